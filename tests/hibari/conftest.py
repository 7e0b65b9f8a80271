"""Shared fixtures for the hibari voice tests. They need the hibari-tts wheel (weights, lexicons, G2P
code) installed without its onnxruntime dependency: pip install --no-deps hibari-tts==0.2.1."""
from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("hibari") is None:
    pytest.skip("hibari-tts is not installed (pip install --no-deps hibari-tts==0.2.1)", allow_module_level=True)


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """Keep the converted-weights cache out of the user's home during tests."""
    old = os.environ.get("MIZUOTO_CACHE_DIR")
    os.environ["MIZUOTO_CACHE_DIR"] = str(tmp_path_factory.mktemp("mizuoto-cache"))
    yield
    if old is None:
        os.environ.pop("MIZUOTO_CACHE_DIR", None)
    else:
        os.environ["MIZUOTO_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def onnx_path():
    from mizuoto.nodes.hibari.loader import HIBARI_ONNX, package_assets
    return package_assets() / HIBARI_ONNX


@pytest.fixture(scope="session")
def voice(_cache_dir):
    from mizuoto.nodes.hibari.engine import HibariVoice
    return HibariVoice.load()

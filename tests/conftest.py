import os
import sys

import pytest

# Shared test helpers (toy_models.py) import as plain modules under --import-mode=importlib.
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """Calibration and settings never leak between tests or into the user's home."""
    monkeypatch.setenv("MIZUOTO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MIZUOTO_CONFIG_DIR", str(tmp_path / "config"))

import importlib.util
import os
import sys

import pytest
import torch

# Shared test helpers (toy_models.py) import as plain modules under --import-mode=importlib.
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """Calibration and settings never leak between tests or into the user's home."""
    monkeypatch.setenv("MIZUOTO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MIZUOTO_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def load_script():
    """Load a script that is not in a package (bench/*.py) by path as a module, unloaded afterwards."""
    loaded = []

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file executes
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


@pytest.fixture
def one_thread():
    """Tiny matrices: one intra-op thread is several times faster than two on a loaded 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

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


def pytest_addoption(parser):
    # The kernel perturbations tests/test_golden_travel.py runs the golden-fixture tests under (with
    # ATEN_CPU_CAPABILITY and MKL_CBWR in the environment): another machine picks other kernels.
    parser.addoption("--threads", type=int, default=1,
                     help="intra-op threads for tests using the one_thread fixture (default 1)")
    parser.addoption("--mkldnn", choices=("on", "off"), default="on",
                     help="off: torch.backends.mkldnn disabled (oneDNN convolutions off) for the whole run")
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (left out of the default suite for its time budget)")


def pytest_configure(config):
    if config.getoption("--mkldnn") == "off":
        torch.backends.mkldnn.enabled = False


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture
def one_thread(request):
    """Tiny matrices: one intra-op thread is several times faster than two on a loaded 2-core machine
    (``--threads N`` changes the count, to show a golden comparison does not depend on it)."""
    n = torch.get_num_threads()
    torch.set_num_threads(request.config.getoption("--threads"))
    yield
    torch.set_num_threads(n)


def pytest_collection_finish(session):
    """Golden travel's other-machine runs start as soon as the suite is collected, when its tests are in
    it: they take ~90 s of CPU, which then overlaps the rest of the suite rather than adding to it."""
    for item in session.items:
        start = getattr(getattr(item, "module", None), "start_machines", None)
        if start is not None and item.get_closest_marker("slow") is None:
            start(session.config)
            return


def pytest_sessionfinish(session):
    for item in session.items:
        stop = getattr(getattr(item, "module", None), "stop_machines", None)
        if stop is not None:
            stop(session.config)
            return


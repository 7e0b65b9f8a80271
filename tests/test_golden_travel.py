"""Golden fixtures travel: every ``golden`` test passes under the kernels another machine would pick.

A fixture recorded on one CPU and compared bit for bit passes only there; tests/golden.py compares at
stated bounds instead. This proves the bounds hold by perturbing, on this machine, what differs between
machines: torch's CPU dispatch (ATEN_CPU_CAPABILITY), MKL's code path (MKL_CBWR=COMPATIBLE; MKL takes other
kernels on AMD than on Intel), the intra-op thread count, and oneDNN convolutions. Each perturbation runs
the golden tests in a fresh interpreter (the first two are read when torch loads)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SUITES = ["indextts2", "gpt_sovits", "cosyvoice", "fish_speech", "vibevoice", "chatterbox", "test_shared_blocks.py"]   # recorded fixtures

# Two machines unlike this one, each perturbing several things at once (every golden test in a fresh
# interpreter costs ~40 s; `--slow` also runs each perturbation alone): a CPU without AVX (scalar ATen
# kernels, MKL's compatible path, no oneDNN) and an AVX2 CPU with two threads.
PERTURBATIONS = {
    "scalar-mkl-compatible-no-onednn": ({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
                                        ["--mkldnn", "off"]),
    "avx2-two-threads": ({"ATEN_CPU_CAPABILITY": "avx2"}, ["--threads", "2"]),
}
ALONE = {
    "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, []),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, []),
    "mkl-compatible": ({"MKL_CBWR": "COMPATIBLE"}, []),
    "two-threads": ({}, ["--threads", "2"]),
    "mkldnn-off": ({}, ["--mkldnn", "off"]),
}


def golden_count() -> int:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "golden",
                          *[str(TESTS / s) for s in SUITES]], capture_output=True, text=True, cwd=TESTS.parent)
    found = re.search(r"(\d+)/\d+ tests collected|(\d+) tests? collected", out.stdout)
    assert found, out.stdout[-2000:] + out.stderr[-2000:]
    return int(found.group(1) or found.group(2))


@pytest.fixture(scope="module")
def expected_count() -> int:
    n = golden_count()
    assert n >= 30, f"only {n} golden tests collected"
    return n


def start(name: str) -> subprocess.Popen:
    env_extra, options = {**PERTURBATIONS, **ALONE}[name]
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-m", "golden", "-p", "no:warnings", *options,
                             *[str(TESTS / s) for s in SUITES]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env_extra}, cwd=TESTS.parent)


MACHINES = pytest.StashKey[dict]()


def start_machines(config: pytest.Config) -> dict[str, subprocess.Popen]:
    """The default perturbations, started once per session (tests/conftest.py starts them as soon as the
    suite is collected, so they run beside it on CI's second core instead of after it)."""
    if MACHINES not in config.stash:
        config.stash[MACHINES] = {name: start(name) for name in PERTURBATIONS}
    return config.stash[MACHINES]


def stop_machines(config: pytest.Config) -> None:
    for proc in config.stash.get(MACHINES, {}).values():
        proc.kill()


@pytest.fixture(scope="module")
def machines(request):
    yield start_machines(request.config)
    stop_machines(request.config)


@pytest.mark.parametrize("name", [*PERTURBATIONS, *[pytest.param(n, marks=pytest.mark.slow) for n in ALONE]])
def test_golden_fixtures_pass_under(name, expected_count, machines):
    proc = machines.get(name) or start(name)
    stdout, stderr = proc.communicate(timeout=1800)
    tail = stdout[-6000:] + stderr[-2000:]
    assert proc.returncode == 0, f"{name}: golden tests failed\n{tail}"
    passed = re.search(r"(\d+) passed", stdout)
    assert passed and int(passed.group(1)) == expected_count, f"{name}: not every golden test ran\n{tail}"

"""`python -m mizuoto doctor` prints the memory check; bad settings are clear errors."""
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "mizuoto", *args], capture_output=True, text=True, timeout=120)


def test_doctor_prints_the_memory_check():
    r = run("doctor", "--setting", "compute.simulate_vram_mb=512", "--setting", "compute.vram_mode=low")
    assert r.returncode == 0, r.stderr
    for line in ("mode           low", "reserve cpu    0 MB", "host copies", "pin budget", "copy streams",
                 "oom retry      on", "oom fallback   off", "allocator"):
        assert line in r.stdout
    assert "simulated" in r.stdout and "of        512 MB" in r.stdout


def test_doctor_rejects_unknown_and_bad_settings():
    r = run("doctor", "--setting", "compute.vram_mod=low")
    assert r.returncode == 2 and "did you mean 'compute.vram_mode'" in r.stderr
    r = run("doctor", "--setting", "compute.gpu_jobs=zero")
    assert r.returncode == 2 and "'compute.gpu_jobs'" in r.stderr and "expected an integer" in r.stderr

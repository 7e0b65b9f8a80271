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


def test_speak_writes_a_plausible_wav(tmp_path):
    """The README's main job: speech from text with the embedded voice, no download."""
    import wave

    import numpy as np

    text = "Hello from Mizuoto. This voice runs inside ComfyUI."
    out = tmp_path / "hello.wav"
    r = run("speak", text, "-o", str(out), "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert '"streamed_mb"' in r.stdout
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768
    seconds = len(pcm) / 24000
    assert 0.03 < seconds / len(text) < 0.15  # speech is roughly 10-25 characters per second
    rms = np.sqrt(np.mean(pcm ** 2))
    assert 0.01 < rms < 0.5


def test_speak_on_a_simulated_gpu_streams_and_reports(tmp_path):
    r = run("speak", "Streaming keeps every sample.", "-o", str(tmp_path / "a.wav"), "--simulate-vram-mb", "24")
    assert r.returncode == 0, r.stderr
    assert '"reason": "budget"' in r.stdout


def test_speak_bad_input_is_a_clear_error_and_writes_nothing(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "x.wav"
    for args, message in [(["  "], "text: empty"), (["...!?"], "nothing speakable"),
                          (["Hi.", "--speed", "0"], "speed: expected 0.25 to 4.0 for this model")]:
        r = run("speak", *args, "-o", str(out))
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert list(folder.iterdir()) == []

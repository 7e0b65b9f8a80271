"""bench/engines.py --quick without any upstream: our rows print, each exact, and the missing-upstream
message names how to give one. Not a timed test: ratios are printed, never asserted."""
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "engines.py"


@pytest.fixture
def bench(load_script):
    return load_script(BENCH, "mizuoto_bench_engines")


def test_quick_without_upstream_prints_our_rows_and_the_missing_message(bench, capsys, monkeypatch, tmp_path):
    for name in ("MIZUOTO_UPSTREAM_PYTHON", *(f"MIZUOTO_UPSTREAM_{e.upper()}" for e in bench.ENGINES)):
        monkeypatch.delenv(name, raising=False)
    missing = tmp_path / "no-venv" / "bin" / "python"       # one engine's interpreter cannot start
    monkeypatch.setenv("MIZUOTO_UPSTREAM_OMNIVOICE", str(missing))
    rows = bench.main(["--quick", "--threads", "1"])
    out = capsys.readouterr().out
    for engine in ("qwen3_tts", "f5_tts"):
        assert f"{engine}: upstream not measured: no upstream interpreter (pass --upstream {engine}=PYTHON" in out
    assert f"omnivoice: upstream not measured: {missing} could not load it: cannot start" in out
    for engine in ("qwen3_tts", "f5_tts", "omnivoice"):
        figures = [r["figure"] for r in rows if r["engine"] == engine]
        assert figures == ["ours", "sim 100 % ÷ ours", "sim 50 % ÷ sim 100 %"], figures
    for r in rows:
        assert r["threads"] == 1 and math.isfinite(r["cpu"]) and r["cpu"] > 0, r
        if r["figure"] == "ours":
            assert r["check"] == "upstream not measured" and r["cpu_ratio"] is None, r
        else:
            assert r["check"] == "exact" and r["cpu_ratio"] > 0, r
    assert not any("upstream" in r["figure"] for r in rows) and "DIFFERENT" not in out
    assert "process CPU time (the main figure" in out
    assert "Qwen3-TTS talker" in out and "F5-TTS DiT" in out and "OmniVoice (" in out


def test_bad_upstream_argument_names_the_expected_form(bench):
    with pytest.raises(SystemExit, match="--upstream: expected ENGINE=PYTHON"):
        bench.main(["--quick", "--upstream", "nosuch=/bin/python"])


"""bench/training.py (the GPU check of GPT-SoVITS s1 training) on the CPU with a tiny T2S: a row per preset,
each estimate covering the peak the simulated device counted, within 1.6x."""
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "training.py"


@pytest.fixture
def bench(load_script):
    return load_script(BENCH, "mizuoto_bench_training")


def test_training_bench_rows_cover_their_peaks(bench, capsys, one_thread):
    rows = bench.main(["--device", "cpu", "--tiny", "--batch", "2", "--phones", "20", "--tokens", "60",
                       "--batches", "5"])
    out = capsys.readouterr().out
    assert [r["preset"] for r in rows] == list(bench.PRESETS) and "est/peak" in out
    for r in rows:
        assert r["peak_mb"] <= r["estimate_mb"] <= 1.6 * r["peak_mb"], r
        assert r["s_per_step"] > 0


def test_s2_bench_rows_cover_their_peaks_and_name_numerics(bench, capsys, one_thread):
    """The SoVITS stage's rows: each estimate (s2_memory) covers the simulated device's peak within 1.6x; lowest's
    host AdamW is left off that count (its peak is below fast's) and, in float32, is not named as rounding."""
    rows = bench.main(["--stage", "s2", "--device", "cpu", "--tiny", "--batch", "2", "--frames", "12", "--phones", "6",
                       "--batches", "2"])
    assert [r["preset"] for r in rows] == list(bench.S2_PRESETS) and "est/peak" in capsys.readouterr().out
    for r in rows:
        assert r["peak_mb"] <= r["estimate_mb"] <= 1.6 * r["peak_mb"], r
    fast, lowest = rows[0], rows[-1]
    assert lowest["peak_mb"] < 0.75 * fast["peak_mb"], (fast, lowest)
    assert "weights rounded" not in lowest["numerics"] and "host-side AdamW in float32" in lowest["numerics"]

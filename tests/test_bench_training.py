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

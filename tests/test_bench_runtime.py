"""bench/runtime.py --quick runs end to end and prints every figure's row, each with an exact output.

Not a timed test: the ratios are printed, never asserted (they depend on the machine and its load).
"""
import math
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench" / "runtime.py"


@pytest.fixture
def bench(load_script):
    return load_script(BENCH, "mizuoto_bench_runtime")


def test_quick_bench_prints_every_row_exact(bench, capsys):
    threads = torch.get_num_threads()
    rows = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert torch.get_num_threads() == threads  # restored

    expected = []
    for model in ("talker", "dit"):
        expected.append(("resident ÷ plain, real CPU device", model, "real CPU device"))
        expected.append(("resident ÷ plain, simulated strict device", model, "simulated, whole"))
        expected += [("streamed ÷ resident", model, f"{r}%:") for r in (0, 25, 50, 75, 100)]
    expected += [("host peak RSS", "talker", label) for label in bench.RSS_ARMS.values()]
    assert len(rows) == len(expected)
    for figure, model, setting in expected:
        matches = [r for r in rows if r["figure"].startswith(figure) and r["model"] == model
                   and r["setting"].startswith(setting)]
        assert len(matches) == 1, (figure, model, setting)

    for row in rows:
        assert row["check"] == "exact", row
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert "asked" not in row["setting"], row  # the residency asked for is the one measured

    for row in rows:
        if row["figure"].startswith("resident ÷ plain"):
            assert row["runtime"] == "hooks 0, acquires 0, streamed 0 B", row
        if row["figure"].startswith("streamed") and row["setting"].startswith("0%"):
            assert row["copied"].startswith("1.00x min"), row  # every streamed unit copied once per call

    # One table, printed with its settings.
    assert "torch.set_num_threads(1)" in out
    assert out.count("figure") == 1
    for row in rows:
        assert row["setting"] in out
    assert "DIFFERENT" not in out

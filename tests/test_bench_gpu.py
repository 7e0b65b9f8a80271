"""bench/gpu.py --quick --device cpu runs its whole control flow on the CPU: the link rows, every arm in
its own process, our arms bit-exact on the strict simulated device, the peers (diffusers, accelerate)
exact when installed and "not installed" rows otherwise, one table, and the table and JSON in $OUT.

Not a timed test: speeds and ratios are printed, never asserted.
"""
import importlib.util
import json
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu.py"


@pytest.fixture
def bench(load_script):
    return load_script(BENCH, "mizuoto_bench_gpu")


def test_quick_cpu_bench_every_row(bench, tmp_path, monkeypatch, capsys):
    out_dir = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out_dir))
    rows = bench.main(["--quick", "--device", "cpu"])
    printed = capsys.readouterr().out

    # The link: a host memcpy here; no pinned or registered copies without CUDA.
    link = [r for r in rows if r["model"] == "link"]
    assert [r["arm"] for r in link] == ["pageable", "pinned", "registered"]
    assert link[0]["check"] == "the link" and link[0]["of_link"] == 1.0 and link[0]["gbps"] > 0
    assert [r["check"] for r in link[1:]] == ["n/a", "n/a"]

    for model in ("talker", "dit"):
        got = {r["arm"]: r for r in rows if r["model"] == model}
        assert list(got) == list(bench.ARMS), model  # every arm, in order, once

        for arm in ("plain", "ours100", "ours50", "ours0"):
            row = got[arm]
            assert row["check"] == "exact" and row["exact"] is True, row
            assert math.isfinite(row["per_s"]) and row["per_s"] > 0, row
            assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert got["plain"]["ratio"] == 1.0

        # The residency asked for is the one measured; each streamed unit is copied once per forward.
        n = got["ours100"]["units"]
        assert n >= 8
        unit_bytes = got["ours100"]["unit_bytes"]
        assert got["ours100"]["resident_units"] == [n] and got["ours100"]["per_call_bytes"] == 0
        assert got["ours0"]["resident_units"] == [0] and got["ours0"]["per_call_bytes"] == unit_bytes
        half = got["ours50"]
        assert half["resident_units"] == [half["planned_units"]] and 0 < half["planned_units"] < n
        assert half["resident_unit_bytes"][0] == pytest.approx(unit_bytes / 2, rel=0.2)
        assert half["per_call_bytes"] == unit_bytes - half["resident_unit_bytes"][0]
        for arm in ("ours50", "ours0"):
            assert got[arm]["gbps"] > 0 and got[arm]["of_link"] > 0, got[arm]
            assert got[arm]["peak_bytes"] < got["ours100"]["peak_bytes"]  # the simulated device's peak

        for peer, modules in bench.PEERS.items():
            installed = all(importlib.util.find_spec(m) is not None for m in modules)
            if installed:  # on the CPU the peers run the same kernels on the same weights
                assert got[peer]["check"] == "exact", got[peer]
            else:
                assert got[peer]["check"] == "not installed", got[peer]
                assert got[peer]["setting"].startswith("missing: ")

    # One table, printed once and written with the rows as JSON.
    assert printed.count("output vs resident") == 1
    assert "FAILED" not in printed and "DIFFERENT" not in printed
    text = (out_dir / "gpu-cpu-quick.txt").read_text()
    data = json.loads((out_dir / "gpu-cpu-quick.json").read_text())
    assert data["meta"]["device"] == "cpu" and data["meta"]["quick"] is True
    assert data["meta"]["link_gbps"] == link[0]["gbps"]
    assert [(r["model"], r["arm"], r["check"]) for r in data["rows"]] == [(r["model"], r["arm"], r["check"])
                                                                         for r in rows]
    for row in rows:
        assert row["setting"] in text and row["label"] in text

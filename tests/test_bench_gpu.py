"""bench/gpu.py --quick --device cpu runs its whole control flow on the CPU: the link rows, every arm in
its own process, our arms bit-exact on the strict simulated device, the peers (diffusers, accelerate)
exact when installed and "not installed" rows otherwise, one table, and the table and JSON in $OUT.

Not a timed test: speeds and ratios are printed, never asserted.
"""
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
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


@pytest.mark.slow   # 40 s: its quick bench is test_quick_cpu_bench_every_row's, run again by the script
def test_gpu_check_dry_run(tmp_path):
    """bench/gpu_check.sh --device cpu: the one-command GPU check's every step on the CPU (the pack made
    importable without pip, the environment and pinning probe, the GPU tests' selection, the quick bench),
    its summary and tables in $OUT, and its exit status."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OUT": str(out), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(BENCH.parent / "gpu_check.sh"), "--device", "cpu"], env=env,
                          capture_output=True, text=True, timeout=600)
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "install:                 link" in summary and "mizuoto imports from" in summary
    assert "cudaHostRegister:        n/a (no CUDA device)" in summary
    assert "pytest -m gpu (collect): ok" in summary and "bench --quick:           ok" in summary
    assert "dry run: not run (would be: bench/gpu.py --deadline" in summary and "FAILED" not in summary
    collected = re.search(r"(\d+)/\d+ tests collected", (out / "pytest.txt").read_text())
    assert collected and int(collected.group(1)) >= 5  # the GPU tests are selected by -m gpu
    rows = json.loads((out / "gpu-cpu-quick.json").read_text())["rows"]
    assert {(r["model"], r["arm"]): r["check"] for r in rows if r["model"] == "dit"} == {
        ("dit", "plain"): "exact", ("dit", "ours0"): "exact"}
    assert (out / "gpu-check.log").read_text().count("bench --quick") >= 2

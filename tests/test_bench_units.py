"""bench/units.py builds every model of the unit table on meta and prints a row for each component."""
from pathlib import Path

import pytest

from mizuoto.nodes.pack.registry import discover

BENCH = Path(__file__).resolve().parents[1] / "bench" / "units.py"


@pytest.fixture
def bench(load_script):
    return load_script(BENCH, "mizuoto_bench_units")


def test_unit_table_has_every_model_and_descending_never_grows_the_working_set(bench, capsys):
    rows = bench.main(["--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert {spec.engine_id for spec in discover()} <= set(bench.ENGINES)   # every engine of ours
    models = [before["model"] for before, _ in rows]
    assert "nn.Transformer" in models and "HiFi-GAN (CosyVoice 2 HiFT)" in models
    assert all(m in out for m in models)
    for before, after in rows:
        assert after["size"] == before["size"]
        # units found below the outermost lists only move bytes out of the fixed part
        assert after["fixed"] <= before["fixed"] and after["min_ws"] <= before["min_ws"]
        if before["fixed"] > before["size"] // 4:
            assert after["units"] >= before["units"]
        else:
            assert after == before
    transformer = next(after for before, after in rows if before["model"] == "nn.Transformer")
    assert transformer["fixed"] <= transformer["size"] // 4

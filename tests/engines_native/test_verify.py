"""`python -m mizuoto verify` (nodes/common/verify.py) on deliberately broken engines: each fault is
reported precisely and the exit status says so. Every registered engine's tiny model runs it in
tests/engines_native/test_conformance.py (placements) and its OOM test (the same fault injector)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conformance import conformance_case
from mizuoto.nodes.common.registry import LoadRequest, discover
from mizuoto.nodes.common.verify import verify
from mizuoto.runtime import ModelHandle

ENGINES = {spec.engine_id: spec for spec in discover()}
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(engine_id: str, root: Path, monkeypatch):
    """The engine's tiny model with units small enough that every engine has something to stream."""
    case = conformance_case(engine_id, root)
    monkeypatch.setattr(ModelHandle, "MIN_UNIT_BYTES", case.unit_bytes)
    monkeypatch.setattr(ModelHandle, "TINY_UNIT_BYTES", case.unit_bytes // 4)
    return ENGINES[engine_id], LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu")), case.request


def test_a_weight_read_outside_its_forward_is_named(tmp_path, monkeypatch):
    """A broken engine: the acoustic phase reads a streamed unit's weight before the unit's forward."""
    from mizuoto.nodes.hibari.engine import HibariVoice

    acoustic = HibariVoice.acoustic

    def leaky(self, ids, speed=1.0):
        for weight in self.model.parameters():      # outside any unit's forward: meta where a unit streams
            (weight * 1).sum()
        return acoustic(self, ids, speed)
    monkeypatch.setattr(HibariVoice, "acoustic", leaky)
    spec, load, request = tiny("hibari", tmp_path, monkeypatch)
    report = verify(spec, load, request)
    assert not report.ok
    streamed = next(r for r in report.runs if r.mode == "all streamed")
    assert streamed.error and "StrictDeviceError" in streamed.error and "not on the device" in streamed.error
    assert any(f.startswith("all streamed: StrictDeviceError") for f in report.faults), report.faults
    assert report.runs[0].error is None             # resident: every weight is placed, nothing to catch


def test_an_estimate_below_the_measured_peak_is_named(tmp_path, monkeypatch):
    from mizuoto.nodes.hibari.phases import HibariEngine

    monkeypatch.setattr(HibariEngine, "acoustic_memory", staticmethod(lambda phonemes, speed: 1024))
    spec, load, request = tiny("hibari", tmp_path, monkeypatch)
    report = verify(spec, load, request)
    assert [f for f in report.faults if f.startswith("phase acoustic: estimate 0.00 MB below the measured")], \
        report.faults
    assert all(r.ok for r in report.runs)           # the audio is still exact: only the estimate is wrong


def test_the_command_writes_the_report_and_exits_by_it(tmp_path, capsys, monkeypatch):
    from mizuoto.cli import main
    from mizuoto.nodes.hibari.phases import HibariEngine

    out = tmp_path / "report.json"
    assert main(["verify", "Hello there.", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "half-resident" in table and "OK: every run equals" in table
    data = json.loads(out.read_text())
    assert data["ok"] and data["engine"] == "hibari" and data["versions"]["torch"] == torch.__version__
    monkeypatch.setattr(HibariEngine, "acoustic_memory", staticmethod(lambda phonemes, speed: 1024))
    assert main(["verify", "Hello there."]) == 1
    assert "FAULTS" in capsys.readouterr().out
    assert main(["verify", "Hi.", "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "--json" in capsys.readouterr().err

"""`python -m mizuoto verify` (nodes/pack/verify.py) on deliberately broken engines: each fault is
reported precisely and the exit status says so. Every registered engine's tiny model runs it in
tests/engines_native/test_conformance.py (placements) and its OOM test (the same fault injector)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conformance import conformance_case
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.nodes.pack.verify import verify
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


def test_ctrl_c_stops_between_steps_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """A real SIGINT (raised as the half-resident run starts) goes to verify's handler: the run stops at
    the next step, nothing is written, the exit status is 130, the previous handler is back and no
    component stays on the device."""
    import signal

    from mizuoto import cli
    from mizuoto.runtime import ModelManager

    managers = []
    build = ModelManager.__init__

    def keep(self, *a, **k):
        build(self, *a, **k)
        managers.append(self)
    monkeypatch.setattr(ModelManager, "__init__", keep)
    draw = cli.ProgressBar.__call__

    def interrupting(self, mode, done, total):
        if mode == "half-resident" and done == 0:
            signal.raise_signal(signal.SIGINT)
        draw(self, mode, done, total)
    monkeypatch.setattr(cli.ProgressBar, "__call__", interrupting)
    before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "report.json"
    assert cli.main(["verify", "Hello there.", "--json", str(out)]) == 130
    err = capsys.readouterr().err
    assert "interrupted; nothing was written" in err and "verify: resident" in err
    assert "all streamed" not in err                        # it stopped in the half-resident run
    assert not out.exists()
    assert signal.getsignal(signal.SIGINT) is before
    assert managers and all(h.loaded_bytes == 0 for m in managers for h in m.handles)


def test_the_progress_bar_draws_each_run_once_off_a_terminal_and_in_place_on_one():
    import io

    from mizuoto.cli import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    log, tty = io.StringIO(), Terminal()
    for stream in (log, tty):
        bar = ProgressBar(stream)
        for done in range(5):
            bar("resident", done, 4)
        bar("all streamed", 0, 2)
        bar.close()
    lines = log.getvalue().splitlines()
    assert [line.split("[")[0].split()[-1] for line in lines] == ["resident", "resident", "streamed"]
    assert lines[0].endswith("[" + "." * 24 + "]   0%") and lines[1].endswith("[" + "#" * 24 + "] 100%")
    assert tty.getvalue().count("\r") == 6 and tty.getvalue().count("\n") == 2
    assert "[" + "#" * 12 + "." * 12 + "]  50%" in tty.getvalue()


@pytest.mark.parametrize("name, expected", [("cuda:7", "CUDA"), ("tpu", "expected cpu or cuda:N"),
                                            ("mps", "expected cpu or cuda:N")])
def test_a_device_that_is_not_there_is_a_usage_error(name, expected, capsys):
    from mizuoto.cli import main

    if name.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has eight GPUs")
    assert main(["verify", "Hi.", "--device", name]) == 2
    err = capsys.readouterr().err
    assert f"--device {name}" in err and expected in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_verify_on_a_real_gpu_equals_and_covers(tmp_path):
    """The embedded voice on cuda:0: the budgets are compute.vram_limit_mb, the OOM is raised as each
    phase begins; every run equals the resident run and the estimates cover the allocator's peaks."""
    from mizuoto.cli import main

    out = tmp_path / "report.json"
    assert main(["verify", "Hello there.", "--device", "cuda:0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["device"].startswith("cuda:0") and data["ok"]
    assert any(r["mode"].startswith("OOM in") and r["oom_retries"] >= 1 for r in data["runs"])
    assert any(r["streamed_mb"] > 0 for r in data["runs"])


def test_the_gpu_injection_raises_as_each_phase_begins_and_is_retried_exactly(tmp_path, monkeypatch):
    """PhaseFaults, verify's injector for a real GPU (whose allocator cannot be intercepted), on the
    strict simulated device: an OOM raised in the first block of each phase, weights placed, is retried
    and the audio equals the run without it."""
    from mizuoto.nodes.pack.pipeline import synthesize
    from mizuoto.nodes.pack.verify import PhaseFaults
    from mizuoto.runtime import Calibration, DeviceService, ModelManager, RequestContext, VramPolicy

    spec, load, request = tiny("hibari", tmp_path, monkeypatch)
    devices = DeviceService(simulate={"cpu": 1 << 40}, strict=True)
    engine = spec.build(load, ModelManager(devices, VramPolicy({}), calibration=Calibration(tmp_path / "c.json")))
    clean, _ = synthesize(engine, request)
    use = RequestContext.use
    faults = PhaseFaults().install()
    try:
        synthesize(engine, request)
        phases = faults.points(0, faults.count)
        assert len(phases) >= 2, phases
        for name, at in phases.items():
            faults.fail = {faults.count + at["first"]}
            wav, meta = synthesize(engine, request)
            assert meta["applied"]["oom_retries"] == 1, name
            assert torch.equal(wav, clean), name
    finally:
        faults.remove()
    assert RequestContext.use is use

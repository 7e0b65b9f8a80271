"""GPT-SoVITS v2 (tiny upstream-layout folder) through the Speak pipeline on the strict simulated device:
resident, all units streamed and half-resident give audio `torch.equal` to a plain CPU run over two chunks
of Chinese with English words after a Chinese transcript (the reference prompt computed once per request),
and no phase (reference, bert, t2s, sovits) allocates more than its estimate. v2Pro runs the same checks in test_conformance.py (tiny.conformance_case)."""
from __future__ import annotations

import pytest
import torch

from gpt_sovits.tiny import write_folder
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy

SPEC = {s.engine_id: s for s in discover()}["gpt_sovits"]
MB = 1 << 20
UNIT = 16 << 10

pytestmark = pytest.mark.usefixtures("one_thread")


def request() -> SpeakRequest:
    t = torch.arange(32000 * 4) / 32000
    wav = 0.3 * torch.sin(2 * torch.pi * 210 * t) * (1 + torch.sin(2 * torch.pi * 2 * t)) / 2
    text = "今天天气很好我们去公园散步吧。Hello world and a nice day to you!"   # cut5: two segments
    return SpeakRequest(text, seed=9, language="zh",
                        reference={"waveform": wav[None, None], "sample_rate": 32000}, reference_text="你好，朋友",
                        options={"top_k": 20, "temperature": 0.9})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = write_folder(tmp_path_factory.mktemp("gsv_stream"), "v2")
    patch = pytest.MonkeyPatch()
    patch.setattr(ModelHandle, "MIN_UNIT_BYTES", UNIT)
    patch.setattr(ModelHandle, "TINY_UNIT_BYTES", UNIT // 4)
    torch.set_num_threads(1)
    load = LoadRequest("tiny", folder, torch.float32, torch.device("cpu"))
    plain, meta = synthesize(SPEC.build(load, ModelManager(DeviceService())), request())
    assert meta["chunks"] == 2
    yield load, plain
    patch.undo()


def build(load, capacity: int, mode: str = "normal"):
    devices = DeviceService(simulate={"cpu": capacity}, strict=True)
    return SPEC.build(load, ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))), devices


def test_streamed_half_and_resident_equal_plain_and_estimates_cover_peaks(setup):
    load, plain = setup
    probe = SPEC.build(load, ModelManager(DeviceService(simulate={"cpu": 1 << 34})))
    sizes = [(h.size_bytes, h.min_working_set) for h in probe.handles]
    assert [h.name for h in probe.handles] == ["t2s", "sovits", "hubert", "bert"] and probe.t2s.kind == "sequence"
    total = sum(s for s, _ in sizes)
    engine, devices = build(load, 4 * total + 256 * MB)
    resident, meta = synthesize(engine, request())
    assert torch.equal(resident, plain) and meta["memory"]["streamed_mb"] == 0
    factors = {h.name: engine.manager.calibration.factor(engine.manager.calibration_key(h)) for h in engine.handles}
    assert all(f == 1.0 for f in factors.values()), f"a phase allocated more than its estimate: {factors}"
    working = devices.memory("cpu").peak - total

    engine, _ = build(load, 4 * total + 256 * MB, mode="none")
    streamed, meta = synthesize(engine, request())
    assert torch.equal(streamed, plain) and meta["memory"]["streamed_mb"] > 0

    engine, _ = build(load, max(m + (s - m) // 2 for s, m in sizes) + working)
    half, meta = synthesize(engine, request())
    assert torch.equal(half, plain) and meta["memory"]["streamed_mb"] > 0

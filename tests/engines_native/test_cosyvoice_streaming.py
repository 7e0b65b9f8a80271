"""CosyVoice 3 (tiny upstream-layout folder) streamed, half-resident and resident on the strict simulated
device give audio equal to a plain CPU run, through every phase (prompt, llm, flow, vocoder); CosyVoice 2
gets the same checks from the registry's conformance test (tests/cosyvoice/tiny.py: conformance_case)."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.cosyvoice.loader import load_cosyvoice
from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from cosyvoice.tiny import write_folder
from runtime_helpers import residency_capacity

UNIT = 64 << 10          # tiny layers: units down to 64 KB

pytestmark = pytest.mark.usefixtures("one_thread")


def request() -> SpeakRequest:
    t = torch.arange(14400) / 24000
    wav = 0.3 * torch.sin(2 * torch.pi * 190 * t) * (1 + torch.sin(2 * torch.pi * 2 * t)) / 2
    return SpeakRequest(text="hi", seed=5, reference=(wav, 24000), reference_text="he")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("cv3") / "tiny", 3)


def engine(folder, capacity: int | None = None, mode: str = "normal") -> CosyVoiceEngine:
    devices = DeviceService(simulate={"cpu": capacity}, strict=True) if capacity else DeviceService()
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    return CosyVoiceEngine(load_cosyvoice(folder, torch.float32), manager, min_unit_bytes=UNIT)


@pytest.fixture(scope="module")
def plain(folder):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # as the tests run (one_thread): kernels split work by thread count
    try:
        wav, _ = synthesize(engine(folder), request())
    finally:
        torch.set_num_threads(threads)
    return wav


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = engine(folder, 1 << 30)
    frames = 30 + plain.numel() // 480       # the 0.6 s reference mel frames + those of the speech
    workings = {"llm": probe.llm_memory(30, 2), "flow": probe.flow_memory(frames),
                "vocoder": probe.vocoder_memory(frames)}
    # "half": of the components that can be partly placed (more than their minimum working set), the one
    # whose phase needs the most working memory is placed half-way; the others fit or stream
    handle = max((h for h in (probe.llm_handle, probe.flow_handle, probe.hift_handle)
                  if h.size_bytes > h.min_working_set), key=lambda h: workings[h.name])
    working = workings[handle.name]
    mode, capacity = residency_capacity(handle, residency, working=working)
    if residency != "half":                  # room for the largest component, whichever phase runs
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    eng = engine(folder, capacity, mode)
    wav, meta = synthesize(eng, request())
    assert torch.equal(wav, plain)
    assert meta["applied"]["oom_retries"] == 0
    if residency == "full":
        assert meta["memory"]["streamed_mb"] == 0
    else:
        assert meta["memory"]["streamed_mb"] > 0
        assert sum(h.streamed_bytes for h in eng.handles) > 0


def test_units_and_fixed_part(folder):
    eng = engine(folder, 1 << 30)
    llm = eng.llm_handle.layout
    names = {u.name for u in llm.units}
    assert {f"llm.model.model.layers.{i}" for i in range(2)} <= names
    fixed = {id(t) for t in llm.fixed}
    model = eng.bundle.llm
    assert id(model.speech_embedding.weight) in fixed
    unit_params = {id(p) for u in llm.units for p in u.params}
    assert id(model.decoder.embed_tokens.weight) not in fixed | unit_params      # pinned to the CPU
    flow = eng.flow_handle.layout
    assert any(u.hot for u in flow.units)
    hift = eng.hift_handle.layout
    assert hift.units and all(id(s.alpha) in {id(t) for t in hift.fixed}
                              for s in eng.bundle.hift.modules() if type(s).__name__ == "Snake")

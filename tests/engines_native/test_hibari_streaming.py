"""The embedded voice streamed (every unit), half-resident and resident on the strict simulated
device gives audio equal, sample for sample, to a plain CPU run."""
import pytest
import torch

from mizuoto.nodes.hibari.engine import HibariVoice
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.hibari.phases import HibariEngine
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from runtime_helpers import residency_capacity

TEXT = "The quick brown fox jumps over the lazy dog, and streaming must not change a single sample!"


@pytest.fixture(scope="module")
def reference():
    voice = HibariVoice.load()
    return voice.synthesize(TEXT, seed=7, speed=1.1)[0]


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(residency, reference):
    voice = HibariVoice.load()
    probe = HibariEngine(HibariVoice.load(), ModelManager(DeviceService(simulate={"cpu": 1 << 30})))
    (phonemes,) = voice.chunks(TEXT)  # one chunk: the test knows the phase's exact estimate
    working = HibariEngine.acoustic_memory(len(voice.g2p.ids(phonemes)), 1.1)
    mode, capacity = residency_capacity(probe.handle, residency, working=working)
    manager = ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True),
                           VramPolicy({"compute.vram_mode": mode}))
    engine = HibariEngine(voice, manager)
    wav, meta = synthesize(engine, SpeakRequest(TEXT, seed=7, speed=1.1))
    assert torch.equal(wav, reference)
    assert meta["applied"]["oom_retries"] == 0
    streamed = meta["memory"]["streamed_mb"]
    if residency == "full":
        assert streamed == 0 and engine.handle.hook_count == 0
    else:
        assert streamed > 0 and engine.handle.partial
        assert (engine.handle.loaded_bytes > engine.handle.layout.fixed_bytes) == (residency == "half")


@pytest.mark.parametrize("text", ["Hi.", "The quick brown fox jumps over the lazy dog.", TEXT * 2])
@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_acoustic_estimate_covers_the_measured_working_memory(text, speed):
    voice = HibariVoice.load()
    devices = DeviceService(simulate={"cpu": 1 << 30}, strict=True)
    engine = HibariEngine(voice, ModelManager(devices, VramPolicy()))
    for phonemes in voice.chunks(text):
        ids = torch.tensor([voice.g2p.ids(phonemes)])
        with engine.manager.request() as ctx, ctx.use([engine.handle]), devices.tracking("cpu") as t:
            voice.acoustic(ids, speed)
        estimate = engine.acoustic_memory(ids.shape[1], speed)
        assert t.peak_bytes <= estimate <= 3 * t.peak_bytes + (1 << 20)

"""F5-TTS (tiny random checkpoint in the upstream layout) streamed, half-resident and resident on the
strict simulated device gives mel and audio equal to a plain CPU run; each phase's working-memory
estimate covers what it really allocates; a cancelled request leaves nothing placed behind."""
from __future__ import annotations

import pytest
import torch

from f5_tts.tiny import write_tiny_checkpoint
from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.f5_tts.loader import load_f5_tts
from mizuoto.nodes.f5_tts.phases import F5TTSEngine, frames_for
from mizuoto.nodes.f5_tts.sample import FlowSettings, sample, total_frames
from mizuoto.nodes.f5_tts.text import reference_prompt
from mizuoto.runtime import Cancelled, DeviceService, ModelManager, VramPolicy
from runtime_helpers import residency_capacity

SEED = 5
UNIT = 64 << 10            # tiny blocks: every DiT block and ConvNeXt block is a unit
TEXT = "Streaming must not change a sample."
REF_TEXT = "Some call me nature."
OPTIONS = {"steps": 4}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("f5") / "tiny", seed=2)


def reference() -> torch.Tensor:
    t = torch.arange(int(24000 * 0.5)) / 24000
    return 0.3 * torch.sin(2 * torch.pi * 150 * t) * torch.sin(2 * torch.pi * 3 * t)


def prepared() -> torch.Tensor:
    """The reference after the engine's pydub pass (reference.prompt_audio): [1, T] at 24 kHz."""
    from mizuoto.nodes.f5_tts.reference import prompt_audio
    return prompt_audio(Reference(reference(), 24000))[0]


def chunk(**kw) -> Chunk:
    return Chunk(kw.pop("text", TEXT), seed=SEED, reference=Reference(reference(), 24000), reference_text=REF_TEXT,
                 options=dict(OPTIONS), **kw)


@pytest.fixture(scope="module")
def plain(folder):
    """The plain CPU run: the same functions, no runtime."""
    torch.set_num_threads(1)
    b = load_f5_tts(folder)
    wav = prepared()
    rms = torch.sqrt(torch.mean(torch.square(wav)))
    assert rms >= 0.1                        # upstream's loudness rule leaves this reference as it is
    prompt = reference_prompt(REF_TEXT)
    ids = torch.tensor([b.tokenizer.encode(prompt + TEXT)])
    with torch.inference_mode():
        mel = sample(b.dit, b.mel(wav).permute(0, 2, 1), ids, frames_for(wav.shape[-1], prompt, TEXT, 1.0, 256),
                     generator=torch.Generator().manual_seed(SEED), settings=FlowSettings(**OPTIONS))
        audio = b.vocoder.decode(mel[:, wav.shape[-1] // 256:].permute(0, 2, 1))[0]
    return mel, audio


def _engine(folder, capacity=None, mode="normal") -> F5TTSEngine:
    devices = DeviceService(simulate={"cpu": capacity or (1 << 30)}, strict=capacity is not None)
    return F5TTSEngine(load_f5_tts(folder), ModelManager(devices, VramPolicy({"compute.vram_mode": mode})),
                       min_unit_bytes=UNIT)


def frames(engine: F5TTSEngine, text: str = TEXT) -> tuple[int, int]:
    prompt = reference_prompt(REF_TEXT)
    n_ids = len(engine.bundle.tokenizer.encode(prompt + text))
    ref = prepared().shape[-1]
    return total_frames(n_ids, ref // 256 + 1, frames_for(ref, prompt, text, 1.0, 256)), ref // 256


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = _engine(folder)
    total, cut = frames(probe)
    working = probe.flow_memory(total)
    mode, capacity = residency_capacity(probe.dit, residency, working=working)
    if residency != "half":                  # room for the largest component, whichever phase runs
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    engine = _engine(folder, capacity, mode)
    seen = {}
    real_flow = engine.flow

    def flow(*args, **kw):
        seen["mel"] = real_flow(*args, **kw)
        return seen["mel"]

    engine.flow = flow
    with engine.manager.request(seed=SEED) as ctx:
        audio = engine.speak_chunk(ctx, chunk())
    mel, ref_audio = plain
    assert torch.equal(seen["mel"], mel)
    assert torch.equal(audio, ref_audio)
    assert ctx.meta["applied"]["oom_retries"] == 0
    if residency == "full":
        assert ctx.meta["memory"]["streamed_mb"] == 0 and engine.dit.hook_count == 0
    else:
        assert ctx.meta["memory"]["streamed_mb"] > 0 and engine.dit.streamed_bytes > 0
        assert engine.dit.partial
    if residency == "none":
        assert engine.vocoder.streamed_bytes > 0


def test_units_and_hot_marks(folder):
    engine = _engine(folder)
    layout = engine.dit.layout
    names = {u.name: u for u in layout.units}
    dit = engine.bundle.dit
    assert {f"transformer_blocks.{i}" for i in range(len(dit.transformer_blocks))} <= set(names)
    assert all(names[f"transformer_blocks.{i}"].hot for i in range(len(dit.transformer_blocks)))
    assert not any(u.hot for u in layout.units if u.name.startswith("text_embed."))   # once per chunk
    fixed = {id(t) for t in layout.fixed}
    assert id(dit.text_embed.text_embed.weight) in fixed            # read by index: the fixed part
    assert id(dit.rotary_embed.inv_freq) in fixed
    voc = {u.name for u in engine.vocoder.layout.units}
    assert {"backbone.convnext.0", "backbone.convnext.1"} <= voc


@pytest.mark.parametrize("text", ["Hi there, you.", TEXT * 4])
def test_flow_and_vocoder_estimates_cover_measured_working_memory(folder, text):
    engine = _engine(folder, 1 << 30)
    devices = engine.manager.devices
    b = engine.bundle
    total, cut = frames(engine, text)
    prompt = reference_prompt(REF_TEXT)
    ids = torch.tensor([b.tokenizer.encode(prompt + text)])
    cond = b.mel(prepared()).permute(0, 2, 1)
    estimate = engine.flow_memory(total)
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.dit], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            mel = sample(b.dit, cond, ids, total, generator=ctx.generator, settings=FlowSettings(steps=2))
    measured = tr.peak_bytes
    print(f"{total} frames: flow estimate {estimate / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB")
    # the upper bound leaves out the attention scores, which the estimate counts for kernels that
    # materialise them (CUDA's math path); the CPU's fused kernel does not, and they grow with frames²
    scores = 2 * b.config.heads * total * total * 4
    assert measured <= estimate <= 4 * measured + scores + (1 << 20)
    new = mel[:, cut:].permute(0, 2, 1).contiguous()
    estimate = engine.vocoder_memory(new.shape[-1])
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.vocoder], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            b.vocoder.decode(new)
    print(f"{new.shape[-1]} frames: vocoder estimate {estimate / 2**20:.2f} MiB, measured {tr.peak_bytes / 2**20:.2f} MiB")
    assert tr.peak_bytes <= estimate <= 4 * tr.peak_bytes + (1 << 20)


def test_cancel_during_the_flow_is_clean(folder, plain):
    probe = _engine(folder)
    mode, capacity = residency_capacity(probe.dit, "half", working=probe.flow_memory(frames(probe)[0]))
    engine = _engine(folder, capacity, mode)
    steps = []

    def progress(done, total):
        steps.append(done)
        if done == 3:
            ctx.cancel()

    with pytest.raises(Cancelled):
        with engine.manager.request(seed=SEED) as ctx:
            engine.speak_chunk(ctx, chunk(progress=progress))
    assert steps == [1, 2, 3]
    assert not engine.manager.devices.memory("cpu").used > sum(h.loaded_bytes for h in engine.handles) + 0
    with engine.manager.request(seed=SEED) as ctx:                 # the next request is unaffected
        assert torch.equal(engine.speak_chunk(ctx, chunk()), plain[1])


def test_vocoder_oom_fallback_decodes_in_tiles_on_the_strict_device(folder):
    """A device too small for the whole mel at once but big enough for 256-frame tiles: without
    `compute.oom_fallback` a clear OOM after the exact retries; with it `tiled_1d` (256 frames, 32 overlap,
    crossfade), named in `applied`, equal to tiled_1d run plainly (and not to the whole decode)."""
    from mizuoto.runtime.fallbacks import tiled_1d
    frames = 700                                     # three tiles: seams at 224..256 and 448..480
    mel = torch.randn(1, 100, frames, generator=torch.Generator().manual_seed(1))
    plain = load_f5_tts(folder).vocoder
    with torch.inference_mode():
        exact, tiled = plain.decode(mel)[0], tiled_1d(plain.decode, mel, 256, 32)[0]

    probe = _engine(folder)
    peaks = {}
    for n in (frames, 256):
        with probe.manager.request() as ctx, ctx.use([probe.vocoder]), probe.manager.devices.tracking("cpu") as tr:
            with torch.inference_mode():
                probe.bundle.vocoder.decode(mel[..., :n])
        peaks[n] = tr.peak_bytes
    capacity = probe.vocoder.size_bytes + (peaks[256] + peaks[frames]) // 2 + frames * 256 * 4

    engine = _engine(folder, capacity)
    with pytest.raises(torch.OutOfMemoryError, match="vocoder: out of memory after 2 retries"):
        with engine.manager.request(seed=0) as ctx:
            engine.decode(ctx, mel)
    assert ctx.meta["applied"]["fallbacks"] == []
    with engine.manager.request(seed=0, settings={"compute.oom_fallback": True}) as ctx:
        audio = engine.decode(ctx, mel)
    assert ctx.meta["applied"]["fallbacks"] == ["vocoder in 256-frame tiles"]
    assert ctx.meta["applied"]["oom_retries"] == 2
    assert audio.shape == exact.shape == (frames * 256,)
    assert torch.equal(audio, tiled) and not torch.equal(audio, exact)
    assert engine.vocoder.in_use == 0
    with engine.manager.request(seed=0, settings={"compute.oom_fallback": True}) as ctx:   # what fits stays exact
        short = engine.decode(ctx, mel[..., :200])
    assert ctx.meta["applied"] == {"oom_retries": 0, "fallbacks": []}
    with torch.inference_mode():
        assert torch.equal(short, plain.decode(mel[..., :200])[0])

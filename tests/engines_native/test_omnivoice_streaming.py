"""OmniVoice (tiny random checkpoint in the upstream layout) streamed, half-resident and resident on the
strict simulated device gives tokens and audio equal to a plain CPU run; each phase's working-memory
estimate covers what it really allocates."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.omnivoice.generate import Sampling, batch, unmask
from mizuoto.nodes.omnivoice.loader import load_omnivoice
from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine, postprocess
from mizuoto.nodes.pack.silence import remove_silence
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from runtime_helpers import residency_capacity

spec = importlib.util.spec_from_file_location("omnivoice_tiny", Path(__file__).parents[1] / "omnivoice" / "tiny.py")
tiny = importlib.util.module_from_spec(spec)
sys.modules["omnivoice_tiny"] = tiny
spec.loader.exec_module(tiny)

SEED = 5
UNIT = 4 << 10           # tiny layers: every layer and codec block is a unit
OPTIONS = {"num_step": 6, "class_temperature": 0.5}
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("omnivoice") / "tiny", seed=2, layers=6)


def reference() -> Reference:
    t = torch.arange(int(24000 * 0.9)) / 24000
    return Reference(0.3 * torch.sin(2 * torch.pi * 220 * t) * torch.sin(2 * torch.pi * 3 * t), 24000)


def chunk() -> Chunk:
    return Chunk("A tiny test, streamed.", seed=SEED, language="en", reference=reference(),
                 reference_text="A reference.", options=dict(OPTIONS))


@pytest.fixture(scope="module")
def plain(folder):
    """The plain CPU run: the same functions, no runtime."""
    from mizuoto.nodes.pack.audio import resample
    torch.set_num_threads(1)
    b = load_omnivoice(folder, torch.float32)
    probe = OmniVoiceEngine(b, ModelManager(DeviceService()))
    c = chunk()
    wav = remove_silence(c.reference.wav, 24000, 200, 100, 200)
    wav = wav[:wav.numel() - wav.numel() % 960]
    with torch.inference_mode():
        codes = b.codec.encode(wav[None, None], resample(wav, 24000, 16000, "torchaudio_functional")[None])[0]
    prompt = probe.make_prompt(c, (codes, "A reference.", 0.0), True)
    ids, _, _ = batch(prompt, b.config, "cpu")
    steps = []
    with torch.inference_mode():
        tokens = unmask(b.model, prompt, b.model.llm.embed_tokens(ids[:, 0]), Sampling.merged(**OPTIONS),
                        torch.Generator().manual_seed(SEED), on_step=lambda i, t: steps.append(t))
        audio = b.codec.decode(tokens[None])[0, 0]
    rms = float(c.reference.wav.pow(2).mean().sqrt())
    return codes, steps, postprocess(remove_silence(audio, 24000, 500, 100, 100), rms)


def _engine(folder, capacity=None, mode="normal"):
    devices = DeviceService(simulate={"cpu": capacity or (1 << 30)}, strict=capacity is not None)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    return OmniVoiceEngine(load_omnivoice(folder, torch.float32), manager, min_unit_bytes=UNIT)


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = _engine(folder)
    prompt = probe.make_prompt(chunk(), (plain[0], "A reference.", 0.0), True)
    working = probe.generate_memory(prompt.length, prompt.frames)
    mode, capacity = residency_capacity(probe.backbone, residency, working=working)
    if residency != "half":                  # room for the largest component, whichever phase runs
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    engine = _engine(folder, capacity, mode)
    steps = []
    with engine.manager.request(seed=SEED) as ctx:
        audio = engine.speak_chunk(ctx, chunk(), on_step=lambda i, t: steps.append(t))
    codes, ref_steps, ref_audio = plain
    assert len(steps) == len(ref_steps) and all(torch.equal(a, b) for a, b in zip(steps, ref_steps))
    assert torch.equal(audio, ref_audio)
    assert ctx.meta["applied"]["oom_retries"] == 0
    backbone = engine.backbone
    if residency == "full":
        assert ctx.meta["memory"]["streamed_mb"] == 0 and backbone.hook_count == 0
    else:
        assert backbone.streamed_bytes > 0 and backbone.partial           # tiny units: under 0.1 MB a step
        assert (backbone.loaded_bytes > backbone.layout.fixed_bytes) == (residency == "half")


def test_fixed_part_and_units(folder):
    engine = _engine(folder)
    model, codec = engine.bundle.model, engine.bundle.codec
    layout = engine.backbone.layout
    fixed = {id(t) for t in layout.fixed}
    unit_params = {id(p) for u in layout.units for p in u.params}
    assert id(model.llm.embed_tokens.weight) not in fixed | unit_params        # pinned to the CPU
    assert id(model.audio_embeddings.weight) in fixed
    assert {u.name for u in layout.units} >= {f"llm.layers.{i}" for i in range(len(model.llm.layers))}
    enc = engine.encoder.layout
    fixed = {id(t) for t in enc.fixed}
    assert all(id(p) in fixed for p in codec.semantic_model.encoder.pos_conv_embed.parameters())
    snakes = [m.alpha for m in codec.acoustic_encoder.modules() if hasattr(m, "alpha")]
    assert snakes and all(id(a) in fixed for a in snakes)
    # The declared units that hold at least the runtime's 64 KB of streamable weights (tiny widths).
    big = lambda m: sum(p.numel() * 4 for p in m.parameters() if p.dim() > 1) >= 64 << 10  # noqa: E731
    want = {f"semantic_model.encoder.layers.{i}" for i in range(2)}
    want |= {f"acoustic_encoder.block.{i}" for i, b in enumerate(codec.acoustic_encoder.block) if big(b)}
    assert len(want) >= 3 and {u.name for u in enc.units} == want
    dec = engine.decoder.layout
    assert {u.name for u in dec.units} == {f"acoustic_decoder.block.{i}" for i, b in
                                           enumerate(codec.acoustic_decoder.block) if big(b)}
    assert len(dec.units) >= 2
    books = {id(q.codebook.embed) for q in codec.quantizer.quantizers}
    assert books <= {id(t) for t in engine.quantizer.layout.fixed}
    assert engine.backbone.kind == "oneshot"


@pytest.mark.parametrize("text", ["Hi.", "The quick brown fox jumps over the lazy dog, twice over, slowly."])
@pytest.mark.parametrize("cloning", [False, True])
def test_generate_estimate_covers_measured_working_memory(folder, text, cloning):
    engine = _engine(folder, 1 << 30)
    devices = engine.manager.devices
    c = Chunk(text, seed=1, language="en", options={"num_step": 2})
    voice = (torch.randint(0, 1024, (8, 30)), "A reference.", 0.2) if cloning else None
    prompt = engine.make_prompt(c, voice, True)
    estimate = engine.generate_memory(prompt.length, prompt.frames)
    ids, _, _ = batch(prompt, engine.config, "cpu")
    embeds = engine.bundle.model.llm.embed_tokens(ids[:, 0]).detach()
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.backbone], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            unmask(engine.bundle.model, prompt, embeds, Sampling(num_step=2), torch.Generator().manual_seed(1))
    measured = tr.peak_bytes
    print(f"{len(text)} chars, cloning {cloning}: length {prompt.length}, estimate {estimate / 2**20:.2f} MiB, "
          f"measured {measured / 2**20:.2f} MiB")
    assert measured <= estimate <= 4 * measured + (1 << 20)


@pytest.mark.parametrize("seconds", [0.5, 2.0])
def test_codec_estimates_cover_measured_working_memory(folder, seconds):
    from mizuoto.nodes.pack.audio import resample
    engine = _engine(folder, 1 << 30)
    devices, codec = engine.manager.devices, engine.bundle.codec
    wav = torch.randn(int(24000 * seconds) // 960 * 960) * 0.1
    wav16 = resample(wav, 24000, 16000, "torchaudio_functional")
    estimate = engine.prompt_memory(wav.numel())
    with engine.manager.request() as ctx, ctx.use([engine.encoder, engine.quantizer], estimate), \
            devices.tracking("cpu") as tr, torch.inference_mode():
        codes = codec.encode(wav[None, None], wav16[None])[0]
    print(f"prompt {seconds} s: estimate {estimate / 2**20:.2f} MiB, measured {tr.peak_bytes / 2**20:.2f} MiB")
    assert tr.peak_bytes <= estimate <= 4 * tr.peak_bytes + (1 << 20)
    estimate = engine.decode_memory(codes.shape[1])
    with engine.manager.request() as ctx, ctx.use([engine.quantizer, engine.decoder], estimate), \
            devices.tracking("cpu") as tr, torch.inference_mode():
        codec.decode(codes[None])
    print(f"decode {codes.shape[1]} frames: estimate {estimate / 2**20:.2f} MiB, measured {tr.peak_bytes / 2**20:.2f} MiB")
    assert tr.peak_bytes <= estimate <= 4 * tr.peak_bytes + (1 << 20)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_generate_estimate_at_the_published_widths(dtype):
    """One backbone layer at the published widths (1024 wide, 16 / 8 heads of 128, MLP 3072, the real
    8 x 1025 heads), a cloning-sized sequence: the estimate covers the step and stays within 2.5x."""
    from mizuoto.nodes.omnivoice.generate import build_prompt
    from mizuoto.nodes.omnivoice.loader import OmniVoiceBundle
    from mizuoto.nodes.omnivoice.model import OmniVoiceConfig, OmniVoiceLM
    cfg = tiny.model_config(hidden=1024, layers=1)
    cfg["llm_config"].update(num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072)
    config = OmniVoiceConfig.from_dict(cfg)
    torch.manual_seed(0)
    model = OmniVoiceLM(config).to(dtype).eval()
    devices = DeviceService(simulate={"cpu": 1 << 34}, strict=True)
    engine = OmniVoiceEngine(OmniVoiceBundle(Path("."), config, model, tiny_codec()), ModelManager(devices))
    prompt = build_prompt(list(range(30)), list(range(60)), torch.randint(0, 1024, (8, 200)), 250, config)
    estimate = engine.generate_memory(prompt.length, prompt.frames)
    ids, _, _ = batch(prompt, config, "cpu")
    embeds = model.llm.embed_tokens(ids[:, 0]).detach()
    with engine.manager.request(seed=0) as ctx, ctx.use([engine.backbone], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            unmask(model, prompt, embeds, Sampling(num_step=1), torch.Generator().manual_seed(0))
    print(f"{dtype}: length {prompt.length}, estimate {estimate / 2**20:.1f} MiB, measured {tr.peak_bytes / 2**20:.1f} MiB")
    assert tr.peak_bytes <= estimate <= 2.5 * tr.peak_bytes


def tiny_codec():
    from mizuoto.nodes.omnivoice.codec import CodecConfig, HiggsAudioTokenizer
    return HiggsAudioTokenizer(CodecConfig.from_dict(tiny.codec_config())).eval()

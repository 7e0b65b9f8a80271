"""Fish Speech (tiny random checkpoint in the upstream layout) streamed, half-resident and resident on the
strict simulated device gives codes and audio equal to a plain CPU run; the working-memory estimates of
the three phases cover what they really allocate. The S2 variant (tiny S2 folder) streamed and
half-resident equals its plain run too."""
from __future__ import annotations

import pytest
import torch

from fish_speech.tiny import write_tiny_checkpoint, write_tiny_s2
from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.fish_speech.generate import S2Sampling, Sampling, build_chat_prompt, build_prompt, generate_codes
from mizuoto.nodes.fish_speech.loader import load_fish_speech
from mizuoto.nodes.fish_speech.phases import FishS2Engine, FishSpeechEngine
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from runtime_helpers import residency_capacity

SEED = 11
UNIT = 16 << 10          # tiny layers: every layer of the tiny config is a unit
OPTIONS = {"max_new_tokens": 10, "temperature": 0.7, "top_p": 0.9}
TEXT, REF_TEXT = "(calm) Tiny speech.", "Reference words."

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    # A slow LM of 12 layers: larger than what the codec's phases need, so that it streams at half.
    return write_tiny_checkpoint(tmp_path_factory.mktemp("fish") / "tiny", seed=7, n_layer=12, dim=128, n_head=4,
                                 head_dim=32, intermediate_size=512)


def reference() -> Reference:
    t = torch.arange(int(44100 * 1.1)) / 44100
    return Reference(0.3 * torch.sin(2 * torch.pi * 220 * t) * torch.sin(2 * torch.pi * 3 * t), 44100)


@pytest.fixture(scope="module")
def plain(folder):
    """The plain CPU run: the same functions, no runtime."""
    torch.set_num_threads(1)
    b = load_fish_speech(folder, torch.float32)
    with torch.inference_mode():
        ref = b.codec.encode(reference().wav)
        prompt = build_prompt(b.tokenizer, TEXT, b.config.num_codebooks, REF_TEXT, ref)
        codes = generate_codes(b.model, prompt, Sampling(**OPTIONS), torch.Generator().manual_seed(SEED), b.im_end_id)
        return codes, b.codec.decode(codes)


def _engine(folder, capacity=None, mode="normal"):
    devices = DeviceService(simulate={"cpu": capacity or (1 << 30)}, strict=capacity is not None)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    return FishSpeechEngine(load_fish_speech(folder, torch.float32), manager, min_unit_bytes=UNIT)


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = _engine(folder)
    working = probe.generate_memory(64, 8, OPTIONS["max_new_tokens"])
    mode, capacity = residency_capacity(probe.lm, residency, working=working)
    # Room for the codec and its working memory in its phases (the idle LM yields to it).
    capacity = max(capacity, probe.codec.size_bytes + probe.codec_memory(reference().wav.numel()) + (2 << 20))
    if residency == "half":
        assert capacity < probe.lm.size_bytes      # still streams
    engine = _engine(folder, capacity, mode)
    seen = {}
    real_codes = engine.codes

    def codes(*args, **kw):
        seen["codes"] = real_codes(*args, **kw)
        return seen["codes"]

    engine.codes = codes
    with engine.manager.request(seed=SEED) as ctx:
        ctx.generator.manual_seed(SEED)
        audio = engine.speak_chunk(ctx, Chunk(TEXT, seed=SEED, reference=reference(), reference_text=REF_TEXT,
                                              options=OPTIONS))
    ref_codes, ref_audio = plain
    assert torch.equal(seen["codes"], ref_codes)
    assert torch.equal(audio, ref_audio)
    assert ctx.meta["applied"]["oom_retries"] == 0
    if residency == "full":
        assert ctx.meta["memory"]["streamed_mb"] == 0 and engine.lm.hook_count == 0
    else:
        assert engine.lm.streamed_bytes > 0


@pytest.mark.parametrize("words", [2, 8])
def test_generate_estimate_covers_measured_working_memory(folder, words):
    engine = _engine(folder, 1 << 30)
    b = engine.bundle
    text = " ".join(["hello", "world", "(sad)", "你好"] * words)[: 8 * words]
    prompt = build_prompt(b.tokenizer, text, b.config.num_codebooks)
    s = Sampling(max_new_tokens=2 * words)
    estimate = engine.generate_memory(prompt.shape[1], len(b.tokenizer.encode(text)), s.max_new_tokens)
    devices = engine.manager.devices
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.lm], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            codes = generate_codes(b.model, prompt, s, ctx.generator, b.im_end_id)
    measured = tr.peak_bytes
    print(f"{prompt.shape[1]} prompt tokens: {codes.shape[1]} frames, estimate {estimate / 2**20:.2f} MiB, "
          f"measured {measured / 2**20:.2f} MiB")
    assert measured <= estimate
    assert estimate - (1 << 20) <= 4 * measured


@pytest.mark.parametrize("seconds", [0.5, 2.0])
def test_codec_estimate_covers_measured_working_memory(folder, seconds):
    engine = _engine(folder, 1 << 30)
    codec = engine.bundle.codec
    wav = torch.randn(int(44100 * seconds)) * 0.1
    devices = engine.manager.devices
    estimate = engine.codec_memory(wav.numel())
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.codec], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            codes = codec.encode(wav)
    encode_peak = tr.peak_bytes
    estimate_dec = engine.codec_memory(codes.shape[1] * codec.config.frame_length)
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.codec], estimate_dec), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            codec.decode(codes)
    decode_peak = tr.peak_bytes
    print(f"{seconds} s: encode estimate {estimate / 2**20:.1f} MiB measured {encode_peak / 2**20:.1f}; "
          f"decode estimate {estimate_dec / 2**20:.1f} measured {decode_peak / 2**20:.1f}")
    assert encode_peak <= estimate and decode_peak <= estimate_dec
    assert estimate - (1 << 20) <= 8 * encode_peak and estimate_dec - (1 << 20) <= 8 * decode_peak


# ---- Fish Audio S2 (the config variant): its own prompt and sampling, the same modules and phases ----------
S2_OPTIONS = {"max_new_tokens": 10, "temperature": 0.7, "top_p": 0.9, "top_k": 20}


@pytest.fixture(scope="module")
def s2_folder(tmp_path_factory):
    return write_tiny_s2(tmp_path_factory.mktemp("fish_s2") / "tiny_s2", seed=7, text_n_layer=12, text_dim=128,
                         text_n_head=4, text_head_dim=32, text_intermediate_size=512)


@pytest.fixture(scope="module")
def s2_plain(s2_folder):
    torch.set_num_threads(1)
    b = load_fish_speech(s2_folder, torch.float32)
    with torch.inference_mode():
        ref = b.codec.encode(reference().wav)
        prompt = build_chat_prompt(b.tokenizer, TEXT, b.config.num_codebooks, REF_TEXT, ref)
        codes = generate_codes(b.model, prompt, S2Sampling(**S2_OPTIONS), torch.Generator().manual_seed(SEED),
                               b.im_end_id)
        return codes, b.codec.decode(codes)


@pytest.mark.parametrize("residency", ["none", "half"])
def test_s2_streamed_and_half_equal_plain_run(s2_folder, s2_plain, residency):
    devices = DeviceService(simulate={"cpu": 1 << 30})
    probe = FishS2Engine(load_fish_speech(s2_folder, torch.float32), ModelManager(devices), min_unit_bytes=UNIT)
    working = probe.generate_memory(96, 8, S2_OPTIONS["max_new_tokens"])
    mode, capacity = residency_capacity(probe.lm, residency, working=working)
    capacity = max(capacity, probe.codec.size_bytes + probe.codec_memory(reference().wav.numel()) + (2 << 20))
    if residency == "half":
        assert capacity < probe.lm.size_bytes
    manager = ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True),
                           VramPolicy({"compute.vram_mode": mode}))
    engine = FishS2Engine(load_fish_speech(s2_folder, torch.float32), manager, min_unit_bytes=UNIT)
    with engine.manager.request(seed=SEED) as ctx:
        ctx.generator.manual_seed(SEED)
        audio = engine.speak_chunk(ctx, Chunk(TEXT, seed=SEED, reference=reference(), reference_text=REF_TEXT,
                                              options=S2_OPTIONS))
    assert torch.equal(audio, s2_plain[1])
    assert ctx.meta["applied"]["oom_retries"] == 0 and engine.lm.streamed_bytes > 0

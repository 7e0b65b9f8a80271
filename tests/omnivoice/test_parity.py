"""Parity with the upstream package (omnivoice 0.2.1 on transformers >= 5.3) on tiny random checkpoints.

Upstream's own classes (OmniVoice, HiggsAudioV2TokenizerModel) are built from the tiny configs, every
parameter and buffer randomised, and saved with `save_pretrained` (plus a tiny byte-level BPE
tokenizer.json); our loader reads those files. Same text / reference / seed must give equal tokens
after every unmasking step, equal reference codes and equal audio (`torch.equal`, float32).
Needs a separate venv: see README.md.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from qwen3_tts.torchaudio_shim import install as _cpu_torchaudio  # noqa: E402

_cpu_torchaudio()
pytest.importorskip("omnivoice.models.omnivoice")
pytest.importorskip("tokenizers")

from mizuoto.nodes.pack.engine import Chunk, Reference  # noqa: E402
from mizuoto.nodes.omnivoice.loader import load_omnivoice  # noqa: E402
from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine  # noqa: E402
from mizuoto.runtime import DeviceService, ModelManager  # noqa: E402


def _tiny():
    """tests/omnivoice/tiny.py by path (the upstream package is also called `omnivoice`)."""
    spec = importlib.util.spec_from_file_location("omnivoice_tiny", Path(__file__).with_name("tiny.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["omnivoice_tiny"] = module
    spec.loader.exec_module(module)
    return module


tiny = _tiny()
pytestmark = pytest.mark.usefixtures("one_thread")
HOP = 960


def write_upstream(folder: Path, seed: int) -> Path:
    from omnivoice.models.omnivoice import OmniVoice, OmniVoiceConfig
    from transformers import HiggsAudioV2TokenizerConfig, HiggsAudioV2TokenizerModel
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = OmniVoice(OmniVoiceConfig(**tiny.model_config()))
    tiny.randomize(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    codec = HiggsAudioV2TokenizerModel(HiggsAudioV2TokenizerConfig(**tiny.codec_config()))
    tiny.randomize(codec, seed + 1)
    codec.save_pretrained(str(folder / "audio_tokenizer"), safe_serialization=True)
    import json
    (folder / "audio_tokenizer" / "preprocessor_config.json").write_text(json.dumps(tiny.PREPROCESSOR))
    tiny.write_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_upstream(tmp_path_factory.mktemp("omnivoice-parity") / "tiny", seed=5)


@pytest.fixture(scope="module")
def upstream(folder):
    from omnivoice.models.omnivoice import OmniVoice
    return OmniVoice.from_pretrained(str(folder), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def ours(folder):
    return OmniVoiceEngine(load_omnivoice(folder, torch.float32), ModelManager(DeviceService()))


def reference_audio(sr: int = 24000, seconds: float = 1.3, gain: float = 0.3) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (gain * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 2.5 * t)
            + 0.01 * np.sin(2 * np.pi * 1234 * t)).astype(np.float32)


def upstream_run(model, seed: int, **kw):
    """model.generate, recording the tokens after every step (the next step's input) and the final ones."""
    steps: list[torch.Tensor] = []
    frames = {}

    def pre(module, args, kwargs):
        ids = kwargs["input_ids"]                      # row 0 (conditional) spans the whole batch length
        steps.append(ids[0, :, ids.shape[2] - frames["n"]:].clone())

    real = model._generate_iterative

    def generate_iterative(task, config):
        frames["n"] = task.target_lens[0]
        out = real(task, config)
        frames["out"] = out[0].clone()
        return out

    model._generate_iterative = generate_iterative
    handle = model.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        torch.manual_seed(seed)
        audio = model.generate(**kw)[0]
    finally:
        handle.remove()
        del model._generate_iterative
    return steps[1:] + [frames["out"]], frames["out"], audio


def our_run(engine, chunk: Chunk):
    steps: list[torch.Tensor] = []
    seen = {}
    real = engine.decode

    def decode(ctx, codes):
        seen["codes"] = codes
        return real(ctx, codes)

    engine.decode = decode
    try:
        with engine.manager.request(seed=chunk.seed) as ctx:
            audio = engine.speak_chunk(ctx, chunk, on_step=lambda i, t: steps.append(t.clone()))
    finally:
        del engine.decode
    return steps, seen["codes"], audio


def compare(upstream_result, our_result, what: str) -> None:
    up_steps, up_codes, up_audio = upstream_result
    steps, codes, audio = our_result
    assert len(steps) == len(up_steps), f"{what}: {len(steps)} steps vs {len(up_steps)}"
    for i, (a, b) in enumerate(zip(steps, up_steps)):
        assert torch.equal(a, b.cpu()), f"{what}: tokens differ after step {i}"
    assert torch.equal(codes, up_codes.cpu())
    up_audio = torch.from_numpy(np.asarray(up_audio))
    assert audio.shape == up_audio.shape, f"{what}: audio {tuple(audio.shape)} vs {tuple(up_audio.shape)}"
    assert torch.equal(audio, up_audio), f"{what}: audio max diff {(audio - up_audio).abs().max().item():.3g}"
    print(f"{what}: {len(steps)} steps, codes {tuple(codes.shape)}, {audio.numel()} samples: equal")


NO_SILENCE_REMOVAL = dict(postprocess_output=False, preprocess_prompt=False)   # upstream's pydub passes off


@pytest.mark.parametrize("language,instruct,options", [
    ("en", None, {}),
    (None, "female, low pitch, british accent", {"num_step": 12, "class_temperature": 0.7}),
    ("zh", "男，青年", {"num_step": 8, "guidance_scale": 0.0, "position_temperature": 0.0}),
])
def test_plain_and_voice_design(upstream, ours, language, instruct, options):
    text = "Hello world, this is a tiny test." if language != "zh" else "你好 world 123"
    want = upstream_run(upstream, 11, text=text, language=language, instruct=instruct, **options,
                        **NO_SILENCE_REMOVAL)
    chunk = Chunk(text, seed=11, language=language or "auto", instruction=instruct,
                  options={**options, **NO_SILENCE_REMOVAL})
    compare(want, our_run(ours, chunk), f"language={language} instruct={instruct!r} {options}")


@pytest.mark.parametrize("gain,speed", [(0.3, 1.0), (0.02, 1.3)])
def test_voice_clone(upstream, ours, gain, speed):
    wav, ref_text = reference_audio(gain=gain), "Speak slowly and clearly."
    prompt = upstream.create_voice_clone_prompt((torch.from_numpy(wav), 24000), ref_text=ref_text,
                                                preprocess_prompt=False)
    chunk = Chunk("Numbers 123 and 4567.", seed=3, language="en", speed=speed,
                  reference=Reference(torch.from_numpy(wav), 24000), reference_text=ref_text,
                  options=dict(NO_SILENCE_REMOVAL))
    with ours.manager.request(seed=3) as ctx:
        codes, text, rms = ours.voice_prompt(ctx, chunk, preprocess=False)
    assert torch.equal(codes, prompt.ref_audio_tokens.cpu()), "reference codes differ"
    assert rms == prompt.ref_rms and text == prompt.ref_text
    chunk.cache.clear()
    want = upstream_run(upstream, 3, text=chunk.text, language="en", voice_clone_prompt=prompt, speed=speed,
                        **NO_SILENCE_REMOVAL)
    compare(want, our_run(ours, chunk), f"voice clone gain={gain} speed={speed}")


def test_reference_at_another_rate_and_duration(upstream, ours):
    """A 16 kHz reference (resampled to 24 kHz the same way) and a fixed duration."""
    wav = reference_audio(sr=16000, seconds=1.1)
    ref_text = "A calm, low voice."
    prompt = upstream.create_voice_clone_prompt((torch.from_numpy(wav), 16000), ref_text=ref_text,
                                                preprocess_prompt=False)
    want = upstream_run(upstream, 8, text="The quick brown fox.", voice_clone_prompt=prompt, duration=1.5,
                        num_step=6, **NO_SILENCE_REMOVAL)
    chunk = Chunk("The quick brown fox.", seed=8, reference=Reference(torch.from_numpy(wav), 16000),
                  reference_text=ref_text, options={"duration": 1.5, "num_step": 6, **NO_SILENCE_REMOVAL})
    compare(want, our_run(ours, chunk), "16 kHz reference, duration 1.5 s")


def test_bfloat16(folder):
    """The diffusion LM in bfloat16 (the tokenizer stays float32 on both sides): tokens after every step
    and audio still equal."""
    from omnivoice.models.omnivoice import OmniVoice
    model = OmniVoice.from_pretrained(str(folder), dtype=torch.bfloat16).eval()
    assert model.audio_tokenizer.dtype == torch.float32
    engine = OmniVoiceEngine(load_omnivoice(folder, torch.bfloat16), ModelManager(DeviceService()))
    text, options = "Hello world, in half precision.", {"num_step": 16, "class_temperature": 0.5}
    want = upstream_run(model, 21, text=text, language="en", **options)
    compare(want, our_run(engine, Chunk(text, seed=21, language="en", options=dict(options))),
            "bfloat16, default pre/post-processing")


def speech_with_pauses(sr: int = 24000, seed: int = 0) -> np.ndarray:
    """Bursts of tone and noise with pauses of 0.1-0.9 s between them and quiet edges."""
    rng = np.random.default_rng(seed)
    parts = [np.zeros(int(0.4 * sr), np.float32)]
    for _ in range(4):
        n = int(rng.uniform(0.2, 0.6) * sr)
        t = np.arange(n) / sr
        parts.append((0.3 * np.sin(2 * np.pi * rng.uniform(120, 300) * t) + 0.02 * rng.standard_normal(n)).astype(np.float32))
        parts.append((0.001 * rng.standard_normal(int(rng.uniform(0.1, 0.9) * sr))).astype(np.float32))
    return np.concatenate(parts)


def test_default_pre_and_post_processing(upstream, ours):
    """Upstream's defaults: the reference's pauses shortened and edges trimmed, a full stop added to its
    transcript, the output's long pauses shortened (pydub there, nodes/omnivoice/silence.py here)."""
    wav, ref_text = speech_with_pauses(), "Speak slowly and clearly"
    prompt = upstream.create_voice_clone_prompt((torch.from_numpy(wav), 24000), ref_text=ref_text)
    chunk = Chunk("Numbers 123 and 4567.", seed=4, language="en", reference=Reference(torch.from_numpy(wav), 24000),
                  reference_text=ref_text)
    with ours.manager.request(seed=4) as ctx:
        codes, text, rms = ours.voice_prompt(ctx, chunk)
    assert torch.equal(codes, prompt.ref_audio_tokens.cpu()) and text == prompt.ref_text == ref_text + "."
    assert codes.shape[1] < len(wav) // 960                  # the pauses were shortened
    chunk.cache.clear()
    want = upstream_run(upstream, 4, text=chunk.text, language="en", voice_clone_prompt=prompt)
    compare(want, our_run(ours, chunk), "voice clone, default pre/post-processing")
    want = upstream_run(upstream, 6, text="Plain speech.", num_step=10)
    compare(want, our_run(ours, Chunk("Plain speech.", seed=6, options={"num_step": 10})),
            "plain, default post-processing")


def test_silence_removal_matches_pydub():
    from omnivoice.utils.audio import remove_silence as upstream_remove
    from mizuoto.nodes.pack.silence import remove_silence
    rng = np.random.default_rng(1)
    cases = [speech_with_pauses(seed=i)[: int(rng.integers(1000, 100000))] for i in range(12)]
    cases += [np.zeros(5000, np.float32), np.full(30000, 0.5, np.float32), np.zeros(0, np.float32),
              (0.9 * rng.standard_normal(24011)).astype(np.float32)]       # clipping, a partial last millisecond
    for x in cases:
        for args in ((200, 100, 200), (500, 100, 100), (0, 100, 300)):
            want = upstream_remove(x[None], 24000, *args)[0]
            got = remove_silence(torch.from_numpy(x), 24000, *args).numpy()
            assert got.shape == want.shape and np.array_equal(got, want), (len(x), args)


def test_text_side_matches(upstream, ours):
    from omnivoice.models.omnivoice import _combine_text, _resolve_instruct, _tokenize_with_nonverbal_tags
    from omnivoice.utils.duration import RuleDurationEstimator
    from omnivoice.utils.text import add_punctuation as up_punct
    from mizuoto.nodes.omnivoice import text as ov
    tok = ours.bundle.tokenizer
    est = RuleDurationEstimator()
    samples = ["Hello [laughter] world!", "你好，世界 [sigh]。", "Mixed 123 and ﬁve … ok", "مَرْحَبًا بِالْعَالَم", "नमस्ते दुनिया",
               "Chào thế giới", "한국어 テスト", "  spaces\tand\nnewlines（括号） "]
    for s in samples:
        wrapped = f"<|text_start|>{_combine_text(s, ref_text='Ref text.')}<|text_end|>"
        assert ov.wrap_text(ov.combine_text(s, "Ref text.")) == wrapped
        assert tok.encode_text(wrapped) == _tokenize_with_nonverbal_tags(wrapped, upstream.text_tokenizer)[0].tolist()
        assert ov.add_punctuation(s) == up_punct(s)
        for ref, n in ((None, None), ("Nice weather today.", 40)):
            want = upstream._estimate_target_tokens(s, ref, n, speed=1.0)
            assert ov.estimate_frames(s, ref, n) == want, s
    for code in range(0, 0x30000, 7):
        ch = chr(code)
        assert ov.char_weight(ch) == est._get_char_weight(ch), hex(code)
    for ins in ("female, low pitch", "Male，青年", "whisper, british accent", "女, 河南话", "elderly"):
        assert ov.resolve_instruct(ins) == _resolve_instruct(ins), ins
        assert ov.resolve_instruct(ins, use_zh=True) == _resolve_instruct(ins, use_zh=True), ins
    for bad in ("femal", "male, female", "british accent, 河南话"):
        with pytest.raises(ValueError):
            _resolve_instruct(bad)
        with pytest.raises(ValueError):
            ov.resolve_instruct(bad)
    style = "<|denoise|><|lang_start|>en<|lang_end|><|instruct_start|>None<|instruct_end|>"
    assert ov.style_text("en", None, True) == style
    assert tok.encode(style) == upstream.text_tokenizer(style, return_tensors="pt").input_ids[0].tolist()


def test_masked_spec_embed_checkpoint_loads(folder, tmp_path):
    """The published tokenizer carries HuBERT's training-only masked_spec_embed (upstream ignores it on
    load); a file with it loads too and decodes the same."""
    from safetensors.torch import load_file, save_file
    import shutil
    copy = tmp_path / "with_extra"
    shutil.copytree(folder, copy)
    path = copy / "audio_tokenizer" / "model.safetensors"
    tensors = load_file(str(path))
    tensors["semantic_model.masked_spec_embed"] = torch.randn(tiny.codec_config()["semantic_model_config"]["hidden_size"])
    save_file(tensors, str(path))
    a, b = load_omnivoice(folder, torch.float32), load_omnivoice(copy, torch.float32)
    codes = torch.randint(0, 1024, (1, 8, 7))
    with torch.inference_mode():
        assert torch.equal(a.codec.decode(codes), b.codec.decode(codes))


# ---- through the Speak pipeline, upstream's defaults, against model.generate ----------------------------

def stereo_44k(seconds: float = 1.6) -> np.ndarray:
    """A 44.1 kHz stereo reference: two different channels, pauses and quiet edges (the defaults trim)."""
    left = reference_audio(sr=44100, seconds=seconds, gain=0.3)
    right = np.roll(reference_audio(sr=44100, seconds=seconds, gain=0.2), 441)
    left[:4410] = right[:4410] = 0.0
    return np.stack([left, right])


def pipeline_run(engine, text: str, seed: int, **request):
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    wav, meta = synthesize(engine, SpeakRequest(text=text, seed=seed, **request))
    return wav, meta


@pytest.mark.parametrize("text,language", [
    ("今天天气很好。我们去公园散步吧！\n2024年3月15日，气温25℃。", "zh"),
    ("こんにちは。今日はいい天気ですね！散歩に行きましょう。", "ja"),
    ("It costs $5.99, Dr. Smith said. See you on March 3rd at 10:30!", "en"),
])
def test_the_pipeline_with_a_44k_stereo_reference_equals_generate(upstream, ours, text, language):
    """A SpeakRequest with a 44.1 kHz stereo ComfyUI AUDIO reference and its transcript, every option at
    its default (reference and output silence processing on, 32 steps): the whole multi-sentence text is
    one generation, and the audio is upstream's model.generate(text, ref_audio=(stereo, 44100), ref_text)."""
    stereo, ref_text = stereo_44k(), "Speak slowly and clearly"
    torch.manual_seed(6)
    want = upstream.generate(text=text, language=language, ref_audio=(torch.from_numpy(stereo), 44100),
                             ref_text=ref_text)[0]
    got, meta = pipeline_run(ours, text, 6, language=language, reference_text=ref_text,
                             reference={"waveform": torch.from_numpy(stereo)[None], "sample_rate": 44100})
    want = torch.from_numpy(np.asarray(want))
    assert meta["chunks"] == 1
    assert got.shape == want.shape and torch.equal(got, want), \
        f"{language}: {tuple(got.shape)} vs {tuple(want.shape)}"


@pytest.mark.parametrize("cloning", [False, True])
def test_a_long_text_through_the_pipeline_equals_generate(upstream, ours, cloning):
    """Over 30 s of estimated audio: upstream's _generate_chunked (pieces of ~15 s, the first piece's voice
    for the rest without a reference, one random stream, cross_fade_chunks, one post-processing)."""
    text = " ".join(f"Sentence number {i} is here, and it goes on a little." for i in range(14))
    options = {"num_step": 4}
    if cloning:
        wav, ref_text = reference_audio(gain=0.05), "A quiet reference."
        kw = dict(ref_audio=(torch.from_numpy(wav), 24000), ref_text=ref_text)
        request = dict(reference={"waveform": torch.from_numpy(wav)[None, None], "sample_rate": 24000},
                       reference_text=ref_text)
    else:
        kw, request = {}, {}
    torch.manual_seed(2)
    want = torch.from_numpy(np.asarray(upstream.generate(text=text, language="en", **kw, **options)[0]))
    got, meta = pipeline_run(ours, text, 2, language="en", options=options, **request)
    assert meta["chunks"] >= 2
    assert got.shape == want.shape and torch.equal(got, want), f"{tuple(got.shape)} vs {tuple(want.shape)}"

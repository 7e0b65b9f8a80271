"""Parity with the upstream package (qwen-tts 0.1.1, transformers 4.57.3) on tiny random checkpoints.

Upstream's own classes are built from tiny configs, every parameter randomised, and saved with
`save_pretrained` in the upstream layout (plus a tiny byte-level BPE tokenizer); our loader reads those
files. Same inputs and greedy decoding must give the same codes, and waveforms within 1e-4; the
voice-clone prompt (reference codes, x-vector) must match too. Needs a separate venv: see README.md.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from qwen3_tts.torchaudio_shim import install as _cpu_torchaudio  # noqa: E402

_cpu_torchaudio()
qwen_tts = pytest.importorskip("qwen_tts")
pytest.importorskip("tokenizers")

from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts  # noqa: E402
from mizuoto.nodes.qwen3_tts.phases import Qwen3TTSEngine  # noqa: E402
from mizuoto.nodes.qwen3_tts.text import TextTokenizer  # noqa: E402
from mizuoto.runtime import DeviceService, ModelManager  # noqa: E402
from qwen3_tts.tiny import GENERATION, TEXT, codec_config, model_config, randomize, write_tokenizer  # noqa: E402

GREEDY = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=14, repetition_penalty=1.05)
TOL = 1e-4
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: one thread is faster


def write_upstream(folder: Path, kind: str, seed: int) -> Path:
    """Upstream classes from the tiny configs, randomised, saved with save_pretrained."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model_config(kind)
    cfg["talker_config"]["text_vocab_size"] = TEXT["text_vocab_size"]
    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**cfg))
    randomize(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    # save_pretrained adds keys (model_type, ...) to speaker_encoder_config that upstream's own config class
    # cannot read back; the published config.json files hold just the model's keys, as written here.
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION))
    codec = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**codec_config()))
    randomize(codec, seed + 1)
    codec.save_pretrained(str(folder / "speech_tokenizer"), safe_serialization=True)
    (folder / "speech_tokenizer" / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1, "sampling_rate": 24000,
        "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
        "chunk_length_s": None, "overlap": None}))
    write_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3-parity")
    t = time.time()
    out = {kind: write_upstream(root / kind, kind, seed)
           for kind, seed in (("custom_voice", 1), ("voice_design", 2), ("base", 3))}
    print(f"\nwrote 3 upstream tiny checkpoints in {time.time() - t:.1f} s")
    return out


def upstream(folder: Path):
    from qwen_tts import Qwen3TTSModel
    return Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32)


def ours(folder: Path) -> Qwen3TTSEngine:
    return Qwen3TTSEngine(load_qwen3_tts(folder, dtype=torch.float32), ModelManager(DeviceService()))


def upstream_codes(tts, text, language, **kw):
    """Upstream's model.generate for one request, returning codes instead of audio."""
    ids = tts._tokenize_texts([tts._build_assistant_text(text)])
    instruct = kw.pop("instruct", None)
    instruct_ids = [tts._tokenize_texts([tts._build_instruct_text(instruct)])[0] if instruct else None]
    codes, _ = tts.model.generate(input_ids=ids, instruct_ids=instruct_ids, languages=[language],
                                  **kw, **tts._merge_generate_kwargs(**GREEDY))
    return codes[0]


def our_codes(engine, text, language, speaker=None, instruct=None, non_streaming=True, voice=None):
    from mizuoto.nodes.qwen3_tts.generate import Request, Sampling
    ids = engine.tokenize(text, instruct, voice[2] if voice and voice[0] is not None else None)
    req = Request(ids["text_ids"], language, speaker, ids["instruct_ids"], non_streaming=non_streaming)
    if voice is not None:
        req.ref_code, req.spk_embedding = voice[0], voice[1]
        req.ref_ids = ids["ref_ids"]
    with engine.manager.request(seed=0) as ctx:
        return engine.codes(ctx, req, Sampling.merged(engine.bundle.generate_defaults, **GREEDY))


def close(a, b, what, audio=True):
    a, b = torch.as_tensor(np.asarray(a)).float(), torch.as_tensor(np.asarray(b)).float()
    assert a.shape == b.shape, f"{what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}"
    err = (a - b).abs().max().item() if a.numel() else 0.0
    clipped = (b.abs() >= 1).float().mean().item() if b.numel() else 0.0
    print(f"{what}: max abs diff {err:.2e} ({b.numel()} samples, std {b.std().item():.3f}, {clipped:.1%} at the clamp)")
    assert not audio or clipped < 0.05, f"{what}: the reference saturates; the comparison would say little"
    assert err <= TOL, f"{what}: max abs diff {err}"


def test_text_tokenizer_matches(folders):
    tts = upstream(folders["custom_voice"])
    mine = TextTokenizer(folders["custom_voice"])
    for text in ["Hello world!", "<|im_start|>assistant\nSpeak slowly, 123.<|im_end|>\n<|im_start|>assistant\n",
                 "The  quick\nbrown fox's 4567 jumps", "héllo wörld"]:
        want = tts.processor(text=text, return_tensors="pt")["input_ids"][0].tolist()
        assert mine.encode(text) == want, text


@pytest.mark.parametrize("speaker,language,instruct", [("Vivian", "english", "Speak slowly."),
                                                       ("dylan", "auto", None), ("vivian", "chinese", None)])
def test_custom_voice(folders, speaker, language, instruct):
    tts, engine = upstream(folders["custom_voice"]), ours(folders["custom_voice"])
    text = "Hello world, this is a tiny test."
    want = upstream_codes(tts, text, language, speakers=[speaker], instruct=instruct, non_streaming_mode=True)
    got = our_codes(engine, text, language, speaker, instruct)
    assert torch.equal(got, want.cpu()), f"codes differ:\n{got}\n{want}"
    wavs, sr = tts.generate_custom_voice(text, speaker=speaker, language=language, instruct=instruct, **GREEDY)
    with engine.manager.request(seed=0) as ctx:
        mine = engine.speak(ctx, text, language=language, speaker=speaker, instruct=instruct, **GREEDY)
    assert sr == 24000
    close(mine, wavs[0], f"custom voice {speaker}/{language} waveform")


@pytest.mark.parametrize("non_streaming", [True, False])
def test_voice_design(folders, non_streaming):
    tts, engine = upstream(folders["voice_design"]), ours(folders["voice_design"])
    text, instruct = "The quick brown fox.", "A calm, low voice."
    want = upstream_codes(tts, text, "english", instruct=instruct, non_streaming_mode=non_streaming)
    got = our_codes(engine, text, "english", instruct=instruct, non_streaming=non_streaming)
    assert torch.equal(got, want.cpu())
    wavs, _ = tts.generate_voice_design(text, instruct=instruct, language="english",
                                        non_streaming_mode=non_streaming, **GREEDY)
    with engine.manager.request(seed=0) as ctx:
        mine = engine.speak(ctx, text, language="english", instruct=instruct, non_streaming=non_streaming, **GREEDY)
    close(mine, wavs[0], f"voice design (non_streaming={non_streaming}) waveform")


def reference_audio(sr: int = 24000, seconds: float = 1.3) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (0.3 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 2.5 * t) + 0.01 * np.sin(2 * np.pi * 1234 * t)).astype(np.float32)


@pytest.mark.parametrize("x_vector_only,non_streaming", [(False, False), (False, True), (True, False)])
def test_voice_clone(folders, x_vector_only, non_streaming):
    tts, engine = upstream(folders["base"]), ours(folders["base"])
    wav, ref = reference_audio(), "Speak slowly and clearly."
    items = tts.create_voice_clone_prompt((wav, 24000), ref_text=ref, x_vector_only_mode=x_vector_only)
    with engine.manager.request(seed=0) as ctx:
        codes, spk = engine.voice_prompt(ctx, (torch.from_numpy(wav), 24000), x_vector_only)
    close(spk, items[0].ref_spk_embedding.cpu(), "x-vector", audio=False)
    if x_vector_only:
        assert codes is None and items[0].ref_code is None
    else:
        assert torch.equal(codes, items[0].ref_code.cpu()), "reference codes differ"
    text = "Numbers 123 and 4567."
    prompt = tts._prompt_items_to_voice_clone_prompt(items)
    ref_ids = None if x_vector_only else [tts._tokenize_texts([tts._build_ref_text(ref)])[0]]
    want = upstream_codes(tts, text, "english", ref_ids=ref_ids, voice_clone_prompt=prompt,
                          non_streaming_mode=non_streaming)
    got = our_codes(engine, text, "english", non_streaming=non_streaming, voice=(codes, spk, ref))
    assert torch.equal(got, want.cpu())
    wavs, _ = tts.generate_voice_clone(text, language="english", voice_clone_prompt=items,
                                       non_streaming_mode=non_streaming, **GREEDY)
    with engine.manager.request(seed=0) as ctx:
        mine = engine.speak(ctx, text, language="english", ref_audio=(torch.from_numpy(wav), 24000), ref_text=ref,
                            x_vector_only=x_vector_only, non_streaming=non_streaming, **GREEDY)
    close(mine, wavs[0], f"voice clone (x_vector_only={x_vector_only}, non_streaming={non_streaming}) waveform")


@pytest.mark.parametrize("rate", [44100, 16000, 48000])
def test_voice_prompt_from_other_rates_equals_upstream(folders, rate):
    """A reference at the rate users' files have: resampled as upstream (librosa's soxr HQ), the reference
    codes are equal and the x-vector as close as at 24 kHz."""
    tts, engine = upstream(folders["base"]), ours(folders["base"])
    wav = reference_audio(rate)
    items = tts.create_voice_clone_prompt((wav, rate), ref_text="Speak slowly.", x_vector_only_mode=False)
    with engine.manager.request(seed=0) as ctx:
        codes, spk = engine.voice_prompt(ctx, (torch.from_numpy(wav), rate), False)
    assert torch.equal(codes, items[0].ref_code.cpu()), f"reference codes from {rate} Hz differ"
    close(spk, items[0].ref_spk_embedding.cpu(), f"x-vector from {rate} Hz", audio=False)


def test_decoder_long_chunked(folders):
    """Codes longer than one 300-frame chunk: chunked decoding with left context matches."""
    tts, engine = upstream(folders["base"]), ours(folders["base"])
    codes = torch.randint(0, 64, (330, 16), generator=torch.Generator().manual_seed(0))
    wavs, _ = tts.model.speech_tokenizer.decode([{"audio_codes": codes}])
    with engine.manager.request(seed=0) as ctx:
        mine = engine.decode(ctx, codes)
    close(mine, wavs[0], "chunked decode of 330 frames")


def test_decoder_fallback_chunks_like_upstream(folders):
    """The OOM fallback's 50-frame chunks use upstream's own left-context scheme: its chunked_decode
    with chunk_size=50 gives the same waveform."""
    from mizuoto.nodes.qwen3_tts.phases import FALLBACK_CHUNK
    tts, engine = upstream(folders["base"]), ours(folders["base"])
    codes = torch.randint(0, 64, (130, 16), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        theirs = tts.model.speech_tokenizer.model.decoder.chunked_decode(codes.T[None], chunk_size=FALLBACK_CHUNK)
        mine = engine.bundle.codec.decode(codes, FALLBACK_CHUNK)
    close(mine, theirs[0, 0], f"decode in {FALLBACK_CHUNK}-frame chunks")


def test_end_token_stops_like_upstream(folders):
    """Longer greedy runs: where upstream stops on the end token, we stop on the same frame."""
    tts, engine = upstream(folders["custom_voice"]), ours(folders["custom_voice"])
    stopped = 0
    for i, text in enumerate(["Hello.", "Speak slowly, please!", "Numbers 123.", "The lazy dog.", "A calm voice."]):
        kw = dict(GREEDY, max_new_tokens=40)
        ids = tts._tokenize_texts([tts._build_assistant_text(text)])
        want, _ = tts.model.generate(input_ids=ids, instruct_ids=[None], languages=["english"], speakers=["vivian"],
                                     non_streaming_mode=True, **tts._merge_generate_kwargs(**kw))
        from mizuoto.nodes.qwen3_tts.generate import Request, Sampling
        req = Request(engine.tokenize(text)["text_ids"], "english", "vivian", non_streaming=True)
        with engine.manager.request(seed=0) as ctx:
            got = engine.codes(ctx, req, Sampling.merged(engine.bundle.generate_defaults, **kw))
        assert torch.equal(got, want[0].cpu()), text
        stopped += got.shape[0] < 39
    print(f"{stopped} of 5 runs ended on the end token before max_new_tokens")
    assert stopped >= 1


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_half_precision(folders, dtype):
    """Both loaded in bf16: same codes, waveform close (bf16 rounding is the same op by op)."""
    from qwen_tts import Qwen3TTSModel
    tts = Qwen3TTSModel.from_pretrained(str(folders["custom_voice"]), dtype=dtype)
    engine = Qwen3TTSEngine(load_qwen3_tts(folders["custom_voice"], dtype=dtype), ModelManager(DeviceService()))
    text = "Hello world, this is a tiny test."
    want = upstream_codes(tts, text, "english", speakers=["vivian"], non_streaming_mode=True)
    got = our_codes(engine, text, "english", "vivian")
    assert torch.equal(got, want.cpu())
    wavs, _ = tts.generate_custom_voice(text, speaker="vivian", language="english", **GREEDY)
    with engine.manager.request(seed=0) as ctx:
        mine = engine.speak(ctx, text, language="english", speaker="vivian", **GREEDY)
    close(mine, wavs[0], f"custom voice waveform in {dtype}")


# ---- through the Speak pipeline, upstream's defaults, against its generate_* calls ---------------------------

@pytest.mark.parametrize("text", ["今天天气很好。我们去公园散步吧！\n明天是2024年3月15日。", "It costs $5.99. See you at 10:30!"])
def test_the_pipeline_equals_generate_voice_clone(folders, tmp_path, text):
    """The Base model's user path: a SpeakRequest with a 44.1 kHz stereo reference and its transcript, every
    option at its default (sampling on), against the user-facing generate_voice_clone(text, ref_audio=<the
    same float WAV>, ref_text) after torch.manual_seed (librosa.load(sr=None, mono=True): the mean; a
    stereo array passed as a tuple fails upstream, `a[0] = ...` on a tuple). Needs librosa."""
    import soundfile
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    tts, engine = upstream(folders["base"]), ours(folders["base"])
    left = reference_audio(44100)
    stereo = np.stack([left, 0.6 * np.roll(left, 200)]).astype(np.float32)
    path = tmp_path / "ref.wav"
    soundfile.write(str(path), stereo.T, 44100, subtype="FLOAT")
    ref_text = "Speak slowly and clearly."
    torch.manual_seed(5)
    wavs, sr = tts.generate_voice_clone(text, language="auto", ref_audio=str(path), ref_text=ref_text)
    got, meta = synthesize(engine, SpeakRequest(text, seed=5, reference_text=ref_text,
                                                reference={"waveform": torch.from_numpy(stereo)[None], "sample_rate": 44100}))
    want = torch.from_numpy(np.asarray(wavs[0]))
    assert sr == 24000 and meta["chunks"] == 1              # qwen-tts reads the text whole
    assert got.shape == want.shape, f"{tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.equal(got, want), f"max |ours - upstream| {(got - want).abs().max().item():.3g}"


def pipeline_equals(engine, request, want, what):
    """Our Speak pipeline on `request` (seeded as the upstream call was) -> torch.equal to upstream's audio."""
    from mizuoto.nodes.pack.pipeline import synthesize
    got, meta = synthesize(engine, request)
    want = torch.from_numpy(np.asarray(want))
    assert meta["chunks"] == 1                              # qwen-tts reads the text whole
    print(f"{what}: {got.numel()} samples ({got.numel() / 24000:.1f} s)")
    assert got.shape == want.shape, f"{what}: {tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}: max |ours - upstream| {(got - want).abs().max().item():.3g}"


ZH = "今天天气很好。我们去公园散步吧！\n明天是2024年3月15日。"


# Seeds chosen so that upstream's audio changes with each input of the case (speaker, language, instruction,
# seed); the random talker's sampling is peaked, and on some seeds a changed input gives the same audio.
@pytest.mark.parametrize("text,voice,language,instruction,their_language,seed", [
    ("Hello world! This is a short test, read by a named voice.", "Vivian", "en", None, "English", 2),
    (ZH, "vivian", "zh", None, "Chinese", 2),
    (ZH, "Dylan", "zh", None, "Chinese", 0),     # a dialect speaker: Chinese is read in its dialect
    ("Please read this slowly: it costs $5.99.", "vivian", "auto", "Speak slowly, in a warm and happy tone.",
     "Auto", 2),
], ids=["english", "chinese", "dialect", "instruction"])
def test_the_pipeline_equals_generate_custom_voice(folders, text, voice, language, instruction, their_language, seed):
    """The CustomVoice model's user path: SpeakRequest(text, voice, language, instruction), every option at
    its default (sampling on), against the user-facing generate_custom_voice(text, speaker, language,
    instruct) after the same torch.manual_seed."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest
    tts, engine = upstream(folders["custom_voice"]), ours(folders["custom_voice"])
    torch.manual_seed(seed)
    wavs, sr = tts.generate_custom_voice(text, speaker=voice, language=their_language, instruct=instruction)
    assert sr == 24000
    pipeline_equals(engine, SpeakRequest(text, seed=seed, voice=voice, language=language, instruction=instruction),
                    wavs[0], f"custom voice {voice}/{language}")


@pytest.mark.parametrize("text,language,their_language,seed", [
    ("The quick brown fox jumps over the lazy dog. Is it 10:30 yet?", "en", "English", 3),
    (ZH, "zh", "Chinese", 5),
], ids=["english", "chinese"])
def test_the_pipeline_equals_generate_voice_design(folders, text, language, their_language, seed):
    """The VoiceDesign model's user path: SpeakRequest(text, instruction=<a voice description>, language),
    defaults (sampling on), against generate_voice_design(text, instruct, language) after the same
    torch.manual_seed."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest
    tts, engine = upstream(folders["voice_design"]), ours(folders["voice_design"])
    instruction = "A calm, low male voice, speaking slowly with a slight rasp."
    torch.manual_seed(seed)
    wavs, sr = tts.generate_voice_design(text, instruct=instruction, language=their_language)
    assert sr == 24000
    pipeline_equals(engine, SpeakRequest(text, seed=seed, instruction=instruction, language=language),
                    wavs[0], f"voice design {language}")

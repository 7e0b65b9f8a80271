"""OmniVoice on tiny random checkpoints in the upstream layout (written by tiny.py, no omnivoice needed):
loader errors name the file, the modes speak, seeds repeat, options reach the sampler."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.omnivoice import ENGINE
from mizuoto.nodes.omnivoice.generate import schedule, time_steps
from mizuoto.nodes.omnivoice.loader import ModelFolderError, is_model_folder, load_omnivoice
from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine
from mizuoto.nodes.omnivoice.text import estimate_frames, resolve_instruct, text_weight
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

spec = importlib.util.spec_from_file_location("omnivoice_tiny", Path(__file__).with_name("tiny.py"))
tiny = importlib.util.module_from_spec(spec)
sys.modules["omnivoice_tiny"] = tiny
spec.loader.exec_module(tiny)

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = {"num_step": 4}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("omnivoice") / "tiny", seed=1, masked_spec_embed=True)


@pytest.fixture(scope="module")
def engine(folder):
    return OmniVoiceEngine(load_omnivoice(folder, torch.float32), ModelManager(DeviceService()))


def speak(engine, chunk: Chunk) -> torch.Tensor:
    with engine.manager.request(seed=chunk.seed) as ctx:
        return engine.speak_chunk(ctx, chunk)


def copy_of(folder: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(folder, dest)
    return dest


def test_spec_and_folder(folder, tmp_path):
    from mizuoto.nodes import NODE_CLASS_MAPPINGS
    assert ENGINE.loader_node == "MizuotoLoadOmniVoice" and ENGINE.engine_id == OmniVoiceEngine.engine_id
    assert "MizuotoLoadOmniVoice" in NODE_CLASS_MAPPINGS
    assert ENGINE.languages == OmniVoiceEngine.capabilities.languages
    assert ENGINE.is_model_folder(folder) and not is_model_folder(tmp_path)
    download = ENGINE.models["OmniVoice"][0]
    assert download.repo == "k2-fsa/OmniVoice"
    for name in ("model.safetensors", "audio_tokenizer/model.safetensors", "tokenizer.json", "config.json"):
        assert download.wants(name), name


def test_missing_files_are_named(folder, tmp_path):
    with pytest.raises(ModelFolderError, match="not found"):
        load_omnivoice(tmp_path / "nowhere")
    for missing in ("tokenizer.json", "audio_tokenizer/model.safetensors", "audio_tokenizer/config.json"):
        broken = copy_of(folder, tmp_path / missing.replace("/", "_"))
        (broken / missing).unlink()
        with pytest.raises(ModelFolderError, match=missing.split("/")[-1]):
            load_omnivoice(broken)


def test_bad_config_fields_name_file_and_field(folder, tmp_path):
    broken = copy_of(folder, tmp_path)
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["llm_config"]["num_hidden_layers"]
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json.*num_hidden_layers"):
        load_omnivoice(broken)
    cfg["llm_config"]["num_hidden_layers"] = 2
    cfg["audio_mask_id"] = 5000
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json.*audio_mask_id"):
        load_omnivoice(broken)
    ccfg = json.loads((broken / "audio_tokenizer" / "config.json").read_text())
    ccfg["semantic_model_config"]["feat_extract_norm"] = "layer"
    (broken / "audio_tokenizer" / "config.json").write_text(json.dumps(ccfg))
    (broken / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"audio_tokenizer/config\.json.*feat_extract_norm"):
        load_omnivoice(broken)
    (broken / "audio_tokenizer" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"audio_tokenizer/config\.json is not valid JSON"):
        load_omnivoice(broken)


def test_wrong_shapes_and_keys_name_the_file(folder, tmp_path):
    broken = copy_of(folder, tmp_path)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["llm_config"]["intermediate_size"] += 8
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*shape mismatch.*mlp"):
        load_omnivoice(broken)
    (broken / "config.json").write_text((folder / "config.json").read_text())
    ccfg = json.loads((broken / "audio_tokenizer" / "config.json").read_text())
    ccfg["target_bandwidths"] = [0.5, 1]                 # 4 quantizers: the file holds 8
    (broken / "audio_tokenizer" / "config.json").write_text(json.dumps(ccfg))
    with pytest.raises(CheckpointError, match=r"audio_tokenizer/model\.safetensors.*unexpected keys.*quantizer"):
        load_omnivoice(broken)


def test_modes_speak_and_seeds_repeat(engine):
    plain = speak(engine, Chunk("Hello there.", seed=3, language="en", options=dict(FAST)))
    again = speak(engine, Chunk("Hello there.", seed=3, language="en", options=dict(FAST)))
    other = speak(engine, Chunk("Hello there.", seed=4, language="en", options=dict(FAST)))
    assert plain.dtype == torch.float32 and plain.dim() == 1 and torch.isfinite(plain).all()
    assert torch.equal(plain, again) and not torch.equal(plain, other)
    assert plain.abs().max() <= 0.5 + 1e-6                      # no reference: upstream's 0.5 peak
    frames = estimate_frames("Hello there.")
    assert plain.numel() == frames * 960 + 2 * 2400             # 0.1 s of silence on both sides
    designed = speak(engine, Chunk("Hello there.", seed=3, instruction="female, whisper", options=dict(FAST)))
    assert designed.numel() == plain.numel() and not torch.equal(designed, plain)
    t = torch.arange(24000) / 24000
    ref = Reference(0.05 * torch.sin(2 * torch.pi * 200 * t), 24000)
    c = Chunk("Hello there.", seed=3, reference=ref, reference_text="A quiet reference", options=dict(FAST))
    cloned = speak(engine, c)
    codes, text, rms = c.prompts["voice"]
    assert codes.shape == (8, 25) and text == "A quiet reference." and 0 < rms < 0.1
    assert cloned.numel() == estimate_frames("Hello there.", text, 25) * 960 + 4800


def test_later_chunks_clone_the_first_chunks_voice(engine):
    """Without a reference, chunk i > 0 takes chunk 0's codes and text as its reference (upstream's
    long-text generation); with one, every chunk uses the reference."""
    cache: dict = {}
    first = Chunk("The first sentence.", seed=0, index=0, count=2, options=dict(FAST), cache=cache)
    speak(engine, first)
    codes, text, rms = cache["first"]
    assert text == "The first sentence." and rms is None and codes.shape == (8, estimate_frames(text))
    second = Chunk("And the second one.", seed=1, index=1, count=2, options=dict(FAST), cache=cache)
    prompt = engine.make_prompt(second, cache["first"], True)
    assert torch.equal(prompt.ids[:, -prompt.frames - codes.shape[1]:-prompt.frames], codes)
    assert prompt.frames == estimate_frames("And the second one.", text, codes.shape[1])
    wav = speak(engine, second)
    assert wav.numel() == prompt.frames * 960            # a piece: post-processed once joined (finish)
    alone = speak(engine, Chunk("And the second one.", seed=1, options=dict(FAST)))
    assert alone.numel() != wav.numel() or not torch.equal(alone, wav)


def test_through_the_speak_pipeline(folder):
    """A 16 kHz ComfyUI AUDIO reference and its transcript: the pipeline resamples the reference to
    24 kHz and encodes it once; multi-sentence text whose audio fits 30 s is generated whole."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    engine = OmniVoiceEngine(load_omnivoice(folder, torch.float32), ModelManager(DeviceService()))
    t = torch.arange(16000) / 16000
    audio = {"waveform": (0.2 * torch.sin(2 * torch.pi * 150 * t))[None, None], "sample_rate": 16000}
    calls = []
    real = engine.encode_reference
    engine.encode_reference = lambda ctx, wav: calls.append(wav.numel()) or real(ctx, wav)
    text = "今天天气很好。我们去公园散步吧！\n明天见。"
    req = SpeakRequest(text=text, seed=9, language="zh", reference=audio,
                       reference_text="A reference", options={"num_step": 3})
    wav, meta = synthesize(engine, req)
    assert meta["chunks"] == 1 and meta["sample_rate"] == 24000 and calls == [24000]
    again, _ = synthesize(engine, req)
    assert torch.equal(wav, again)
    with pytest.raises(ValueError, match="language"):
        synthesize(engine, SpeakRequest(text="Hi.", language="xx"))
    with pytest.raises(ValueError, match="reference_text"):
        synthesize(engine, SpeakRequest(text="Hi.", reference=audio))


@pytest.mark.parametrize("cloning", [pytest.param(False, marks=pytest.mark.slow), True])   # False: 22 s
def test_a_long_text_is_cut_generated_from_one_stream_joined_then_post_processed(folder, cloning):
    """Over 30 s of estimated audio: upstream's pieces (chunk_text_punctuation at ~15 s), the first
    piece's voice for the rest when there is no reference, one random stream, cross_fade_chunks, and
    the post-processing once on the joined audio: the pipeline equals those steps done by hand."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    from mizuoto.nodes.pack.segments import join_waves
    from mizuoto.nodes.omnivoice.phases import postprocess
    from mizuoto.nodes.omnivoice.segments import chunk_text_punctuation
    from mizuoto.nodes.pack.silence import remove_silence
    engine = OmniVoiceEngine(load_omnivoice(folder, torch.float32), ModelManager(DeviceService()))
    text = " ".join(f"Sentence number {i} is here, and it goes on a little." for i in range(14))
    t = torch.arange(24000) / 24000
    ref = Reference(0.05 * torch.sin(2 * torch.pi * 150 * t), 24000) if cloning else None
    ref_text = "A quiet reference." if cloning else None
    pieces = engine.split_text(text, ref, ref_text)
    if cloning:
        wav, text_, _ = engine.prepare_reference(ref, ref_text)
        frames = estimate_frames(text, text_, wav.numel() // 960)
    else:
        frames = estimate_frames(text)
    assert frames > 750
    assert pieces == chunk_text_punctuation(text, int(15 * 25 / (frames / len(text))), 3) and len(pieces) >= 2
    req = SpeakRequest(text=text, seed=4, language="en", options={"num_step": 2},
                       reference={"waveform": ref.wav[None, None], "sample_rate": 24000} if cloning else None,
                       reference_text=ref_text)
    got, meta = synthesize(engine, req)
    assert meta["chunks"] == len(pieces)
    cache: dict = {}
    prompts: dict = {}
    raw = []
    with engine.manager.request(seed=4) as ctx:
        for i, piece in enumerate(pieces):
            chunk = Chunk(piece, seed=4 + i, index=i, count=len(pieces), language="en", reference=ref,
                          reference_text=ref_text, options={"num_step": 2}, cache=cache, prompts=prompts)
            raw.append(engine.speak_chunk(ctx, chunk))
    joined = join_waves(raw, engine.join, 24000)
    want = postprocess(remove_silence(joined, 24000, mid_sil=500, lead_sil=100, trail_sil=100),
                       prompts["voice"][2] if cloning else None)
    assert torch.equal(got, want)
    # the second piece continued the first's random stream (a fresh seed would draw other noise)
    assert "rng" in cache


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_backbone_with_a_float32_tokenizer(folder, dtype):
    engine = OmniVoiceEngine(load_omnivoice(folder, dtype), ModelManager(DeviceService()))
    assert engine.bundle.dtype == dtype and engine.bundle.codec.fc.weight.dtype == torch.float32
    t = torch.arange(24000) / 24000
    c = Chunk("Hello there.", seed=0, reference=Reference(0.2 * torch.sin(2 * torch.pi * 200 * t), 24000),
              reference_text="A reference.", options=dict(FAST))
    wav = speak(engine, c)
    assert wav.dtype == torch.float32 and torch.isfinite(wav).all() and wav.abs().max() > 0


def test_speed_and_duration(engine):
    text = "Speak at another rate, please."
    fast = speak(engine, Chunk(text, seed=0, speed=2.0, options=dict(FAST)))
    assert fast.numel() == estimate_frames(text, speed=2.0) * 960 + 4800
    fixed = speak(engine, Chunk("Any text at all.", seed=0, options={**FAST, "duration": 1.2}))
    assert fixed.numel() == 30 * 960 + 4800


def test_languages_are_upstream_ids(engine):
    langs = OmniVoiceEngine.capabilities.languages
    assert langs[0] == "auto" and len(langs) == 647 and {"en", "zh", "ja", "yo", "zu", "sah", "kbt"} <= set(langs)
    style = engine.make_prompt(Chunk("Hi.", seed=0, language="yo"), None, True)
    assert engine.bundle.tokenizer.tok.decode(style.ids[0, :12].tolist(), skip_special_tokens=False).startswith("<|lang_start|>yo<|lang_end|>")
    auto = engine.make_prompt(Chunk("Hi.", seed=0), None, True)
    assert "<|lang_start|>None<|lang_end|>" in engine.bundle.tokenizer.tok.decode(auto.ids[0].tolist()[:20], skip_special_tokens=False)


def test_unknown_options_and_instructions_are_refused(engine):
    with pytest.raises(ValueError, match="unknown options.*top_k"):
        speak(engine, Chunk("Hi.", seed=0, options={"top_k": 5}))
    with pytest.raises(ValueError, match="did you mean 'female'"):
        speak(engine, Chunk("Hi.", seed=0, instruction="femal"))
    with pytest.raises(ValueError, match="at most one item"):
        resolve_instruct("male, female")
    assert resolve_instruct("Female, Low Pitch") == "female, low pitch"
    assert resolve_instruct("female", use_zh=True) == "女"


def test_schedule_commits_every_token_once():
    for frames, steps in ((1, 32), (37, 32), (250, 8), (5, 1)):
        plan = schedule(frames, 8, steps, 0.1)
        assert len(plan) == steps and sum(plan) == frames * 8 and min(plan) >= 0
    t = time_steps(32, 0.1)
    assert t[0] == 0.0 and t[-1] == pytest.approx(1.0) and all(a < b for a, b in zip(t, t[1:]))


def test_duration_estimate_rules():
    ref = text_weight("Nice to meet you.")                     # upstream's default rate: this in 25 frames
    assert ref == 13 + 3 * 0.2 + 0.5
    assert estimate_frames("Nice to meet you.") == int(50 * (25 / 50) ** (1 / 3))   # short texts are boosted
    long = "word " * 200
    assert estimate_frames(long) == int(text_weight(long) / (ref / 25))
    assert estimate_frames(long, speed=2.0) == int(text_weight(long) / (ref / 25) / 2.0)
    assert estimate_frames(long, "Ten frames.", 10) == int(text_weight(long) / (text_weight("Ten frames.") / 10))
    assert text_weight("你好") == 6.0 and text_weight("ab 1,") == 2 + 0.2 + 3.5 + 0.5


def test_silence_removal_shortens_pauses_and_trims_edges():
    from mizuoto.nodes.pack.silence import remove_silence
    sr = 24000
    tone = lambda s: 0.3 * torch.sin(2 * torch.pi * 200 * torch.arange(int(s * sr)) / sr)  # noqa: E731
    quiet = lambda s: torch.zeros(int(s * sr))  # noqa: E731
    wav = torch.cat([quiet(0.8), tone(0.5), quiet(1.5), tone(0.5), quiet(0.8)])
    out = remove_silence(wav, sr, mid_sil=500, lead_sil=100, trail_sil=100)
    # 0.8 s edges -> 0.1 s; the 1.5 s pause -> 1.0 s (0.5 s kept after one sound and before the next)
    assert abs(out.numel() / sr - (0.1 + 0.5 + 1.0 + 0.5 + 0.1)) < 0.02
    assert torch.equal(out, torch.round(out * 32768) / 32768)                 # 16-bit values
    assert remove_silence(quiet(1.0), sr).numel() == 0
    loud = tone(1.0)
    assert remove_silence(loud, sr).numel() == loud.numel()

"""Qwen3-TTS engine on a tiny random checkpoint (no qwen-tts, no tokenizers): loading, errors, seeds, modes."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from mizuoto.nodes.pack.audio import resample
from mizuoto.nodes.qwen3_tts.audio import log_mel
from mizuoto.nodes.qwen3_tts.loader import ModelFolderError, find_models, load_qwen3_tts
from mizuoto.nodes.qwen3_tts.phases import Qwen3TTSEngine
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError
from qwen3_tts.tiny import template_ids, write_tiny_checkpoint

FAST = dict(max_new_tokens=6)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: one thread is faster


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tts") / "qwen3_tts"
    write_tiny_checkpoint(root / "tiny-custom", "custom_voice", seed=1)
    write_tiny_checkpoint(root / "tiny-base", "base", seed=2)
    write_tiny_checkpoint(root / "tiny-design", "voice_design", seed=3)
    return root


def engine(folder, dtype=torch.float32):
    return Qwen3TTSEngine(load_qwen3_tts(folder, dtype), ModelManager(DeviceService()), min_unit_bytes=64 << 10)


def toks(n=5, seed=0, instruct=False):
    return {"text_ids": template_ids(n, seed), "instruct_ids": template_ids(4, 9, "user") if instruct else None,
            "ref_ids": template_ids(3, 8, "ref")}


def speak(e, seed=0, **kw):
    with e.manager.request(seed=seed) as ctx:
        return e.speak(ctx, kw.pop("text", "hello"), tokens=kw.pop("tokens", toks()), **{**FAST, **kw})


def test_find_models(root, tmp_path):
    assert find_models(root) == ["tiny-base", "tiny-custom", "tiny-design"]
    assert find_models(tmp_path / "nowhere") == []


def test_missing_and_corrupt_files_are_named(root, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(root / "tiny-custom", broken)
    (broken / "speech_tokenizer" / "model.safetensors").unlink()
    with pytest.raises(ModelFolderError, match="speech_tokenizer/model.safetensors"):
        load_qwen3_tts(broken)
    shutil.copy(root / "tiny-custom" / "speech_tokenizer" / "model.safetensors", broken / "speech_tokenizer")
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*truncated|truncated.*model\.safetensors"):
        load_qwen3_tts(broken)
    shutil.copy(root / "tiny-custom" / "model.safetensors", broken)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json is not valid JSON"):
        load_qwen3_tts(broken)
    cfg = json.loads((root / "tiny-custom" / "config.json").read_text())
    cfg["tts_model_type"] = "music"
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="tts_model_type 'music'"):
        load_qwen3_tts(broken)


def test_bf16_load_is_bf16_without_float32_copies(root):
    b = load_qwen3_tts(root / "tiny-custom", torch.bfloat16)
    assert {p.dtype for p in b.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in b.codec.parameters()} == {torch.bfloat16}
    assert b.model.talker.model.rotary.inv_freq.dtype == torch.float32     # RoPE angles stay float32


def test_bad_requests_have_clear_errors(root):
    e = engine(root / "tiny-custom")
    with pytest.raises(ValueError, match="text: empty"):
        speak(e, text="   ", speaker="vivian")
    with pytest.raises(ValueError, match="language 'klingon' is not supported.*english"):
        speak(e, speaker="vivian", language="klingon")
    with pytest.raises(ValueError, match="speaker 'bob' is not a voice of this model; expected one of dylan, vivian"):
        speak(e, speaker="bob")
    with pytest.raises(ValueError, match="only Base models clone voices"):
        speak(e, speaker="vivian", ref_audio=(torch.zeros(24000), 24000))
    with pytest.raises(ValueError, match="temperature"):
        speak(e, speaker="vivian", temperature=0)
    b = engine(root / "tiny-base")
    with pytest.raises(ValueError, match="ref_text"):
        speak(b, ref_audio=(torch.zeros(24000), 24000))
    with pytest.raises(ValueError, match="expects 24000 Hz"):
        speak(b, ref_audio=torch.zeros(24000), x_vector_only=True)


def test_seed_determinism_and_modes(root):
    e = engine(root / "tiny-custom")
    a = speak(e, seed=4, speaker="Vivian", language="english")
    assert torch.equal(a, speak(e, seed=4, speaker="vivian", language="english"))
    assert not torch.equal(a, speak(e, seed=5, speaker="vivian", language="english"))
    assert a.dtype == torch.float32 and a.dim() == 1 and a.numel() % 1920 == 0
    d = engine(root / "tiny-design")
    w = speak(d, instruct="calm", tokens=toks(instruct=True))
    assert w.numel() > 0 and torch.isfinite(w).all()


def test_voice_clone_resamples_other_rates(root):
    e = engine(root / "tiny-base")
    t = torch.arange(16000) / 16000
    wav16 = 0.3 * torch.sin(2 * torch.pi * 200 * t)
    with e.manager.request(seed=0) as ctx:
        codes, spk = e.voice_prompt(ctx, (wav16, 16000), x_vector_only=False)
    assert codes.shape == (13, 16) and spk.shape == (128,)
    w = speak(e, ref_audio={"waveform": wav16[None, None], "sample_rate": 16000}, ref_text="ref")
    assert w.numel() > 0


def test_resample_and_mel():
    t = torch.arange(16000) / 16000
    x = torch.sin(2 * torch.pi * 440 * t)
    y = resample(x, 16000, 24000)
    assert y.shape == (24000,)
    ref = torch.sin(2 * torch.pi * 440 * torch.arange(24000) / 24000)
    assert (y[200:-200] - ref[200:-200]).abs().max() < 1e-2
    mel = log_mel(y)
    assert mel.shape == (1, 24000 // 256, 128)


def test_static_kv_cache_is_opt_in_named_and_equal_on_cpu(root):
    e = engine(root / "tiny-custom")
    with e.manager.request(seed=3) as ctx:
        ref = e.speak(ctx, "hello", tokens=toks(), speaker="vivian", language="english", **FAST)
    assert "kv_cache" not in ctx.meta["applied"]
    with e.manager.request(seed=3, settings={"compute.kv_cache": "static"}) as ctx:
        out = e.speak(ctx, "hello", tokens=toks(), speaker="vivian", language="english", **FAST)
    assert ctx.meta["applied"]["kv_cache"] == "static"
    assert torch.equal(out, ref)


def test_the_pipeline_reads_the_whole_text_in_one_generation_as_upstream(root, tmp_path):
    """qwen-tts cuts nothing: generate_custom_voice(text=...) reads the text whole. Through the Speak
    pipeline, multi-sentence Chinese / Japanese and text with numbers reach the talker as one segment,
    exactly as written, and the audio is that of one direct speak call."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    from qwen3_tts.tiny import GENERATION, write_tokenizer

    folder = tmp_path / "tiny-custom"
    shutil.copytree(root / "tiny-custom", folder)
    write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({**GENERATION, "max_new_tokens": 8}))
    e = engine(folder)
    seen = []
    speak_text = e.speak

    def recording(ctx, text, **kw):
        seen.append(text)
        return speak_text(ctx, text, **kw)
    e.speak = recording
    for text in ("今天天气很好。我们去公园散步吧！\n明天见。", "こんにちは。元気ですか？", "It costs $5.99. See you at 10:30!"):
        seen.clear()
        wav, meta = synthesize(e, SpeakRequest(text, seed=3, language="auto", voice="vivian",
                                               settings={"compute.vram_mode": "normal"}))
        assert seen == [text] and meta["chunks"] == 1
        with e.manager.request(seed=3) as ctx:
            direct = speak_text(ctx, text, speaker="vivian")
        assert torch.equal(wav, direct.reshape(-1).float())
    assert e.split_text("  \n ") == []

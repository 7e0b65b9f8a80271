"""IndexTTS 2 through our loader and the Speak pipeline on a tiny folder in the published layout: errors
name the file and field, cloning and the emotion-vector mode run, the text rules, undeclared modes refused."""
from __future__ import annotations

import shutil

import pytest
import torch
import yaml

pytestmark = pytest.mark.usefixtures("one_thread")

from mizuoto.nodes.formats.checkpoint import ModelFolderError
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.indextts2 import ENGINE
from mizuoto.nodes.indextts2.loader import is_model_folder, load_indextts2
from mizuoto.nodes.indextts2.text import TextNormalizer, tokenize_by_cjk_char
from mizuoto.nodes.pack.registry import LoadRequest
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

from indextts2.tiny import reference, write_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("indextts2") / "tiny")


@pytest.fixture(scope="module")
def engine(folder):
    return ENGINE.build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")), ModelManager(DeviceService()))


def request(**kw) -> SpeakRequest:
    base = dict(text="hello world", seed=3, reference={"waveform": reference()[None, None], "sample_rate": 22050},
                options={"max_mel_tokens": 10, "diffusion_steps": 2})
    base.update(kw)
    return SpeakRequest(**base)


def copy(folder, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(folder, dst)
    return dst


def test_folder_detection_and_a_missing_file_names_it(folder, tmp_path):
    assert is_model_folder(folder)
    bad = copy(folder, tmp_path)
    (bad / "bigvgan" / "bigvgan_generator.pt").unlink()
    assert not is_model_folder(bad)
    with pytest.raises(ModelFolderError, match="bigvgan_generator.pt"):
        load_indextts2(bad)


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["gpt"].__setitem__("heads", "twenty"), "gpt.heads"),
    (lambda c: c["gpt"].__setitem__("condition_type", "perceiver"), "gpt.condition_type"),
    (lambda c: c["s2mel"]["DiT"].__setitem__("depth", 0), "depth"),
    (lambda c: c["gpt"]["condition_module"].pop("num_blocks"), "gpt.condition_module.num_blocks"),
])
def test_config_errors_name_the_file_and_field(folder, tmp_path, edit, field):
    bad = copy(folder, tmp_path)
    config = yaml.safe_load((bad / "config.yaml").read_text())
    edit(config)
    (bad / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(CheckpointError, match=field) as e:
        load_indextts2(bad)
    assert "config.yaml" in str(e.value)


def test_wrong_shapes_name_the_checkpoint(folder, tmp_path):
    bad = copy(folder, tmp_path)
    state = torch.load(bad / "gpt.pth", weights_only=True)
    state["mel_head.weight"] = state["mel_head.weight"][:, :-1].clone()
    torch.save(state, bad / "gpt.pth")
    with pytest.raises(CheckpointError, match="gpt.pth.*mel_head.weight"):
        load_indextts2(bad)
    s2 = torch.load(folder / "s2mel.pth", weights_only=True)
    s2["net"]["cfm"]["estimator.unexpected"] = torch.zeros(1)
    torch.save(s2, bad / "s2mel.pth")
    torch.save(torch.load(folder / "gpt.pth", weights_only=True), bad / "gpt.pth")
    with pytest.raises(CheckpointError, match="s2mel.pth.*unexpected"):
        load_indextts2(bad)


def test_cloning_is_deterministic_for_a_seed(engine):
    a, meta = synthesize(engine, request())
    b, _ = synthesize(engine, request())
    c, _ = synthesize(engine, request(seed=4))
    assert meta["sample_rate"] == 22050 and a.dtype == torch.float32 and a.numel() > 0
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_emotion_vector_changes_the_speech_and_alpha_scales_it(engine):
    plain, _ = synthesize(engine, request())
    sad, _ = synthesize(engine, request(options={"max_mel_tokens": 10, "diffusion_steps": 2, "sad": 0.8}))
    none, _ = synthesize(engine, request(options={"max_mel_tokens": 10, "diffusion_steps": 2, "sad": 0.8,
                                                  "emotion_alpha": 0.0}))
    assert not torch.equal(plain, sad)
    assert not torch.equal(none, sad)
    w = engine.emotion_weights(type("C", (), {"options": {"sad": 0.8, "calm": 0.33333, "emotion_alpha": 0.5}})())
    assert w.tolist() == pytest.approx([0, 0, 0.4, 0, 0, 0, 0, 0.1666], abs=1e-6)


def test_emotion_vector_needs_the_matrices(folder, tmp_path):
    bad = copy(folder, tmp_path)
    (bad / "feat2.pt").unlink()
    engine = ENGINE.build(LoadRequest("tiny", bad, torch.float32, torch.device("cpu")), ModelManager(DeviceService()))
    with pytest.raises(ValueError, match="feat1.pt and feat2.pt"):
        synthesize(engine, request(options={"happy": 1.0}))


def test_undeclared_modes_are_refused(engine):
    with pytest.raises(ValueError, match="options"):
        synthesize(engine, request(options={"emotion_text": 1.0}))
    with pytest.raises(ValueError, match="reference_text"):
        synthesize(engine, request(reference_text="hello"))
    with pytest.raises(ValueError, match="num_beams"):
        synthesize(engine, request(options={"num_beams": 1}))


def test_text_rules():
    def normalize(text: str) -> str:
        return tokenize_by_cjk_char(TextNormalizer().normalize(text))
    assert normalize("what's this? 你好，世界。(ok)") == "WHAT IS THIS? 你 好 , 世 界 .'OK'"
    assert normalize("a: b; c...") == "A, B, C…"


def test_emotion_reference_blends_by_alpha(engine):
    opts = {"max_mel_tokens": 10, "diffusion_steps": 2}
    t = torch.arange(20000) / 16000
    emo = {"waveform": (0.2 * torch.sin(2 * torch.pi * 330 * t))[None, None], "sample_rate": 16000}
    plain, _ = synthesize(engine, request())
    full, _ = synthesize(engine, request(options={**opts, "emotion_reference": emo}))
    none, _ = synthesize(engine, request(options={**opts, "emotion_reference": emo, "emotion_alpha": 0.0}))
    other = {**emo, "waveform": 0.5 * emo["waveform"].flip(-1)}
    none2, _ = synthesize(engine, request(options={**opts, "emotion_reference": other, "emotion_alpha": 0.0}))
    assert not torch.equal(plain, full)
    assert torch.equal(none, none2)          # base + 0 * (emo - base): the reference plays no part
    # upstream without an emotion reference: the speaker file loaded again, at 16 kHz, is the emotion
    # reference (alpha 1), not the 22.05 kHz copy's resampling
    own = {"waveform": reference()[None, None], "sample_rate": 22050}
    again, _ = synthesize(engine, request(options={**opts, "emotion_reference": own}))
    assert torch.equal(plain, again) and not torch.equal(plain, none)
    with pytest.raises(ValueError, match="emotion_reference"):
        synthesize(engine, request(options={**opts, "emotion_reference": {"waveform": torch.zeros(1, 1, 10)}}))


def test_emotion_text_runs_the_emotion_model(engine):
    opts = {"max_mel_tokens": 10, "diffusion_steps": 2}
    a, _ = synthesize(engine, request(options={**opts, "emotion_text": "so happy today"}))
    b, _ = synthesize(engine, request(options={**opts, "emotion_text": "so happy today"}))
    assert torch.equal(a, b) and a.numel() > 0
    with pytest.raises(ValueError, match="emotion_text"):
        synthesize(engine, request(options={**opts, "emotion_text": "  "}))


def test_emotion_reply_parsing_as_upstream():
    from mizuoto.nodes.indextts2.emotion import after_thinking, emotion_vector
    assert emotion_vector('{"高兴": 0.8, "悲伤": 0.3}', "x") == [0.8, 0, 0.3, 0, 0, 0, 0, 0]
    assert emotion_vector('高兴: 2.0, 愤怒: 0.1', "x") == [1.2, 0.1, 0, 0, 0, 0, 0, 0]     # regex fallback, clamped
    assert emotion_vector('{"悲伤": 0.7}', "I feel gloomy") == [0, 0, 0, 0, 0, 0.7, 0, 0]   # melancholic swap
    assert emotion_vector('{"emotion": "angry"}', "x") == [0, 1.0, 0, 0, 0, 0, 0, 0]
    assert emotion_vector("nothing", "x") == [0, 0, 0, 0, 0, 0, 0, 1.0]                      # calm by default
    assert after_thinking([1, 151668, 5, 6]) == [5, 6] and after_thinking([5]) == [5]


def test_static_kv_cache_gives_the_same_speech_on_the_cpu(folder, engine):
    from mizuoto.runtime import VramPolicy
    static = ENGINE.build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")),
                          ModelManager(DeviceService(), VramPolicy({"compute.kv_cache": "static"})))
    a, _ = synthesize(engine, request())
    b, meta = synthesize(static, request())
    assert meta["applied"]["kv_cache"] == "static"
    assert torch.equal(a, b)          # beam reordering of the preallocated buffers is exact


def test_long_text_is_read_in_upstreams_segments_with_200_ms_between(engine, monkeypatch):
    from mizuoto.nodes.indextts2.text import split_segments
    text = "你好世界" * 8                  # 40 pieces on the tiny BPE: at most 20 per segment, 20 + 20
    monkeypatch.setattr(engine, "max_segment_tokens", 20)     # the tiny GPT reads at most 40 text positions
    heard, waves = [], []
    real = engine.speak_chunk

    def spy(ctx, chunk):
        heard.append(chunk.tokens)
        waves.append(real(ctx, chunk))
        return waves[-1]

    monkeypatch.setattr(engine, "speak_chunk", spy)
    wav, meta = synthesize(engine, request(text=text))
    assert heard == [tuple(s) for s in split_segments(engine.tokenizer.tokenize(text), 20)]
    assert [len(t) for t in heard] == [20, 20] and meta["chunks"] == 2
    assert torch.equal(wav, torch.cat([waves[0], torch.zeros(4410), waves[1]]))   # int(22050 * 200 / 1000)

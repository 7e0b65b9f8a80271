"""The Chatterbox loader and engine on tiny.write_folder (the published layout): sizes read from the shapes,
conds.pt read as plain data and refused clearly when it is not upstream's, the built-in voice and cloning,
options reaching T3."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.chatterbox import ENGINE
from mizuoto.nodes.chatterbox.loader import load_chatterbox, load_voice, missing_files
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak
from mizuoto.runtime.loading import CheckpointError

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny matrices: one thread is faster on a loaded machine
OPTIONS = {"max_new_tokens": tiny.FOLDER_T3_TOKENS}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    tiny.write_folder(root / "chatterbox" / "tiny")
    return root


@pytest.fixture(scope="module")
def model(root):
    with pytest.MonkeyPatch.context() as mp, use_runtime(build_runtime()):
        mp.setenv("MIZUOTO_MODELS_DIR", str(root))
        (loaded,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load("tiny", ENGINE.precisions[0], "auto")
        yield loaded


def test_sizes_come_from_the_shapes(root) -> None:
    b = load_chatterbox(root / "chatterbox" / "tiny")
    c = b.t3.config
    assert (c.hidden_size, c.num_attention_heads, c.head_dim, c.num_hidden_layers) == (128, 2, 64, 2)
    assert b.s3gen.config.flow.encoder_size == 64 and b.s3gen.config.hift.base_channels == 64
    assert b.voice is not None and b.voice.prompt_tokens.shape == (1, 24)


def test_missing_files_and_optional_conds(root, tmp_path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(root / "chatterbox" / "tiny", folder)
    (folder / "conds.pt").unlink()
    assert missing_files(folder) == []
    assert load_chatterbox(folder).voice is None
    (folder / "ve.safetensors").unlink()
    assert missing_files(folder) == ["ve.safetensors"]
    with pytest.raises(FileNotFoundError, match="ve.safetensors"):
        load_chatterbox(folder)


@pytest.mark.parametrize("spoil,match", [
    (lambda d: d.pop("gen"), "'t3' and 'gen'"),
    (lambda d: d["t3"].update(speaker_emb=torch.zeros(1, 7)), "t3.speaker_emb"),
    (lambda d: d["gen"].update(prompt_token=torch.tensor([[1, 7000]])), "gen.prompt_token holds ids outside"),
    (lambda d: d["gen"].update(prompt_feat=torch.full((1, 4, 80), float("nan"))), "gen.prompt_feat holds non-finite"),
])
def test_a_bad_conds_file_is_named(tmp_path, spoil, match) -> None:
    data = tiny.builtin_conds()
    spoil(data)
    torch.save(data, tmp_path / "conds.pt")
    with pytest.raises(CheckpointError, match=match) as e:
        load_voice(tmp_path / "conds.pt")
    assert "conds.pt" in str(e.value)


def test_builtin_voice_is_deterministic_and_options_reach_t3(model, monkeypatch) -> None:
    from mizuoto.nodes.chatterbox import phases
    from mizuoto.nodes.chatterbox.t3 import T3
    seen, conditioning, generate = [], T3.conditioning, phases.generate

    def record_emotion(self, speaker, prompt, emotion):
        seen.append(("exaggeration", emotion))
        return conditioning(self, speaker, prompt, emotion)

    def record_sampling(model, cond, ids, s, generator, **kwargs):
        seen.append(("sampling", s))
        return generate(model, cond, ids, s, generator, **kwargs)

    monkeypatch.setattr(T3, "conditioning", record_emotion)
    monkeypatch.setattr(phases, "generate", record_sampling)
    a, _ = speak(model, SpeakRequest("Hello there.", seed=5, options=OPTIONS))
    b, _ = speak(model, SpeakRequest("Hello there.", seed=5, options=OPTIONS))
    speak(model, SpeakRequest("Hello there.", seed=5, options={**OPTIONS, "exaggeration": 1.5, "cfg_weight": 0.3,
                                                               "temperature": 0.9, "top_p": 0.8, "min_p": 0.1,
                                                               "repetition_penalty": 1.5}))
    assert a.numel() > 0 and torch.equal(a, b)
    assert a[:480].abs().max() == 0          # the trim fade's first 20 ms
    assert seen[0] == ("exaggeration", 0.5) and seen[-2] == ("exaggeration", 1.5)
    s = seen[-1][1]
    assert (s.cfg_weight, s.temperature, s.top_p, s.min_p, s.repetition_penalty, s.max_new_tokens) == \
        (0.3, 0.9, 0.8, 0.1, 1.5, tiny.FOLDER_T3_TOKENS)


def test_cloning_from_a_stereo_44k_reference(model) -> None:
    g = torch.Generator().manual_seed(9)
    ref = {"waveform": (0.2 * torch.randn(1, 2, 44100, generator=g)), "sample_rate": 44100}
    wav, _ = speak(model, SpeakRequest("Hello there.", seed=5, reference=ref, options=OPTIONS))
    builtin, _ = speak(model, SpeakRequest("Hello there.", seed=5, options=OPTIONS))
    assert torch.isfinite(wav).all() and wav.numel() > 0
    assert not (wav.shape == builtin.shape and torch.equal(wav, builtin))


def test_without_conds_a_reference_is_required(root, tmp_path) -> None:
    folder = tmp_path / "chatterbox" / "noconds"
    shutil.copytree(root / "chatterbox" / "tiny", folder)
    (folder / "conds.pt").unlink()
    with pytest.MonkeyPatch.context() as mp, use_runtime(build_runtime()):
        mp.setenv("MIZUOTO_MODELS_DIR", str(tmp_path))
        (loaded,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load("noconds", ENGINE.precisions[0], "auto")
        with pytest.raises(ValueError, match="reference"):
            speak(loaded, SpeakRequest("Hello there.", seed=5, options=OPTIONS))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_clones_and_speaks(root, precision) -> None:
    g = torch.Generator().manual_seed(9)
    ref = {"waveform": (0.2 * torch.randn(1, 2, 44100, generator=g)), "sample_rate": 44100}
    with pytest.MonkeyPatch.context() as mp, use_runtime(build_runtime()):
        mp.setenv("MIZUOTO_MODELS_DIR", str(root))
        (loaded,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load("tiny", precision, "auto")
        wav, _ = speak(loaded, SpeakRequest("Hello there.", seed=5, reference=ref, options=OPTIONS))
    assert wav.dtype == torch.float32 and wav.numel() > 0 and torch.isfinite(wav).all()

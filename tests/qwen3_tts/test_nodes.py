"""Qwen3-TTS through the ComfyUI nodes: a known model downloaded from a (local fake) hub with its
hashes checked, loaded by the loader node, spoken by the Speak node sentence by sentence."""
import hashlib
import json

import pytest
import torch

pytest.importorskip("tokenizers")

from mizuoto.nodes.formats.download import DownloadError  # noqa: E402
from mizuoto.nodes.pack.speak import MizuotoSpeak  # noqa: E402
from mizuoto.nodes import NODE_CLASS_MAPPINGS  # noqa: E402
from mizuoto.nodes.pack.loader_node import model_choices  # noqa: E402
from mizuoto.nodes.qwen3_tts import ENGINE  # noqa: E402
from qwen3_tts.tiny import write_tiny_checkpoint, write_tokenizer  # noqa: E402

NAME = "Qwen3-TTS-12Hz-0.6B-CustomVoice"
Loader = NODE_CLASS_MAPPINGS["MizuotoLoadQwen3TTS"]


def mirror(tmp_path, corrupt=False):
    repo = tmp_path / "hub" / "Qwen" / NAME
    write_tiny_checkpoint(repo, "custom_voice", seed=1)
    write_tokenizer(repo)
    config = json.loads((repo / "generation_config.json").read_text())
    (repo / "generation_config.json").write_text(json.dumps({**config, "max_new_tokens": 6}))
    sums = {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in repo.rglob("*.safetensors")}
    if corrupt:
        sums["model.safetensors"] = "f" * 64
    (repo / "sha256sums.json").write_text(json.dumps(sums))
    return tmp_path / "hub"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(tmp_path / "models" / "TTS"))
    return tmp_path


def test_download_load_and_speak(env, monkeypatch):
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(mirror(env)))
    assert NAME in Loader.INPUT_TYPES()["required"]["model"][0]
    (model,) = Loader().load(NAME, "fp32", "cpu")
    assert (env / "models" / "TTS" / "qwen3_tts" / NAME / "model.safetensors").is_file()
    assert NAME in model_choices(ENGINE)  # now a local folder
    speak = MizuotoSpeak()
    text = "Hello world. The quick brown fox jumps over the lazy dog!"
    (a,) = speak.speak(model, text, seed=4, speed=1.0, language="en", voice="vivian")
    (b,) = speak.speak(model, text, seed=4, speed=1.0, language="en", voice="vivian")
    assert a["sample_rate"] == 24000 and a["waveform"].shape[:2] == (1, 1) and a["waveform"].numel() > 0
    assert torch.equal(a["waveform"], b["waveform"])  # the seed decides, chunk by chunk
    with pytest.raises(ValueError, match="voice: 'nobody' is not a voice"):
        speak.speak(model, "Hello.", seed=0, speed=1.0, language="en", voice="nobody")
    with pytest.raises(ValueError, match="speed: this model has no speaking-rate control"):
        speak.speak(model, "Hello.", seed=0, speed=1.5, language="en", voice="vivian")


def test_a_corrupt_download_is_refused_and_leaves_no_model(env, monkeypatch):
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(mirror(env, corrupt=True)))
    with pytest.raises(DownloadError, match="does not match the published"):
        Loader().load(NAME, "fp32", "cpu")
    assert not (env / "models" / "TTS" / "qwen3_tts" / NAME).exists()


def test_unknown_or_escaping_model_names(env):
    for bad in ["no-such-model", "../../etc", "/tmp"]:
        with pytest.raises(FileNotFoundError):
            Loader().load(bad, "bf16", "auto")

"""F5-TTS through the ComfyUI nodes: the known model downloaded from a (local fake) hub into the
upstream layout with its hashes checked; a local model folder loaded by the loader node and spoken by
the Speak node with reference audio at another rate, sentence by sentence."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch

from f5_tts.tiny import write_tiny_checkpoint
from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.formats.download import DownloadError
from mizuoto.nodes.pack.loader_node import model_choices
from mizuoto.nodes.pack.speak import MizuotoSpeak
from mizuoto.nodes.f5_tts import ENGINE

Loader = NODE_CLASS_MAPPINGS["MizuotoLoadF5TTS"]
pytestmark = pytest.mark.usefixtures("one_thread")


def mirror(tmp_path, corrupt: bool = False):
    """SWivid/F5-TTS and charactr/vocos-mel-24khz as a hub mirror holding the tiny files (plus files the
    download must leave alone)."""
    tiny = write_tiny_checkpoint(tmp_path / "tiny", seed=3)
    hub = tmp_path / "hub"
    f5 = hub / "SWivid" / "F5-TTS" / "F5TTS_v1_Base"
    f5.mkdir(parents=True)
    shutil.copy(tiny / "model_1200.safetensors", f5 / "model_1250000.safetensors")
    shutil.copy(tiny / "vocab.txt", f5 / "vocab.txt")
    (hub / "SWivid" / "F5-TTS" / "F5TTS_Base").mkdir()
    (hub / "SWivid" / "F5-TTS" / "F5TTS_Base" / "model_1200000.safetensors").write_bytes(b"other model")
    voc = hub / "charactr" / "vocos-mel-24khz"
    shutil.copytree(tiny / "vocos", voc)
    (voc / "README.md").write_text("model card")
    for repo, names in ((hub / "SWivid" / "F5-TTS", ["F5TTS_v1_Base/model_1250000.safetensors"]),
                        (voc, ["pytorch_model.bin"])):
        sums = {n: hashlib.sha256((repo / n).read_bytes()).hexdigest() for n in names}
        if corrupt:
            sums = {n: "f" * 64 for n in sums}
        (repo / "sha256sums.json").write_text(json.dumps(sums))
    return hub, tiny


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(tmp_path / "models" / "TTS"))
    return tmp_path


def test_download_lands_in_the_upstream_layout(env, monkeypatch):
    hub, _ = mirror(env)
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(hub))
    assert "F5TTS_v1_Base" in Loader.INPUT_TYPES()["required"]["model"][0]
    Loader().load("F5TTS_v1_Base", "fp32", "cpu")
    folder = env / "models" / "TTS" / "f5_tts" / "F5TTS_v1_Base"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "model_1250000.safetensors", "vocab.txt", "vocos/config.yaml", "vocos/pytorch_model.bin"]
    assert ENGINE.is_model_folder(folder) and "F5TTS_v1_Base" in model_choices(ENGINE)


def test_a_corrupt_download_is_refused(env, monkeypatch):
    hub, _ = mirror(env, corrupt=True)
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(hub))
    with pytest.raises(DownloadError, match="does not match the published"):
        Loader().load("F5TTS_v1_Base", "fp32", "cpu")
    assert not (env / "models" / "TTS" / "f5_tts" / "F5TTS_v1_Base").exists()


def test_load_and_speak_with_a_resampled_reference(env):
    write_tiny_checkpoint(env / "models" / "TTS" / "f5_tts" / "tiny", seed=3)
    (model,) = Loader().load("tiny", "fp32", "cpu")
    t = torch.arange(int(16000 * 0.7)) / 16000
    ref = {"waveform": (0.1 * torch.sin(2 * torch.pi * 180 * t)).reshape(1, 1, -1), "sample_rate": 16000}
    speak = MizuotoSpeak()
    text = "Hello world. " + "The quick brown fox jumps over the lazy dog, again and again. " * 3
    args = dict(seed=4, speed=1.0, language="en", reference_audio=ref, reference_text="A calm voice.")
    (a,) = speak.speak(model, text, **args)
    (b,) = speak.speak(model, text, **args)
    assert a["sample_rate"] == 24000 and a["waveform"].shape[:2] == (1, 1) and a["waveform"].numel() > 0
    assert torch.equal(a["waveform"], b["waveform"])          # the seed decides, chunk by chunk
    with pytest.raises(ValueError, match="reference_audio"):
        speak.speak(model, "Hello.", seed=0, speed=1.0, language="en")
    with pytest.raises(ValueError, match="reference_text"):
        speak.speak(model, "Hello.", seed=0, speed=1.0, language="en", reference_audio=ref)
    with pytest.raises(ValueError, match="speed"):
        speak.speak(model, "Hello.", **{**args, "speed": 3.5})

"""OmniVoice through the ComfyUI nodes: the known model downloaded from a (local fake) hub with only its
files taken and their hashes checked, loaded by the loader node, spoken by the Speak node."""
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("tokenizers")

from mizuoto.nodes import NODE_CLASS_MAPPINGS  # noqa: E402
from mizuoto.nodes.pack.speak import MizuotoSpeak  # noqa: E402

spec = importlib.util.spec_from_file_location("omnivoice_tiny", Path(__file__).with_name("tiny.py"))
tiny = importlib.util.module_from_spec(spec)
sys.modules["omnivoice_tiny"] = tiny
spec.loader.exec_module(tiny)

Loader = NODE_CLASS_MAPPINGS["MizuotoLoadOmniVoice"]
pytestmark = pytest.mark.usefixtures("one_thread")


def mirror(root: Path) -> Path:
    repo = root / "hub" / "k2-fsa" / "OmniVoice"
    tiny.write_tiny_checkpoint(repo, seed=2)
    (repo / "images").mkdir()
    (repo / "images" / "figure.png").write_bytes(b"not a model file")            # not downloaded
    sums = {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in repo.rglob("*.safetensors")}
    (repo / "sha256sums.json").write_text(json.dumps(sums))
    return root / "hub"


def test_download_load_and_speak(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(tmp_path / "models" / "TTS"))
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(mirror(tmp_path)))
    assert "OmniVoice" in Loader.INPUT_TYPES()["required"]["model"][0]
    (model,) = Loader().load("OmniVoice", "fp32", "cpu")
    folder = tmp_path / "models" / "TTS" / "omnivoice" / "OmniVoice"
    assert (folder / "audio_tokenizer" / "model.safetensors").is_file() and not (folder / "images").exists()
    speak = MizuotoSpeak()
    (a,) = speak.speak(model, "Hello world.", seed=4, speed=1.0, language="en", instruction="male, elderly")
    (b,) = speak.speak(model, "Hello world.", seed=4, speed=1.0, language="en", instruction="male, elderly")
    assert a["sample_rate"] == 24000 and a["waveform"].shape[:2] == (1, 1) and torch.equal(a["waveform"], b["waveform"])
    t = torch.arange(24000) / 24000
    reference = {"waveform": (0.3 * torch.sin(2 * torch.pi * 180 * t))[None, None], "sample_rate": 24000}
    (c,) = speak.speak(model, "Hello world.", seed=4, speed=1.0, language="auto", reference_audio=reference,
                       reference_text="A reference")
    assert c["waveform"].numel() > 0 and torch.isfinite(c["waveform"]).all()
    with pytest.raises(ValueError, match="instruction: unsupported voice-design items"):
        speak.speak(model, "Hello.", seed=0, speed=1.0, language="en", instruction="sound happy")

"""The tiny random VibeVoice-Realtime model recorded by make_realtime_fixtures.py, read back for the tests."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch
from safetensors import safe_open

from mizuoto.nodes.vibevoice.model import UNUSED_PREFIXES, RealtimeConfig, VibeVoiceRealtime
from mizuoto.nodes.vibevoice.voices import PARTS, Prefilled, VoicePreset

HERE = Path(__file__).parent
GOLDEN = HERE / "fixtures" / "realtime.safetensors"
VENV = os.environ.get("VIBEVOICE_VENV", "")
SRC = os.environ.get("VIBEVOICE_SRC", "")
LIVE = bool(VENV and SRC and Path(VENV, "bin", "python").is_file() and Path(SRC, "vibevoice").is_dir())
LIVE_REASON = "live parity needs VIBEVOICE_VENV (reference venv) and VIBEVOICE_SRC (an upstream checkout)"


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The file's tensors, each copied into a fresh allocation: a CPU matmul kernel may split its sums
    differently for a buffer at an odd offset in the file, which alone changes the last bit."""
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).clone() for k in f.keys()}, f.metadata()


def record_live(tmp: Path) -> Path:
    """Rerun upstream (reference venv) into `tmp`."""
    out = tmp / "realtime.safetensors"
    subprocess.run([str(Path(VENV, "bin", "python")), str(HERE / "make_realtime_fixtures.py"), str(out)], check=True,
                   env={**os.environ, "VIBEVOICE_SRC": SRC}, timeout=600, capture_output=True)
    return out


def model_from(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> VibeVoiceRealtime:
    model = VibeVoiceRealtime(RealtimeConfig.from_dict(json.loads(meta["config"]))).eval()
    weights = {k[len("weight."):]: v for k, v in tensors.items() if k.startswith("weight.")}
    used = {k: v for k, v in weights.items() if not k.startswith(UNUSED_PREFIXES)}
    assert len(used) < len(weights)     # the recording holds the unused parts the published file holds
    model.load_state_dict(used, strict=True)
    return model


def preset_from(tensors: dict[str, torch.Tensor]) -> VoicePreset:
    """The voice preset upstream prefilled for the recording (its four parts' hidden states and caches)."""
    parts = {}
    for name in PARTS:
        n = sum(1 for k in tensors if k.startswith(f"preset.{name}.k"))
        parts[name] = Prefilled(tensors[f"preset.{name}.hidden"],
                                tuple(tensors[f"preset.{name}.k{i}"] for i in range(n)),
                                tuple(tensors[f"preset.{name}.v{i}"] for i in range(n)))
    return VoicePreset(**parts)


def write_folder(tensors: dict[str, torch.Tensor], meta: dict[str, str], folder: Path) -> Path:
    """The recorded tiny model as a model folder in the published layout (config.json, model.safetensors holding
    every part upstream saves, the unused ones included)."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(json.loads(meta["config"]), indent=2))   # as the hub's, indented
    save_file({k[len("weight."):]: v for k, v in tensors.items() if k.startswith("weight.")},
              str(folder / "model.safetensors"))
    return folder

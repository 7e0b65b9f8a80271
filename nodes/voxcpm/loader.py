"""Find and load VoxCPM 2 checkpoints in the upstream layout (openbmb/VoxCPM2), unchanged:

    models/TTS/voxcpm/<model>/
        config.json  model.safetensors  audiovae.pth (or audiovae.safetensors)  tokenizer.json

model.safetensors loads through runtime.loading.load_module (meta build, each tensor read straight into
the target dtype). audiovae.pth is a torch pickle read with `weights_only=True` (tensors only); its
legacy weight-norm tensors (`weight_g`, `weight_v`) load as they are. Loading is strict where upstream's
is not (`strict=False`): a missing, unexpected or misshapen tensor is an error naming the file.
The AudioVAE runs in float32 whatever the model's dtype, as upstream's does.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...runtime.loading import CheckpointError, load_module
from .audiovae import AudioVAE, AudioVAEConfig
from .model import ConfigError, VoxCPM2, VoxCPMConfig

REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")
VAE_FILES = ("audiovae.safetensors", "audiovae.pth")   # upstream's order of preference


class ModelFolderError(FileNotFoundError):
    """A folder that is not a complete VoxCPM 2 model."""


def vae_file(folder: Path) -> Path | None:
    return next((folder / f for f in VAE_FILES if (folder / f).is_file()), None)


def is_model_folder(folder: Path) -> bool:
    return all((folder / f).is_file() for f in REQUIRED) and vae_file(folder) is not None


def read_config(path: Path) -> tuple[VoxCPMConfig, AudioVAEConfig]:
    if not path.is_file():
        raise ModelFolderError(f"VoxCPM: {path} not found")
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"VoxCPM: {path} is not valid JSON ({e}); the download is incomplete or corrupt") from None
    try:
        if isinstance(data, dict) and data.get("architecture", "voxcpm2") != "voxcpm2":
            raise ConfigError(f"architecture: {data['architecture']!r} is not VoxCPM 2 (expected 'voxcpm2')")
        config = VoxCPMConfig.from_dict(data)
        if config.cfm.mean_mode:
            raise ConfigError("dit_config.dit_mean_mode: mean-velocity sampling is not implemented "
                              "(no published VoxCPM 2 model uses it)")
        return config, AudioVAEConfig.from_dict(config.audio_vae)
    except ConfigError as e:
        raise CheckpointError(f"VoxCPM: {path}: {e}") from None


def load_audiovae(path: Path, config: AudioVAEConfig) -> AudioVAE:
    """The AudioVAE from `audiovae.pth` (torch pickle, weights only) or `audiovae.safetensors`, in float32."""
    if path.suffix == ".safetensors":
        return load_module(lambda: AudioVAE(config), path, torch.float32).eval()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - any unreadable pickle is the file's fault; name it
        raise CheckpointError(f"VoxCPM: {path} is not a readable weights-only torch checkpoint ({e})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"VoxCPM: {path} does not hold a state dict of tensors")
    with torch.device("meta"):
        vae = AudioVAE(config)
    expected = vae.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = [f"{k}: file {list(state[k].shape)}, model {list(expected[k].shape)}"
              for k in expected if k in state and state[k].shape != expected[k].shape]
    if missing or unexpected or shapes:
        problems = [f"{what} {', '.join(keys[:6])}{' ...' if len(keys) > 6 else ''}"
                    for what, keys in (("missing keys", missing), ("unexpected keys", unexpected),
                                       ("shape mismatch", shapes)) if keys]
        raise CheckpointError(f"VoxCPM: {path} does not match the AudioVAE of config.json: " + "; ".join(problems))
    vae.load_state_dict({k: v if not v.is_floating_point() else v.float() for k, v in state.items()}, assign=True)
    return vae.eval()


@dataclass
class VoxCPMBundle:
    folder: Path
    config: VoxCPMConfig
    model: VoxCPM2
    vae: AudioVAE
    _tokenizer: Any = None

    @property
    def tokenizer(self):
        """The text tokenizer (built on first use: it needs the `tokenizers` package)."""
        if self._tokenizer is None:
            from .text import TextTokenizer
            self._tokenizer = TextTokenizer(self.folder / "tokenizer.json")
        return self._tokenizer

    @property
    def dtype(self) -> torch.dtype:
        return self.model.stop_head.weight.dtype


def load_voxcpm(folder: str | Path, dtype: torch.dtype | None = torch.bfloat16) -> VoxCPMBundle:
    """Load the model folder in `dtype` (None: the config's dtype; the AudioVAE stays float32), eval mode, CPU."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"VoxCPM: model folder {folder} not found")
    missing = [f for f in REQUIRED if not (folder / f).is_file()]
    if vae_file(folder) is None:
        missing.append(" or ".join(VAE_FILES))
    if missing:
        raise ModelFolderError(f"VoxCPM: {folder} is missing {', '.join(missing)} (expected the upstream layout of "
                               "openbmb/VoxCPM2)")
    config, vae_config = read_config(folder / "config.json")
    if dtype is None:
        names = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
                 "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}
        if config.dtype not in names:
            raise CheckpointError(f"VoxCPM: {folder / 'config.json'}: dtype: unknown {config.dtype!r}")
        dtype = names[config.dtype]
    model = load_module(lambda: VoxCPM2(config), folder / "model.safetensors", dtype).eval()
    vae = load_audiovae(vae_file(folder), vae_config)
    return VoxCPMBundle(folder, config, model, vae)

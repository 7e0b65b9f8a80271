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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...runtime.loading import CheckpointError, SizeSource, load_module, load_module_from_state
from ..formats.checkpoint import ModelFolderError, load_pickle, read_json, state_dict
from .audiovae import AudioVAE, AudioVAEConfig
from .model import ConfigError, VoxCPM2, VoxCPMConfig

REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")
VAE_FILES = ("audiovae.safetensors", "audiovae.pth")   # upstream's order of preference


def vae_file(folder: Path) -> Path | None:
    return next((folder / f for f in VAE_FILES if (folder / f).is_file()), None)


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks to be a VoxCPM 2 model ([] when complete)."""
    return [f for f in REQUIRED if not (folder / f).is_file()] + \
        ([f"{' or '.join(VAE_FILES)}"] if vae_file(folder) is None else [])


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


def read_config(path: Path) -> tuple[VoxCPMConfig, AudioVAEConfig]:
    data = read_json(path, "VoxCPM")
    try:
        if data.get("architecture", "voxcpm2") != "voxcpm2":
            raise ConfigError(f"architecture: {data['architecture']!r} is not VoxCPM 2 (expected 'voxcpm2')")
        config = VoxCPMConfig.from_dict(data)
        if config.cfm.mean_mode:
            raise ConfigError("dit_config.dit_mean_mode: mean-velocity sampling is not implemented "
                              "(no published VoxCPM 2 model uses it)")
        return config, AudioVAEConfig.from_dict(config.audio_vae)
    except ConfigError as e:
        raise CheckpointError(f"VoxCPM: {path}: {e}") from None


def load_audiovae(path: Path, config: AudioVAEConfig, sizes: SizeSource | None = None) -> AudioVAE:
    """The AudioVAE from `audiovae.pth` (torch pickle, weights only; a nested "state_dict" accepted as upstream
    does) or `audiovae.safetensors`, in float32."""
    if path.suffix == ".safetensors":
        return load_module(lambda: AudioVAE(config), path, torch.float32, sizes).eval()
    obj = load_pickle(path)
    nested = isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict)
    state = state_dict(obj, path, key="state_dict" if nested else None)
    return load_module_from_state(lambda: AudioVAE(config), state, torch.float32, path, sizes).eval()


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
    sizes = SizeSource(folder / "config.json", read_json(folder / "config.json", "VoxCPM"))
    model = load_module(lambda: VoxCPM2(config), folder / "model.safetensors", dtype, sizes).eval()
    vae = load_audiovae(vae_file(folder), vae_config, sizes)
    return VoxCPMBundle(folder, config, model, vae)

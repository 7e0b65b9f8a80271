"""Load a VibeVoice-Realtime model folder in the published layout (microsoft/VibeVoice-Realtime-0.5B), unchanged:

    models/TTS/vibevoice/<model>/
        config.json          model_type "vibevoice_streaming" (decoder_config, diffusion_head_config,
                             acoustic_tokenizer_config, tts_backbone_num_hidden_layers)
        model.safetensors    upstream's parameter names (model.*, tts_eos_classifier.*)
        voices/<name>.pt     voice presets, from the repository's demo/voices/streaming_model/ (voices.py)

The module is built with parameters on `meta` and the file's tensors read into fresh allocations of their own
(runtime.loading.load_module: strict names and shapes, errors naming the file and the config field). The
parts of the file the Realtime model never reads (model.UNUSED_PREFIXES) are not read.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ...runtime.loading import CheckpointError, SizeSource, checkpoint_path, load_module
from ..formats.checkpoint import ModelFolderError, read_json
from .longform import LongformConfig, VibeVoiceLongform
from .model import UNUSED_PREFIXES, RealtimeConfig, VibeVoiceRealtime

ENGINE = "VibeVoice"


def read_config(folder: Path) -> tuple[RealtimeConfig, dict]:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelFolderError(f"{ENGINE}: {folder} has no config.json (expected the layout of "
                               "microsoft/VibeVoice-Realtime-0.5B)")
    data = read_json(path, ENGINE)
    try:
        return RealtimeConfig.from_dict(data), data
    except ValueError as e:
        raise CheckpointError(f"{ENGINE}: {path}: {e}") from None


def load_realtime(folder: str | os.PathLike, dtype: torch.dtype = torch.float32) -> VibeVoiceRealtime:
    """The Realtime model of `folder` in `dtype`, in eval mode."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"{ENGINE}: model folder {folder} not found")
    config, data = read_config(folder)
    sizes = SizeSource(folder / "config.json", data)
    return load_module(lambda: VibeVoiceRealtime(config), checkpoint_path(folder), dtype, sizes,
                       unused=UNUSED_PREFIXES).eval()


def model_type(folder: str | os.PathLike) -> str:
    """The folder's config.json model_type: "vibevoice_streaming" (Realtime) or "vibevoice" (1.5B / Large)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ModelFolderError(f"{ENGINE}: {folder} has no config.json (expected the layout of "
                               "microsoft/VibeVoice-Realtime-0.5B or microsoft/VibeVoice-1.5B)")
    kind = read_json(path, ENGINE).get("model_type")
    if kind not in ("vibevoice_streaming", "vibevoice"):
        raise CheckpointError(f"{ENGINE}: {path}: model_type {kind!r}, expected 'vibevoice_streaming' (Realtime) "
                              "or 'vibevoice' (1.5B / Large)")
    return kind


def load_longform(folder: str | os.PathLike, dtype: torch.dtype = torch.float32) -> VibeVoiceLongform:
    """The long-form model of `folder` (microsoft/VibeVoice-1.5B's layout: config.json and model.safetensors or
    its shards with model.safetensors.index.json) in `dtype`, in eval mode. Every tensor of the checkpoint is
    read: the long-form model uses all of it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"{ENGINE}: model folder {folder} not found")
    path = folder / "config.json"
    data = read_json(path, ENGINE)
    try:
        config = LongformConfig.from_dict(data)
    except ValueError as e:
        raise CheckpointError(f"{ENGINE}: {path}: {e}") from None
    sizes = SizeSource(path, data)
    return load_module(lambda: VibeVoiceLongform(config), checkpoint_path(folder), dtype, sizes).eval()

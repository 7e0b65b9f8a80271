"""Find and load F5-TTS v1 model folders in the upstream layout, unchanged:

    models/TTS/f5_tts/<model>/
        model_1250000.safetensors      SWivid/F5-TTS F5TTS_v1_Base/ (EMA weights: ema_model.transformer.*)
        vocab.txt                      the character/pinyin vocabulary
        config.yaml                    optional: upstream's training config (model.arch, model.mel_spec);
                                       without it, the F5TTS_v1_Base architecture
        vocos/config.yaml  vocos/pytorch_model.bin      charactr/vocos-mel-24khz

The DiT is built on the meta device and each tensor read straight into the target dtype
(runtime.loading.load_module); the vocoder stays float32 (upstream decodes in float32). Config files
are read as plain data (`yaml.SafeLoader`, bounded: `checkpoint.load_yaml`). Errors name the file at fault.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...runtime.loading import CheckpointError, SizeSource, load_module, read_safetensors_header
from ..formats.checkpoint import check_sizes, load_yaml
from ..blocks.vocoder import MelSpectrogramFeatures, Vocos, load_vocos
from .model import DiT, DiTConfig, F5Checkpoint
from .text import F5Tokenizer

# configs/F5TTS_v1_Base.yaml, model.arch and model.mel_spec (f5-tts 1.1.22)
V1_BASE_ARCH: dict[str, Any] = {"dim": 1024, "depth": 22, "heads": 16, "ff_mult": 2, "text_dim": 512,
                                "text_mask_padding": True, "qk_norm": None, "conv_layers": 4, "pe_attn_head": None}
V1_MEL: dict[str, Any] = {"target_sample_rate": 24000, "n_mel_channels": 100, "hop_length": 256, "win_length": 1024,
                          "n_fft": 1024, "mel_spec_type": "vocos"}
BOOKKEEPING = ("step", "initted")   # ema_pytorch's counters, saved next to the weights


class ModelFolderError(FileNotFoundError):
    """A folder that is not a complete F5-TTS model."""


@dataclass(frozen=True)
class MelConfig:
    sample_rate: int = 24000
    n_mels: int = 100
    hop_length: int = 256
    win_length: int = 1024
    n_fft: int = 1024

    @classmethod
    def from_dict(cls, mel: dict[str, Any], source: str) -> MelConfig:
        if mel.get("mel_spec_type", "vocos") != "vocos":
            raise ValueError(f"{source}: model.mel_spec.mel_spec_type = {mel.get('mel_spec_type')!r}; only vocos "
                             "mels are supported")
        names = {"target_sample_rate": "sample_rate", "n_mel_channels": "n_mels", "hop_length": "hop_length",
                 "win_length": "win_length", "n_fft": "n_fft"}
        values = {}
        for key, attr in names.items():
            v = mel.get(key, getattr(cls, attr))
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{source}: model.mel_spec.{key} = {v!r}; expected a positive integer")
            values[attr] = v
        return cls(**values)


def checkpoint_file(folder: Path) -> Path:
    """The one `model_<step>.safetensors` (or `model.safetensors`) of the folder."""
    found = sorted(p for p in folder.glob("model*.safetensors") if re.fullmatch(r"model(_\d+)?\.safetensors", p.name))
    if not found:
        raise ModelFolderError(f"F5-TTS: {folder} holds no model_<step>.safetensors (expected the files of "
                               "SWivid/F5-TTS F5TTS_v1_Base/)")
    if len(found) > 1:
        raise ModelFolderError(f"F5-TTS: {folder} holds several checkpoints ({', '.join(p.name for p in found)}); "
                               "keep one per model folder")
    return found[0]


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks to be an F5-TTS model ([] when complete)."""
    folder = Path(folder)
    found = [p for p in folder.glob("model*.safetensors") if re.fullmatch(r"model(_\d+)?\.safetensors", p.name)]
    missing = [] if len(found) == 1 else ["one model_*.safetensors (the checkpoint)"]
    return missing + [f for f in ("vocab.txt", "vocos/config.yaml", "vocos/pytorch_model.bin")
                      if not (folder / f).is_file()]


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


def find_models(root: str | os.PathLike) -> list[str]:
    root = Path(root)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and is_model_folder(p)) if root.is_dir() else []


def read_config(folder: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(model.arch, model.mel_spec, source) from the folder's config.yaml, or F5TTS_v1_Base's."""
    path = folder / "config.yaml"
    if not path.is_file():
        return dict(V1_BASE_ARCH), dict(V1_MEL), "F5TTS_v1_Base (built in)"
    data = load_yaml(path, "F5-TTS")
    check_sizes(data, path, "F5-TTS")
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("arch"), dict):
        raise CheckpointError(f"{path}: expected upstream's training config with a model.arch mapping")
    if model.get("backbone", "DiT") != "DiT":
        raise CheckpointError(f"{path}: model.backbone = {model.get('backbone')!r}; only DiT (F5-TTS) is supported")
    if model.get("tokenizer", "pinyin") not in ("pinyin", "char", "custom"):
        raise CheckpointError(f"{path}: model.tokenizer = {model.get('tokenizer')!r}; expected a vocab.txt tokenizer "
                              "(pinyin, char or custom)")
    mel = model.get("mel_spec") or {}
    if not isinstance(mel, dict):
        raise CheckpointError(f"{path}: model.mel_spec must be a mapping")
    return model["arch"], mel, str(path)


@dataclass
class F5Bundle:
    folder: Path
    config: DiTConfig
    mel_config: MelConfig
    dit: DiT
    vocoder: Vocos
    tokenizer: F5Tokenizer
    mel: MelSpectrogramFeatures = field(init=False)

    def __post_init__(self) -> None:
        m = self.mel_config
        # upstream's MelSpec: torchaudio MelSpectrogram(power 1, centred), log(max(mel, 1e-5))
        self.mel = MelSpectrogramFeatures(m.sample_rate, m.n_fft, m.hop_length, m.n_mels, "center", floor=1e-5,
                                          win_length=m.win_length)

    @property
    def dtype(self) -> torch.dtype:
        return self.dit.proj_out.weight.dtype


def load_f5_tts(folder: str | os.PathLike, dtype: torch.dtype = torch.float32) -> F5Bundle:
    """The DiT in `dtype`, Vocos in float32, the tokenizer; eval mode, on the CPU."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"F5-TTS: model folder {folder} not found")
    weights = checkpoint_file(folder)
    missing = [f for f in ("vocab.txt", "vocos/config.yaml", "vocos/pytorch_model.bin") if not (folder / f).is_file()]
    if missing:
        raise ModelFolderError(f"F5-TTS: {folder} is missing {', '.join(missing)} (expected vocab.txt from "
                               "SWivid/F5-TTS and vocos/ from charactr/vocos-mel-24khz)")
    tokenizer = F5Tokenizer(folder / "vocab.txt")
    arch, mel, source = read_config(folder)
    try:
        mel_config = MelConfig.from_dict(mel, source)
        config = DiTConfig.from_arch(arch, mel_dim=mel_config.n_mels, vocab_size=len(tokenizer), source=source)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    header = read_safetensors_header(weights)
    rows = header.get("ema_model.transformer.text_embed.text_embed.weight")
    if rows is not None and rows.shape[0] != len(tokenizer) + 1:
        raise CheckpointError(f"{weights}: the text embedding has {rows.shape[0]} rows but {folder / 'vocab.txt'} "
                              f"has {len(tokenizer)} tokens (+1 filler); they belong to different models")
    bookkeeping = {k: (header[k].dtype, header[k].shape) for k in BOOKKEEPING if k in header}
    checkpoint = load_module(lambda: F5Checkpoint(config, bookkeeping), weights, dtype,
                             SizeSource(source, {"model.arch": arch}))
    dit = checkpoint.dit.eval()
    vocoder = load_vocos(folder / "vocos", torch.float32)
    if vocoder.config.n_mels != mel_config.n_mels or vocoder.config.input_channels != mel_config.n_mels:
        raise CheckpointError(f"{folder / 'vocos' / 'config.yaml'}: a vocoder for {vocoder.config.input_channels} "
                              f"mel channels; the DiT makes {mel_config.n_mels}")
    return F5Bundle(folder, config, mel_config, dit, vocoder, tokenizer)

"""Vocos (charactr/vocos-*; PyPI `vocos` 0.1.0) as general blocks: mel features in, waveform out.

    cfg = VocosConfig.from_yaml(folder / "config.yaml")          # plain data; no class path is imported
    voc = load_vocos(folder)                                      # config.yaml + pytorch_model.bin
    wav = voc.decode(mel)                                         # mel [B, n_mels, T] -> [B, T * hop]
    mel = voc.feature_extractor(wav)                              # the log-mel the model was trained on

Parameter and buffer names follow upstream's module tree (`backbone.convnext.0.dwconv.weight`,
`head.istft.window`, `feature_extractor.mel_spec.mel_scale.fb`), so the published checkpoints load
unchanged and strictly. Every weight is read inside the forward of the nn.Linear / nn.Conv1d that
owns it (the runtime streams those); norms, layer scales and buffers are the fixed part.

`MelSpectrogram` is torchaudio's `transforms.MelSpectrogram` (torch.stft, magnitude, HTK
triangular filterbank without normalisation by default) computed with the same torch operations, so
log-mels equal torchaudio's bit for bit: F5-TTS extracts its reference mel with it too.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import check_sizes, load_pickle, load_yaml, state_dict

# ---- mel features (torchaudio's MelSpectrogram) ------------------------------------------------------


def hz_to_mel(freq: float, mel_scale: str = "htk") -> float:
    if mel_scale == "htk":
        return 2595.0 * math.log10(1.0 + (freq / 700.0))
    f_sp = 200.0 / 3
    mels = freq / f_sp
    min_log_hz, logstep = 1000.0, math.log(6.4) / 27.0
    if freq >= min_log_hz:
        mels = min_log_hz / f_sp + math.log(freq / min_log_hz) / logstep
    return mels


def mel_to_hz(mels: Tensor, mel_scale: str = "htk") -> Tensor:
    if mel_scale == "htk":
        return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz, logstep = 1000.0, math.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    log_t = mels >= min_log_mel
    freqs[log_t] = min_log_hz * torch.exp(logstep * (mels[log_t] - min_log_mel))
    return freqs


def mel_filterbank(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int,
                   norm: str | None = None, mel_scale: str = "htk") -> Tensor:
    """Triangular filterbank [n_freqs, n_mels], float32, as torchaudio.functional.melscale_fbanks."""
    if mel_scale not in ("htk", "slaney") or norm not in (None, "slaney"):
        raise ValueError(f"mel_filterbank: mel_scale htk|slaney and norm None|slaney, got {mel_scale!r}, {norm!r}")
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(hz_to_mel(f_min, mel_scale), hz_to_mel(f_max, mel_scale), n_mels + 2)
    f_pts = mel_to_hz(m_pts, mel_scale)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = torch.max(torch.zeros(1), torch.min(down, up))
    if norm == "slaney":
        fb *= (2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])).unsqueeze(0)
    return fb


class _Spectrogram(nn.Module):
    """Holds the analysis window (`spectrogram.window`, as torchaudio names it)."""

    def __init__(self, win_length: int) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(win_length))


class _MelScale(nn.Module):
    """Holds the filterbank (`mel_scale.fb`, as torchaudio names it)."""

    def __init__(self, fb: Tensor) -> None:
        super().__init__()
        self.register_buffer("fb", fb)


class MelSpectrogram(nn.Module):
    """|STFT|^power through a mel filterbank: torchaudio.transforms.MelSpectrogram(sample_rate, n_fft,
    win_length, hop_length, n_mels, power, center, pad_mode="reflect", norm, mel_scale), [..., T] ->
    [..., n_mels, frames]."""

    def __init__(self, sample_rate: int = 24000, n_fft: int = 1024, win_length: int | None = None,
                 hop_length: int | None = None, n_mels: int = 100, power: float = 1.0, center: bool = True,
                 norm: str | None = None, mel_scale: str = "htk", f_min: float = 0.0, f_max: float | None = None) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.win_length = win_length or n_fft
        self.hop_length = hop_length or self.win_length // 2
        self.power, self.center = power, center
        self.spectrogram = _Spectrogram(self.win_length)
        f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.mel_scale = _MelScale(mel_filterbank(n_fft // 2 + 1, f_min, f_max, n_mels, sample_rate, norm, mel_scale))

    def forward(self, wav: Tensor) -> Tensor:
        shape = wav.shape
        spec = torch.stft(wav.reshape(-1, shape[-1]), n_fft=self.n_fft, hop_length=self.hop_length,
                          win_length=self.win_length, window=self.spectrogram.window, center=self.center,
                          pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        spec = spec.reshape(shape[:-1] + spec.shape[-2:])
        spec = spec.abs() if self.power == 1.0 else spec.abs().pow(self.power)
        return torch.matmul(spec.transpose(-1, -2), self.mel_scale.fb).transpose(-1, -2)


class MelSpectrogramFeatures(nn.Module):
    """Vocos's feature extractor: log(max(mel, floor)) of `MelSpectrogram` (power 1); padding "center"
    (the STFT centres frames) or "same" (reflect-pad (win - hop) / 2 each side, no centring).
    Vocos uses floor 1e-7; F5-TTS extracts its reference mel with floor 1e-5."""

    def __init__(self, sample_rate: int = 24000, n_fft: int = 1024, hop_length: int = 256, n_mels: int = 100,
                 padding: str = "center", floor: float = 1e-7, win_length: int | None = None) -> None:
        super().__init__()
        if padding not in ("center", "same"):
            raise ValueError(f"padding: expected 'center' or 'same', got {padding!r}")
        self.padding, self.floor = padding, floor
        self.mel_spec = MelSpectrogram(sample_rate, n_fft, win_length, hop_length, n_mels, power=1.0,
                                       center=padding == "center")

    def forward(self, wav: Tensor) -> Tensor:
        if self.padding == "same":
            pad = self.mel_spec.win_length - self.mel_spec.hop_length
            wav = F.pad(wav, (pad // 2, pad // 2), mode="reflect")
        return torch.log(torch.clip(self.mel_spec(wav), min=self.floor))


# ---- the generator ----------------------------------------------------------------------------------


class ConvNeXtBlock(nn.Module):
    """1-D ConvNeXt block on [B, C, T]: depthwise conv (k 7), LayerNorm, Linear-GELU-Linear, layer scale,
    residual (vocos.modules.ConvNeXtBlock without AdaLayerNorm)."""

    def __init__(self, dim: int, intermediate_dim: int, layer_scale: float | None) -> None:
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), float(layer_scale))) if layer_scale and layer_scale > 0 else None

    def forward(self, x: Tensor) -> Tensor:
        residual = x
        x = self.dwconv(x).transpose(1, 2)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        if self.gamma is not None:
            x = self.gamma * x
        return residual + x.transpose(1, 2)


class VocosBackbone(nn.Module):
    """Conv embedding, LayerNorm, ConvNeXt blocks, final LayerNorm: [B, C_in, T] -> [B, T, dim]."""

    def __init__(self, input_channels: int, dim: int, intermediate_dim: int, num_layers: int,
                 layer_scale_init_value: float | None = None) -> None:
        super().__init__()
        self.embed = nn.Conv1d(input_channels, dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        scale = layer_scale_init_value or 1 / num_layers
        self.convnext = nn.ModuleList([ConvNeXtBlock(dim, intermediate_dim, scale) for _ in range(num_layers)])
        self.final_layer_norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm(self.embed(x).transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))


class ISTFT(nn.Module):
    """Inverse STFT with "center" (torch.istft) or "same" padding: overlap-add of windowed inverse FFTs
    (F.fold), divided by the window envelope, (win - hop) / 2 samples trimmed each side, as vocos does
    it (torch.istft refuses "same": the envelope is zero at the untrimmed edges)."""

    def __init__(self, n_fft: int, hop_length: int, win_length: int, padding: str = "same") -> None:
        super().__init__()
        if padding not in ("center", "same"):
            raise ValueError(f"padding: expected 'center' or 'same', got {padding!r}")
        self.padding, self.n_fft, self.hop_length, self.win_length = padding, n_fft, hop_length, win_length
        self.register_buffer("window", torch.hann_window(win_length))

    def forward(self, spec: Tensor) -> Tensor:
        """Complex spectrogram [B, n_fft/2+1, T] -> waveform [B, L]."""
        if self.padding == "center":
            return torch.istft(spec, self.n_fft, self.hop_length, self.win_length, self.window, center=True)
        pad = (self.win_length - self.hop_length) // 2
        frames = spec.shape[-1]
        ifft = torch.fft.irfft(spec, self.n_fft, dim=1, norm="backward") * self.window[None, :, None]
        size = (frames - 1) * self.hop_length + self.win_length
        fold = dict(output_size=(1, size), kernel_size=(1, self.win_length), stride=(1, self.hop_length))
        y = F.fold(ifft, **fold)[:, 0, 0, pad:-pad]
        envelope = F.fold(self.window.square().expand(1, frames, -1).transpose(1, 2), **fold).squeeze()[pad:-pad]
        if not bool((envelope > 1e-11).all()):
            raise ValueError("ISTFT: the window envelope vanishes (hop too large for the window)")
        return y / envelope


class ISTFTHead(nn.Module):
    """Linear to log-magnitude and phase, exp (clipped at 100), inverse STFT: [B, T, dim] -> [B, T * hop]."""

    def __init__(self, dim: int, n_fft: int, hop_length: int, padding: str = "same") -> None:
        super().__init__()
        self.out = nn.Linear(dim, n_fft + 2)
        self.istft = ISTFT(n_fft, hop_length, n_fft, padding)

    def forward(self, x: Tensor) -> Tensor:
        mag, p = self.out(x).transpose(1, 2).chunk(2, dim=1)
        mag = torch.clip(torch.exp(mag), max=1e2)
        # cos/sin rather than exp(i p), the same complex arithmetic as upstream (bit-identical)
        return self.istft(mag * (torch.cos(p) + 1j * torch.sin(p)))


# ---- config and model -----------------------------------------------------------------------------------

FEATURES = {"vocos.feature_extractors.MelSpectrogramFeatures"}
BACKBONES = {"vocos.models.VocosBackbone"}
HEADS = {"vocos.heads.ISTFTHead"}


class VocosConfigError(ValueError):
    """config.yaml does not describe a Vocos this module builds (names the file and field)."""


@dataclass(frozen=True)
class VocosConfig:
    sample_rate: int = 24000
    n_fft: int = 1024
    hop_length: int = 256
    n_mels: int = 100
    padding: str = "center"
    input_channels: int = 100
    dim: int = 512
    intermediate_dim: int = 1536
    num_layers: int = 8
    layer_scale_init_value: float | None = None
    head_dim: int = 512
    head_n_fft: int = 1024
    head_hop_length: int = 256
    head_padding: str = "same"

    @classmethod
    def from_dict(cls, data: Any, source: str = "config.yaml") -> VocosConfig:
        """Read upstream's config (`feature_extractor` / `backbone` / `head`, each `class_path` +
        `init_args`) as plain data: the class paths are checked against the supported ones, never imported."""
        if not isinstance(data, dict):
            raise VocosConfigError(f"{source}: expected a mapping with feature_extractor, backbone and head")
        parts = {}
        for key, allowed in (("feature_extractor", FEATURES), ("backbone", BACKBONES), ("head", HEADS)):
            part = data.get(key)
            if not isinstance(part, dict) or part.get("class_path") not in allowed:
                got = part.get("class_path") if isinstance(part, dict) else part
                raise VocosConfigError(f"{source}: {key}.class_path is {got!r}; supported: {', '.join(sorted(allowed))}")
            args = part.get("init_args") or {}
            if not isinstance(args, dict):
                raise VocosConfigError(f"{source}: {key}.init_args must be a mapping")
            parts[key] = args
        fe, bb, hd = parts["feature_extractor"], parts["backbone"], parts["head"]
        if bb.get("adanorm_num_embeddings") is not None:
            raise VocosConfigError(f"{source}: backbone.init_args.adanorm_num_embeddings: conditional (EnCodec) "
                                   "Vocos is not supported")

        def get(args: dict, section: str, name: str, kind: type, default: Any = None) -> Any:
            value = args.get(name, default)
            if value is None and default is None:
                if name == "layer_scale_init_value":
                    return None
                raise VocosConfigError(f"{source}: {section}.init_args.{name} is missing")
            if kind is str:
                ok = isinstance(value, str)
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            else:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok:
                raise VocosConfigError(f"{source}: {section}.init_args.{name} = {value!r} is not a valid {kind.__name__}")
            return value

        cfg = cls(
            sample_rate=get(fe, "feature_extractor", "sample_rate", int, 24000),
            n_fft=get(fe, "feature_extractor", "n_fft", int, 1024),
            hop_length=get(fe, "feature_extractor", "hop_length", int, 256),
            n_mels=get(fe, "feature_extractor", "n_mels", int, 100),
            padding=get(fe, "feature_extractor", "padding", str, "center"),
            input_channels=get(bb, "backbone", "input_channels", int),
            dim=get(bb, "backbone", "dim", int),
            intermediate_dim=get(bb, "backbone", "intermediate_dim", int),
            num_layers=get(bb, "backbone", "num_layers", int),
            layer_scale_init_value=get(bb, "backbone", "layer_scale_init_value", float),
            head_dim=get(hd, "head", "dim", int),
            head_n_fft=get(hd, "head", "n_fft", int),
            head_hop_length=get(hd, "head", "hop_length", int),
            head_padding=get(hd, "head", "padding", str, "same"),
        )
        for section, value in (("feature_extractor", cfg.padding), ("head", cfg.head_padding)):
            if value not in ("center", "same"):
                raise VocosConfigError(f"{source}: {section}.init_args.padding = {value!r}; expected center or same")
        return cfg

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> VocosConfig:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"Vocos config not found: {path}")
        try:
            data = load_yaml(path, "Vocos")
        except CheckpointError as e:
            raise VocosConfigError(f"{path}: not valid YAML ({e})") from None
        check_sizes(data, path, "Vocos")
        return cls.from_dict(data, str(path))


class Vocos(nn.Module):
    """feature_extractor (audio -> log-mel), backbone + head (log-mel -> audio)."""

    def __init__(self, cfg: VocosConfig) -> None:
        super().__init__()
        self.config = cfg
        self.feature_extractor = MelSpectrogramFeatures(cfg.sample_rate, cfg.n_fft, cfg.hop_length, cfg.n_mels,
                                                        cfg.padding)
        self.backbone = VocosBackbone(cfg.input_channels, cfg.dim, cfg.intermediate_dim, cfg.num_layers,
                                      cfg.layer_scale_init_value)
        self.head = ISTFTHead(cfg.head_dim, cfg.head_n_fft, cfg.head_hop_length, cfg.head_padding)

    @property
    def hop_length(self) -> int:
        return self.config.head_hop_length

    def decode(self, features: Tensor) -> Tensor:
        """Mel features [B, n_mels, T] -> waveform [B, T * hop]."""
        return self.head(self.backbone(features))

    def forward(self, features: Tensor) -> Tensor:
        return self.decode(features)


def load_vocos(folder: str | os.PathLike, dtype: torch.dtype = torch.float32) -> Vocos:
    """A Vocos model folder in the upstream layout (`config.yaml` + `pytorch_model.bin`, a pickle read
    with `torch.load(weights_only=True)`), loaded strictly, in eval mode on the CPU."""
    from ...runtime.loading import SizeSource, load_module_from_state
    folder = Path(folder)
    cfg = VocosConfig.from_yaml(folder / "config.yaml")
    sizes = SizeSource(folder / "config.yaml", load_yaml(folder / "config.yaml", "Vocos"))
    weights = folder / "pytorch_model.bin"
    state = state_dict(load_pickle(weights), weights)
    return load_module_from_state(lambda: Vocos(cfg), state, dtype, weights, sizes).eval()

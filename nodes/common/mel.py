"""Mel filterbanks and log-mel front ends shared by the engines (numpy/torch, no librosa at run time).

`mel_filters` is librosa.filters.mel with its defaults (Slaney mel scale and area normalisation), or the
HTK scale without normalisation (`htk=True, norm=None`, torchaudio's MelSpectrogram default scale).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def _hz_to_mel(f: np.ndarray, htk: bool = False) -> np.ndarray:
    f = np.asanyarray(f, dtype=np.float64)
    if htk:
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    mels = f / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m: np.ndarray, htk: bool = False) -> np.ndarray:
    if htk:
        return 700.0 * (10.0 ** (np.asanyarray(m, dtype=np.float64) / 2595.0) - 1.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


@lru_cache(maxsize=16)
def mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None = None, htk: bool = False,
                norm: str | None = "slaney") -> np.ndarray:
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=htk, norm=norm), float32
    [n_mels, n_fft // 2 + 1]."""
    fmax = sr / 2 if fmax is None else fmax
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin, htk), _hz_to_mel(fmax, htk), n_mels + 2), htk)
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    if norm == "slaney":
        enorm = 2.0 / (mel_f[2: n_mels + 2] - mel_f[:n_mels])
        weights *= enorm[:, np.newaxis]
    elif norm is not None:
        raise ValueError(f"mel_filters norm: expected 'slaney' or None, got {norm!r}")
    return weights


def log_mel(wav: Tensor, basis: Tensor, n_fft: int, hop: int, win: int, *, pad: int | None = None,
            center: bool = False, magnitude_eps: float = 1e-9, floor: float = 1e-5) -> Tensor:
    """Mono waveform [T] (or [B, T]) -> log-mel [B, n_mels, frames] in float32.

    The HiFi-GAN-family recipe most TTS front ends use: reflect padding of `pad` samples per side
    (default (n_fft - hop) // 2) unless `center`, periodic Hann window, magnitude sqrt(re^2 + im^2 + eps),
    mel projection with `basis` [n_mels, n_fft // 2 + 1], log(max(x, floor)).
    """
    y = wav.float()
    y = y[None] if y.dim() == 1 else y
    if not center:
        pad = (n_fft - hop) // 2 if pad is None else pad
        y = F.pad(y[:, None], (pad, pad), mode="reflect")[:, 0]
    window = torch.hann_window(win, device=y.device)
    spec = torch.stft(y, n_fft, hop_length=hop, win_length=win, window=window, center=center,
                      pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + magnitude_eps)
    return torch.log(torch.clamp(torch.matmul(basis.to(y.device), mag), min=floor))

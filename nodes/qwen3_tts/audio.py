"""Audio helpers for Qwen3-TTS voice prompts: mono conversion, resampling, the speaker encoder's log-mel.

The log-mel reproduces upstream's `mel_spectrogram` (librosa's Slaney mel filterbank, periodic Hann window,
reflect padding of (n_fft - hop) / 2, magnitude with +1e-9, log of max(x, 1e-5)) without librosa.
Resampling is a windowed-sinc polyphase filter (Hann window, 6 zero crossings, 0.99 roll-off); upstream
uses librosa's soxr, so a resampled prompt is close to, not bit-identical with, upstream's.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

MEL = dict(n_fft=1024, num_mels=128, hop_size=256, win_size=1024, fmin=0, fmax=12000)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    f = np.asanyarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    mels = f / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


@lru_cache(maxsize=8)
def mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) with its defaults (Slaney scale and norm), float32."""
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2: n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


def log_mel(wav: Tensor, sr: int = 24000) -> Tensor:
    """Mono waveform [T] -> log-mel [1, frames, 128] (float32, on the waveform's device)."""
    p = MEL
    basis = torch.from_numpy(mel_filters(sr, p["n_fft"], p["num_mels"], p["fmin"], p["fmax"])).to(wav.device)
    window = torch.hann_window(p["win_size"]).to(wav.device)
    pad = (p["n_fft"] - p["hop_size"]) // 2
    y = F.pad(wav.float()[None, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(y, p["n_fft"], hop_length=p["hop_size"], win_length=p["win_size"], window=window,
                      center=False, normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(torch.matmul(basis, mag), min=1e-5)).transpose(1, 2)


def to_mono(wav: Tensor) -> Tensor:
    """[T], [C, T] or [B, C, T] (ComfyUI AUDIO) -> float32 [T] (channels averaged, first batch item)."""
    wav = torch.as_tensor(wav)
    if wav.dim() == 3:
        wav = wav[0]
    if wav.dim() == 2:
        wav = wav.mean(dim=0)
    if wav.dim() != 1:
        raise ValueError(f"reference audio: expected a waveform [T], [C, T] or [B, C, T], got shape {tuple(wav.shape)}")
    return wav.float()


def resample(wav: Tensor, orig: int, target: int, zeros: int = 6, rolloff: float = 0.99) -> Tensor:
    """Band-limited resampling of [T] from `orig` Hz to `target` Hz (windowed sinc, Hann window)."""
    if orig == target:
        return wav
    if orig <= 0 or target <= 0:
        raise ValueError(f"sample rates must be positive, got {orig} -> {target}")
    g = math.gcd(orig, target)
    up, down = target // g, orig // g
    cutoff = min(up, down) * rolloff
    width = math.ceil(zeros * down / cutoff)
    idx = torch.arange(-width, width + down, dtype=torch.float64)[None] / down
    t = (-torch.arange(up, dtype=torch.float64)[:, None] / up + idx) * cutoff
    t = t.clamp(-zeros, zeros)
    window = torch.cos(t * math.pi / zeros / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t) * window * (cutoff / down)
    x = F.pad(wav.double()[None, None], (width, width + down))
    y = F.conv1d(x, kernel[:, None], stride=down)          # [1, up, frames]
    y = y[0].T.reshape(-1)
    n = math.ceil(up * wav.shape[-1] / down)
    return y[:n].to(wav.dtype)

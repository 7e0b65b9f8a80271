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
    """Mono waveform [T] (or [B, T]) -> log-mel [B, n_mels, frames] in float32 (float64 for a float64 waveform:
    parity checks, with `basis` upcast and the window made in float64).

    The HiFi-GAN-family recipe most TTS front ends use: reflect padding of `pad` samples per side
    (default (n_fft - hop) // 2) unless `center`, periodic Hann window, magnitude sqrt(re^2 + im^2 + eps),
    mel projection with `basis` [n_mels, n_fft // 2 + 1], log(max(x, floor)).
    """
    y = wav if wav.dtype == torch.float64 else wav.float()
    y = y[None] if y.dim() == 1 else y
    if not center:
        pad = (n_fft - hop) // 2 if pad is None else pad
        y = F.pad(y[:, None], (pad, pad), mode="reflect")[:, 0]
    window = torch.hann_window(win, device=y.device, dtype=y.dtype)
    spec = torch.stft(y, n_fft, hop_length=hop, win_length=win, window=window, center=center,
                      pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + magnitude_eps)
    return torch.log(torch.clamp(torch.matmul(basis.to(y.device, y.dtype), mag), min=floor))


# ---- the recipes engines share (CosyVoice, IndexTTS 2, GPT-SoVITS) -------------------------------------------


def slaney_filters(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> Tensor:
    """librosa.filters.mel (Slaney scale and norm, float32), as Whisper's asset and Matcha compute it."""
    return torch.from_numpy(mel_filters(sr, n_fft, n_mels, fmin, fmax))


def whisper_log_mel(audio: Tensor, n_mels: int = 128) -> Tensor:
    """Whisper's log_mel_spectrogram of 16 kHz audio [T] -> [n_mels, frames] (in the audio's dtype: a float64
    run upcasts the float32 filterbank, as Whisper's asset is, and makes the window in float64)."""
    window = torch.hann_window(400, device=audio.device, dtype=audio.dtype)
    stft = torch.stft(audio, 400, 160, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel = slaney_filters(16000, 400, n_mels).to(audio.device, audio.dtype) @ magnitudes
    log_spec = torch.clamp(mel, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def kaldi_fbank(wav: Tensor, num_mel_bins: int = 80, sample_frequency: float = 16000.0) -> Tensor:
    """torchaudio.compliance.kaldi.fbank(wav[None], num_mel_bins, dither=0) with its defaults (25/10 ms
    povey frames, DC removal, pre-emphasis 0.97, power spectrum, 20 Hz..Nyquist, log) -> [frames, bins]."""
    eps = torch.tensor(torch.finfo(torch.float).eps, dtype=wav.dtype, device=wav.device)
    size, shift = int(sample_frequency * 0.025), int(sample_frequency * 0.010)
    padded = 1 if size == 0 else 2 ** (size - 1).bit_length()
    n = wav.numel()
    if n < size:
        return torch.empty(0, num_mel_bins, dtype=wav.dtype, device=wav.device)
    wav = wav.contiguous()
    frames = wav.as_strided((1 + (n - size) // shift, size), (shift, 1))
    frames = frames - torch.mean(frames, dim=1).unsqueeze(1)
    offset = F.pad(frames.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)
    frames = frames - 0.97 * offset[:, :-1]
    window = torch.hann_window(size, periodic=False, device=wav.device, dtype=wav.dtype).pow(0.85).unsqueeze(0)
    frames = F.pad((frames * window).unsqueeze(0), (0, padded - size), mode="constant", value=0).squeeze(0)
    spectrum = torch.fft.rfft(frames).abs().pow(2.0)
    # made in float32 as torchaudio makes them; a float64 input gets float64 banks (no float32 rounding in it)
    banks = kaldi_mel_banks(num_mel_bins, padded, sample_frequency,
                            dtype=torch.float64 if wav.dtype == torch.float64 else None)
    banks = banks.to(device=wav.device, dtype=wav.dtype)
    banks = F.pad(banks, (0, 1), mode="constant", value=0)
    return torch.max(torch.mm(spectrum, banks.T), eps).log()


def kaldi_mel_banks(num_bins: int, padded: int, sample_freq: float, low_freq: float = 20.0,
                    dtype: torch.dtype | None = None) -> Tensor:
    """torchaudio's get_mel_banks in the default dtype (float32), or in `dtype` (float64 parity checks)."""
    num_fft_bins = padded / 2
    high_freq = 0.5 * sample_freq
    fft_bin_width = sample_freq / padded
    mel_low = 1127.0 * math.log(1.0 + low_freq / 700.0)
    mel_high = 1127.0 * math.log(1.0 + high_freq / 700.0)
    delta = (mel_high - mel_low) / (num_bins + 1)
    b = torch.arange(num_bins, dtype=dtype).unsqueeze(1)
    left, center, right = mel_low + b * delta, mel_low + (b + 1.0) * delta, mel_low + (b + 2.0) * delta
    mel = (1127.0 * (1.0 + fft_bin_width * torch.arange(num_fft_bins, dtype=dtype) / 700.0).log()).unsqueeze(0)
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    return torch.max(torch.zeros(1), torch.min(up, down))


def matcha_mel(wav: Tensor, n_fft: int = 1920, num_mels: int = 80, sampling_rate: int = 24000, hop_size: int = 480,
               win_size: int = 1920, fmin: float = 0.0, fmax: float | None = 8000.0) -> Tensor:
    """Matcha-TTS mel_spectrogram (center=False) of audio [T] -> log-mel [num_mels, frames] (the shared recipe)."""
    basis = slaney_filters(sampling_rate, n_fft, num_mels, fmin, fmax)
    return log_mel(wav, basis, n_fft, hop_size, win_size, pad=int((n_fft - hop_size) / 2))[0]

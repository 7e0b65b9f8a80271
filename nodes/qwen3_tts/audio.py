"""The speaker encoder's log-mel: upstream's `mel_spectrogram` (librosa's Slaney mel filterbank, periodic
Hann window, reflect padding of (n_fft - hop) / 2, magnitude with +1e-9, log of max(x, 1e-5)) without librosa.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..blocks import mel
from ..blocks.mel import mel_filters

MEL = dict(n_fft=1024, num_mels=128, hop_size=256, win_size=1024, fmin=0, fmax=12000)


def log_mel(wav: Tensor, sr: int = 24000) -> Tensor:
    """Mono waveform [T] -> log-mel [1, frames, 128] (float32, on the waveform's device)."""
    p = MEL
    basis = torch.from_numpy(mel_filters(sr, p["n_fft"], p["num_mels"], p["fmin"], p["fmax"]))
    return mel.log_mel(wav, basis, p["n_fft"], p["hop_size"], p["win_size"]).transpose(1, 2)

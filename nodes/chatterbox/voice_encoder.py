"""Chatterbox's voice encoder (`ve.safetensors`): a 3-layer LSTM over 40-band power mels of 160-frame
partials, projected to a 256-d speaker embedding that conditions T3.

The front end is upstream's `embeds_from_wavs` on 16 kHz audio, in torch: silence trimmed as
`librosa.effects.trim(top_db=20)` (RMS frames of 2048, hop 512, constant centre padding), a centred
reflect-padded STFT (n_fft 400, hop 160, Hann), |X|^2 through librosa's Slaney mel basis, partials every
`round((16000 / 1.3) / 160) = 77` frames (the last kept when it covers >= 80 %), each embedding
L2-normalised, their mean normalised again. The STFT and the RMS run in float64 here and in float32
(pocketfft) upstream, so the mels agree to float32 rounding and the embeddings to ~1e-6, not bit for bit.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.mel import slaney_filters

SAMPLE_RATE = 16000
NUM_MELS = 40
PARTIAL_FRAMES = 160
N_FFT, HOP = 400, 160
RATE = 1.3                 # Resemble's default partial rate
MIN_COVERAGE = 0.8


class VoiceEncoder(nn.Module):
    def __init__(self, num_mels: int = NUM_MELS, hidden: int = 256, embed: int = 256) -> None:
        super().__init__()
        self.lstm = nn.LSTM(num_mels, hidden, num_layers=3, batch_first=True)
        self.proj = nn.Linear(hidden, embed)
        self.similarity_weight = nn.Parameter(torch.tensor([10.0]))
        self.similarity_bias = nn.Parameter(torch.tensor([-5.0]))

    def forward(self, mels: Tensor) -> Tensor:
        """Partials [B, 160, 40] -> L2-normalised embeddings [B, 256]."""
        _, (hidden, _) = self.lstm(mels)
        raw = F.relu(self.proj(hidden[-1]))
        return raw / torch.linalg.norm(raw, dim=1, keepdim=True)


def trim_silence(wav: Tensor, top_db: float = 20.0, frame_length: int = 2048, hop: int = 512) -> Tensor:
    """librosa.effects.trim(wav, top_db): the span from the first to one past the last frame whose RMS is
    within `top_db` of the loudest frame's."""
    y = wav.double()
    padded = F.pad(y, (frame_length // 2, frame_length // 2))
    frames = padded.unfold(0, frame_length, hop)
    rms = frames.pow(2).mean(dim=-1).sqrt()
    amin = 1e-10                                  # amplitude_to_db's amin (1e-5) squared
    db = 10 * torch.log10(torch.clamp(rms.pow(2), min=amin)) - 10 * torch.log10(
        torch.clamp(rms.max().pow(2), min=amin))
    loud = torch.nonzero(db > -top_db).flatten()
    if loud.numel() == 0:
        return wav[:0]
    start = int(loud[0]) * hop
    end = min(wav.shape[-1], (int(loud[-1]) + 1) * hop)
    return wav[start:end]


def power_mel(wav: Tensor) -> Tensor:
    """Mono 16 kHz [T] -> power mel [frames, 40] (float32), upstream's `melspectrogram` (mel_type "amp")."""
    y = wav.double()
    spec = torch.stft(y, N_FFT, hop_length=HOP, win_length=N_FFT, window=torch.hann_window(N_FFT, dtype=y.dtype),
                      center=True, pad_mode="reflect", return_complex=True)
    power = spec.abs().float().pow(2)
    basis = slaney_filters(SAMPLE_RATE, N_FFT, NUM_MELS, 0.0, 8000.0)
    return (basis @ power).T.contiguous()


def partial_count(frames: int, step: int) -> tuple[int, int]:
    """Upstream's `get_num_wins`: how many partials and the padded length they cover."""
    if frames < 1:
        raise ValueError("reference audio: nothing left after trimming silence; give a reference with speech")
    n, remainder = divmod(max(frames - PARTIAL_FRAMES + step, 0), step)
    if n == 0 or (remainder + (PARTIAL_FRAMES - step)) / PARTIAL_FRAMES >= MIN_COVERAGE:
        n += 1
    return n, PARTIAL_FRAMES + step * (n - 1)


def speaker_embedding(encoder: VoiceEncoder, wav16k: Tensor) -> Tensor:
    """Mono float32 16 kHz [T] -> the speaker embedding [1, 256] upstream's `prepare_conditionals` makes."""
    speech = trim_silence(wav16k)
    if speech.shape[-1] <= N_FFT // 2:
        raise ValueError(f"reference audio: {speech.shape[-1]} samples at 16 kHz after trimming silence; the voice "
                         f"encoder needs more than {N_FFT // 2} (give a reference with speech)")
    mel = power_mel(speech)
    step = int(round((SAMPLE_RATE / RATE) / PARTIAL_FRAMES))
    n, target = partial_count(mel.shape[0], step)
    if target > mel.shape[0]:
        mel = torch.cat([mel, mel.new_zeros(target - mel.shape[0], NUM_MELS)])
    partials = torch.stack([mel[i * step: i * step + PARTIAL_FRAMES] for i in range(n)])
    dev = encoder.proj.weight.device
    embeds = encoder(partials.to(dev, encoder.proj.weight.dtype)).float().cpu()
    raw = embeds.mean(dim=0, keepdim=True)
    return raw / torch.linalg.norm(raw, dim=1, keepdim=True)

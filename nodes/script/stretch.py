"""Pitch-preserving time-stretch (WSOLA) in torch: speech sped up or slowed down without changing its
voice.

WSOLA (waveform-similarity overlap-add) cuts the input into Hann-windowed frames read at the stretched
rate and overlap-adds them at the output rate; each frame's read position moves by up to a quarter
frame so that it continues the previous frame's waveform (the most similar position by normalised
cross-correlation), which keeps pitch periods whole. Frames are 25 ms at half-frame hops, long enough
for two periods of an 80 Hz voice. The search runs on the channels' mean, so every channel is cut at
the same places. Deterministic: the same input gives the same output on one machine (ties pick the
nominal position, then the earliest).
"""
from __future__ import annotations

import math

import torch

MIN_FACTOR = 0.5
MAX_FACTOR = 2.0
FRAME_S = 0.025


def time_stretch(audio: torch.Tensor, factor: float, sample_rate: int) -> torch.Tensor:
    """``audio`` (1-D or [C, T]) played ``factor`` times faster (0.5 to 2.0, > 1 is shorter) at its pitch;
    the result has ``round(T / factor)`` samples. Factor 1 returns an unchanged copy."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
            not MIN_FACTOR <= factor <= MAX_FACTOR:
        raise ValueError(f"factor: expected a number from {MIN_FACTOR} to {MAX_FACTOR}, got {factor!r}")
    _check_audio(audio)
    return stretch_to_length(audio, round(audio.shape[-1] / factor), sample_rate)


def stretch_to_length(audio: torch.Tensor, length: int, sample_rate: int) -> torch.Tensor:
    """``audio`` (1-D or [C, T]) stretched to exactly ``length`` samples, for T / length from 0.5 to 2.0
    (a timeline fitting speech into a cue asks for a length, not a factor)."""
    _check_audio(audio)
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or not 1000 <= sample_rate <= 768_000:
        raise ValueError(f"sample_rate: expected an integer from 1000 to 768000 Hz, got {sample_rate!r}")
    n = audio.shape[-1]
    if isinstance(length, bool) or not isinstance(length, int) or length < 0 or \
            (n > 0 and not (length > 0 and MIN_FACTOR <= n / length <= MAX_FACTOR)):
        raise ValueError(f"length: expected samples giving a factor from {MIN_FACTOR} to {MAX_FACTOR} "
                         f"for {n} input samples, got {length!r}")
    if length == n:
        return audio.clone()
    x = audio if audio.dim() == 2 else audio[None]
    work = x if x.dtype == torch.float64 else x.float()
    out = _wsola(work, length, n / length, sample_rate)
    out = out.to(audio.dtype)
    return out if audio.dim() == 2 else out[0]


def _check_audio(audio: object) -> None:
    if not isinstance(audio, torch.Tensor) or audio.dim() not in (1, 2) or not audio.is_floating_point():
        shape = tuple(audio.shape) if isinstance(audio, torch.Tensor) else type(audio).__name__
        raise ValueError(f"audio: expected a float tensor of shape [T] or [C, T], got {shape}")


def _wsola(x: torch.Tensor, length: int, factor: float, sample_rate: int) -> torch.Tensor:
    """[C, T] -> [C, length]: frames of N samples written every N/2 output samples, read around every
    N/2 * factor input samples, each moved by up to ``tol`` to continue the previous one."""
    half = max(1, round(FRAME_S * sample_rate / 2))
    frame, hop = 2 * half, half
    tol = max(1, frame // 4)
    count = math.ceil((length + half) / hop) + 1          # frames covering output [0, length) fully
    # Input coordinates are shifted by half + tol: frame k's nominal read start is tol + round(k*hop*factor).
    nominal = [tol + round(k * hop * factor) for k in range(count)]
    padded_len = max(nominal) + tol + frame + hop          # room for the last template too
    xp = torch.nn.functional.pad(x, (half + tol, padded_len - x.shape[-1] - half - tol))
    guide = xp.mean(0)
    starts = [nominal[0]]
    for k in range(1, count):
        template = guide[starts[-1] + hop: starts[-1] + hop + frame]
        lo = nominal[k] - tol
        candidates = guide[lo: lo + 2 * tol + frame].unfold(0, frame, 1)   # [2*tol+1, frame]
        score = candidates @ template / candidates.square().sum(1).clamp_min(1e-12).sqrt()
        best = int(score.argmax())
        # silence (or a flat template) carries no alignment: keep the nominal position
        starts.append(lo + best if score[best] > score[tol] else nominal[k])
    window = torch.hann_window(frame, periodic=True, dtype=x.dtype, device=x.device)
    index = torch.tensor(starts, device=x.device)[:, None] + torch.arange(frame, device=x.device)
    frames = xp[:, index] * window                          # [C, count, frame]
    # With hops of half a frame, even frames tile the output end to end and so do odd ones (half a
    # frame later): two dense adds, the same order on every device.
    total = (count + 1) * hop + frame
    out = x.new_zeros(x.shape[0], total)
    weight = x.new_zeros(total)
    for parity in (0, 1):
        part = frames[:, parity::2].reshape(x.shape[0], -1)
        at = parity * hop
        out[:, at: at + part.shape[-1]] += part
        weight[at: at + part.shape[-1]] += window.repeat(frames[:, parity::2].shape[1])
    return out[:, half: half + length] / weight[half: half + length].clamp_min(1e-6)

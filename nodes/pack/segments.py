"""How an engine's upstream cuts a request into segments and joins their audio.

`Engine.split_text` returns the segments (plain strings, or `Segment` where upstream segments tokens
rather than text); `Engine.join` says what upstream puts between consecutive segments' waveforms, and
the pipeline applies it with `join_waves`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Segment:
    """One segment as upstream reads it. `tokens`: upstream's own tokens when it tokenizes the whole
    text first and cuts the token list (the model then reads these tokens, not `text` re-tokenized);
    `text` is what is shown for it."""

    text: str
    tokens: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Join:
    """What upstream puts between consecutive segments: `silence_ms` of zeros (int(rate * ms / 1000)
    samples), with `fade_ms` the end before it faded out and the start after it faded in (float32
    linear ramps over at most that segment); or a linear cross-fade over `crossfade_s` seconds (at most
    the shorter neighbour)."""

    silence_ms: float = 0.0
    crossfade_s: float = 0.0
    fade_ms: float = 0.0

    def __post_init__(self) -> None:
        if min(self.silence_ms, self.crossfade_s, self.fade_ms) < 0 or \
                (self.crossfade_s and (self.silence_ms or self.fade_ms)):
            raise ValueError("Join: expected silence_ms >= 0 (and fade_ms >= 0) or crossfade_s >= 0, not both")


def join_waves(waves: Sequence[Tensor], join: Join, sample_rate: int) -> Tensor:
    """Consecutive mono float32 segment waveforms -> one waveform, joined as upstream joins them."""
    if not waves:
        return torch.zeros(0)
    if join.crossfade_s > 0:
        return _crossfade(waves, int(join.crossfade_s * sample_rate))
    gap = int(sample_rate * join.silence_ms / 1000.0)
    if join.fade_ms > 0:
        return _faded(waves, int(sample_rate * join.fade_ms / 1000.0), gap)
    parts: list[Tensor] = []
    for i, wav in enumerate(waves):
        if i and gap:
            parts.append(torch.zeros(gap, dtype=wav.dtype))
        parts.append(wav)
    return torch.cat(parts)


def _faded(waves: Sequence[Tensor], fade: int, gap: int) -> Tensor:
    # OmniVoice's cross_fade_chunks: the joined audio so far fades out, silence, the next fades in
    # (np.linspace in float32; each sample is multiplied once, so no sum order can differ)
    out = waves[0].float().clone()
    for nxt in waves[1:]:
        nxt = nxt.float().clone()
        n, m = min(fade, out.numel()), min(fade, nxt.numel())
        if n > 0:
            out[-n:] *= torch.from_numpy(np.linspace(1, 0, n, dtype=np.float32))
        if m > 0:
            nxt[:m] *= torch.from_numpy(np.linspace(0, 1, m, dtype=np.float32))
        out = torch.cat([out, torch.zeros(gap), nxt])
    return out


def _crossfade(waves: Sequence[Tensor], samples: int) -> Tensor:
    # F5-TTS's infer_batch_process: np.linspace fades (float64) over min(samples, both lengths)
    out = waves[0].double()
    for nxt in waves[1:]:
        nxt = nxt.double()
        n = min(samples, out.numel(), nxt.numel())
        if n <= 0:
            out = torch.cat([out, nxt])
            continue
        # numpy's linspace, not torch's: their last bits differ
        mixed = out[-n:] * torch.from_numpy(np.linspace(1, 0, n)) + nxt[:n] * torch.from_numpy(np.linspace(0, 1, n))
        out = torch.cat([out[:-n], mixed, nxt[n:]])
    return out.float()


class Pieces:
    """A request's joined audio handed over as it becomes final: after each segment, the samples no later
    join can change (a fade or cross-fade still reaches the last `fade_ms` / `crossfade_s` of what is
    joined so far). `hold_all`: an engine that post-processes the joined audio as a whole (`Engine.finish`)
    hands everything over at the end. The pieces concatenated are the request's audio exactly."""

    def __init__(self, join: Join, sample_rate: int, hold_all: bool = False) -> None:
        self.join = join
        self.sample_rate = sample_rate
        self.hold_all = hold_all
        self.waves: list[Tensor] = []
        self.sent = 0

    @property
    def tail(self) -> int:
        if self.join.crossfade_s > 0:
            return int(self.join.crossfade_s * self.sample_rate)
        return int(self.sample_rate * self.join.fade_ms / 1000.0)

    def add(self, wav: Tensor) -> Tensor:
        """The samples made final by one more segment's waveform (possibly none)."""
        self.waves.append(wav)
        if self.hold_all:
            return torch.zeros(0)
        joined = join_waves(self.waves, self.join, self.sample_rate)
        final = joined.numel() - min(self.tail, joined.numel())
        piece = joined[self.sent:final]
        self.sent = max(self.sent, final)
        return piece

    def rest(self, wav: Tensor) -> Tensor:
        """What of the request's final audio `wav` was not handed over yet."""
        return wav[self.sent:]

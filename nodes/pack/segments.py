"""How an engine's upstream cuts a request into segments and joins their audio.

`Engine.split_text` returns the segments (plain strings, or `Segment` where upstream segments tokens
rather than text); `Engine.join` says what upstream puts between consecutive segments' waveforms, and
the pipeline applies it with `join_waves`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
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
    joined so far), and within a segment, as an engine hands over the start of it (`partial`). `hold_all`:
    an engine that post-processes the joined audio as a whole (`Engine.finish`) hands everything over at
    the end. The pieces concatenated are the request's audio exactly; `rest` checks that they are."""

    def __init__(self, join: Join, sample_rate: int, hold_all: bool = False) -> None:
        self.join = join
        self.sample_rate = sample_rate
        self.hold_all = hold_all
        self.waves: list[Tensor] = []
        self.handed: list[Tensor] = []
        self.sent = 0
        self._start: int | None = None      # where the segment being handed over partially begins

    @property
    def tail(self) -> int:
        if self.join.crossfade_s > 0:
            return int(self.join.crossfade_s * self.sample_rate)
        return int(self.sample_rate * self.join.fade_ms / 1000.0)

    def _hand(self, piece: Tensor) -> Tensor:
        if piece.numel():
            self.handed.append(piece)
            self.sent += piece.numel()
        return piece

    def add(self, wav: Tensor) -> Tensor:
        """The samples made final by one more segment's waveform (possibly none)."""
        self.waves.append(wav)
        self._start = None
        if self.hold_all:
            return torch.zeros(0)
        joined = join_waves(self.waves, self.join, self.sample_rate)
        final = joined.numel() - min(self.tail, joined.numel())
        return self._hand(joined[self.sent:final].clone())

    def partial(self, prefix: Tensor) -> Tensor:
        """The samples made final by the first `prefix.numel()` samples of the next segment (possibly none).
        Past its first `tail` samples a segment reaches the joined audio unchanged (a fade or cross-fade
        touches only the first and last `tail`), so once the prefix covers twice that, everything but
        its last `tail` samples is final; the first such call joins once, later ones slice the prefix."""
        if self.hold_all or prefix.numel() < 2 * self.tail or prefix.numel() == 0:
            return torch.zeros(0)
        if self._start is None:
            joined = join_waves(self.waves + [prefix], self.join, self.sample_rate)
            self._start = joined.numel() - prefix.numel()
            return self._hand(joined[self.sent:joined.numel() - self.tail].clone())
        return self._hand(prefix[self.sent - self._start:prefix.numel() - self.tail].clone())

    def rest(self, wav: Tensor) -> Tensor:
        """What of the request's final audio `wav` was not handed over yet; a RuntimeError if what was
        handed over is not the start of it (an engine's pieces that were not its final audio)."""
        if self.sent and not torch.equal(torch.cat(self.handed), wav[:self.sent]):
            raise RuntimeError("the audio handed over while it was made is not the start of the final audio")
        return wav[self.sent:]


class ChunkPieces:
    """`Chunk.emit` for one chunk: collects the samples an engine hands over while it makes them and
    passes each new final stretch of the request's audio to `hand` (through `Pieces.partial`). A phase
    retried after an OOM emits its samples again: they must equal the first emission and are dropped."""

    def __init__(self, stream: Pieces, hand: Callable[[Tensor], None], what: str) -> None:
        self.stream = stream
        self.hand = hand
        self.what = what
        self.buffer = torch.zeros(0)
        self.length = 0

    def __call__(self, samples: Tensor, start: int) -> None:
        samples = samples.detach().reshape(-1).float().cpu()
        end = start + samples.numel()
        if not 0 <= start <= self.length:
            raise RuntimeError(f"{self.what}: emitted samples from {start}, expected at most {self.length} "
                               "(pieces must come in order, without gaps)")
        seen = min(end, self.length) - start
        if seen > 0 and not torch.equal(self.buffer[start:start + seen], samples[:seen]):
            raise RuntimeError(f"{self.what}: samples {start}-{start + seen} emitted again differ from the first time")
        if end <= self.length:
            return
        if not bool(torch.isfinite(samples).all()):
            raise FloatingPointError(f"{self.what}: NaN or infinite samples (corrupt weights, or a precision too "
                                     "low for this model)")
        if end > self.buffer.numel():                  # grow by doubling: each sample is copied O(1) times
            grown = torch.zeros(max(end, 2 * self.buffer.numel()))
            grown[:self.length] = self.buffer[:self.length]
            self.buffer = grown
        self.buffer[self.length:end] = samples[self.length - start:]
        self.length = end
        piece = self.stream.partial(self.buffer[:self.length])
        if piece.numel():
            self.hand(piece)

"""pydub's silence functions in numpy, sample for sample: 16-bit samples, millisecond positions, seek
steps and audioop's integer RMS (over every channel's samples, as audioop reads interleaved frames).
Upstreams that clean a reference (or their output) with pydub get the same samples here.

    wav = remove_silence(wav, 24000, mid_sil=500, lead_sil=100, trail_sil=100)    # OmniVoice's output
    ref = remove_silence(ref, 24000, mid_sil=200, lead_sil=100, trail_sil=200)    # OmniVoice's reference
    seg = Segment.from_float(channels, rate)                                       # F5-TTS's reference pass

remove_silence: silences longer than `mid_sil` ms (quieter than -50 dBFS) shrink to `mid_sil`; the
leading and trailing silence keep `lead_sil` / `trail_sil` ms. The result is quantised to 16 bits, as
upstream's is.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

THRESHOLD_DB = -50.0
SEEK_MS = 10
FULL_SCALE = 32768.0
SILENT_RATE = 11025              # AudioSegment.silent's default frame_rate


class Segment:
    """16-bit frames [T, C] addressed in milliseconds the way pydub's AudioSegment does."""

    def __init__(self, samples: np.ndarray, rate: int) -> None:
        self.samples = samples if samples.ndim == 2 else samples[:, None]
        self.rate = rate

    @classmethod
    def from_float(cls, wav: Tensor, rate: int) -> Segment:
        """float [T] or [C, T] in [-1, 1] scale -> 16-bit frames (what a 16-bit file holds)."""
        x = wav.detach().cpu().numpy().astype(np.float32)
        x = x[None] if x.ndim == 1 else x
        return cls((x.T * 32768.0).clip(-32768, 32767).astype(np.int16), rate)

    @classmethod
    def silent(cls, ms: int, rate: int, channels: int = 1) -> Segment:
        """AudioSegment.silent(ms) (made at 11025 Hz) appended to audio at `rate`: audioop.ratecv's
        frame count for the zeros."""
        return cls(np.zeros((ratecv_frames(int(SILENT_RATE * (ms / 1000.0)), SILENT_RATE, rate), channels),
                            np.int16), rate)

    def to_float(self) -> Tensor:
        """[C, T] float32, as torchaudio / soundfile read the 16-bit file back."""
        return torch.from_numpy(np.ascontiguousarray(self.samples.T).astype(np.float32) / 32768.0)

    def __len__(self) -> int:
        return round(1000 * (len(self.samples) / self.rate))

    def __add__(self, other: Segment) -> Segment:
        return Segment(np.concatenate([self.samples, other.samples]), self.rate)

    def frames(self, ms: float) -> int:
        return int(ms * (self.rate / 1000.0))

    def reversed(self) -> Segment:
        return Segment(self.samples[::-1].copy(), self.rate)

    def __getitem__(self, window: slice) -> Segment:
        n = len(self)
        start = min(window.start if window.start is not None else 0, n)
        end = min(window.stop if window.stop is not None else n, n)
        s, e = self.frames(start), self.frames(end)
        data = self.samples[s:e]
        missing = (e - s) - len(data)
        if missing > 0:                                   # a last, partial millisecond: zero-filled
            data = np.concatenate([data, np.zeros((missing, data.shape[1]), dtype=np.int16)])
        return Segment(data, self.rate)

    def rms(self) -> int:
        """audioop.rms: the truncated square root of the mean square (exact integer sums)."""
        if self.samples.size == 0:
            return 0
        total = int(np.square(self.samples.astype(np.int64)).sum())
        return int(math.sqrt(total / self.samples.size))

    def dbfs(self) -> float:
        rms = self.rms()
        return -math.inf if rms == 0 else 20 * math.log(rms / FULL_SCALE, 10)


def ratecv_frames(frames: int, inrate: int, outrate: int) -> int:
    """How many frames audioop.ratecv makes of `frames` (CPython's loop, state None)."""
    g = math.gcd(inrate, outrate)
    inrate, outrate = inrate // g, outrate // g
    d, out = -outrate, 0
    while True:
        while d < 0:
            if frames == 0:
                return out
            frames -= 1
            d += outrate
        while d >= 0:
            out += 1
            d -= inrate


def detect_silence(seg: Segment, min_len: int, thresh_db: float, step: int) -> list[list[int]]:
    length = len(seg)
    if length < min_len:
        return []
    thresh = 10 ** (thresh_db / 20) * FULL_SCALE
    last = length - min_len
    starts = list(range(0, last + 1, step))
    if last % step:
        starts.append(last)
    silent = [i for i in starts if seg[i:i + min_len].rms() <= thresh]
    if not silent:
        return []
    ranges, prev = [], silent[0]
    begin = prev
    for i in silent[1:]:
        if i != prev + step and i > prev + min_len:
            ranges.append([begin, prev + min_len])
            begin = i
        prev = i
    ranges.append([begin, prev + min_len])
    return ranges


def detect_nonsilent(seg: Segment, min_len: int, thresh_db: float, step: int) -> list[list[int]]:
    silent = detect_silence(seg, min_len, thresh_db, step)
    length = len(seg)
    if not silent:
        return [[0, length]]
    if silent[0][0] == 0 and silent[0][1] == length:
        return []
    out, prev_end = [], 0
    for start, end in silent:
        out.append([prev_end, start])
        prev_end = end
    if silent[-1][1] != length:
        out.append([prev_end, length])
    if out[0] == [0, 0]:
        out.pop(0)
    return out


def split_on_silence(seg: Segment, min_len: int, thresh_db: float, keep: int, step: int) -> list[Segment]:
    ranges = [[start - keep, end + keep] for start, end in detect_nonsilent(seg, min_len, thresh_db, step)]
    for a, b in zip(ranges, ranges[1:]):
        if b[0] < a[1]:
            a[1] = (a[1] + b[0]) // 2
            b[0] = a[1]
    return [seg[max(start, 0):min(end, len(seg))] for start, end in ranges]


def leading_silence(seg: Segment, thresh_db: float = THRESHOLD_DB, chunk: int = 10) -> int:
    trim = 0
    while seg[trim:trim + chunk].dbfs() < thresh_db and trim < len(seg):
        trim += chunk
    return min(trim, len(seg))


def remove_silence(wav: Tensor, rate: int, mid_sil: int = 300, lead_sil: int = 100, trail_sil: int = 300) -> Tensor:
    """Mono float32 [T] -> the same with long silences shortened and the edges trimmed (16-bit values)."""
    seg = Segment.from_float(wav, rate)
    if mid_sil > 0:
        parts = split_on_silence(seg, mid_sil, THRESHOLD_DB, mid_sil, SEEK_MS)
        seg = Segment(np.concatenate([p.samples for p in parts]) if parts else np.zeros((0, 1), np.int16), rate)
    start = max(0, leading_silence(seg) - lead_sil)
    seg = seg[start:].reversed()
    start = max(0, leading_silence(seg) - trail_sil)
    return seg[start:].reversed().to_float()[0]

"""Spoken cues placed on one timeline at their subtitle times.

A cue's times become samples by exact integer rounding (half up): ``(ms * sample_rate + 500) // 1000``.
Speech shorter than its cue is followed by silence; speech longer than its cue is handled by the policy:

- ``pad_trim``: cut at the cue's end, the last ``fade_ms`` faded out.
- ``overlap``: left whole, running over what follows (mixed by addition).
- ``shift``: left whole; each following cue starts at its own time or when the previous cue's speech
  ends, whichever is later, so a delay is absorbed by the next gap long enough for it.
- ``stretch``: time-compressed (pitch kept) to fit, by at most ``max_stretch``; speech still too long
  after that goes to the ``fallback`` policy (``pad_trim``, ``overlap`` or ``shift``).

Under every policy but ``shift`` (and ``stretch`` falling back to ``shift``) each cue starts exactly at
its own sample. The output is allocated once at its final length, computed from the lengths first;
cues are written into it one at a time, so beyond the caller's inputs only one cue's (stretched) audio
is held at a time.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Literal

import torch

from .srt import Cue, format_time
from .stretch import MAX_FACTOR, stretch_to_length

Policy = Literal["pad_trim", "overlap", "shift", "stretch"]
Fallback = Literal["pad_trim", "overlap", "shift"]
POLICIES = ("pad_trim", "overlap", "shift", "stretch")
FALLBACKS = ("pad_trim", "overlap", "shift")
MAX_SECONDS = 4 * 3600        # the longest timeline placed by default


def to_sample(ms: int, sample_rate: int) -> int:
    """The sample a time in milliseconds falls on: exact rounding, half up."""
    return (ms * sample_rate + 500) // 1000


def to_ms(sample: int, sample_rate: int) -> int:
    """The millisecond nearest a sample (half up); `to_sample` of it gives the sample back at >= 1001 Hz."""
    return (sample * 2000 + sample_rate) // (2 * sample_rate)


@dataclasses.dataclass(frozen=True)
class Placement:
    """What happened to one cue, in samples: its original slot ``start``..``end``, where it went
    (``new_start``..``new_end``, the span its adjusted subtitle shows), the speech it was given, the
    length written after stretching and cutting, the stretch factor (1.0: none) and the samples cut.

    ``actions``: ``("fit",)``, or what was done, in order, among ``moved`` (started later, ``shift``),
    ``stretched``, ``trimmed`` (``pad_trim``), ``overran`` (``overlap``) and ``extended`` (``shift``:
    it ends later and pushes what follows)."""

    index: int
    start: int
    end: int
    new_start: int
    new_end: int
    speech: int
    placed: int
    stretch: float
    trimmed: int
    actions: tuple[str, ...]
    sample_rate: int

    @property
    def start_s(self) -> float:
        return self.start / self.sample_rate

    @property
    def end_s(self) -> float:
        return self.end / self.sample_rate

    @property
    def new_start_s(self) -> float:
        return self.new_start / self.sample_rate

    @property
    def new_end_s(self) -> float:
        return self.new_end / self.sample_rate

    @property
    def speech_s(self) -> float:
        return self.speech / self.sample_rate

    @property
    def adjusted(self) -> bool:
        return self.actions != ("fit",)

    def describe(self) -> str:
        """One line for a user: the cue, its speech against its slot, and each action with its size."""
        sr = self.sample_rate
        slot = self.end - self.start
        said = []
        for action in self.actions:
            if action == "moved":
                said.append(f"moved {(self.new_start - self.start) / sr:.3f} s later "
                            f"(starts {format_time(to_ms(self.new_start, sr))})")
            elif action == "stretched":
                said.append(f"stretched x{self.stretch:.3f}")
            elif action == "trimmed":
                said.append(f"trimmed {self.trimmed / sr:.3f} s ({self.trimmed} samples)")
            elif action == "overran":
                said.append(f"runs {(self.placed - slot) / sr:.3f} s past its end")
            elif action == "extended":
                said.append(f"ends {(self.placed - slot) / sr:.3f} s later")
            else:
                said.append(action)
        return (f"cue {self.index} {format_time(to_ms(self.start, sr))} --> {format_time(to_ms(self.end, sr))}: "
                f"speech {self.speech / sr:.3f} s in {slot / sr:.3f} s: " + "; ".join(said))


@dataclasses.dataclass(frozen=True)
class Timeline:
    """The placed audio ([C, T] float32), the cues at their new times (for the adjusted SRT) and what
    was done to each cue, in the order given."""

    audio: torch.Tensor
    cues: tuple[Cue, ...]
    report: tuple[Placement, ...]
    sample_rate: int

    def report_text(self) -> str:
        """A first line counting the adjusted cues, then one line per adjusted cue."""
        adjusted = [p for p in self.report if p.adjusted]
        return "\n".join([f"{len(adjusted)} of {len(self.report)} cues adjusted"] + [p.describe() for p in adjusted])


def place_cues(cues: Sequence[Cue], audio: Sequence[torch.Tensor], sample_rate: int, *,
               policy: Policy = "pad_trim", max_stretch: float = 1.5, fallback: Fallback = "overlap",
               fade_ms: float = 10.0, max_seconds: float = MAX_SECONDS) -> Timeline:
    """Place ``audio[i]`` (1-D or [C, T] float; channels 1 or the widest count, mono spread to all) at
    ``cues[i]``'s time; see the module's description for the policies. ``max_stretch``: the most speech
    is compressed (1 to 2). ``max_seconds`` bounds the output, checked before it is allocated."""
    check_placement(policy, max_stretch, fallback, fade_ms, max_seconds, sample_rate)
    if len(cues) != len(audio):
        raise ValueError(f"audio: expected one tensor per cue ({len(cues)}), got {len(audio)}")
    lengths, channels, device = _lengths(audio)
    shifting = policy == "shift" or (policy == "stretch" and fallback == "shift")
    plan = _plan(cues, lengths, sample_rate, policy, max_stretch, fallback, shifting)
    total = max((max(p.new_end, p.new_start + p.placed) for p in plan), default=0)
    if total > max_seconds * sample_rate:
        raise ValueError(f"timeline: {total / sample_rate:.1f} s long, at most {max_seconds:g} s (max_seconds)")
    out = torch.zeros(channels, total, dtype=torch.float32, device=device)
    fade = max(1, round(fade_ms * sample_rate / 1000))
    for i, p in enumerate(plan):
        _write(out, audio[i], p, fade)
    adjusted = tuple(cue if (p.new_start, p.new_end) == (p.start, p.end) else
                     dataclasses.replace(cue, start_ms=to_ms(p.new_start, sample_rate),
                                         end_ms=to_ms(p.new_end, sample_rate))
                     for cue, p in zip(cues, plan))
    return Timeline(out, adjusted, tuple(plan), sample_rate)


def check_placement(policy: str, max_stretch: float = 1.5, fallback: str = "overlap", fade_ms: float = 10.0,
                    max_seconds: float = MAX_SECONDS, sample_rate: int = 24000) -> None:
    """The placement options, checked (callers check them before making any audio)."""
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback: expected one of {', '.join(FALLBACKS)}, got {fallback!r}")
    for name, value, lo, hi in (("max_stretch", max_stretch, 1.0, MAX_FACTOR), ("fade_ms", fade_ms, 0.0, 1000.0),
                                ("max_seconds", max_seconds, 0.0, 48 * 3600.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise ValueError(f"{name}: expected a number from {lo:g} to {hi:g}, got {value!r}")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or not 8000 <= sample_rate <= 768_000:
        raise ValueError(f"sample_rate: expected an integer from 8000 to 768000 Hz, got {sample_rate!r}")


def _shape(i: int, a: object) -> tuple[int, int, torch.device]:
    """Channels, samples and device of ``audio[i]``, checked (a function, so the tensor is released when
    it returns: a lazily made input holds one cue's audio at a time)."""
    if not isinstance(a, torch.Tensor) or a.dim() not in (1, 2) or not a.is_floating_point():
        shape = tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
        raise ValueError(f"audio[{i}]: expected a float tensor of shape [T] or [C, T], got {shape}")
    return (a.shape[0] if a.dim() == 2 else 1), a.shape[-1], a.device


def _lengths(audio: Sequence[torch.Tensor]) -> tuple[list[int], int, torch.device]:
    """Every cue's speech length, and the output's channel count and device."""
    lengths, channels, device = [], 1, torch.device("cpu")
    for i in range(len(audio)):
        c, n, dev = _shape(i, audio[i])
        if i == 0:
            device = dev
        elif dev != device:
            raise ValueError(f"audio[{i}]: on {dev}, the others on {device}")
        if c != 1 and channels not in (1, c):
            raise ValueError(f"audio[{i}]: {c} channels where others have {channels} (expected 1 or {channels})")
        channels = max(channels, c)
        lengths.append(n)
    return lengths, channels, device


def _plan(cues: Sequence[Cue], lengths: list[int], sr: int, policy: str, max_stretch: float,
          fallback: str, shifting: bool) -> list[Placement]:
    """Every cue's placement from the lengths alone (integers), before any sample is written."""
    plan: list[Placement] = []
    cursor = 0              # shifting: where the previous cue's speech ends
    for i, cue in enumerate(cues):
        if not isinstance(cue, Cue):
            raise ValueError(f"cues[{i}]: expected a Cue, got {type(cue).__name__}")
        if shifting and i and cue.start_ms < cues[i - 1].start_ms:
            raise ValueError(f"cues[{i}]: starts before cues[{i - 1}]; shifting needs cues in time order")
        start, end = to_sample(cue.start_ms, sr), to_sample(cue.end_ms, sr)
        slot = end - start
        speech = lengths[i]
        new_start = max(start, cursor) if shifting else start
        actions = ["moved"] if new_start > start else []
        length, factor, over = speech, 1.0, policy
        if policy == "stretch" and speech > slot:
            length = max(slot, math.ceil(speech / max_stretch))
            if speech > length * max_stretch:      # ceil of a rounded quotient can land one short
                length += 1
            if length < speech:                    # max_stretch 1 stretches nothing
                factor = speech / length
                actions.append("stretched")
            over = fallback
        placed, trimmed = length, 0
        if length > slot:
            if over == "pad_trim":
                placed, trimmed = slot, length - slot
            actions.append({"pad_trim": "trimmed", "overlap": "overran", "shift": "extended"}[over])
        cursor = new_start + placed
        plan.append(Placement(cue.index, start, end, new_start, new_start + max(slot, placed), speech, placed,
                              factor, trimmed, tuple(actions) or ("fit",), sr))
    if shifting:    # a moved cue's subtitle ends no later than the next one starts (never before its speech)
        for i in range(len(plan) - 1):
            p, nxt = plan[i], plan[i + 1]
            if p.new_end > nxt.new_start:
                plan[i] = dataclasses.replace(p, new_end=max(p.new_start + p.placed, nxt.new_start))
    return plan


def _write(out: torch.Tensor, audio: torch.Tensor, p: Placement, fade: int) -> None:
    """Add one cue's audio at its placement: stretched to its length, cut with a fade when trimmed."""
    if p.placed == 0:
        return
    x = audio if audio.dim() == 2 else audio[None]
    if "stretched" in p.actions:
        x = stretch_to_length(x, p.placed + p.trimmed, p.sample_rate)
    head = p.placed - min(fade, p.placed) if p.trimmed else p.placed
    at = p.new_start
    out[:, at: at + head] += x[:, :head]
    if head < p.placed:     # a linear fade towards zero over the last samples before the cut
        n = p.placed - head
        ramp = torch.arange(n, 0, -1, dtype=torch.float32, device=out.device) / (n + 1)
        out[:, at + head: at + p.placed] += x[:, head: p.placed] * ramp

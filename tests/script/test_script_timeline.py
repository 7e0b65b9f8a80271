"""Cue audio on a timeline (issue 32): exact start samples under the non-shifting policies, an exact
report, stretching within its limit, and a 1 000-cue timeline holding one cue's audio at a time."""
from __future__ import annotations

import random
import weakref
from fractions import Fraction

import pytest
import torch

from mizuoto.nodes.script.srt import Cue, format_srt, parse_srt
from mizuoto.nodes.script.timeline import Placement, place_cues, to_ms, to_sample

SR = 16_000


def tone(seconds: float, value: float = 0.5, channels: int = 0) -> torch.Tensor:
    """A constant signal (its first nonzero sample marks where it was placed)."""
    n = round(seconds * SR)
    return torch.full((channels, n) if channels else (n,), value)


def test_sample_rounding_is_exact_half_up_and_round_trips():
    for sr in (8000, 22_050, 24_000, 44_100, 48_000):
        for ms in range(0, 5000, 7):
            exact = Fraction(ms * sr, 1000)
            assert to_sample(ms, sr) == int(exact + Fraction(1, 2))
            assert to_ms(to_sample(ms, sr), sr) == ms
    assert to_sample(5, 44_100) == 221          # 220.5: half up, where round() of the float gives 220


@pytest.mark.parametrize("policy", ["pad_trim", "overlap", "stretch"])
@pytest.mark.parametrize("sr", [22_050, 44_100])
def test_every_cue_starts_at_its_own_sample_under_non_shifting_policies(policy, sr):
    rng = random.Random(5)
    cues, audio, t = [], [], 0
    for i in range(60):
        t += rng.randrange(250, 900)
        length = rng.randrange(200, 800)
        cues.append(Cue(i + 1, t, t + length, f"cue {i}"))
        speech = round(length * sr / 1000 * rng.uniform(0.3, 1.8))     # some fit, some run over
        audio.append(torch.full((speech,), float(i + 1)))
        t += length
    tl = place_cues(cues, audio, sr, policy=policy, fallback="overlap")
    for cue, p in zip(cues, tl.report):
        start = to_sample(cue.start_ms, sr)
        assert p.new_start == p.start == start
        # the first sample written there is this cue's (mixed with an earlier cue running over, if any)
        assert tl.audio[0, start] >= cue.index and (start == 0 or tl.audio[0, start - 1] != cue.index)
    if policy == "stretch":
        assert all(p.stretch <= 1.5 for p in tl.report)
        assert all(p.placed == p.end - p.start for p in tl.report if 1 < p.speech / (p.end - p.start) <= 1.5)


def test_the_report_is_exact():
    srt = parse_srt("1\n00:00:01,000 --> 00:00:02,000\na\n\n2\n00:00:02,000 --> 00:00:02,500\nb\n\n"
                    "3\n00:00:04,000 --> 00:00:05,000\nc\n")
    audio = [tone(0.8), tone(1.0), tone(2.0)]       # fits; 2x its cue; 2x its cue
    pad = place_cues(srt.cues, audio, SR, policy="pad_trim")
    assert pad.report == (
        Placement(1, 16_000, 32_000, 16_000, 32_000, 12_800, 12_800, 1.0, 0, ("fit",), SR),
        Placement(2, 32_000, 40_000, 32_000, 40_000, 16_000, 8000, 1.0, 8000, ("trimmed",), SR),
        Placement(3, 64_000, 80_000, 64_000, 80_000, 32_000, 16_000, 1.0, 16_000, ("trimmed",), SR),
    )
    assert pad.audio.shape == (1, 80_000) and pad.cues == srt.cues
    assert pad.report_text() == (
        "2 of 3 cues adjusted\n"
        "cue 2 00:00:02,000 --> 00:00:02,500: speech 1.000 s in 0.500 s: trimmed 0.500 s (8000 samples)\n"
        "cue 3 00:00:04,000 --> 00:00:05,000: speech 2.000 s in 1.000 s: trimmed 1.000 s (16000 samples)")

    stretch = place_cues(srt.cues, audio, SR, policy="stretch", max_stretch=1.6, fallback="shift")
    assert [(p.new_start, p.new_end, p.placed, p.stretch, p.trimmed, p.actions) for p in stretch.report] == [
        (16_000, 32_000, 12_800, 1.0, 0, ("fit",)),
        (32_000, 42_000, 10_000, 1.6, 0, ("stretched", "extended")),
        (64_000, 84_000, 20_000, 1.6, 0, ("stretched", "extended")),
    ]
    assert [(c.start_ms, c.end_ms) for c in stretch.cues] == [(1000, 2000), (2000, 2625), (4000, 5250)]
    assert stretch.report_text().splitlines()[1] == \
        "cue 2 00:00:02,000 --> 00:00:02,500: speech 1.000 s in 0.500 s: stretched x1.600; ends 0.125 s later"


def test_shift_pushes_following_cues_until_a_gap_absorbs_the_delay():
    cues = [Cue(1, 0, 1000, "a"), Cue(2, 1000, 2000, "b"), Cue(3, 2000, 3000, "c"), Cue(4, 5000, 6000, "d")]
    audio = [tone(1.5, 1.0), tone(1.0, 2.0), tone(0.5, 3.0), tone(0.5, 4.0)]
    tl = place_cues(cues, audio, SR, policy="shift")
    assert [(p.new_start, p.new_end, p.actions) for p in tl.report] == [
        (0, 24_000, ("extended",)),
        (24_000, 40_000, ("moved",)),                   # its subtitle ends where cue 3 starts
        (40_000, 56_000, ("moved",)),
        (80_000, 96_000, ("fit",)),
    ]
    assert tl.audio[0, 23_999] == 1.0 and tl.audio[0, 24_000] == 2.0 and tl.audio[0, 40_000] == 3.0
    assert tl.report_text().splitlines()[2] == ("cue 2 00:00:01,000 --> 00:00:02,000: speech 1.000 s in 1.000 s: "
                                               "moved 0.500 s later (starts 00:00:01,500)")
    assert parse_srt(format_srt(tl.cues)).cues == tl.cues
    with pytest.raises(ValueError, match="shifting needs cues in time order"):
        place_cues(cues[::-1], audio[::-1], SR, policy="shift")


def test_overlap_mixes_and_pad_trim_fades_at_the_cut():
    cues = [Cue(1, 0, 1000, "a"), Cue(2, 1000, 2000, "b")]
    over = place_cues(cues, [tone(1.5, 1.0), tone(1.0, 2.0)], SR, policy="overlap")
    assert over.audio[0, 15_999] == 1.0 and over.audio[0, 16_000] == 3.0 and over.audio[0, 24_000] == 2.0
    assert over.cues[0].end_ms == 1500 and over.report[0].actions == ("overran",)
    trim = place_cues(cues, [tone(1.5, 1.0), tone(1.0, 2.0)], SR, policy="pad_trim", fade_ms=1.0)
    fade = trim.audio[0, 16_000 - 16: 16_000]
    assert torch.equal(fade, torch.arange(16, 0, -1, dtype=torch.float32) / 17)
    assert trim.audio[0, 16_000 - 17] == 1.0 and trim.audio[0, 16_000] == 2.0


def test_channels_mix_mono_into_stereo_and_dtypes_become_float32():
    cues = [Cue(1, 0, 100, "a"), Cue(2, 100, 200, "b")]
    stereo = torch.stack([torch.full((1600,), 1.0), torch.full((1600,), -1.0)]).double()
    tl = place_cues(cues, [torch.full((1600,), 0.25, dtype=torch.float16), stereo], SR)
    assert tl.audio.dtype == torch.float32 and tl.audio.shape == (2, 3200)
    assert tl.audio[:, 0].tolist() == [0.25, 0.25] and tl.audio[:, 1600].tolist() == [1.0, -1.0]
    assert place_cues([], [], SR).audio.shape == (1, 0)


class LazyCues:
    """Cue audio made on each read and counted while alive: shows the timeline never holds two."""

    def __init__(self, count: int, samples: int):
        self.count, self.samples = count, samples
        self.alive = 0
        self.most_alive = 0

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> torch.Tensor:
        # every tenth cue runs 1.3x over (stretched), the rest fit
        n = self.samples * 13 // 10 if i % 10 == 0 else self.samples * 9 // 10
        audio = torch.full((n,), float(i % 7 + 1))
        self.alive += 1
        self.most_alive = max(self.most_alive, self.alive)
        weakref.finalize(audio, self._gone)
        return audio

    def _gone(self) -> None:
        self.alive -= 1


def test_a_thousand_cues_hold_one_cue_audio_at_a_time():
    sr = 8000
    cues = [Cue(i + 1, i * 300, i * 300 + 250, f"line {i}") for i in range(1000)]
    audio = LazyCues(1000, to_sample(250, sr))
    tl = place_cues(cues, audio, sr, policy="stretch")
    assert audio.most_alive == 1 and audio.alive == 0
    assert tl.audio.shape == (1, to_sample(999 * 300 + 250, sr))
    stretched = [p for p in tl.report if "stretched" in p.actions]
    assert len(stretched) == 100 and all(p.placed == 2000 and p.stretch == 1.3 for p in stretched)
    assert all(p.new_start == to_sample(c.start_ms, sr) for c, p in zip(cues, tl.report))
    assert len(tl.report_text().splitlines()) == 101


def test_the_output_bound_is_checked_before_allocating():
    with pytest.raises(ValueError, match=r"timeline: 7200.0 s long, at most 3600 s"):
        place_cues([Cue(1, 0, 7_200_000, "a")], [torch.zeros(10)], SR, max_seconds=3600)


@pytest.mark.parametrize("kwargs, message", [
    ({"policy": "squash"}, "policy: expected one of pad_trim, overlap, shift, stretch"),
    ({"fallback": "stretch"}, "fallback: expected one of pad_trim, overlap, shift"),
    ({"max_stretch": 2.5}, "max_stretch: expected a number from 1 to 2"),
    ({"max_stretch": float("nan")}, "max_stretch"),
    ({"fade_ms": -1.0}, "fade_ms"),
])
def test_bad_options_are_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        place_cues([Cue(1, 0, 100, "a")], [torch.zeros(10)], SR, **kwargs)


def test_bad_inputs_are_errors():
    cue = Cue(1, 0, 100, "a")
    with pytest.raises(ValueError, match=r"audio: expected one tensor per cue \(1\), got 2"):
        place_cues([cue], [torch.zeros(1), torch.zeros(1)], SR)
    with pytest.raises(ValueError, match=r"audio\[0\]: expected a float tensor"):
        place_cues([cue], [torch.zeros(10, dtype=torch.int32)], SR)
    with pytest.raises(ValueError, match=r"audio\[1\]: 3 channels where others have 2"):
        place_cues([cue, cue], [torch.zeros(2, 10), torch.zeros(3, 10)], SR)
    with pytest.raises(ValueError, match=r"cues\[0\]: expected a Cue"):
        place_cues([(0, 100)], [torch.zeros(10)], SR)
    with pytest.raises(ValueError, match="sample_rate"):
        place_cues([cue], [torch.zeros(10)], 4000)

"""OmniVoice's long-text cut and join as upstream's generate makes them (fixtures/segments.json, recorded by
make_segment_fixtures.py from omnivoice 0.2.1's own functions; README.md)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.segments import join_waves
from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine
from mizuoto.nodes.omnivoice.segments import split_long_text
from mizuoto.nodes.omnivoice.text import estimate_frames

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "segments.json").read_text())


def wave(samples: int, marker: int) -> torch.Tensor:
    """make_segment_fixtures.wave: exact float32 samples."""
    k = torch.arange(samples, dtype=torch.int64)
    return ((k * 37 + marker * 11) % 101).to(torch.float32) / 101


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE) >= 50 and sum(len(c["pieces"]) > 1 for c in FIXTURE) >= 30
    assert sum(len(c["pieces"]) == 1 and len(c["text"]) > 20 for c in FIXTURE) >= 5


@pytest.mark.parametrize("case", FIXTURE, ids=lambda c: f"{c['text'][:12]}|{c['ref_frames']}|{c['speed']}")
def test_estimate_and_pieces_equal_upstream(case):
    frames = estimate_frames(case["text"], case["ref_text"], case["ref_frames"], speed=case["speed"])
    assert frames == case["target_frames"]
    assert split_long_text(case["text"], frames, 25) == case["pieces"]


@pytest.mark.parametrize("case", [c for c in FIXTURE if len(c["pieces"]) > 1][:12], ids=lambda c: c["text"][:12])
def test_pieces_are_joined_as_cross_fade_chunks(case):
    joined = join_waves([wave(n, i) for i, n in enumerate(case["wave_lengths"])], OmniVoiceEngine.join, 24000)
    assert joined.dtype == torch.float32 and joined.numel() == case["joined_samples"]
    assert hashlib.sha256(joined.numpy().tobytes()).hexdigest() == case["joined_sha256"]

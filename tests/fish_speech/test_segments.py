"""Fish Speech segments text as upstream's generate_long does: S1 reads it whole (one TextPart); S2 one segment
per batch of split_text_by_speaker / group_turns_into_batches (5 turns, 512 bytes), each segment's user text
upstream's batch text (fixtures/segments.json from make_segment_fixtures.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mizuoto.nodes.fish_speech.generate import speaker_turns
from mizuoto.nodes.fish_speech.phases import FishS2Engine, FishSpeechEngine

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "segments.json").read_text())


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE) >= 20


@pytest.mark.parametrize("case", FIXTURE, ids=lambda c: c["text"][:20])
def test_segments_are_upstreams_batches(case):
    text = case["text"]
    assert FishSpeechEngine.split_text(None, text) == [text]
    upstream = case["batches_512"]
    segments = FishS2Engine.split_text(None, text)
    assert len(segments) == len(upstream)
    assert [speaker_turns(s) for s in segments] == upstream

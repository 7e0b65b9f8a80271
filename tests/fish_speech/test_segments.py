"""Fish Speech reads the whole text as one segment, as upstream's generate_long does (S1: one TextPart; S2:
one batch), and S2's user text is upstream's batch (fixtures/segments.json from make_segment_fixtures.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mizuoto.nodes.fish_speech.generate import SPEAKER_TAG, speaker_turns
from mizuoto.nodes.fish_speech.phases import FishS2Engine, FishSpeechEngine

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "segments.json").read_text())


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE) >= 20


@pytest.mark.parametrize("case", FIXTURE, ids=lambda c: c["text"][:20])
def test_one_segment_and_upstreams_batch(case):
    text = case["text"]
    for engine in (FishSpeechEngine, FishS2Engine):
        assert engine.split_text(None, text) == [text]
    upstream = case["batches_512"]
    if len(upstream) == 1:
        assert speaker_turns(text) == upstream[0]
    else:
        # upstream's later batches see the earlier ones' codes, which one segment per request cannot
        # reproduce: only texts of more than 5 speaker turns get here
        assert len(SPEAKER_TAG.findall(text)) > 5

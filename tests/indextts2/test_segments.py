"""IndexTTS 2 segments as upstream's TextTokenizer.split_segments cuts them, joined with its 200 ms of silence.

fixtures/segments.json is recorded from upstream by make_segment_fixtures.py (README.md).
"""
from __future__ import annotations

import json
import types

import pytest
import torch

from mizuoto.nodes.pack.segments import Segment, join_waves
from mizuoto.nodes.indextts2.phases import IndexTTS2Engine
from mizuoto.nodes.indextts2.text import TextTokenizer, split_segments

from indextts2 import tiny

FIXTURE = json.loads((tiny.FIXTURES / "segments.json").read_text())


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("bpe") / "bpe.model"
    tiny.write_bpe(path)
    return TextTokenizer(path)


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE["texts"]) >= 20 and len(FIXTURE["token_cases"]) >= 10
    assert any(len(c["segments"]) > 1 for c in FIXTURE["texts"])


@pytest.mark.parametrize("case", FIXTURE["texts"] + FIXTURE["token_cases"],
                         ids=lambda c: c.get("text", "tokens")[:24])
def test_split_segments_equals_upstream(case):
    assert split_segments(case["tokens"]) == case["segments"]


@pytest.mark.parametrize("case", FIXTURE["texts"], ids=lambda c: c["text"][:24])
def test_split_text_equals_upstream(tokenizer, case):
    assert tokenizer.tokenize(case["text"]) == case["tokens"]
    me = types.SimpleNamespace(tokenizer=tokenizer, max_segment_tokens=IndexTTS2Engine.max_segment_tokens)
    segments = IndexTTS2Engine.split_text(me, case["text"])
    assert all(isinstance(s, Segment) for s in segments)
    assert [list(s.tokens) for s in segments] == case["segments"]
    # the model reads upstream's ids of each segment's pieces
    assert [tokenizer.ids(s.tokens) for s in segments] == [tokenizer.ids(p) for p in case["segments"]]


@pytest.mark.parametrize("case", FIXTURE["joins"], ids=lambda c: str(c["lengths"]))
def test_segments_are_joined_with_upstreams_interval_silence(case):
    wav = join_waves([torch.ones(n) for n in case["lengths"]], IndexTTS2Engine.join, case["sample_rate"])
    assert wav.numel() == case["total"]
    zero = (wav == 0).tolist()
    runs = []
    for i, z in enumerate(zero):
        if z:
            if runs and runs[-1][1] == i:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
    assert runs == case["zero_runs"]


def test_a_long_run_is_cut_as_upstream_cuts_it():
    # upstream cuts a run when it reaches 121 pieces (120 + 1), and never merges past 120
    assert [len(s) for s in split_segments(["▁A"] * 250)] == [120, 1, 120, 9]
    assert [len(s) for s in split_segments(["▁A"] * 120)] == [120]

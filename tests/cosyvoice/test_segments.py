"""CosyVoice segments as upstream's text_normalize(split=True) cuts them, wetext and inflect installed
(fixtures/segments.json, recorded by make_segment_fixtures.py from upstream; README.md)."""
from __future__ import annotations

import json
import types

import pytest

from mizuoto.nodes.pack.engine import Chunk
from mizuoto.nodes.pack.segments import Join
from mizuoto.nodes.cosyvoice.frontend import TextNormalizer, TextTokenizer, split_paragraph
from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine

from cosyvoice.tiny import FIXTURES, write_tokenizer

FIXTURE = json.loads((FIXTURES / "segments.json").read_text())
CASES = [(v, c) for v in (2, 3) for c in FIXTURE[f"v{v}"]]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[int, TextTokenizer]:
    pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder)
    return {v: TextTokenizer(folder, v) for v in (2, 3)}


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE["v2"]) >= 20 and sum(len(c["segments"]) > 1 for c in FIXTURE["v2"]) >= 3


@pytest.mark.parametrize("version, case", CASES, ids=lambda x: x["text"][:20] if isinstance(x, dict) else f"v{x}")
def test_segments_equal_upstream(tokenizers, version, case):
    tok = tokenizers[version]
    engine = types.SimpleNamespace(normalizer=TextNormalizer(tok.encode))
    assert CosyVoiceEngine.split_text(engine, case["text"]) == case["segments"]


def test_split_paragraph_packs_by_characters_for_chinese():
    text = "一二三四五六七八九十。" * 10                           # 110 characters: 77 + 33 once past 60
    assert [len(s) for s in split_paragraph(text, len, "zh")] == [77, 33]
    assert split_paragraph("短。" + "长" * 70 + "。", len, "zh") == ["短。" + "长" * 70 + "。"]


def test_a_segment_reaches_the_lm_as_upstream_feeds_it():
    # normalising a segment again would strip its space and turn the final "、" into "。"
    engine = types.SimpleNamespace(normalizer=TextNormalizer(len))
    assert CosyVoiceEngine.lm_text(engine, Chunk(" 你好、", 0, segmented=True)) == " 你好、"
    assert CosyVoiceEngine.lm_text(engine, Chunk(" 你好、", 0)) == "你好。"


def test_segments_are_concatenated_as_upstream_yields_them():
    assert CosyVoiceEngine.join == Join()

"""GPT-SoVITS segments as upstream's TextPreprocessor.pre_seg_text(text, lang, "cut5") cuts them
(fixtures/segments.json, recorded by make_segment_fixtures.py from upstream; README.md)."""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from mizuoto.nodes.gpt_sovits.cut import cut5, pre_seg_text, split_big_text
from mizuoto.nodes.gpt_sovits.phases import GPTSoVITSEngine

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "segments.json").read_text())
CASES = [(lang, c) for lang in ("zh", "en") for c in FIXTURE[lang]]


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE["zh"]) >= 20 and sum(len(c["segments"]) > 1 for c in FIXTURE["zh"]) >= 10


@pytest.mark.parametrize("lang, case", CASES, ids=lambda x: x["text"][:20] if isinstance(x, dict) else x)
def test_segments_equal_upstream(lang, case):
    assert pre_seg_text(case["text"], lang) == case["segments"]
    engine = GPTSoVITSEngine.split_text(types.SimpleNamespace(), case["text"], language=lang)
    assert engine == [s for s in case["segments"] if s]      # upstream's preprocess skips empty segments


def test_cut5_keeps_a_decimal_point_and_drops_mark_only_pieces():
    assert cut5("3.14元，好。。") == "3.14元，\n好。"
    assert split_big_text("一" * 6 + "。" + "二" * 3, 7) == ["一" * 6 + "。", "二" * 3]


def test_a_segment_reaches_the_model_as_cut():
    chunk = types.SimpleNamespace(text="好", segmented=True, language="zh", index=0)
    assert GPTSoVITSEngine.chunk_text(None, chunk) == "好"
    chunk.segmented = False                                    # speak_chunk called directly: pre_seg_text's ends
    assert GPTSoVITSEngine.chunk_text(None, chunk) == "。好。"


METHOD_CASES = [(lang, m, c) for lang, cases in FIXTURE["methods"].items() for c in cases
                for m in ("cut0", "cut1", "cut2", "cut3", "cut4")]


def test_the_methods_fixture_holds_the_front_end_sentences():
    assert len(FIXTURE["methods"]["en"]) >= 35 and len(FIXTURE["methods"]["zh"]) >= 40
    assert sum(len(c["cut1"]) > 1 for c in FIXTURE["methods"]["zh"]) >= 5     # cut1 / cut2 do cut somewhere
    assert sum(len(c["cut2"]) > 1 for c in FIXTURE["methods"]["en"]) >= 5


def test_webui_methods_equal_upstream():
    """cut0-cut4 (text_segmentation_method.py) through pre_seg_text, as upstream's TextPreprocessor runs them."""
    different = [(lang, m, c["text"][:30]) for lang, m, c in METHOD_CASES if pre_seg_text(c["text"], lang, m) != c[m]]
    assert not different
    with pytest.raises(ValueError, match="cut9"):
        pre_seg_text("你好。", "zh", "cut9")

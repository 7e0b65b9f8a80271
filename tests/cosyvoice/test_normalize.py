"""CosyVoice's text normalisation against upstream's text_normalize with its requirements installed (wetext
0.0.4, inflect 7.3.1): fixtures/normalize_table.json, recorded by make_segment_fixtures.py (README.md)."""
from __future__ import annotations

import json

import pytest

from mizuoto.nodes.cosyvoice.frontend import TextNormalizer, TextTokenizer, reorder_tokens

from cosyvoice.tiny import FIXTURES, write_tokenizer

TABLE = json.loads((FIXTURES / "normalize_table.json").read_text(encoding="utf-8"))
CASES = [(lang, c) for lang in ("zh", "en") for c in TABLE[lang]]


@pytest.fixture(scope="module")
def normalizer(tmp_path_factory) -> TextNormalizer:
    pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder)
    return TextNormalizer(TextTokenizer(folder, 2).encode)


def test_the_table_covers_both_languages():
    assert len(TABLE["zh"]) >= 50 and len(TABLE["en"]) >= 50
    for lang in ("zh", "en"):     # paragraphs long enough to be cut
        assert sum(len(c.get("segments", ())) > 1 for c in TABLE[lang]) >= 2


@pytest.mark.parametrize("lang, case", CASES, ids=lambda x: x["text"][:24] if isinstance(x, dict) else x)
def test_normalisation_equals_upstream(normalizer, lang, case):
    if "error" in case:
        # upstream fails here (wetext 0.0.4 asserts on a text its grammar cannot read): ours reads it
        # without TN, inflect still spelling out the digits (README.md, front-end table)
        assert case["error"] == "AssertionError"
        assert normalizer.normalize(case["text"]) == normalizer.spell_out_number(case["text"].strip())
        return
    assert normalizer.segments(case["text"]) == case["segments"]
    assert normalizer.normalize(case["text"]) == case["normalized"]


def test_normalisation_spells_out_numbers():
    # the table is not the identity: a bypassed normaliser fails it
    rows = [c for lang in ("zh", "en") for c in TABLE[lang] if "error" not in c]
    assert sum(c["normalized"] != c["text"].strip() for c in rows) >= 90
    assert not any(ch.isdigit() for c in rows for ch in c["normalized"])
    assert sum("error" in c for lang in ("zh", "en") for c in TABLE[lang]) == 3


def test_reorder_follows_wetext_004():
    # money's fields in upstream's order, fields it does not list dropped, escapes kept as written
    tagged = 'money { currency_maj: "dollars" integer_part: "five" extra: "x" } name { value: "a\\"b" }'
    assert reorder_tokens(tagged, "en") == ('money { integer_part: "five" currency_maj: "dollars" } '
                                            'name { value: "a\\"b" }')
    preserved = 'date { month: "may" day: "two" preserve_order: "true" }'
    assert reorder_tokens(preserved, "en") == preserved


def test_markup_and_blank_text(normalizer):
    assert normalizer.segments("<|im_start|>第1句<|im_end|>") == ["<|im_start|>第1句<|im_end|>"]
    assert normalizer.normalize("<|im_start|>第1句") == "<|im_start|>第1句"
    assert normalizer.segments("   ") == [] and normalizer.normalize("") == ""


def test_the_graphs_load_once_per_normaliser(normalizer):
    normalizer.normalize("第1句。")
    graphs = normalizer._graphs["zh"]
    normalizer.normalize("第2句。")
    assert normalizer._graphs["zh"] is graphs
    assert TextNormalizer(len)._graphs == {}     # a new normaliser (engine) starts without them


def test_the_transcript_is_normalised_as_upstream_sends_it():
    import types

    from mizuoto.nodes.pack.engine import Chunk
    from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine
    chunk = Chunk("好。", 0, segmented=True, reference_text="我在2023年说过。")
    for version, prompt in ((2, "我在二零二三年说过。"),
                            # v3's prompt text carries <|endofprompt|>: upstream's text_normalize leaves it as written
                            (3, "You are a helpful assistant.<|endofprompt|>我在2023年说过。")):
        engine = types.SimpleNamespace(version=version, normalizer=TextNormalizer(len))
        engine.lm_text = lambda c, e=engine: CosyVoiceEngine.lm_text(e, c)
        assert CosyVoiceEngine.llm_texts(engine, chunk, True) == ("好。", prompt, True)

"""IndexTTS 2's text front end against upstream's TextNormalizer + TextTokenizer on 50+ Chinese and 50+
English sentences (numbers, dates, times, currency, percentages, phone numbers, units, abbreviations,
ordinals, tech terms, pinyin with tones, names with ·, mixed text, a glossary).

fixtures/frontend.json is recorded by make_frontend_fixtures.py (README.md) with both of upstream's number
normalisers: wetext (its Mac/Windows path, the one the engine runs: matched on every sentence) and
WeTextProcessing (its Linux path: pynini grammars built at load time); where the two differ is listed in
WETEXT_VS_WETEXTPROCESSING with the reason.
"""
from __future__ import annotations

import json

import pytest

from mizuoto.nodes.indextts2.text import TextNormalizer, TextTokenizer

from indextts2 import tiny

FIXTURE = json.loads((tiny.FIXTURES / "frontend.json").read_text())
CASES = FIXTURE["cases"]

# Sentences where upstream's two normalisers disagree (we read them as wetext does, upstream's Mac/Windows path).
WETEXT_VS_WETEXTPROCESSING = {
    "買了３本書，花了１２０元。": "WeTextProcessing's Chinese normaliser converts traditional characters to "
                                  "simplified by default; wetext only when asked (traditional_to_simple)",
    "Here are some highly-rated M.2 NVMe SSDs: Samsung 9100 PRO PCIe 5.0 SSD M.2, $139.99":
        "'M.2': wetext's compiled English grammar reads 'M.two', WeTextProcessing 1.2.0's 'M point two'",
    "The meeting is on January 5th, 2024 at 10:30 am.": "dates: WeTextProcessing 1.2.0 puts a space before the "
                                                        "comma after the day ('january , twenty')",
    "He was born on July 4, 1976.": "the same space before the comma after a date",
    "Email me at john@example.com.": "WeTextProcessing 1.2.0 spells 'exampl e dot com dot ', wetext "
                                     "'example dot com.'",
    "\"Hello\" (she said) [quietly]; then: goodbye...": "wetext's English verbalizer keeps the escaping "
                                                        "backslash of '\\\"' (so \\' after the punctuation map); "
                                                        "WeTextProcessing writes \"' Hello'\"",
    "Good morning!\nThank you.\n\nHi there?": "wetext's English grammar rejects a blank line (an "
                                              "AssertionError): upstream reads the text as it is; "
                                              "WeTextProcessing collapses the whitespace",
    "It costs $5  today, 3 items.": "the same with a double space: on the wetext path '$5' and '3' stay digits",
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, TextTokenizer]:
    path = tmp_path_factory.mktemp("bpe") / "bpe.model"
    tiny.write_bpe(path)
    return {"plain": TextTokenizer(path), "glossary": TextTokenizer(path, TextNormalizer(FIXTURE["glossary"]))}


def test_the_table_has_fifty_sentences_per_language():
    sets = [c["set"] for c in CASES]
    assert sets.count("zh") >= 50 and sets.count("en") >= 50 and sets.count("glossary") >= 3


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['set']}-{c['text'][:20]}")
def test_front_end_equals_upstream(tokenizers, case):
    tokenizer = tokenizers["glossary" if case["set"] == "glossary" else "plain"]
    assert tokenizer.normalizer.normalize(case["text"]) == case["wetext"]["normalized"]
    assert tokenizer.tokenize(case["text"]) == case["wetext"]["tokens"]


def test_upstreams_two_normalisers_differ_only_where_listed():
    differ = {c["text"] for c in CASES if c["wetext"] != c["wetextprocessing"]}
    assert differ == set(WETEXT_VS_WETEXTPROCESSING)


def test_the_normaliser_is_built_once_per_object_on_first_use(tokenizers):
    fresh = TextNormalizer()
    assert fresh._zh is None and fresh._en is None          # nothing loaded at construction
    fresh.normalize("3个")
    zh = fresh._zh
    fresh.normalize("3 cats")
    assert fresh._zh is zh and fresh._zh is not tokenizers["plain"].normalizer._zh


def test_a_glossary_must_hold_text():
    with pytest.raises(ValueError, match="glossary"):
        TextNormalizer({"C++": 3})
    with pytest.raises(ValueError, match="glossary"):
        TextNormalizer({"M.2": {"en": ["M", "two"]}})


def test_a_bad_glossary_file_is_an_error_naming_it(tmp_path):
    from mizuoto.nodes.indextts2.text import TextNormalizer
    from mizuoto.runtime.loading import CheckpointError

    path = tmp_path / "glossary.yaml"
    path.write_text("terms: [unclosed", encoding="utf-8")
    with pytest.raises(ValueError, match="glossary.yaml is not a YAML glossary"):
        TextNormalizer.from_glossary_file(path)
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(CheckpointError, match="glossary.yaml is not UTF-8"):
        TextNormalizer.from_glossary_file(path)
    path.write_text("C++: {zh: C 加加, en: C plus plus}\n", encoding="utf-8")
    assert TextNormalizer.from_glossary_file(path).glossary == {"C++": {"zh": "C 加加", "en": "C plus plus"}}

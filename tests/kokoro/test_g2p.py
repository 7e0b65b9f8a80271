"""Our English phonemes against upstream's (KPipeline + misaki 0.9.4 + spaCy en_core_web_sm, no espeak) on
the 300 sentences of data/g2p_sentences.txt, recorded by g2p_record.py in fixtures/g2p_misaki.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mizuoto.nodes.kokoro import text as kt

HERE = Path(__file__).parent
REF = json.loads((HERE / "fixtures" / "g2p_misaki.json").read_text(encoding="utf-8"))
# where hibari's perceptron tagger and spaCy's disagree (README: G2P difference rate)
TAGGER_DIFFERENCES = {51: "object: spaCy VBP, ours NN", 177: "Etc.: spaCy tags its period NNP (silent)",
                      198: "that: spaCy DT (stressed), ours WDT", 264: "live: spaCy JJ (lˈIv), ours VBP"}


def sentences() -> list[str]:
    lines = (HERE / "data" / "g2p_sentences.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def ours(g2p, sentence: str) -> str:
    return " ".join(kt.pieces(g2p(sentence).strip()))      # the engine's phonemes() for one sentence


@pytest.mark.parametrize("code", ["a", "b"])
def test_phonemes_equal_upstream_but_for_the_tagger_cases(code):
    text = sentences()
    assert len(text) == len(REF[code]) == 300
    g2p = kt.english(british=code == "b")
    differ = {i: (s, ours(g2p, s), REF[code][i]) for i, s in enumerate(text) if ours(g2p, s) != REF[code][i]}
    assert set(differ) == set(TAGGER_DIFFERENCES), {i: d for i, d in differ.items() if i not in TAGGER_DIFFERENCES}


@pytest.mark.parametrize("index", [131, 140, 144, 262, 276])
def test_quoted_words_are_read_with_curly_quotes(index):
    g2p = kt.english(british=False)
    got = ours(g2p, sentences()[index])
    assert got == REF["a"][index] and ("“" in got or "”" in got)


@pytest.mark.parametrize("index", [1, 263, 269, 278])
def test_known_sub_tokens_of_an_unknown_word_are_still_read(index):
    """misaki without a fallback leaves out only the unknown piece (10:30 -> ten thirty)."""
    assert ours(kt.english(british=False), sentences()[index]) == REF["a"][index]


def test_no_extra_normalization():
    g2p = kt.english(british=False)
    assert ours(g2p, "We drove 300 km in a single day.") == "wˌi dɹˈOv θɹˈi hˈʌndɹəd  ɪn ɐ sˈɪŋɡᵊl dˈA."
    assert "nˈʌmbəɹ" not in ours(g2p, "Oh no... not again.")


def test_quote_tags():
    from hibari.g2p.token import Tok

    from mizuoto.nodes.kokoro.misaki_en import quote_tag
    toks = [Tok('"'), Tok("Hi", whitespace=""), Tok('"', whitespace=" "), Tok("he"), Tok("“"), Tok("”")]
    assert [quote_tag(toks, i) for i in range(len(toks))] == ["``", None, "''", None, "``", "''"]

"""The shared splitter never rewrites text: every segment is a slice of the input (issue 26)."""
from __future__ import annotations

import re

import pytest

from mizuoto.nodes.pack.text import split_at_spaces, split_sentences

TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    "Hello there. How are you?\nI am fine!",
    "第一句。\n第二句！\n\n第三句？",
    "こんにちは。今日はいい天気ですね！散歩に行きましょう。",
    "He said \"stop.\" Then he left… Really?! Yes.",
    "今天是2025年1月1日。The price is $12.50, okay? 好的。",
    "A" * 700,
    "一" * 500,
    "one, two, three, " * 40 + "done.",
    "word " * 120,
    "  leading and trailing spaces.   Second sentence.  ",
]


def _is_ordered_slices(text: str, segments: list[str]) -> bool:
    pos = 0
    for s in segments:
        found = text.find(s, pos)
        if found < 0 or text[pos:found].strip():
            return False
        pos = found + len(s)
    return not text[pos:].strip()


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("max_chars", [10, 40, 135, 250])
def test_segments_are_slices_of_the_text_within_the_limit(text, max_chars):
    segments = split_sentences(text, max_chars)
    assert segments and all(0 < len(s) <= max_chars for s in segments)
    assert all(s == s.strip() for s in segments)
    # only whitespace at a cut is dropped: the segments and those gaps rebuild the text
    assert _is_ordered_slices(text, segments)
    assert re.sub(r"\s", "", "".join(segments)) == re.sub(r"\s", "", text)


def test_cjk_sentences_are_joined_without_a_space():
    assert split_sentences("今天天气很好。我们去公园散步吧！") == ["今天天气很好。我们去公园散步吧！"]


def test_a_newline_between_sentences_stays_a_newline():
    assert split_sentences("Hello there.\nHow are you?") == ["Hello there.\nHow are you?"]
    assert split_sentences("第一句。\n\n第二句！") == ["第一句。\n\n第二句！"]


def test_sentences_are_packed_and_cut_at_sentence_ends():
    assert split_sentences("One. Two. Three.", 9) == ["One. Two.", "Three."]
    assert split_sentences("一二三。四五六。七八九。", 8) == ["一二三。四五六。", "七八九。"]


def test_a_long_sentence_is_cut_after_clause_punctuation_then_at_spaces_then_hard():
    assert split_sentences("aaaa, bbbb, cccc.", 11) == ["aaaa, bbbb,", "cccc."]
    assert split_sentences("aaaa bbbb cccc.", 9) == ["aaaa bbbb", "cccc."]
    assert split_sentences("一二三四五六七", 3) == ["一二三", "四五六", "七"]


def test_nothing_speakable_gives_no_segment():
    assert split_sentences("  \n ") == []


def test_phonemes_cut_at_spaces_keep_their_spacing_and_long_words_are_cut_hard():
    assert split_at_spaces("ab  cd", 10) == ["ab  cd"]
    assert split_at_spaces("abc def ghi", 7) == ["abc def", "ghi"]
    assert split_at_spaces("abcdefghij k", 4) == ["abcd", "efgh", "ij k"]
    assert all(len(p) <= 5 for p in split_at_spaces("x" * 23 + " yy zz", 5))

"""SRT reading and writing (issue 32): accepted variants, reported repairs, clear errors, exact round trip."""
from __future__ import annotations

import time

import pytest

from mizuoto.nodes.script.srt import Cue, SrtError, SrtLimits, SrtRepair, format_srt, format_time, parse_srt

CANONICAL = """1
00:00:01,000 --> 00:00:02,500
[Alice] Hello
there

2
00:00:02,500 --> 00:00:04,000 X1:40 X2:600 Y1:20 Y2:50
Second

3
00:01:05,007 --> 100:00:00,000
"""

CUES = (Cue(1, 1000, 2500, "[Alice] Hello\nthere"), Cue(2, 2500, 4000, "Second", "X1:40 X2:600 Y1:20 Y2:50"),
        Cue(3, 65007, 360_000_000, ""))


def test_canonical_text_reads_to_cues_and_writes_back_byte_for_byte():
    srt = parse_srt(CANONICAL)
    assert srt.cues == CUES and srt.repairs == ()
    assert format_srt(srt.cues) == CANONICAL
    assert parse_srt(format_srt(CUES)).cues == CUES
    assert (CUES[0].start_s, CUES[0].end_s) == (1.0, 2.5)
    assert format_srt([]) == "" and parse_srt("").cues == ()


@pytest.mark.parametrize("variant", [
    "\ufeff" + CANONICAL,
    CANONICAL.replace("\n", "\r\n"),
    CANONICAL.replace("\n", "\r"),
    "\n\n" + CANONICAL.replace("\n\n", "\n \t\n\n\n") + "\n\n\n",
    CANONICAL.rstrip("\n"),
    CANONICAL.replace("00:00:01,000", "0:0:1,000"),
    CANONICAL.replace(" --> ", "-->").replace("00:00:02,500\n[", "00:00:02,500   \n["),
])
def test_accepted_variants_read_the_same_without_repairs(variant):
    srt = parse_srt(variant)
    assert srt.cues == CUES and srt.repairs == ()


def test_repairs_are_made_and_reported_in_line_order():
    text = ("7\n00:00:01.000 --> 00:00:02,000\na\n00:00:03,000 --> 00:00:04.000\nb\n3\n00:00:03,500 --> "
            "00:00:05,000\nc\n\n4\n00:00:06,000 --> 00:00:07,000\nd\n")
    srt = parse_srt(text)
    assert srt.cues == (Cue(1, 1000, 2000, "a"), Cue(2, 3000, 3500, "b"), Cue(3, 3500, 5000, "c"),
                        Cue(4, 6000, 7000, "d"))
    assert srt.repairs == (
        SrtRepair(1, 1, "index 7 renumbered 1"),
        SrtRepair(1, 2, "'.' before the milliseconds read as ',' (timing lines: 2)"),
        SrtRepair(2, 4, "no blank line before this cue: read as a new cue"),
        SrtRepair(2, 4, "no index line: numbered 2"),
        SrtRepair(3, 6, "no blank line before this cue: read as a new cue"),
        SrtRepair(2, 7, "overlapped cue 3: end moved from 00:00:04,000 to 00:00:03,500"),
    )
    assert str(srt.repairs[0]) == "cue 1 (line 1): index 7 renumbered 1"


def test_overlap_policy():
    text = "1\n00:00:01,000 --> 00:00:03,000\na\n\n2\n00:00:02,000 --> 00:00:04,000\nb\n"
    assert parse_srt(text).cues[0].end_ms == 2000
    kept = parse_srt(text, overlap="keep")
    assert [(c.start_ms, c.end_ms) for c in kept.cues] == [(1000, 3000), (2000, 4000)] and kept.repairs == ()
    with pytest.raises(SrtError, match=r"cue 2 \(line 6\): starts at 00:00:02,000, while cue 1 .* is still showing"):
        parse_srt(text, overlap="error")
    same_start = text.replace("00:00:02,000 -->", "00:00:01,000 -->")
    with pytest.raises(SrtError, match="still showing"):
        parse_srt(same_start)
    assert len(parse_srt(same_start, overlap="keep").cues) == 2
    with pytest.raises(ValueError, match="overlap: expected"):
        parse_srt(text, overlap="merge")


@pytest.mark.parametrize("text, cue, line, message", [
    ("1\n00:00:01,00 --> 00:00:02,000\nx", 1, 2, "bad timing line .*three millisecond digits"),
    ("1\n00:00:01,000 -> 00:00:02,000\nx", 1, 2, "expected a timing line"),
    ("1\n00:00:01,000 --> 00:00:02,000 --> 00:00:03,000\nx", 1, 2, "bad timing line"),
    ("1\n-00:00:01,000 --> 00:00:02,000\nx", 1, 2, "bad timing line"),
    ("1\n00:00:03,000 --> 00:00:02,000\nx", 1, 2, "ends at 00:00:02,000, before it starts at 00:00:03,000"),
    ("1\n00:60:00,000 --> 01:00:00,000\n", 1, 2, "minutes and seconds must be below 60"),
    ("1\n00:00:60,000 --> 00:01:00,000\n", 1, 2, "minutes and seconds must be below 60"),
    ("1\n100:00:00,001 --> 100:00:01,000\n", 1, 2, "past 100 hours"),
    ("1\n1000:00:00,000 --> 1000:00:01,000\n", 1, 2, "bad timing line"),
    ("hello", 1, 1, "expected a cue index or a timing line, got 'hello'"),
    ("1\nhello\n", 1, 2, "expected a timing line .* after index 1"),
    ("1\n00:00:05,000 --> 00:00:06,000\na\n\n2\n00:00:01,000 --> 00:00:02,000\nb", 2, 6,
     r"before cue 1 \(00:00:05,000\): the cues are out of order"),
    ("1\n00:00:01,000 --> 00:00:02,000\na\n\nstray\n", 2, 5, "a blank line inside a cue's text ends the cue"),
    ("1\n00:00:01,000 --> 00:00:02,000\n" + "x" * 2001, 1, 3, "longer than 2000 characters"),
])
def test_malformed_srt_is_an_error_naming_cue_and_line(text, cue, line, message):
    with pytest.raises(SrtError, match=message) as e:
        parse_srt(text)
    assert (e.value.cue, e.value.line) == (cue, line)
    assert str(e.value).startswith(f"SRT cue {cue} (line {line}): ")


def test_bounds():
    one = "1\n00:00:01,000 --> 00:00:02,000\na\n\n"
    with pytest.raises(SrtError, match="more than 3 cues") as e:
        parse_srt(one * 4, limits=SrtLimits(max_cues=3), overlap="keep")
    assert (e.value.cue, e.value.line) == (4, 13)
    with pytest.raises(ValueError, match="350 characters, at most 100"):
        parse_srt(one * 10, limits=SrtLimits(max_chars=100))
    with pytest.raises(ValueError, match="SrtLimits.max_cues"):
        SrtLimits(max_cues=0)
    with pytest.raises(ValueError, match="expected text"):
        parse_srt(b"1\n")


def test_ten_thousand_cues_read_and_write_back_quickly():
    cues = tuple(Cue(i + 1, i * 1000, i * 1000 + 900, f"line {i}") for i in range(10_000))
    t0 = time.perf_counter()
    text = format_srt(cues)
    assert parse_srt(text).cues == cues
    assert time.perf_counter() - t0 < 3.0
    with pytest.raises(SrtError, match="more than 10000 cues"):
        parse_srt(text + "\n10001\n10:00:00,000 --> 10:00:01,000\nx\n")


def test_format_refuses_cues_that_would_not_read_back():
    for text in ("a\n\nb", "a\n", "a\r\nb", "a\n00:00:01,000 --> 00:00:02,000"):
        with pytest.raises(ValueError, match="SRT cannot hold"):
            format_srt([Cue(1, 0, 1000, text)])
    with pytest.raises(ValueError, match="start_ms <= end_ms"):
        format_srt([Cue(1, 2000, 1000, "a")])
    with pytest.raises(ValueError, match="settings"):
        format_srt([Cue(1, 0, 1000, "a", "X1:1\n")])
    with pytest.raises(ValueError, match="expected a Cue"):
        format_srt([(1, 0, 1000, "a")])
    assert parse_srt(format_srt([Cue(1, 0, 1000, "a --> b")])).cues == (Cue(1, 0, 1000, "a --> b"),)


def test_format_time():
    assert [format_time(ms) for ms in (0, 1, 59_999, 3_600_000, 359_999_999, 360_000_000)] == [
        "00:00:00,000", "00:00:00,001", "00:00:59,999", "01:00:00,000", "99:59:59,999", "100:00:00,000"]

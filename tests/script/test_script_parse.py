"""The script format (issue 32): tags into segments, the seed rule, and every hostile script a clear
error naming its place or a documented result."""
from __future__ import annotations

import time

import pytest

from mizuoto.nodes.script.parse import (SEED_LIMIT, Pause, ScriptError, ScriptLimits, Speech, assign_seeds,
                                        parse_script)

NAMES = ["Alice", "Bob"]


def texts(segments):
    return [(s.character, s.text) if isinstance(s, Speech) else s.seconds for s in segments]


def test_a_dialogue_reads_into_segments_with_their_places():
    script = "[Alice] Hello Bob. [pause:0.5s] How are you?\n[Bob] Fine."
    assert parse_script(script, characters=NAMES) == [
        Speech("Hello Bob.", "Alice", line=1, column=9),
        Pause(0.5, line=1, column=20),
        Speech("How are you?", "Alice", line=1, column=33),
        Speech("Fine.", "Bob", line=2, column=7),
    ]


def test_text_without_tags_is_the_narrator_line_by_line():
    assert texts(parse_script("  One.  \n\n Two, \nthree.\n")) == [(None, "One."), (None, "Two,"), (None, "three.")]
    assert texts(parse_script("Two,\nthree.", split_lines=False)) == [(None, "Two,\nthree.")]
    assert parse_script("") == [] and parse_script(" \n\t\n") == []


def test_character_switch_lasts_until_the_next_and_narrator_switches_back():
    got = parse_script("[alice] a\nb\n[NARRATOR] c [BOB] d", characters=NAMES)
    assert texts(got) == [("Alice", "a"), ("Alice", "b"), (None, "c"), ("Bob", "d")]


def test_unknown_character_is_an_error_listing_the_known_ones_or_the_narrator_when_asked():
    with pytest.raises(ScriptError) as e:
        parse_script("Hi.\n  [Carol] hello", characters=NAMES)
    assert (e.value.line, e.value.column) == (2, 3)
    assert "unknown character 'Carol'" in str(e.value) and "Alice, Bob" in str(e.value)
    assert str(e.value).startswith("script line 2, column 3: ")
    with pytest.raises(ScriptError, match="known characters are none"):
        parse_script("[Carol] hello")
    assert texts(parse_script("[Bob] a [Carol] b", characters=NAMES, unknown="narrator")) == \
        [("Bob", "a"), (None, "b")]


@pytest.mark.parametrize("tag, seconds", [
    ("[pause:0.5s]", 0.5), ("[pause:300ms]", 0.3), ("[pause:2]", 2.0), ("[PAUSE: 1.25 S]", 1.25),
    ("[pause:.5]", 0.5), ("[pause:60s]", 60.0), ("[pause:60000ms]", 60.0),
])
def test_pause_durations(tag, seconds):
    assert parse_script(f"a {tag} b") == [Speech("a"), Pause(seconds, column=3), Speech("b", column=4 + len(tag))]


def test_a_zero_pause_only_cuts_the_text():
    assert texts(parse_script("a [pause:0] b [pause:0ms] c")) == [(None, "a"), (None, "b"), (None, "c")]


def test_language_scopes():
    got = parse_script("a [de:Bob] b\nc [Alice] d [lang:fr] e [Bob] f [it:Alice] g [lang:default] h",
                       characters=NAMES)
    assert [(s.character, s.language, s.text) for s in got] == [
        (None, None, "a"), ("Bob", "de", "b"), ("Bob", "de", "c"), ("Alice", None, "d"), ("Alice", "fr", "e"),
        ("Bob", "fr", "f"), ("Alice", "it", "g"), ("Alice", None, "h")]


def test_known_languages_and_names_for_them():
    got = parse_script("[German:Bob] a [lang:EN] b", characters=NAMES, languages={"German": "de", "English": "en"})
    assert [(s.language, s.text) for s in got] == [("de", "a"), ("en", "b")]
    assert parse_script("[lang:ZH] a", languages=["zh", "en"])[0].language == "zh"
    with pytest.raises(ScriptError, match=r"language 'ja': expected one of en, zh"):
        parse_script("[lang:ja] a", languages=["zh", "en"])
    with pytest.raises(ScriptError, match=r"\[Klingon:\.\.\.\] is not a tag"):
        parse_script("[Klingon:Bob] a", characters=NAMES, languages=["de"])


def test_speed_lasts_until_changed_and_seed_pins_one_segment():
    got = parse_script("[speed:1.5] a [seed:7] b [pause:1] c\n[seed:9][Bob] d [speed:default] e", characters=NAMES)
    assert [(s.text, s.speed, s.seed) for s in got if isinstance(s, Speech)] == [
        ("a", 1.5, None), ("b", 1.5, 7), ("c", 1.5, None), ("d", 1.5, 9), ("e", None, None)]


def test_seed_rule_counts_spoken_segments_and_pins_move_nothing():
    segments = parse_script("a [pause:1] b [seed:100] c\nd")
    seeds = [s.seed for s in assign_seeds(segments, 40) if isinstance(s, Speech)]
    assert seeds == [40, 41, 100, 43]
    unpinned = [s.seed for s in assign_seeds(parse_script("a [pause:1] b\nc\nd"), 40) if isinstance(s, Speech)]
    assert unpinned == [40, 41, 42, 43]
    assert [s.seed for s in assign_seeds(parse_script("a\nb"), SEED_LIMIT - 1)] == [SEED_LIMIT - 1, 0]
    assert assign_seeds([Pause(1.0)], 3) == [Pause(1.0)]
    for bad in (-1, SEED_LIMIT, 1.0, True, "1"):
        with pytest.raises(ValueError, match="seed: expected an integer"):
            assign_seeds(segments, bad)


def test_escapes_write_literal_brackets_and_backslashes():
    got = parse_script(r"a \[laughs\] b \\ c \n d \q")
    assert texts(got) == [(None, r"a [laughs] b \ c \n d \q")]
    assert parse_script(r"\[x\]")[0].column == 1
    assert texts(parse_script("a\\\\[Bob] b", characters=NAMES)) == [(None, "a\\"), ("Bob", "b")]


@pytest.mark.parametrize("script, where, message", [
    ("[Alice", (1, 1), r"'\[' is not closed before the end of the text"),
    ("ok\nx [Alice\n y", (2, 3), "not closed before the end of the line"),
    ("[Al[ice]", (1, 1), r"not closed before another '\['"),
    ("[Al\\]ice]", (1, 1), "not closed before a backslash"),
    ("a ] b", (1, 3), "']' closes no tag"),
    ("[Alice]]", (1, 8), "']' closes no tag"),
    ("[]", (1, 1), "empty tag"),
    ("[ :x]", (1, 1), "is not a tag"),
    ("[pause]", (1, 1), r"\[pause\] needs a value"),
    ("[pause:-1s]", (1, 1), "expected a non-negative duration"),
    ("[pause:nan]", (1, 1), "expected a non-negative duration"),
    ("[pause:inf]", (1, 1), "expected a non-negative duration"),
    ("[pause:1e3]", (1, 1), "expected a non-negative duration"),
    ("[pause:1 min]", (1, 1), "expected a non-negative duration"),
    ("[pause:61s]", (1, 1), "at most 60 s per pause"),
    ("[pause:" + "9" * 5000 + "]", (1, 1), "at most 60 s per pause"),
    ("[speed:nan] a", (1, 1), "speed 'nan': expected a number from 0.25 to 4"),
    ("[speed:-1] a", (1, 1), "expected a number from 0.25 to 4"),
    ("[speed:0] a", (1, 1), "expected a number from 0.25 to 4"),
    ("[speed:inf] a", (1, 1), "expected a number from 0.25 to 4"),
    ("[speed:4.01] a", (1, 1), "expected a number from 0.25 to 4"),
    ("[speed:" + "9" * 400 + "] a", (1, 1), r"speed '9{40}\.\.\.'"),
    ("[seed:-1] a", (1, 1), "expected an integer from 0 to 18446744073709551615"),
    ("[seed:1.5] a", (1, 1), "expected an integer"),
    (f"[seed:{SEED_LIMIT}] a", (1, 1), "expected an integer"),
    ("[seed:" + "9" * 5000 + "] a", (1, 1), "expected an integer"),
    ("[seed:٣] a", (1, 1), "expected an integer"),
    ("a\n[seed:3]\n[pause:1]", (2, 1), "followed by no text"),
    ("[lang:] a", (1, 1), "language '': expected a language code"),
    ("[lang:english!] a", (1, 1), "expected a language code"),
    ("[x" + "y" * 70 + "]", (1, 1), "longer than 64 characters"),
])
def test_hostile_tags_are_errors_naming_their_place(script, where, message):
    with pytest.raises(ScriptError, match=message) as e:
        parse_script(script, characters=NAMES)
    assert (e.value.line, e.value.column) == where
    assert len(str(e.value)) < 400          # a huge value is not echoed back whole


def test_pauses_have_a_total_cap():
    with pytest.raises(ScriptError, match="pauses add up to more than 600 s") as e:
        parse_script("a [pause:60]" * 11)
    assert e.value.column == 1 + 12 * 10 + 2
    assert sum(s.seconds for s in parse_script("a [pause:60]" * 10) if isinstance(s, Pause)) == 600


def test_a_hundred_thousand_tags_stop_at_the_tag_bound_quickly():
    t0 = time.perf_counter()
    with pytest.raises(ScriptError, match="more than 20000 tags") as e:
        parse_script("[A]" * 100_000, characters=["A"])
    assert e.value.column == 20_000 * 3 + 1
    with pytest.raises(ScriptError, match="more than 10000 segments"):
        parse_script("a [pause:1ms]" * 10_000)
    with pytest.raises(ValueError, match="500001 characters, at most 500000"):
        parse_script("a" * 500_001)
    assert time.perf_counter() - t0 < 2.0


def test_the_largest_accepted_script_parses_in_bounded_time():
    script = "\n".join(f"[{'Alice' if i % 2 else 'Bob'}] line {i}." for i in range(10_000))
    t0 = time.perf_counter()
    got = parse_script(script, characters=NAMES)
    assert len(got) == 10_000 and got[-1] == Speech("line 9999.", "Alice", line=10_000, column=9)
    assert time.perf_counter() - t0 < 2.0


def test_limits_can_be_tightened_and_must_be_sane():
    tight = ScriptLimits(max_tags=2, max_pause_s=1.0)
    with pytest.raises(ScriptError, match="more than 2 tags"):
        parse_script("[pause:1][pause:1][pause:1]", limits=tight)
    with pytest.raises(ScriptError, match="at most 1 s per pause"):
        parse_script("[pause:1.5]", limits=tight)
    for bad in ({"max_tags": 0}, {"max_pause_s": float("nan")}, {"max_chars": True}, {"min_speed": 5.0}):
        with pytest.raises(ValueError, match="ScriptLimits"):
            ScriptLimits(**bad)


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="expected text"):
        parse_script(b"[Alice] hi")
    with pytest.raises(ValueError, match="unknown: expected"):
        parse_script("a", unknown="skip")
    with pytest.raises(ValueError, match="the string 'Alice'"):
        parse_script("a", characters="Alice")
    with pytest.raises(ValueError, match="differ only in case"):
        parse_script("a", characters=["Bob", "bob"])
    with pytest.raises(ValueError, match="reserved"):
        parse_script("a", characters=["Pause"])
    with pytest.raises(ValueError, match="not a usable name"):
        parse_script("a", characters=["Dr. Who: The"])
    with pytest.raises(ValueError, match="reserved"):
        parse_script("a", languages=["default"])

"""English front end against upstream's `clean_text(..., "en", "v2")` symbols (fixtures/english.json, recorded
by make_frontend_fixtures.py on upstream's own lexicon files)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mizuoto.nodes.gpt_sovits import en_normalize, english, frontend

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "english.json").read_text(encoding="utf-8"))
# Upstream decides these through NLTK's POS tagger (homograph "resume") and wordsegment + g2p_en's neural
# predictor (unknown words; "thirty-two" is one: wordsegment keeps it whole, so upstream predicts it, where
# ours reads "thirty" + "two"): documented gaps of english.py, kept visible here.
KNOWN_DIFFERENT = {"Café naïve résumé.": "NLTK POS homograph (résumé)",
                   "Blorptastic frumbles!": "g2p_en neural OOV predictor",
                   "He paid 32.3$ for the book.": "wordsegment keeps thirty-two whole -> neural predictor"}


@pytest.fixture(scope="module")
def lexicon(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("text")
    header = "".join(f";;; {i}\n" for i in range(1, 57))
    entries = FIXTURE["lexicon"]
    (folder / "cmudict.rep").write_text(header + "".join(f"{w.upper()}  {' '.join(p)}\n" for w, p in entries.items()))
    (folder / "cmudict-fast.rep").write_text("")
    (folder / "engdict-hot.rep").write_text("")
    return english.read_lexicon(folder)


@pytest.mark.golden
@pytest.mark.parametrize("text", sorted(FIXTURE["cases"]))
def test_symbols_equal_upstream(lexicon, text):
    case = FIXTURE["cases"][text]
    (segment,) = frontend.phones_and_bert_inputs(text, "en", lexicon)
    ids, norm = segment.phone_ids, segment.norm_text
    table = {i: s for s, i in english.symbols().items()}
    got = [table[i] for i in ids]
    assert case["equal"] == (text not in KNOWN_DIFFERENT), KNOWN_DIFFERENT.get(text)
    if case["equal"]:
        assert (got, norm) == (case["phones"], case["norm"])
    else:
        assert got != case["phones"]


def test_lexicon_files_are_read_as_upstream_reads_them(tmp_path):
    header = "".join("WRONG  W R AO1 NG\n" for _ in range(56))        # lines 1-56 are skipped
    letters = "".join(f"{c}  EH1 K S\n" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")   # spelling needs every letter
    (tmp_path / "cmudict.rep").write_text(header + "WORLD  W ER1 L D\nDAY  D EY1\nAE  EY1 IY1\n" + letters)
    (tmp_path / "cmudict-fast.rep").write_text("WORLD W ER1 L D Z\nFOO F UW1\n")   # only words the first lacks
    (tmp_path / "engdict-hot.rep").write_text("DAY D EY2\n")                       # overrides
    lex = english.read_lexicon(tmp_path)
    words = {k: v for k, v in lex.items() if len(k) > 1}
    assert words == {"world": ["W", "ER1", "L", "D"], "day": ["D", "EY2"], "foo": ["F", "UW1"]}   # "ae" removed
    (tmp_path / "cmudict.rep").write_text(header + "WORLD  W ER1 L D\n" + letters.replace("Q  EH1 K S\n", ""))
    with pytest.raises(ValueError, match=r"cmudict\.rep has no pronunciation for the letters q"):
        english.read_lexicon(tmp_path)
    with pytest.raises(FileNotFoundError, match="engdict-hot.rep"):
        (tmp_path / "engdict-hot.rep").unlink()
        english.read_lexicon(tmp_path)


def test_numbers_read_as_inflect():
    assert en_normalize.number_to_words(0) == "zero"
    assert en_normalize.number_to_words(115, andword="") == "one hundred fifteen"
    assert en_normalize.number_to_words(3500) == "three thousand, five hundred"
    assert en_normalize.number_to_words(1_000_021) == "one million and twenty-one"
    assert en_normalize.number_to_words("101st") == "one hundred and first"
    assert en_normalize.ordinal("twelve") == "twelfth" and en_normalize.ordinal("13") == "13th"
    assert english.text_normalize("1905 2007 1800 2000 3001") == \
        "nineteen oh five two thousand seven eighteen hundred two thousand three thousand one"
    with pytest.raises(ValueError, match="decillions"):
        en_normalize.number_to_words(10 ** 36)
    with pytest.raises(ValueError, match="amount"):
        en_normalize.normalize("(5$")                  # upstream's int("(5") fails too


def test_normaliser_is_on_the_english_path():
    """The numbers the old reader got wrong (issue #26), as upstream reads them ("1980s" is its measurement
    rule's "seconds"; the "," after "a.m." goes with the repeated-punctuation rule)."""
    norm = english.text_normalize("$5.99 at 10:30, 1st and 3rd, 3.14159, 2.0, 1/2, the 1980s, 3 - 2.")
    assert norm == ("five dollars and ninety-nine cents at ten thirty a.m. first and third, three point one four "
                    "one five nine, two point zero, one half, the nineteen eighty seconds, three minus two.")


def test_symbol_table_is_upstreams():
    assert len(english.symbols()) == 732 and english.symbols()["!"] == 0 and "AH0" in english.symbols()

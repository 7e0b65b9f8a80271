"""GPT-SoVITS's English front end (upstream `text/english.py` + `en_normalization/expend.py` + `cleaner.py`),
the part that needs no data download: text -> ARPAbet phones -> symbol ids.

The lexicon is upstream's own: `cmudict.rep` (from line 57), `cmudict-fast.rep` (words the first lacks)
and `engdict-hot.rep` (overrides), read as `read_dict_new` + `hot_reload_hot` read them, from the
`text/` folder of a GPT-SoVITS checkout (every install has them; put them in
`models/TTS/gpt_sovits/pretrained_models/text/`). Nothing is downloaded.

Where upstream asks NLTK's part-of-speech tagger (g2p_en's homographs such as "read", "live", "resume") or
`wordsegment` + g2p_en's neural predictor (words longer than three letters that are neither in the lexicon
nor a possessive), this front end cannot follow it: homographs take the lexicon's pronunciation, compounds
are split at their hyphens / apostrophes only (and a "negative" the normaliser glued to the word before it
split off, as wordsegment does), and other unknown words are spelled letter by letter. Numbers, times, currency, measurements, ordinals, decimals,
fractions and arithmetic are read as upstream's en_normalization reads them (en_normalize.py).
"""
from __future__ import annotations

import io
import json
import re
import string
from functools import lru_cache
from pathlib import Path

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import check_data_file
from .en_normalize import normalize

ENGINE = "GPT-SoVITS"
CMU_FILES = ("cmudict.rep", "cmudict-fast.rep", "engdict-hot.rep")
# Upstream escapes these keys before joining them into one pattern: the first two are literal strings (a
# ";" alone is not turned into ","; the character filter below drops it).
REP_MAP = {"[;:：，；]": ",", '["’]': "'", "。": ".", "！": "!", "？": "?"}
PUNCTUATION = ["!", "?", "…", ",", ".", "-"]
DROPPED = (" ", "<pad>", "UW", "</s>", "<s>")           # upstream's g2p() filter (yes, unstressed "UW" too)
REMOVED_ABBREVIATIONS = ("ae", "ai", "ar", "ios", "hud", "os")

@lru_cache(maxsize=1)
def symbols() -> dict[str, int]:
    """The v2 symbol table (text/symbols2.py `symbols`, 732 entries) -> id."""
    table = json.loads((Path(__file__).parent / "symbols_v2.json").read_text(encoding="utf-8"))
    return {s: i for i, s in enumerate(table)}


def read_lexicon(folder: Path) -> dict[str, list[str]]:
    """upstream's get_dict(): cmudict.rep from line 57 ("WORD  PH PH"), cmudict-fast.rep for missing words,
    engdict-hot.rep overriding; keys lower-cased; the first pronunciation only (all upstream reads)."""
    paths = [folder / name for name in CMU_FILES]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"GPT-SoVITS English needs upstream's lexicon files {missing} (GPT_SoVITS/text/ of a "
                                f"GPT-SoVITS checkout)")
    lexicon: dict[str, list[str]] = {}
    for index, line in enumerate(_lexicon_lines(paths[0]), start=1):
        if index >= 57:
            parts = line.strip().split("  ")
            if len(parts) >= 2:
                lexicon[parts[0].lower()] = parts[1].split(" ")
    for path, override in ((paths[1], False), (paths[2], True)):
        for line in _lexicon_lines(path):
            parts = line.strip().split(" ")
            if parts and parts[0] and (override or parts[0].lower() not in lexicon):
                lexicon[parts[0].lower()] = parts[1:]
    for word in REMOVED_ABBREVIATIONS:
        lexicon.pop(word, None)
    # Unknown words are spelled letter by letter from the lexicon's own letter entries (a KeyError mid-request
    # without them).
    letters = [c for c in string.ascii_lowercase if not lexicon.get(c)]
    if letters:
        raise CheckpointError(f"{ENGINE}: {paths[0]} has no pronunciation for the letters {', '.join(letters[:8])}; "
                              f"expected upstream's CMU dictionary (entries from line 57, single letters included)")
    return lexicon


def _lexicon_lines(path: Path) -> io.StringIO:
    """A lexicon file's lines. A stray undecodable byte becomes U+FFFD, as it did (it costs one word), but a
    file that is mostly not UTF-8 is a corrupt download, not a lexicon."""
    text = check_data_file(path, ENGINE).read_bytes().decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad > 16 + len(text) // 1000:
        raise CheckpointError(f"{ENGINE}: {path} is not UTF-8 text ({bad} undecodable bytes); expected upstream's "
                              f"'WORD  PH PH' lexicon lines")
    return io.StringIO(text, newline=None)


def text_normalize(text: str) -> str:
    """english.text_normalize: the punctuation map, expend.normalize (en_normalize.py), repeated
    punctuation collapsed."""
    for literal, rep in REP_MAP.items():
        text = text.replace(literal, rep)
    text = normalize(text)
    punct = "".join(re.escape(p) for p in PUNCTUATION)
    return re.sub(f"([{punct}\\s])([{punct}])+", r"\1", text)


# NLTK's TweetTokenizer on normalised text (letters, spaces, ' . , ? ! -): words with inner ' or -, ellipses,
# single characters.
_TOKEN = re.compile(r"[A-Za-z](?:[A-Za-z]|['\-_])+[A-Za-z]|[A-Za-z_]+|\.(?:\s*\.){1,}|\S")


def _spell(word: str, lexicon: dict[str, list[str]]) -> list[str]:
    phones: list[str] = []
    for w in word:
        if w == "a":
            phones.append("EY1")
        elif not w.isalpha():
            phones.append(w)
        else:
            phones.extend(lexicon[w])
    return phones


def query(o_word: str, lexicon: dict[str, list[str]]) -> list[str]:
    """en_G2p.qryword without the name dictionary, wordsegment and the neural predictor (see above)."""
    word = o_word.lower()
    if len(word) > 1 and word in lexicon:
        return list(lexicon[word])
    if len(word) <= 3:
        return _spell(word, lexicon)
    if re.match(r"^([a-z]+)('s)$", word):
        phones = query(word[:-2], lexicon)
        if phones[-1] in ("P", "T", "K", "F", "TH", "HH"):
            return phones + ["S"]
        if phones[-1] in ("S", "Z", "SH", "ZH", "CH", "JH"):
            return phones + ["AH0", "Z"]
        return phones + ["Z"]
    glued = re.match(r"^([a-z]+)negative$", word)
    if glued and glued.group(1) in lexicon and "negative" in lexicon:
        # en_normalize glues "negative" to the word before a minus sign (upstream's replace_negative_num eats
        # the space); upstream's wordsegment splits it off again
        return query(glued.group(1), lexicon) + list(lexicon["negative"])
    parts = [p for p in re.split(r"[^a-z]+", word) if p]
    if len(parts) > 1:            # wordsegment's split of a compound such as "eighty-four", on its separators
        return [ph for part in parts for ph in query(part, lexicon)]
    return _spell(word, lexicon)


def g2p(text: str, lexicon: dict[str, list[str]]) -> list[str]:
    prons: list[str] = []
    for o_word in _TOKEN.findall(text):
        word = o_word.lower()
        if re.search("[a-z]", word) is None:
            pron = [word]
        elif len(word) == 1:
            pron = ["EY1"] if o_word == "A" else list(lexicon[word])
        else:
            pron = query(o_word, lexicon)
        prons.extend(pron)
        prons.append(" ")
    phones = [p if p != "<unk>" else "UNK" for p in prons[:-1] if p not in DROPPED]
    table = symbols()
    return [p if p in table else "-" for p in phones if p in table or p == "'"]


def clean_text(text: str, lexicon: dict[str, list[str]]) -> tuple[list[str], str]:
    """cleaner.clean_text for "en": (phones, normalised text); fewer than 4 phones get a leading ","."""
    norm = text_normalize(text)
    phones = g2p(norm, lexicon)
    if len(phones) < 4:
        phones = [","] + phones
    table = symbols()
    return ["UNK" if p not in table else p for p in phones], norm


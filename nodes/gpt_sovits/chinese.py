"""GPT-SoVITS's Chinese front end (upstream `text/chinese2.py` + the "zh" part of `text/cleaner.py`, v2
symbols): text -> normalised text -> opencpop-strict phones + word2ph (phones per character, for the BERT
features).

Two pinyin sources, as upstream: G2PW (`g2pw.G2PW`, with upstream's polyphonic correction table) when the
user has its model folder, else upstream's own `is_g2pw = False` path (pypinyin's `lazy_pinyin` INITIALS /
FINALS_TONE3). Words come from jieba's part-of-speech segmenter (upstream uses jieba_fast: the same
algorithm and dictionary in C), then PaddleSpeech's tone sandhi (`tone_sandhi.py`), erhua, and the
pinyin -> opencpop-strict symbol table (`data/opencpop-strict.txt`, upstream's file, MIT).
"""
from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from . import tone_sandhi
from .english import symbols
from .zh_normalize import normalize

if TYPE_CHECKING:
    from .g2pw import G2PW

PUNCTUATION = ("!", "?", "…", ",", ".", "-")          # text/symbols.py `punctuation`
REP_MAP = {"：": ",", "；": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": ".", "·": ",", "、": ",",
           "...": "…", "$": ".", "/": ",", "—": "-", "~": "…", "～": "…"}
SPECIAL = (("￥", "SP2"), ("^", "SP3"))                 # cleaner.py `special` for "zh": a pause symbol for ","

# chinese2.py's erhua word lists (upstream, MIT).
MUST_ERHUA = {"小院儿", "胡同儿", "范儿", "老汉儿", "撒欢儿", "寻老礼儿", "妥妥儿", "媳妇儿"}
NOT_ERHUA = {
    "虐儿", "为儿", "护儿", "瞒儿", "救儿", "替儿", "有儿", "一儿", "我儿", "俺儿", "妻儿", "拐儿", "聋儿", "乞儿",
    "患儿", "幼儿", "孤儿", "婴儿", "婴幼儿", "连体儿", "脑瘫儿", "流浪儿", "体弱儿", "混血儿", "蜜雪儿", "舫儿",
    "祖儿", "美儿", "应采儿", "可儿", "侄儿", "孙儿", "侄孙儿", "女儿", "男儿", "红孩儿", "花儿", "虫儿", "马儿",
    "鸟儿", "猪儿", "猫儿", "狗儿", "少儿",
}
# pypinyin spellings -> the table's keys: after an initial, and for syllables without one.
FINAL_REP = {"uei": "ui", "iou": "iu", "uen": "un"}
ZERO_INITIAL_REP = {"ing": "ying", "i": "yi", "in": "yin", "u": "wu"}
ZERO_INITIAL_FIRST = {"v": "yu", "e": "e", "i": "y", "u": "w"}

_PUNCT_CLASS = "".join(re.escape(p) for p in PUNCTUATION)
_REP_PATTERN = re.compile("|".join(re.escape(p) for p in REP_MAP))


@functools.cache
def pinyin_to_symbols() -> dict[str, tuple[str, str]]:
    """upstream's opencpop-strict.txt: pinyin without tone -> (initial symbol, final symbol)."""
    table = {}
    for line in (Path(__file__).parent / "data" / "opencpop-strict.txt").read_text(encoding="utf-8").splitlines():
        pinyin, phones = line.split("\t")
        initial, final = phones.split(" ")
        table[pinyin] = (initial, final)
    return table


def replace_punctuation(text: str) -> str:
    """嗯 / 呣 respelt, punctuation mapped to the six symbols, everything but CJK and those six dropped."""
    text = text.replace("嗯", "恩").replace("呣", "母")
    text = _REP_PATTERN.sub(lambda m: REP_MAP[m.group()], text)
    return re.sub(r"[^\u4e00-\u9fa5" + "".join(PUNCTUATION) + r"]+", "", text)


def replace_consecutive_punctuation(text: str) -> str:
    return re.sub(f"([{_PUNCT_CLASS}])([{_PUNCT_CLASS}])+", r"\1", text)


def text_normalize(text: str) -> str:
    """chinese2.text_normalize: PaddleSpeech's normaliser sentence by sentence, punctuation mapped, runs of
    punctuation collapsed to their first symbol."""
    return replace_consecutive_punctuation("".join(replace_punctuation(s) for s in normalize(text)))


def _segment(sentence: str) -> list[tuple[str, str]]:
    """jieba's default part-of-speech segmenter (HMM on), as upstream's `psg.lcut`."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)      # its first call logs the dictionary build at DEBUG
    return [(pair.word, pair.flag) for pair in jieba.posseg.lcut(sentence)]


def _pypinyin_initials_finals(word: str) -> tuple[list[str], list[str]]:
    from pypinyin import Style, lazy_pinyin

    initials = lazy_pinyin(word, neutral_tone_with_five=True, style=Style.INITIALS)
    finals = lazy_pinyin(word, neutral_tone_with_five=True, style=Style.FINALS_TONE3)
    return initials, finals


def _g2pw_initials_finals(word: str, pinyins: list[str | None], polyphonic: dict[str, list[str]],
                          segment: str) -> tuple[list[str], list[str]]:
    from pypinyin.contrib.tone_convert import to_finals_tone3, to_initials

    from .g2pw import correct_pronunciation

    initials, finals = [], []
    for pinyin in correct_pronunciation(word, pinyins, polyphonic):
        if pinyin is None:      # upstream fails here too (None[0]): G2PW gave no reading
            raise ValueError(f"GPT-SoVITS Chinese: G2PW has no reading for a character of {word!r} in {segment!r}")
        if pinyin[0].isalpha():
            initials.append(to_initials(pinyin))
            finals.append(to_finals_tone3(pinyin, neutral_tone_with_five=True))
        else:                   # punctuation reads as itself
            initials.append(pinyin)
            finals.append(pinyin)
    return initials, finals


def merge_erhua(initials: list[str], finals: list[str], word: str, pos: str) -> tuple[list[str], list[str]]:
    """chinese2._merge_erhua: a final 儿 read er1 becomes er2; outside the exception lists (and adjectives,
    abbreviations, names) an er2 / er5 儿 takes the previous syllable's tone."""
    for i, phn in enumerate(finals):
        if i == len(finals) - 1 and word[i] == "儿" and phn == "er1":
            finals[i] = "er2"
    if word not in MUST_ERHUA and (word in NOT_ERHUA or pos in {"a", "j", "nr"}):
        return initials, finals
    if len(finals) != len(word):
        return initials, finals
    new_initials, new_finals = [], []
    for i, phn in enumerate(finals):
        if (i == len(finals) - 1 and word[i] == "儿" and phn in {"er2", "er5"} and word[-2:] not in NOT_ERHUA
                and new_finals):
            phn = "er" + new_finals[-1][-1]
        new_initials.append(initials[i])
        new_finals.append(phn)
    return new_initials, new_finals


def _syllable_phones(initial: str, final: str, segment: str) -> list[str]:
    """One pinyin syllable (tone-numbered final) -> [initial symbol, final symbol + tone]."""
    tone, pinyin = final[-1], initial + final[:-1]
    if tone not in "12345":
        raise ValueError(f"GPT-SoVITS Chinese: no tone in the reading {initial + final!r} ({segment!r})")
    if initial:
        if final[:-1] in FINAL_REP:
            pinyin = initial + FINAL_REP[final[:-1]]
    elif pinyin in ZERO_INITIAL_REP:
        pinyin = ZERO_INITIAL_REP[pinyin]
    elif pinyin[:1] in ZERO_INITIAL_FIRST:
        pinyin = ZERO_INITIAL_FIRST[pinyin[0]] + pinyin[1:]
    table = pinyin_to_symbols()
    if pinyin not in table:     # upstream asserts the same
        raise ValueError(f"GPT-SoVITS Chinese: the reading {initial + final!r} ({pinyin!r} in {segment!r}) is not "
                         f"in the opencpop-strict table")
    new_initial, new_final = table[pinyin]
    return [new_initial, new_final + tone]


def g2p(norm_text: str, g2pw: G2PW | None = None,
        polyphonic: dict[str, list[str]] | None = None) -> tuple[list[str], list[int]]:
    """chinese2.g2p on normalised text: (phones, word2ph). With `g2pw` (and upstream's polyphonic table,
    `g2pw.read_polyphonic`) pinyin comes from G2PW as with upstream's default `is_g2pw = True`; without, from
    pypinyin as with `is_g2pw = False`."""
    if g2pw is not None and polyphonic is None:
        raise ValueError("GPT-SoVITS Chinese: G2PW needs upstream's polyphonic table (g2pw.read_polyphonic)")
    sentences = [s for s in re.split(f"(?<=[{_PUNCT_CLASS}])\\s*", norm_text) if s.strip() != ""]
    segments = [re.sub("[a-zA-Z]+", "", s) for s in sentences]
    readings: list[list[str | None]] = []
    if g2pw is not None:
        batch = [s for s in segments if s]
        readings = list(g2pw(batch)) if batch else []
    cursor = 0
    phones: list[str] = []
    word2ph: list[int] = []
    for seg in segments:
        words = tone_sandhi.pre_merge_for_modify(_segment(seg))
        pinyins: list[str | None] = []
        if g2pw is not None and seg:
            pinyins = readings[cursor]
            cursor += 1
        initials: list[str] = []
        finals: list[str] = []
        start = 0
        for word, pos in words:
            end = start + len(word)
            if pos != "eng":
                if g2pw is None:
                    sub_initials, sub_finals = _pypinyin_initials_finals(word)
                else:
                    sub_initials, sub_finals = _g2pw_initials_finals(word, pinyins[start:end], polyphonic, seg)
                sub_finals = tone_sandhi.modified_tone(word, pos, sub_finals)
                sub_initials, sub_finals = merge_erhua(sub_initials, sub_finals, word, pos)
                initials += sub_initials
                finals += sub_finals
            start = end
        for c, v in zip(initials, finals):
            if c == v:
                if c not in PUNCTUATION:    # upstream asserts the same (a character pypinyin cannot read)
                    raise ValueError(f"GPT-SoVITS Chinese: no reading for {c!r} in {seg!r}")
                phone = [c]
            else:
                phone = _syllable_phones(c, v, seg)
            phones += phone
            word2ph.append(len(phone))
    return phones, word2ph


def clean_text(text: str, g2pw: G2PW | None = None,
               polyphonic: dict[str, list[str]] | None = None) -> tuple[list[str], list[int], str]:
    """cleaner.clean_text(text, "zh", "v2"): (phones, word2ph, norm_text). A ￥ (or else a ^) anywhere turns
    every "," of the text into the pause symbol SP2 (SP3); symbols outside the v2 table become UNK."""
    table = symbols()
    for mark, pause in SPECIAL:
        if mark in text:
            norm_text = text_normalize(text.replace(mark, ","))
            phones, word2ph = g2p(norm_text, g2pw, polyphonic)
            return [pause if ph == "," else ph for ph in phones], word2ph, norm_text
    norm_text = text_normalize(text)
    phones, word2ph = g2p(norm_text, g2pw, polyphonic)
    if len(phones) != sum(word2ph) or len(norm_text) != len(word2ph):     # upstream asserts both
        raise ValueError(f"GPT-SoVITS Chinese: {len(phones)} phones / {len(word2ph)} characters do not match "
                         f"word2ph for {norm_text!r}")
    return ["UNK" if ph not in table else ph for ph in phones], word2ph, norm_text

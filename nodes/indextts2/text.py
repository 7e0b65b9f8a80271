"""IndexTTS 2's text front end: a small pure-Python rule set, then upstream's sentencepiece BPE.

Upstream normalises with WeTextProcessing (pynini grammars: numbers, dates, units read out) before the
rules kept here; that normaliser is not reproduced. What is kept, as upstream applies it: the English
"X's" contractions of its ENGLISH_CONTRACTION_PATTERN read as "X is", its punctuation map (full-width and
bracket characters to the few symbols the BPE knows; "$" to "." when the text has Chinese), and
`tokenize_by_CJK_char` (CJK characters spaced apart, everything upper-cased) before `bpe.model`.
"""
from __future__ import annotations

import re
from pathlib import Path

from ...runtime.loading import CheckpointError
from ..common.checkpoint import check_data_file

CONTRACTION = re.compile(r"(what|where|who|which|how|t?here|it|s?he|that|this)'s", re.IGNORECASE)
CHAR_MAP = {
    "：": ",", "；": ",", ";": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": " ", "·": "-", "、": ",",
    "...": "…", ",,,": "…", "，，，": "…", "……": "…", "“": "'", "”": "'", '"': "'", "‘": "'", "’": "'",
    "（": "'", "）": "'", "(": "'", ")": "'", "《": "'", "》": "'", "【": "'", "】": "'", "[": "'", "]": "'",
    "—": "-", "～": "-", "~": "-", "「": "'", "」": "'", ":": ",",
}
ZH_CHAR_MAP = {"$": ".", **CHAR_MAP}
CJK = re.compile(r"([\u1100-\u11ff\u2e80-\ua4cf\ua840-\uD7AF\uF900-\uFAFF\uFE30-\uFE4F\uFF65-\uFFDC"
                 r"\U00020000-\U0002FFFF])")
CHINESE = re.compile(r"[\u4e00-\u9fff]")


def _replace(text: str, table: dict[str, str]) -> str:
    pattern = re.compile("|".join(re.escape(k) for k in table))
    return pattern.sub(lambda m: table[m.group()], text)


def normalize(text: str) -> str:
    """The kept rules (see the module docstring), then CJK spacing and upper case."""
    text = CONTRACTION.sub(r"\1 is", text)
    text = _replace(text.rstrip() if CHINESE.search(text) else text, ZH_CHAR_MAP if CHINESE.search(text) else CHAR_MAP)
    parts = CJK.split(text.strip())
    return " ".join(w.strip().upper() for w in parts if w.strip())


class TextTokenizer:
    """bpe.model through sentencepiece; ids for the GPT's text embedding."""

    def __init__(self, path: str | Path) -> None:
        import sentencepiece
        self.path = check_data_file(path, "IndexTTS 2")
        try:
            self.sp = sentencepiece.SentencePieceProcessor()
            self.sp.LoadFromSerializedProto(self.path.read_bytes())   # (model_proto=b"" would load nothing)
        except (RuntimeError, OSError) as e:   # "could not parse ModelProto", "unk is not defined" (an empty file)
            detail = " ".join(str(e).split())[:200]
            raise CheckpointError(f"IndexTTS 2: {self.path} is not a sentencepiece model ({detail}); expected "
                                  f"upstream's bpe.model") from None

    @property
    def vocab_size(self) -> int:
        return self.sp.GetPieceSize()

    def encode(self, text: str) -> list[int]:
        return self.ids(self.tokenize(text))

    def tokenize(self, text: str) -> list[str]:
        """The BPE pieces of `text` (upstream's TextTokenizer.tokenize)."""
        if not text:
            return []
        if len(text.strip()) == 1:         # upstream encodes a single character as it is
            return list(self.sp.Encode(text, out_type=str))
        return list(self.sp.Encode(normalize(text), out_type=str))

    def ids(self, pieces: list[str] | tuple[str, ...]) -> list[int]:
        return [self.sp.PieceToId(p) for p in pieces]


# Upstream's TextTokenizer.punctuation_marks_tokens: the pieces a segment may end on.
SEGMENT_END_TOKENS = (".", "!", "?", "▁.", "▁?", "▁...")
MAX_SEGMENT_TOKENS = 120       # infer_v2.IndexTTS2.infer's max_text_tokens_per_segment default


def split_segments(tokens: list[str], max_tokens: int = MAX_SEGMENT_TOKENS,
                   split_tokens: tuple[str, ...] = SEGMENT_END_TOKENS,
                   quick_streaming_tokens: int = 0) -> list[list[str]]:
    """Upstream's TextTokenizer.split_segments_by_token, step for step (its quirks included: the "'"
    after a segment end is appended to that segment and still read again by the next one, since
    `i += 1` does not advance a for loop): cut at `split_tokens`, then at commas or "-" inside an
    over-long run, then hard at `max_tokens`; neighbours are merged while they fit."""
    if not tokens:
        return []
    segments: list[list[str]] = []
    current: list[str] = []
    for i, token in enumerate(tokens):
        current.append(token)
        if not ("," in split_tokens or "▁," in split_tokens) and ("," in current or "▁," in current):
            subs = split_segments(current, max_tokens, (",", "▁,"), quick_streaming_tokens)
        elif "-" not in split_tokens and "-" in current:
            subs = split_segments(current, max_tokens, ("-",), quick_streaming_tokens)
        elif len(current) <= max_tokens:
            if token in split_tokens and len(current) > 2:
                if i < len(tokens) - 1 and tokens[i + 1] in ("'", "▁'"):
                    current.append(tokens[i + 1])
                segments.append(current)
                current = []
            continue
        else:
            subs = [current[j:j + max_tokens] for j in range(0, len(current), max_tokens)]
        segments.extend(subs)
        current = []
    if current:
        segments.append(current)
    merged: list[list[str]] = []
    total = 0
    for segment in segments:
        total += len(segment)
        if not segment:
            continue
        if merged and (len(merged[-1]) + len(segment) <= max_tokens and total > quick_streaming_tokens
                       or len(merged[-1]) + len(segment) <= max_tokens / 2):
            merged[-1] = merged[-1] + segment
        else:
            merged.append(segment)
    return merged

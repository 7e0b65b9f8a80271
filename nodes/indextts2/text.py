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
        if not text:
            return []
        if len(text.strip()) == 1:         # upstream encodes a single character as it is
            return list(self.sp.Encode(text))
        return list(self.sp.Encode(normalize(text)))

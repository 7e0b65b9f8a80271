"""Chatterbox's English text front end: upstream's `punc_norm` (tts.py) and `EnTokenizer` (spaces become the
`[SPACE]` token, then the `tokenizers` BPE of tokenizer.json), framed by T3's start and stop text ids."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..formats.checkpoint import load_tokenizer

SOT, EOT, SPACE = "[START]", "[STOP]", "[SPACE]"
EMPTY_TEXT = "You need to add some text for me to talk."   # what upstream says for an empty text
_PUNCTUATION = [("...", ", "), ("…", ", "), (":", ","), (" - ", ", "), (";", ", "), ("—", "-"), ("–", "-"),
                (" ,", ","), ("“", "\""), ("”", "\""), ("‘", "'"), ("’", "'")]


def punc_norm(text: str) -> str:
    """Upstream's clean-up: capitalise the first letter, collapse whitespace, map uncommon punctuation,
    end with a full stop unless the text ends in . ! ? - or a comma."""
    if len(text) == 0:
        return EMPTY_TEXT
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in _PUNCTUATION:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not any(text.endswith(p) for p in {".", "!", "?", "-", ","}):
        text += "."
    return text


class EnTokenizer:
    def __init__(self, path: Path) -> None:
        self.tokenizer = load_tokenizer(path, "Chatterbox")
        vocab = self.tokenizer.get_vocab()
        missing = [t for t in (SOT, EOT) if t not in vocab]
        if missing:
            raise ValueError(f"{path}: not Chatterbox's text tokenizer (no {', '.join(missing)} token)")

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text.replace(" ", SPACE)).ids)


def text_tokens(tokenizer: EnTokenizer, text: str, start: int, stop: int) -> Tensor:
    """The ids T3 reads for `text` (upstream `generate`: punc_norm, encode, then start/stop ids around)."""
    return torch.tensor([start, *tokenizer.encode(punc_norm(text)), stop], dtype=torch.long)

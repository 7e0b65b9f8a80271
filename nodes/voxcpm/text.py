"""VoxCPM 2's text tokenizer: the Llama-style BPE of `tokenizer.json`, with upstream's splitting of
multi-character Chinese tokens into single characters (`mask_multichar_chinese_tokens`).

Upstream reads the folder with transformers' `LlamaTokenizerFast`, which (transformers >= 5) keeps the
file's vocabulary and merges but replaces its text pipeline with its own: no normalizer, a Metaspace
pre-tokenizer ("▁" for spaces, one prepended unless the text already starts with one) whose prepend
scheme follows tokenizer_config.json (`add_prefix_space`, default true; `legacy`, default false). We do
the same, so leading spaces tokenize as upstream's do.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..formats.checkpoint import load_json, load_tokenizer


# The 30 languages VoxCPM 2 was trained on (upstream's README). The model reads the language from the
# text itself (no tag): a chosen code is accepted and changes nothing.
LANGUAGES = ("auto", "ar", "my", "zh", "da", "nl", "en", "fi", "fr", "de", "el", "he", "hi", "id", "it", "ja", "km",
             "ko", "lo", "ms", "no", "pl", "pt", "ru", "es", "sw", "sv", "tl", "th", "tr", "vi")


def is_multichar_chinese(token: str) -> bool:
    return len(token) >= 2 and all("\u4e00" <= ch <= "\u9fff" for ch in token)


class TextTokenizer:
    """text -> ids as upstream's wrapper: BPE tokens without special tokens; a token that is two or more CJK
    ideographs (its "▁" word marks removed) becomes one token per character."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import pre_tokenizers   # imported on first use: only BPE engines need it
        self.path = Path(path)
        self.tokenizer = load_tokenizer(self.path, "VoxCPM text tokenizer")
        settings = self.path.with_name("tokenizer_config.json")
        settings = load_json(settings, "VoxCPM text tokenizer") if settings.is_file() else {}
        scheme = ("never" if settings.get("add_prefix_space") is False
                  else "always" if settings.get("legacy", False) else "first")
        self.tokenizer.normalizer = None
        self.tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme,
                                                                split=False)
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        self.multichar = {t for t in vocab if is_multichar_chinese(t)}
        unk = getattr(self.tokenizer.model, "unk_token", None) or "<unk>"
        self.unk_id = vocab.get(unk, 0)

    def tokens(self, text: str) -> list[str]:
        out: list[str] = []
        for token in self.tokenizer.encode(text, add_special_tokens=False).tokens:
            clean = token.replace("\u2581", "")
            out.extend(clean) if clean in self.multichar else out.append(token)
        return out

    def __call__(self, text: str) -> list[int]:
        ids = (self.tokenizer.token_to_id(t) for t in self.tokens(text))
        return [self.unk_id if i is None else i for i in ids]


def normalize_spaces(text: str) -> str:
    """Upstream's clean-up of the text read: newlines to spaces, runs of whitespace to one space."""
    return re.sub(r"\s+", " ", text.replace("\n", " "))


def with_control(text: str, control: str | None) -> str:
    """Voice design / style control: upstream reads "(instruction)text"."""
    control = (control or "").strip()
    return f"({control}){text}" if control else text

"""VibeVoice's text tokenization (upstream's processor: `VibeVoiceTextTokenizerFast`, Qwen2.5's byte-level BPE):
the text the model speaks is `tokenizer.encode(text.strip() + "\\n", add_special_tokens=False)`, read here with
the `tokenizers` library from a tokenizer.json (Qwen2.5's, which the published Realtime folder does not ship:
upstream fetches Qwen/Qwen2.5-0.5B's). The negative (classifier-free guidance) prompt is `<|image_pad|>`.
"""
from __future__ import annotations

import os

from ..formats.checkpoint import CheckpointError, load_tokenizer

ENGINE = "VibeVoice"
NEGATIVE_TOKEN = "<|image_pad|>"


class TextTokenizer:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path
        self._tok = load_tokenizer(path, ENGINE)
        negative = self._tok.token_to_id(NEGATIVE_TOKEN)
        if negative is None:
            raise CheckpointError(f"{ENGINE}: {path} has no {NEGATIVE_TOKEN} token (expected Qwen2.5's tokenizer.json)")
        self.negative_id: int = negative

    def encode(self, text: str) -> list[int]:
        """The ids of `text` as upstream's processor makes them (stripped, one newline appended)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text: nothing to speak (empty or only whitespace)")
        return self._tok.encode(text.strip() + "\n", add_special_tokens=False).ids

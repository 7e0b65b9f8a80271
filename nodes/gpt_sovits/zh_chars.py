"""Traditional -> simplified Chinese characters, character by character, as upstream's
`text/zh_normalization/char_convert.py` (PaddleSpeech's table) converts them before normalising text and
before G2PW reads a sentence.

`data/traditional_to_simplified.txt` holds that table's effective mapping (line 1: traditional characters,
line 2: the simplified character each becomes; where the table lists a traditional character twice the
later pair wins, as in upstream's dict; pairs mapping a character to itself are left out).
"""
from __future__ import annotations

import functools
from pathlib import Path

TABLE = Path(__file__).parent / "data" / "traditional_to_simplified.txt"


@functools.cache
def _table() -> dict[int, str]:
    traditional, simplified = TABLE.read_text(encoding="utf-8").splitlines()
    return {ord(t): s for t, s in zip(traditional, simplified, strict=True)}


def traditional_to_simplified(text: str) -> str:
    return text.translate(_table())

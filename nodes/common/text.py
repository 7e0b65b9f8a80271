"""Sentence chunks for engines that read one chunk per request (long text, bounded memory)."""
from __future__ import annotations

import re

# A sentence: up to end punctuation (with closing quotes) before a space or the end; CJK ends need no space.
_SENTENCE = re.compile(r""".+?(?:[.!?;:…]+["'”’)\]]*(?=\s|$)|[。！？；]+[”’」』）)]*|$)""", re.S)
_CLAUSE_END = re.compile(r"(?<=[,，、])\s*")


def split_sentences(text: str, max_chars: int = 250) -> list[str]:
    """Split at sentence ends, pack sentences into chunks of at most `max_chars`; a longer sentence
    is cut at clause punctuation, then at spaces, then hard. Every character but edge spaces is kept."""
    chunks: list[str] = []
    current = ""
    for sentence in (m.group().strip() for m in _SENTENCE.finditer(text)):
        if not sentence:
            continue
        for piece in _fit(sentence, max_chars):
            if current and len(current) + 1 + len(piece) > max_chars:
                chunks.append(current)
                current = piece
            else:
                current = f"{current} {piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def _fit(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    parts = [p for p in _CLAUSE_END.split(sentence) if p]
    if len(parts) == 1:
        parts = sentence.split(" ")
        if len(parts) == 1:  # no spaces (e.g. CJK without punctuation): hard cut
            return [sentence[i:i + max_chars] for i in range(0, len(sentence), max_chars)]
    out, current = [], ""
    for part in parts:
        for piece in _fit(part, max_chars) if len(part) > max_chars else [part]:
            joined = f"{current} {piece}".strip() if current else piece
            if len(joined) > max_chars:
                out.append(current)
                current = piece
            else:
                current = joined
    if current:
        out.append(current)
    return out

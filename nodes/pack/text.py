"""Text segmentation shared by engines: segments are slices of the caller's text, never rewritten.

An engine reads its text one segment at a time (long text, bounded memory). Upstream engines feed each
segment to the model exactly as it appears in the input, so a segment here is always `text[a:b]` with
only the whitespace at its two cuts dropped: sentences inside one segment keep what separated them
(no space between CJK sentences, a newline stays a newline).
"""
from __future__ import annotations

import re

# A sentence: up to end punctuation (with closing quotes) before a space or the end; CJK ends need no space.
_SENTENCE = re.compile(r""".+?(?:[.!?;:…]+["'”’)\]]*(?=\s|$)|[。！？；]+[”’」』）)]*|$)""", re.S)
_CLAUSE_END = re.compile(r"[,，、]")
_SPACE = re.compile(r"\s+")

Span = tuple[int, int]


def split_sentences(text: str, max_chars: int = 250) -> list[str]:
    """Split at sentence ends and pack whole sentences into segments of at most `max_chars`; a longer
    sentence is cut after clause punctuation, then at spaces, then hard. Each segment is a slice of
    `text` with its edge whitespace dropped."""
    if max_chars < 1:
        raise ValueError(f"max_chars: expected >= 1, got {max_chars}")
    pieces: list[Span] = []
    for m in _SENTENCE.finditer(text):
        pieces.extend(_fit(text, _strip(text, m.start(), m.end()), max_chars))
    return [text[a:b] for a, b in _pack(text, pieces, max_chars)]


def _strip(text: str, a: int, b: int) -> Span:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _pack(text: str, spans: list[Span], max_chars: int) -> list[Span]:
    """Greedily merge consecutive spans while the slice covering them fits (its length counts what
    separates them, as the model will read it)."""
    out: list[Span] = []
    for a, b in spans:
        if a >= b:
            continue
        if out and b - out[-1][0] <= max_chars:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _cuts(text: str, a: int, b: int, pattern: re.Pattern[str], after: bool) -> list[Span]:
    """[a, b) split at each match of `pattern`: after the match (punctuation stays with its clause) or
    around it (whitespace is dropped)."""
    parts, start = [], a
    for m in pattern.finditer(text, a, b):
        parts.append(_strip(text, start, m.end() if after else m.start()))
        start = m.end()
    parts.append(_strip(text, start, b))
    return [p for p in parts if p[0] < p[1]]


def _fit(text: str, span: Span, max_chars: int) -> list[Span]:
    a, b = span
    if b - a <= max_chars:
        return [span]
    parts = _cuts(text, a, b, _CLAUSE_END, after=True)
    if len(parts) == 1:
        parts = _cuts(text, a, b, _SPACE, after=False)
        if len(parts) == 1:  # no spaces (e.g. CJK without punctuation): hard cut
            return [_strip(text, i, min(i + max_chars, b)) for i in range(a, b, max_chars)]
    return _pack(text, [s for p in parts for s in _fit(text, p, max_chars)], max_chars)


def split_at_spaces(ps: str, limit: int) -> list[str]:
    """Cut a phoneme string at spaces into pieces of at most `limit` characters; a longer word is cut
    hard. Spaces inside a piece stay as they were (double spaces included: upstream keeps them)."""
    if len(ps) <= limit:
        return [ps]
    out: list[str] = []
    cur = ""
    for word in ps.split(" "):
        while len(word) > limit:                                  # one "word" longer than a piece: cut it
            if cur:
                out.append(cur)
                cur = ""
            out.append(word[:limit])
            word = word[limit:]
        if cur and len(cur) + len(word) + 1 > limit:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    if cur:
        out.append(cur)
    return out

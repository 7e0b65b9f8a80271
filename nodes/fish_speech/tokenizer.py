"""Fish Speech's tiktoken BPE (`tokenizer.tiktoken` + `special_tokens.json`) in pure Python.

Same ids as upstream's `FishTokenizer` (tiktoken with FISH_TIKTOKEN_PATTERN, every special token
allowed) without the tiktoken wheel and without the `regex` package: the pre-tokenizer pattern is
small enough to scan by hand with `unicodedata` categories, and byte-pair merging is tiktoken's
own lowest-rank-first loop. Upstream's pattern, alternatives tried in this order at each position:

    (?i:'s|'t|'re|'ve|'m|'ll|'d)  |  \\p{P}  |  [^\\r\\n\\p{L}\\p{N}]?\\p{L}+  |  \\p{N}
    |  ' ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*'  |  \\s*[\\r\\n]+  |  \\s+(\\?!\\S)  |  \\s+

(the seventh is upstream's typo for a look-ahead: it matches whitespace, a literal "?!" and one
more non-space character; kept as written). `\\s` is Unicode White_Space, as in Rust's regex crate.
Special-token ids follow upstream: the tokens of special_tokens.json in file order, numbered from
the size of the rank table (upstream ignores the ids written in the file).
"""
from __future__ import annotations

import base64
import re
import unicodedata
from pathlib import Path

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import load_json, load_tokenizer, read_text_bounded

WHITE_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")
SEMANTIC = re.compile(r"<\|semantic:(\d+)\|>")
MAX_ENCODE_CHARS = 400_000      # upstream encodes long strings in pieces of this many characters


def _cat(ch: str) -> str:
    return unicodedata.category(ch)


def _letter(ch: str) -> bool:
    return _cat(ch)[0] == "L"


def _number(ch: str) -> bool:
    return _cat(ch)[0] == "N"


def _punct(ch: str) -> bool:
    return _cat(ch)[0] == "P"


def _fold(ch: str) -> str:
    """Simple case folding for the contraction letters (Rust regex folds 's' with 'S' and U+017F)."""
    return "s" if ch == "\u017f" else ch.lower()


def _match_at(s: str, i: int) -> int:
    """End of the pattern's match starting at i (every position starts some match)."""
    n = len(s)
    c = s[i]
    if c == "'":                                          # (?i:'s|'t|'re|'ve|'m|'ll|'d)
        for suffix in CONTRACTIONS:
            j = i + 1 + len(suffix)
            if j <= n and all(_fold(a) == b for a, b in zip(s[i + 1:j], suffix)):
                return j
    if _punct(c):                                         # \p{P}
        return i + 1
    j = i
    if c not in "\r\n" and not _letter(c) and not _number(c) and i + 1 < n and _letter(s[i + 1]):
        j = i + 1                                         # [^\r\n\p{L}\p{N}]?\p{L}+
    if _letter(s[j]):
        while j < n and _letter(s[j]):
            j += 1
        return j
    if _number(c):                                        # \p{N}
        return i + 1
    j = i + 1 if c == " " else i                          # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    k = j
    while k < n and s[k] not in WHITE_SPACE and not _letter(s[k]) and not _number(s[k]):
        k += 1
    if k > j:
        while k < n and s[k] in "\r\n":
            k += 1
        return k
    end = i                                               # the whitespace run at i
    while end < n and s[end] in WHITE_SPACE:
        end += 1
    last = max((p for p in range(i, end) if s[p] in "\r\n"), default=-1)
    if last >= 0:                                         # \s*[\r\n]+
        return last + 1
    if s.startswith("?!", end) and end + 2 < n and s[end + 2] not in WHITE_SPACE:
        return end + 3                                    # \s+(\?!\S)
    return end                                            # \s+


def pretokenize(s: str) -> list[str]:
    """The pieces upstream's regex cuts `s` into."""
    pieces, i = [], 0
    while i < len(s):
        j = _match_at(s, i)
        pieces.append(s[i:j])
        i = j
    return pieces


def byte_pair_encode(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's merge loop: repeatedly join the adjacent pair of lowest rank (leftmost on ties)."""
    if piece in ranks:
        return [ranks[piece]]
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, where = None, -1
        for k in range(len(parts) - 1):
            r = ranks.get(parts[k] + parts[k + 1])
            if r is not None and (best is None or r < best):
                best, where = r, k
        if best is None:
            break
        parts[where:where + 2] = [parts[where] + parts[where + 1]]
    return [ranks[p] for p in parts]


def read_ranks(path: Path) -> dict[bytes, int]:
    """`<base64 token> <rank>` lines (upstream's loader: blank lines and the "=" empty token skipped)."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(read_text_bounded(path, "Fish Speech").splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            if token == "=":
                continue
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise CheckpointError(f"{path}: line {n} is not '<base64 token> <rank>': {line[:60]!r}") from None
    # Byte-level BPE falls back to single bytes: without all 256 a text would fail mid-request (a KeyError).
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise CheckpointError(f"{path}: {len(missing)} of the 256 single-byte tokens are missing (e.g. byte "
                              f"{missing[0]}); expected a byte-level BPE listing every byte")
    return ranks


class FishTokenizer:
    """Text -> token ids, with special tokens (`<|im_end|>`, `<|semantic:12|>`, ...) recognised in the text."""

    def __init__(self, ranks: dict[bytes, int], special_tokens: list[str]) -> None:
        self.ranks = ranks
        self.special = {tok: len(ranks) + i for i, tok in enumerate(special_tokens)}
        semantic = {int(m.group(1)): i for tok, i in self.special.items() if (m := SEMANTIC.fullmatch(tok))}
        if not semantic or 0 not in semantic:
            raise ValueError("special tokens: expected the semantic tokens <|semantic:0|>, <|semantic:1|>, ...")
        self.semantic_begin_id = semantic[0]
        self.semantic_end_id = semantic[max(semantic)]
        self.semantic_id_to_token_id = semantic
        # Longest first, so that a special token that is a prefix of another never wins.
        names = sorted(self.special, key=len, reverse=True)
        self._special_rx = re.compile("|".join(re.escape(t) for t in names)) if names else None

    @classmethod
    def from_folder(cls, folder: Path) -> FishTokenizer:
        ranks = read_ranks(folder / "tokenizer.tiktoken")
        path = folder / "special_tokens.json"
        data = load_json(path, "Fish Speech", (dict, list))
        if not all(isinstance(t, str) for t in data):
            raise CheckpointError(f"{path}: expected a JSON object or list of special-token strings")
        try:
            return cls(ranks, list(data))
        except ValueError as e:
            raise CheckpointError(f"{path}: {e}") from None

    def token_id(self, token: str) -> int:
        return self.special[token]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for start in range(0, len(text), MAX_ENCODE_CHARS):
            ids += self._encode(text[start:start + MAX_ENCODE_CHARS])
        return ids

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = []
        pos = 0
        for m in self._special_rx.finditer(text) if self._special_rx is not None else ():
            ids += self._ordinary(text[pos:m.start()])
            ids.append(self.special[m.group(0)])
            pos = m.end()
        return ids + self._ordinary(text[pos:])

    def _ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in pretokenize(text):
            ids += byte_pair_encode(piece.encode("utf-8"), self.ranks)
        return ids


class HFTokenizer:
    """Fish Audio S2's `tokenizer.json` (a Qwen3 byte-level BPE) through the `tokenizers` library, which is
    what upstream's AutoTokenizer runs: `encode(text, add_special_tokens=False)`, added tokens recognised
    in the text. The semantic range is the lowest and highest id of `<|semantic:0..4095|>` in the
    vocabulary, as upstream's FishTokenizer computes it (its config's ids are overridden the same way)."""

    def __init__(self, tokenizer) -> None:
        self._tok = tokenizer
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        ids = [vocab[t] for i in range(4096) if (t := f"<|semantic:{i}|>") in vocab]
        if not ids:
            raise ValueError("no semantic tokens <|semantic:N|> in the vocabulary")
        self.semantic_begin_id, self.semantic_end_id = min(ids), max(ids)
        self.vocab_size = max(vocab.values()) + 1
        self.special = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()}

    @classmethod
    def from_folder(cls, folder: Path) -> HFTokenizer:
        path = folder / "tokenizer.json"
        tokenizer = load_tokenizer(path, "Fish Speech")   # tokenizers is imported on first use: S2 folders only
        try:
            return cls(tokenizer)
        except ValueError as e:
            raise CheckpointError(f"{path}: {e}") from None

    def token_id(self, token: str) -> int:
        return self.special[token]

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

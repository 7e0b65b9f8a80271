"""Text -> phoneme chunks -> ids with hibari's own G2P (lexicons, tagger, rules), but with its
unknown-word net (`assets/oov.onnx`) run by us in torch instead of onnxruntime.

hibari.g2p imports no onnxruntime at module level: only `hibari.g2p.oov.OOV` does, and only when it
is not given a `session`. We hand it a session-shaped object backed by our torch module, so hibari's
own character mapping and CTC decoding stay in use unchanged.

Long text: hibari's sentence splitter, then sentences over MAX_PHONEMES are cut at clause punctuation
(as hibari does) and, where a clause alone is still too long, at word boundaries; nothing is dropped.
"""
from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from .loader import OOV_ONNX, OOV_ONNX_SHA256, WeightFileError, onnx_state_dict, package_assets, verify_file
from .model import TransformerLayer
from ..formats.onnx_reader import OnnxFormatError
from ..pack.text import split_at_spaces

# hibari.tts.MAX_PHONEMES: the acoustic model has no positional table, so this is not a hard limit of
# the graph; it is the chunk length hibari was built and evaluated with (attention cost grows as L^2).
MAX_PHONEMES = 400
_CLAUSE = re.compile(r"(?<=[,;:—])\s+")               # hibari.tts._CLAUSE
# hibari's number reader names groups up to decillions: 36 digits; longer runs (with or without thousands
# separators) raise inside it, and past 4 300 digits Python refuses the int itself.
MAX_NUMBER_DIGITS = 36
_LONG_NUMBER = re.compile(r"\d(?:[\d,]*\d)?")
_WORD = re.compile(r"[^\W\d_]+")                    # runs of letters
SILENT = frozenset(';:,.!?—…"()“” ')                  # vocab entries that carry no sound of their own


class OovNet(nn.Module):
    """hibari's unknown-word net: characters [1, L] -> CTC labels [1, 4 L] (4 output slots per character)."""

    def __init__(self, chars: int = 330, labels: int = 54, dim: int = 128, layers: int = 4, maxlen: int = 24):
        super().__init__()
        self.labels = labels
        self.emb = nn.Embedding(chars, dim)
        self.pos = nn.Embedding(maxlen, dim)
        self.layers = nn.ModuleList([TransformerLayer(dim, heads=4, ff=3 * dim, linear=nn.Linear) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 4 * labels)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        x = self.emb(chars) + self.pos(torch.arange(chars.shape[1], device=chars.device))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)).view(chars.shape[0], -1, self.labels).argmax(dim=-1)


def _oov_rename(name: str) -> str:
    name = name.removeprefix("m.").replace(".self_attn.in_proj_", ".self_attn.in_proj.")
    return "pos.weight" if name == "pos" else name


def load_oov_net(path: Path | None = None) -> OovNet:
    path = Path(path) if path else package_assets() / OOV_ONNX
    verify_file(path, OOV_ONNX_SHA256)
    try:
        state = onnx_state_dict(path, rename=_oov_rename)
    except OnnxFormatError as e:
        raise WeightFileError(f"{path} could not be read ({e}); expected sha256 {OOV_ONNX_SHA256}") from e
    net = OovNet()
    net.load_state_dict(state, strict=True)
    return net.eval()


class TorchOovSession:
    """The slice of onnxruntime.InferenceSession that hibari.g2p.oov.OOV uses: run(None, {"chars": ids})."""

    def __init__(self, net: OovNet):
        self.net = net

    def run(self, output_names, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            return [self.net(torch.from_numpy(np.asarray(feeds["chars"], dtype=np.int64))).numpy()]


def _digit_by_digit(match: re.Match) -> str:
    number = match.group()
    digits = [c for c in number if c.isdigit()]
    return " ".join(digits) if len(digits) > MAX_NUMBER_DIGITS else number


def split_phonemes(ps: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Cut one sentence's phonemes into pieces of at most `limit` characters: at clause punctuation
    first (hibari's rule, so its chunks are reproduced exactly), then at spaces, then hard."""
    if len(ps) <= limit:
        return [ps]
    out: list[str] = []
    cur = ""
    for part in _CLAUSE.split(ps):
        if cur and len(cur) + len(part) + 1 > limit:
            out.append(cur)
            cur = part
        else:
            cur = f"{cur} {part}" if cur else part
    if cur:
        out.append(cur)
    return [piece for chunk in out for piece in split_at_spaces(chunk, limit)]


class HibariG2P:
    """hibari's American English G2P with our OOV net; phoneme chunks and model ids."""

    def __init__(self, oov_net: OovNet | None = None):
        from hibari.g2p import G2P
        from hibari.g2p.oov import OOV
        assets = package_assets()
        oov = OOV(str(assets / OOV_ONNX), session=TorchOovSession(oov_net or load_oov_net()))
        self.g2p = G2P(oov=oov)
        self.vocab: dict[str, int] = json.loads((assets / "vocab.json").read_text(encoding="utf-8"))

    @staticmethod
    def sentences(text: str) -> list[str]:
        from hibari.tts import Hibari                              # a staticmethod; no model is created
        return Hibari.split_sentences(text)

    def phonemes(self, sentence: str) -> str:
        return self.g2p(sentence)

    def chunks(self, text: str) -> list[str]:
        """Phoneme strings of at most MAX_PHONEMES characters, in reading order (hibari's Hibari.phonemize,
        plus the word-level cut). Numbers longer than hibari can name are read digit by digit."""
        out: list[str] = []
        for sentence in self.sentences(_LONG_NUMBER.sub(_digit_by_digit, text)):
            ps = self.phonemes(sentence)
            if ps:
                out.extend(split_phonemes(ps))
        return out

    def ids(self, phonemes: str) -> list[int]:
        """hibari's Hibari.ids: vocab ids with the 0 pad at both ends; characters outside the vocab are skipped."""
        return [0, *(self.vocab[c] for c in phonemes if c in self.vocab), 0]

    @staticmethod
    def foreign_words(text: str) -> list[str]:
        """Words with letters outside the Latin script (Greek, Cyrillic, kana, hanzi, ...): hibari spells
        their letters out by name or drops them, so they are not read as words."""
        return [w for w in _WORD.findall(text)
                if any(c.isalpha() and not unicodedata.name(c, "").startswith("LATIN") for c in w)]

    def speakable(self, phonemes: str) -> bool:
        return any(c in self.vocab and c not in SILENT for c in phonemes)

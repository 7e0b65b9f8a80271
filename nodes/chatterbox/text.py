"""Chatterbox's English text front end: upstream's `punc_norm` (tts.py) and `EnTokenizer` (spaces become the
`[SPACE]` token, then the `tokenizers` BPE of tokenizer.json), framed by T3's start and stop text ids."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from ..formats.checkpoint import load_tokenizer

SOT, EOT, SPACE = "[START]", "[STOP]", "[SPACE]"
EMPTY_TEXT = "You need to add some text for me to talk."   # what upstream says for an empty text
_PUNCTUATION = [("...", ", "), ("…", ", "), (":", ","), (" - ", ", "), (";", ", "), ("—", "-"), ("–", "-"),
                (" ,", ","), ("“", "\""), ("”", "\""), ("‘", "'"), ("’", "'")]


_ENDERS = {".", "!", "?", "-", ","}


def punc_norm(text: str, enders: set[str] = _ENDERS) -> str:
    """Upstream's clean-up: capitalise the first letter, collapse whitespace, map uncommon punctuation,
    end with a full stop unless the text ends in one of `enders` (. ! ? - or a comma)."""
    if len(text) == 0:
        return EMPTY_TEXT
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in _PUNCTUATION:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not any(text.endswith(p) for p in enders):
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


# ---- Chatterbox Multilingual (upstream mtl_tts.py and models/tokenizers/tokenizer.py MTLTokenizer) ----------
LANGUAGES = ("ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja", "ko", "ms", "nl", "no", "pl",
             "pt", "ru", "sv", "sw", "tr", "zh")
_MTL_ENDERS = {".", "!", "?", "-", ",", "、", "，", "。", "？", "！"}


def mtl_punc_norm(text: str) -> str:
    """The multilingual punc_norm: the English one with CJK sentence ends also accepted."""
    return punc_norm(text, _MTL_ENDERS)


def korean_jamo(text: str) -> str:
    """Upstream's korean_normalize: each Hangul syllable (U+AC00..U+D7AF) as its initial, medial and final
    conjoining jamo, then strip()."""
    out = []
    for ch in text:
        if not ("\uac00" <= ch <= "\ud7af"):
            out.append(ch)
            continue
        base = ord(ch) - 0xAC00
        out.append(chr(0x1100 + base // (21 * 28)) + chr(0x1161 + (base % (21 * 28)) // 28)
                   + (chr(0x11A7 + base % 28) if base % 28 > 0 else ""))
    return "".join(out).strip()


class Cangjie:
    """Upstream's ChineseCangjieConverter on Cangjie5_TC.json ("glyph<TAB>code" entries): each "Lo" character
    with a code becomes [cj_x] per code letter, its index among the glyphs sharing the code when above 0,
    then [cj_.]. Word segmentation (spacy-pkuseg, upstream's dependency) runs first; see `segment`. The
    segmenter's model folder `spacy_ontonotes/` is looked for beside the table (see `pkuseg_model_dir`)."""

    def __init__(self, path: Path) -> None:
        import json
        self.model_folder = Path(path).parent
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a readable Cangjie table ({e})") from None
        if not isinstance(data, list) or not all(isinstance(e, str) and "\t" in e for e in data):
            raise ValueError(f"{path}: expected a JSON list of 'glyph<TAB>code' strings (Cangjie5_TC.json)")
        self.word2cj: dict[str, str] = {}
        self.cj2word: dict[str, list[str]] = {}
        for entry in data:
            word, code = entry.split("\t")[:2]
            self.word2cj[word] = code
            self.cj2word.setdefault(code, []).append(word)
        self.segmenter = None       # spacy-pkuseg's, made on first use

    def segment(self, text: str) -> str:
        """Upstream's pkuseg word segmentation, words joined by spaces. Upstream calls `pkuseg()`, which
        downloads spacy_ontonotes into spacy-pkuseg's home on first use; here the same model is read from a
        folder already on disk (`pkuseg(model_name=<folder>)` takes the same load path, no download)."""
        if self.segmenter is None:
            self.segmenter = pkuseg_class()(model_name=str(pkuseg_model_dir(self.model_folder)))
        return " ".join(self.segmenter.cut(text))

    def encode_glyph(self, glyph: str) -> str | None:
        code = self.word2cj.get(glyph)
        if code is None:
            return None
        index = self.cj2word[code].index(glyph)
        return code + (str(index) if index > 0 else "")

    def __call__(self, text: str) -> str:
        from unicodedata import category
        out = []
        for ch in text:
            code = self.encode_glyph(ch) if category(ch) == "Lo" else None
            out.append(ch if code is None else "".join(f"[cj_{c}]" for c in code) + "[cj_.]")
        return "".join(out)


def pkuseg_class():
    """spacy-pkuseg's segmenter class (a chatterbox-tts dependency, so upstream always segments Chinese)."""
    try:
        from spacy_pkuseg import pkuseg
    except ImportError:
        raise ValueError("language zh: Chatterbox Multilingual segments Chinese words with the spacy-pkuseg "
                         "package, which is not installed (pip install spacy-pkuseg)") from None
    return pkuseg


PKUSEG_MODEL = "spacy_ontonotes"     # the model upstream's pkuseg() loads (spacy-pkuseg's default)
PKUSEG_URL = "https://github.com/explosion/spacy-pkuseg/releases/download/v0.0.26/spacy_ontonotes.zip"
PKUSEG_SHA256 = "b216e7f92de7ae285aeab8feba2faa8ea8216e5995ff6fb3d391cc8356db1bfe"   # spacy-pkuseg's config.py
# what spacy-pkuseg's FeatureExtractor.load and Model.load read (its current format, or its older one)
PKUSEG_FILES = (("features.msgpack", "features.pkl"), ("weights.npz", "model.txt"))


def pkuseg_model_dir(model_folder: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The spacy_ontonotes folder (unpacked from PKUSEG_URL): `<model folder>/spacy_ontonotes/`, else where
    upstream's own download leaves it (`$PKUSEG_HOME/spacy_ontonotes`, default ~/.pkuseg). A release asset in
    a zip, so the pack's hub downloads cannot fetch it; nothing is downloaded here."""
    import os
    environ = os.environ if environ is None else environ
    home = Path(environ.get("PKUSEG_HOME") or "~/.pkuseg").expanduser()
    candidates = [Path(model_folder) / PKUSEG_MODEL, home / PKUSEG_MODEL]
    for folder in candidates:
        if folder.is_dir() and all(any((folder / n).is_file() for n in names) for names in PKUSEG_FILES):
            return folder
    needs = " and ".join(" or ".join(names) for names in PKUSEG_FILES)
    raise ValueError(f"language zh: spacy-pkuseg's segmentation model folder {PKUSEG_MODEL} (holding {needs}) is "
                     f"not in {candidates[0]} (nor in {candidates[1]}, where spacy-pkuseg itself keeps it); "
                     f"download {PKUSEG_URL} (sha256 {PKUSEG_SHA256}) and unpack its files into {candidates[0]}")


def japanese_kana(text: str) -> str:
    """Upstream's hiragana_normalize with pykakasi (a chatterbox-tts dependency): kanji phrases become
    hiragana (a space before a leading は or へ), katakana and the rest stay, then NFKD."""
    import unicodedata
    try:
        import pykakasi
    except ImportError:
        raise ValueError("language ja: Chatterbox Multilingual converts kanji to kana with the pykakasi "
                         "package, which is not installed (pip install pykakasi)") from None
    out = []
    for r in pykakasi.kakasi().convert(text):
        orig, hira = r["orig"], r["hira"]
        if any(19968 <= ord(c) <= 40959 for c in orig):
            out.append(" " + hira if hira and hira[0] in ("は", "へ") else hira)
        elif orig and all(12449 <= ord(c) <= 12538 for c in orig):
            out.append(orig)
        else:
            out.append(orig)
    return unicodedata.normalize("NFKD", "".join(out))


def check_language(language: str | None, cangjie: Cangjie | None = None) -> None:
    """Fail before any model work when `language` needs what is not here: upstream's 23 codes, pykakasi for
    ja, spacy-pkuseg, Cangjie5_TC.json and the spacy_ontonotes folder for zh."""
    if language is None:
        return
    if language not in LANGUAGES:
        raise ValueError(f"language: Chatterbox Multilingual speaks {', '.join(LANGUAGES)}; got {language!r}")
    if language == "ja":
        japanese_kana("")
    if language == "zh":
        if cangjie is None:
            raise ValueError("language zh: the model folder lacks Cangjie5_TC.json (download it from "
                             "ResembleAI/chatterbox)")
        pkuseg_class()
        pkuseg_model_dir(cangjie.model_folder)


def mtl_encode(tokenizer: EnTokenizer, text: str, language: str | None, cangjie: Cangjie | None = None) -> list[int]:
    """Upstream MTLTokenizer.encode: lowercase, NFKD, the language's preprocessing, the `[xx]` tag first, spaces
    as [SPACE]. Hebrew diacritics (dicta-onnx) and Russian stress marks (russian-text-stresser) are optional
    upstream and skipped without them, as here."""
    from unicodedata import normalize
    check_language(language, cangjie)
    text = normalize("NFKD", text.lower())
    if language == "zh":
        text = cangjie(cangjie.segment(text))
    elif language == "ja":
        text = japanese_kana(text)
    elif language == "ko":
        text = korean_jamo(text)
    if language:
        text = f"[{language}]{text}"
    return list(tokenizer.tokenizer.encode(text.replace(" ", SPACE)).ids)


def mtl_text_tokens(tokenizer: EnTokenizer, text: str, language: str | None, start: int, stop: int,
                    cangjie: Cangjie | None = None) -> Tensor:
    """The ids the multilingual T3 reads (upstream ChatterboxMultilingualTTS.generate)."""
    return torch.tensor([start, *mtl_encode(tokenizer, mtl_punc_norm(text), language, cangjie), stop],
                        dtype=torch.long)

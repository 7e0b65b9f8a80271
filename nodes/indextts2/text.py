"""IndexTTS 2's text front end, as upstream's TextTokenizer.encode: TextNormalizer.normalize, then
`tokenize_by_CJK_char` (CJK characters spaced apart, everything upper-cased), then sentencepiece BPE.

TextNormalizer reproduces upstream's (indextts/utils/front.py) rule for rule: the language pick
(`use_chinese`: any Chinese character, no Latin letter, an e-mail address, or pinyin with a tone digit),
the "X's" contractions read "X is", the model folder's glossary.yaml terms, the protection of `<字|读音>`
pronunciation annotations, tech terms (GPT-5-nano: hyphens kept, not read as minus), pinyin with tones
(restored with j/q/x + u written v, upper-cased) and Chinese names joined by ·/-/— around the number
normaliser, then its punctuation map (full-width and bracket characters to the few symbols the BPE knows;
"$" to "." on the Chinese path). Numbers, dates, currency, units ... are read out by wetext: upstream's
Mac/Windows path, `Normalizer(lang="zh", operator="tn", remove_erhua=False)` / `Normalizer(lang="en",
operator="tn")`, the same WeTextProcessing grammars compiled (upstream's Linux path builds them with
pynini; tests/indextts2/README.md lists where the two differ).

Deliberate differences: where upstream replaces the placeholders of a `set` (its iteration order varies
from run to run), ours are in order of first appearance; where wetext raises, upstream prints the
traceback and reads nothing, ours raises a ValueError (Chinese); on the English path both read the text
as it is (as upstream does where wetext's English grammar rejects it: a double space, for one).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import check_data_file, read_text_bounded

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
LATIN = re.compile(r"[a-zA-Z]")
EMAIL = re.compile(r"^[a-zA-Z0-9]+@[a-zA-Z0-9]+\.[a-zA-Z]+$")
PINYIN_TONE = re.compile(
    r"(?<![a-z])((?:[bpmfdtnlgkhjqxzcsryw]|[zcs]h)?(?:[aeiouüv]|[ae]i|u[aio]|ao|ou|i[aue]|[uüv]e|[uvü]ang?|uai"
    r"|[aeiuv]n|[aeio]ng|ia[no]|i[ao]ng)|ng|er)([1-5])", re.IGNORECASE)
NAME = re.compile(r"[\u4e00-\u9fff]+(?:[-·—][\u4e00-\u9fff]+){1,2}", re.IGNORECASE)
TECH_TERM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+")
PRONUNCIATION = re.compile(r"<([^|>\n]+)\|([^>\n]+)>")
JQX_U = re.compile(r"([jqx])[uü](n|e|an)*(\d)", re.IGNORECASE)


def _table(table: dict[str, str]) -> re.Pattern:
    return re.compile("|".join(re.escape(k) for k in table))


CHAR_PATTERN, ZH_CHAR_PATTERN = _table(CHAR_MAP), _table(ZH_CHAR_MAP)


def _letters(n: int) -> str:
    """Upstream's _idx_to_alpha: 0 -> a, 25 -> z, 26 -> aa ..."""
    s = ""
    while True:
        s = chr(ord("a") + n % 26) + s
        n = n // 26 - 1
        if n < 0:
            return s


def use_chinese(text: str) -> bool:
    """Upstream's TextNormalizer.use_chinese: which normaliser reads `text`."""
    if CHINESE.search(text) or not LATIN.search(text) or EMAIL.match(text):
        return True
    return PINYIN_TONE.search(text) is not None


def correct_pinyin(pinyin: str) -> str:
    """j/q/x + u/ü written v (ju4 -> JV4), upper-cased; other syllables kept as written."""
    if pinyin[0] not in "jqxJQX":
        return pinyin
    return JQX_U.sub(r"\g<1>v\g<2>\g<3>", pinyin).upper()


def tokenize_by_cjk_char(text: str) -> str:
    """Upstream's tokenize_by_CJK_char: CJK characters spaced apart, the rest upper-cased."""
    return " ".join(w.strip().upper() for w in CJK.split(text.strip()) if w.strip())


class TextNormalizer:
    """Upstream's TextNormalizer.normalize (module docstring); wetext's two normalisers are built on the
    first text, once per object."""

    def __init__(self, glossary: dict[str, Any] | None = None) -> None:
        self.glossary = dict(glossary or {})
        for term, value in self.glossary.items():
            values = value.values() if isinstance(value, dict) else [value]
            if not isinstance(term, str) or not all(isinstance(v, str) for v in values):
                raise ValueError(f"IndexTTS 2 glossary: {term!r}: expected text, or a mapping of 'zh'/'en' to text")
        self._zh: Any = None
        self._en: Any = None

    @classmethod
    def from_glossary_file(cls, path: str | Path | None) -> "TextNormalizer":
        """The model folder's glossary.yaml (upstream loads it when present; its terms replace the defaults)."""
        if path is None or not Path(path).is_file():
            return cls()
        import yaml
        text = read_text_bounded(path, "IndexTTS 2")        # size-checked before it is read
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"IndexTTS 2: {path} is not a YAML glossary ({' '.join(str(e).split())[:200]})") from None
        return cls(data if isinstance(data, dict) else None)

    def _normalizers(self) -> tuple[Any, Any]:
        if self._zh is None:
            from wetext import Normalizer
            self._zh = Normalizer(remove_erhua=False, lang="zh", operator="tn")
            self._en = Normalizer(lang="en", operator="tn")
        return self._zh, self._en

    def apply_glossary(self, text: str, lang: str) -> str:
        """Upstream's apply_glossary_terms: longest terms first, case-insensitive (the reading is a
        re.sub template there too)."""
        for term in sorted(self.glossary, key=len, reverse=True):
            value = self.glossary[term]
            reading = value.get(lang, term) if isinstance(value, dict) else value
            text = re.compile(re.escape(term), re.IGNORECASE).sub(reading, text)
        return text

    def normalize(self, text: str) -> str:
        zh, en = self._normalizers()
        annotations: dict[str, str] = {}

        def protect(m: re.Match) -> str:
            key = f"PRONPLACEHOLDER{_letters(len(annotations))}PRONPLACEHOLDER"
            annotations[key] = m.group(0)
            return key

        text = PRONUNCIATION.sub(protect, text)
        chinese = use_chinese(text)
        text = CONTRACTION.sub(r"\1 is", text)
        if self.glossary:
            text = self.apply_glossary(text, "zh" if chinese else "en")
        # hyphens of tech terms are kept apart from the number grammar (which reads "-" as minus)
        terms = sorted(dict.fromkeys(TECH_TERM.findall(text.rstrip() if chinese else text)), key=len, reverse=True)
        if chinese:
            text = text.rstrip()
            for term in terms:
                text = text.replace(term, term.replace("-", "<H>"))
            pinyin = list(dict.fromkeys("".join(p) for p in PINYIN_TONE.findall(text)))
            for i, p in enumerate(pinyin):
                text = text.replace(p, f"<pinyin_{chr(ord('a') + i)}>")
            names = list(dict.fromkeys(NAME.findall(text)))
            for i, name in enumerate(names):
                text = text.replace(name, f"<n_{chr(ord('a') + i)}>")
            try:
                result = zh.normalize(text)
            except Exception as e:   # kaldifst / wetext errors share no base class; upstream would read nothing
                raise ValueError(f"IndexTTS 2: the Chinese text normaliser failed on {text[:80]!r} ({e!r})") from e
            for i, name in enumerate(names):
                result = result.replace(f"<n_{chr(ord('a') + i)}>", name)
            for i, p in enumerate(pinyin):
                result = result.replace(f"<pinyin_{chr(ord('a') + i)}>", correct_pinyin(p))
            if terms:
                result = re.sub(r"\s*<H>\s*", "-", result)
        else:
            protected = text
            for term in terms:
                protected = protected.replace(term, term.replace("-", "<H>"))
            try:
                result = en.normalize(protected)
                if terms:
                    result = re.sub(r"\s*<H>\s*", "-", result)
            except Exception:   # as upstream: the text unread (wetext's English grammar rejects "a  b", for one)
                result = text
        table, pattern = (ZH_CHAR_MAP, ZH_CHAR_PATTERN) if chinese else (CHAR_MAP, CHAR_PATTERN)
        result = pattern.sub(lambda m: table[m.group()], result)
        for key, value in annotations.items():
            result = result.replace(key, value)
        return result


class TextTokenizer:
    """bpe.model through sentencepiece, after upstream's normaliser; ids for the GPT's text embedding."""

    def __init__(self, path: str | Path, normalizer: TextNormalizer | None = None) -> None:
        import sentencepiece
        self.path = check_data_file(path, "IndexTTS 2")
        self.normalizer = normalizer if normalizer is not None else TextNormalizer()
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
        return self.ids(self.tokenize(text))

    def normalize(self, text: str) -> str:
        """What the BPE reads: upstream's normaliser, then tokenize_by_CJK_char."""
        return tokenize_by_cjk_char(self.normalizer.normalize(text))

    def tokenize(self, text: str) -> list[str]:
        """The BPE pieces of `text` (upstream's TextTokenizer.tokenize)."""
        if not text:
            return []
        if len(text.strip()) == 1:         # upstream encodes a single character as it is
            return list(self.sp.Encode(text, out_type=str))
        return list(self.sp.Encode(self.normalize(text), out_type=str))

    def ids(self, pieces: list[str] | tuple[str, ...]) -> list[int]:
        return [self.sp.PieceToId(p) for p in pieces]


# Upstream's TextTokenizer.punctuation_marks_tokens: the pieces a segment may end on.
SEGMENT_END_TOKENS = (".", "!", "?", "▁.", "▁?", "▁...")
MAX_SEGMENT_TOKENS = 120       # infer_v2.IndexTTS2.infer's max_text_tokens_per_segment default


def split_segments(tokens: list[str], max_tokens: int = MAX_SEGMENT_TOKENS,
                   split_tokens: tuple[str, ...] = SEGMENT_END_TOKENS,
                   quick_streaming_tokens: int = 0) -> list[list[str]]:
    """Upstream's TextTokenizer.split_segments_by_token, step for step (its quirks included: the "'"
    after a segment end is appended to that segment and still read again by the next one, since
    `i += 1` does not advance a for loop): cut at `split_tokens`, then at commas or "-" inside an
    over-long run, then hard at `max_tokens`; neighbours are merged while they fit."""
    if not tokens:
        return []
    segments: list[list[str]] = []
    current: list[str] = []
    for i, token in enumerate(tokens):
        current.append(token)
        if not ("," in split_tokens or "▁," in split_tokens) and ("," in current or "▁," in current):
            subs = split_segments(current, max_tokens, (",", "▁,"), quick_streaming_tokens)
        elif "-" not in split_tokens and "-" in current:
            subs = split_segments(current, max_tokens, ("-",), quick_streaming_tokens)
        elif len(current) <= max_tokens:
            if token in split_tokens and len(current) > 2:
                if i < len(tokens) - 1 and tokens[i + 1] in ("'", "▁'"):
                    current.append(tokens[i + 1])
                segments.append(current)
                current = []
            continue
        else:
            subs = [current[j:j + max_tokens] for j in range(0, len(current), max_tokens)]
        segments.extend(subs)
        current = []
    if current:
        segments.append(current)
    merged: list[list[str]] = []
    total = 0
    for segment in segments:
        total += len(segment)
        if not segment:
            continue
        if merged and (len(merged[-1]) + len(segment) <= max_tokens and total > quick_streaming_tokens
                       or len(merged[-1]) + len(segment) <= max_tokens / 2):
            merged[-1] = merged[-1] + segment
        else:
            merged.append(segment)
    return merged

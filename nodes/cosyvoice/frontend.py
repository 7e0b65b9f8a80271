"""CosyVoice's front end without its heavy dependencies: BPE text tokens, text rules, and the three
features of a reference recording.

- Text tokens: Qwen2 byte-level BPE rebuilt from `CosyVoice-BlankEN/vocab.json` + `merges.txt` with the
  `tokenizers` package, plus upstream's added special tokens in upstream's order (v3 adds ~300 phoneme
  tokens; `<|endofprompt|>` gets id 151646 in the real vocabulary).
- Text normalisation: upstream's `text_normalize` as it runs with its requirements installed (wetext's
  Chinese / English TN, then its own rules, inflect for the digits left in English text, split_paragraph):
  `TextNormalizer`. Text holding `<|...|>` markup is left untouched, as upstream does.
- Features (each bit-exact against the upstream function in the fixtures): Whisper's 128-bin log-mel at
  16 kHz (speech tokenizer), Kaldi fbank at 16 kHz (CAM++), Matcha's 80-bin log-mel at 24 kHz (flow prompt).
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..formats.checkpoint import load_json, read_text_bounded, tokenizer_errors



QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL_V2 = ("<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>", "[noise]",
              "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>",
              "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]")
_PHONES_EN = ("AA AA0 AA1 AA2 AE AE0 AE1 AE2 AH AH0 AH1 AH2 AO AO0 AO1 AO2 AW AW0 AW1 AW2 AY AY0 AY1 AY2 B CH D DH "
              "EH EH0 EH1 EH2 ER ER0 ER1 ER2 EY EY0 EY1 EY2 F G HH IH IH0 IH1 IH2 IY IY0 IY1 IY2 JH K L M N NG OW OW0 "
              "OW1 OW2 OY OY0 OY1 OY2 P R S SH T TH UH UH0 UH1 UH2 UW UW0 UW1 UW2 V W Y Z ZH")
_PHONES_ZH = ("a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié iòng "
              "ióng iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s sh t u "
              "uang ue un uo uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī uō uǎ uǎi "
              "uǎn uǎng uǐ uǒ vè w x y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng ér ì ìn ìng í "
              "ín íng ò òng òu ó óng óu ù ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn īng ō ōng ōu ū ūn ǎ "
              "ǎi ǎn ǎng ǎo ǐ ǐn ǐng ǒ ǒng ǒu ǔ ǔn ǘ ǚ ǜ")
SPECIAL_V3 = SPECIAL_V2 + ("<|endofsystem|>",) + tuple(f"[{p}]" for p in (_PHONES_EN + " " + _PHONES_ZH).split())

V3_SYSTEM = "You are a helpful assistant."
ENDOFPROMPT = "<|endofprompt|>"


class TextTokenizer:
    """Upstream's `CosyVoice2Tokenizer` / `CosyVoice3Tokenizer` (HF AutoTokenizer + add_special_tokens)."""

    def __init__(self, folder: str | Path, version: int) -> None:
        try:
            from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
        except ImportError:
            raise ImportError("CosyVoice needs the `tokenizers` package for its text tokenizer "
                              "(pip install tokenizers; ComfyUI already ships it)") from None
        folder = Path(folder)
        vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
        for f in (vocab_path, merges_path):
            if not f.is_file():
                raise FileNotFoundError(f"CosyVoice text tokenizer: {f} not found")
        vocab = load_json(vocab_path, "CosyVoice text tokenizer")
        try:
            lines = read_text_bounded(merges_path, "CosyVoice text tokenizer").splitlines()
            merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"CosyVoice text tokenizer: {vocab_path} / {merges_path} could not be read: {e}") from None
        # Qwen2's own specials: tokenizer_config.json's added tokens, else <|endoftext|> after the vocabulary.
        specials: list[tuple[int, str]] = []
        config = folder / "tokenizer_config.json"
        if config.is_file():
            try:
                added = load_json(config, "CosyVoice text tokenizer").get("added_tokens_decoder") or {}
                specials = sorted((int(i), e["content"]) for i, e in added.items())
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"CosyVoice text tokenizer: {config} is not a valid tokenizer config: {e}") from None
        if not specials:
            specials = [(len(vocab), "<|endoftext|>")]
        table = dict(vocab)
        for idx, content in specials:
            table.setdefault(content, idx)
        with tokenizer_errors("CosyVoice text tokenizer", vocab_path, merges_path,
                              expected="a Qwen2 BPE vocabulary and its merges"):
            tok = Tokenizer(models.BPE(vocab=table, merges=merges, unk_token=None, byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        # New tokens get the next ids in order (HF add_special_tokens: id = len(tokenizer)); known ones keep theirs.
        nxt = max(table.values()) + 1
        for content in [c for _, c in specials] + list(SPECIAL_V3 if version == 3 else SPECIAL_V2):
            expected = table.get(content, nxt)
            tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
            if tok.token_to_id(content) != expected:
                raise ValueError(f"CosyVoice text tokenizer: {content!r} got id {tok.token_to_id(content)}, "
                                 f"expected {expected} (vocabulary ids in {vocab_path} are not contiguous)")
            if content not in table:
                table[content] = expected
                nxt += 1
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def token_id(self, content: str) -> int | None:
        return self.tok.token_to_id(content)


# ---- text normalisation (upstream's text_normalize with its requirements: wetext 0.0.4 and inflect) -------

_CHINESE = re.compile(r"[\u4e00-\u9fff]+")
_DIGIT = re.compile(r"\d")      # wetext 0.0.4 normalises only text holding a (Unicode) digit
# wetext 0.0.4's TokenParser orders for TN: these tokens' fields are re-serialised in this order (fields not
# listed are dropped), unless the token carries preserve_order: "true".
_TN_ORDERS = {
    "zh": {"date": ("year", "month", "day"), "fraction": ("denominator", "numerator"),
           "measure": ("denominator", "numerator", "value"), "money": ("value", "currency"),
           "time": ("noon", "hour", "minute", "second")},
    "en": {"date": ("preserve_order", "text", "day", "month", "year"),
           "money": ("integer_part", "fractional_part", "quantity", "currency_maj")},
}


def contains_chinese(text: str) -> bool:
    return bool(_CHINESE.search(text))


def _replace_blank(text: str) -> str:
    """Upstream's replace_blank: drop spaces except between two ASCII non-space characters (its
    text[i - 1] at i = 0 reads the last character; a final space, where upstream raises, is dropped)."""
    out = []
    for i, c in enumerate(text):
        if c == " ":
            after, before = text[i + 1] if i + 1 < len(text) else " ", text[i - 1]
            if after.isascii() and after != " " and before.isascii() and before != " ":
                out.append(c)
        else:
            out.append(c)
    return "".join(out)


def _chinese_rules(text: str) -> str:
    """Upstream's rules after TN on Chinese text (newlines, blanks, corner marks, full stops, brackets)."""
    text = text.replace("\n", "")
    text = _replace_blank(text)
    text = text.replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    text = text.replace("（", "").replace("）", "").replace("【", "").replace("】", "").replace("`", "")
    text = text.replace("——", " ")
    return re.sub(r"[，,、]+$", "。", text)


def reorder_tokens(tagged: str, lang: str) -> str:
    """wetext 0.0.4's TokenParser(lang, "tn").reorder: parse the tagger's `name { key: "value" ... }`
    tokens and write them again, the fields of ordered tokens in _TN_ORDERS' order (others dropped).
    Values are kept as written, escapes included (wetext 0.1.8's reorder keeps unlisted fields and
    re-escapes backslashes, which changes the verbalizer's input)."""
    orders, n, i = _TN_ORDERS[lang], len(tagged), 0
    out = []

    def key_at(j: int) -> tuple[str, int]:
        k = j
        while k < n and (tagged[k].isascii() and tagged[k].isalpha() or tagged[k] == "_"):
            k += 1
        return tagged[j:k], k

    def skip(j: int, chars: str) -> int:
        for ch in chars:             # each character of `chars` at most once, in turn (parse_chars)
            if j < n and tagged[j] == ch:
                j += 1
        return j

    while True:
        while i < n and tagged[i] == " ":
            i += 1
        if i >= n:
            break
        name, i = key_at(i)
        i = skip(i, " { ")
        fields: list[tuple[str, str]] = []
        while True:
            while i < n and tagged[i] == " ":
                i += 1
            if i >= n:
                break
            if tagged[i] == "}":
                i += 1
                break
            key, i = key_at(i)
            i = skip(i, ': "')
            start = i
            while i < n and tagged[i] != '"':
                i += 2 if tagged[i] == "\\" else 1
            if i >= n:
                raise ValueError(f"wetext: unterminated value in the tagger's output {tagged!r}")
            fields.append((key, tagged[start:i]))
            i += 1
        members = dict(fields)
        order = [k for k, _ in fields]
        if name in orders and members.get("preserve_order") != "true":
            order = list(orders[name])
        out.append(name + " {" + "".join(f' {k}: "{members[k]}"' for k in order if k in members) + " }")
    return " ".join(out)


def only_punctuation(text: str) -> bool:
    """Upstream's is_only_punctuation (`^[\\p{P}\\p{S}]*$`), also true for blank text."""
    return all(unicodedata.category(c)[0] in "PSZ" for c in text)


class TextNormalizer:
    """Upstream's `CosyVoiceFrontEnd.text_normalize` with its requirements installed (text_frontend
    'wetext', inflect), step for step:

    - text holding `<|...|>` markup is left as it is; otherwise it is stripped;
    - Chinese (a CJK ideograph in it): wetext's Chinese TN, upstream's rules, split_paragraph by characters;
    - otherwise: wetext's English TN, the digits left spelled out by inflect, split_paragraph by text tokens;
    - segments of punctuation only are dropped.

    wetext as upstream pins it (0.0.4): `Normalizer(remove_erhua=False).normalize` runs TN only on text with a
    digit, in the language of that test (zh if a CJK ideograph, else en), as tagger -> reorder -> verbalizer,
    nothing stripped (text its grammar cannot read, where upstream fails, stays as written). We run the same
    compiled grammars (WeTextProcessing's zh/en TN tagger and verbalizer,
    shipped in wetext 0.1.8's wheel) through kaldifst the same way; 0.1.8's own `normalize` differs (English
    always normalised, text stripped, `.isdigit()` text taken as Chinese). The graphs and inflect load on
    first use, once per normaliser."""

    def __init__(self, tokenize: Callable[[str], list[int]]) -> None:
        self.tokenize = tokenize
        self._graphs: dict[str, tuple[Any, Any]] = {}
        self._inflect: Any = None

    def _wetext(self, text: str, lang: str) -> str:
        if not _DIGIT.search(text):
            return text
        if lang not in self._graphs:
            try:
                from wetext.constants import FSTS   # importing wetext loads its graphs (kaldifst)
            except ImportError:
                raise ImportError("CosyVoice's text normalisation needs the `wetext` package "
                                  "(pip install 'wetext>=0.1.8,<0.2')") from None
            self._graphs[lang] = (FSTS[lang]["tn"]["tagger"], FSTS[lang]["tn"]["verbalizer"])
        tagger, verbalizer = self._graphs[lang]
        tagged = tagger(text)
        if not tagged.strip():
            # the grammar has no reading of the whole text (English "#1", "+1 202 ..."): upstream fails there
            # (wetext 0.0.4 asserts on the empty tagging); we go on with the text as written
            return text
        return verbalizer(reorder_tokens(tagged, lang))

    def spell_out_number(self, text: str) -> str:
        """Upstream's spell_out_number: every run of `str.isdigit()` characters through inflect's number_to_words
        (inflect, slow to import, loads only when a digit is left)."""
        if not any(c.isdigit() for c in text):
            return text
        if self._inflect is None:
            try:
                import inflect
            except ImportError:
                raise ImportError("CosyVoice's English text normalisation needs the `inflect` package "
                                  "(pip install 'inflect>=7.3.1,<8')") from None
            self._inflect = inflect.engine()
        out, start = [], None
        for i, c in enumerate(text):
            if c.isdigit():
                start = i if start is None else start
                continue
            if start is not None:
                out.append(self._inflect.number_to_words(text[start:i]))
                start = None
            out.append(c)
        if start is not None:
            out.append(self._inflect.number_to_words(text[start:]))
        return "".join(out)

    def _normalized(self, text: str) -> tuple[str, str]:
        text = text.strip()
        if contains_chinese(text):
            return _chinese_rules(self._wetext(text, "zh")), "zh"
        return self.spell_out_number(self._wetext(text, "en")), "en"

    def normalize(self, text: str) -> str:
        """`text_normalize(text, split=False)`: the whole text normalised (a reference transcript)."""
        if "<|" in text and "|>" in text or not text:
            return text
        return self._normalized(text)[0]

    def segments(self, text: str) -> list[str]:
        """`text_normalize(text, split=True)`: the normalised segments the LM reads, in order (blank text,
        where upstream's split_paragraph raises, has none)."""
        if "<|" in text and "|>" in text:
            return [text]
        text, lang = self._normalized(text)
        if not text:
            return []
        parts = split_paragraph(text, self.tokenize, lang)
        # upstream's is_only_punctuation: `^[\p{P}\p{S}]*$` (a space is not punctuation there)
        return [p for p in parts if not all(unicodedata.category(c)[0] in "PS" for c in p)]


# ---- segments (upstream's frontend_utils.split_paragraph) ------------------------------------------------------

def split_paragraph(text: str, tokenize: Callable[[str], list[int]], lang: str = "zh", token_max_n: int = 80,
                    token_min_n: int = 60, merge_len: int = 20, comma_split: bool = False) -> list[str]:
    """Upstream's split_paragraph, step for step: cut after sentence punctuation (a closing quote
    follows its mark), pack up to `token_max_n` (characters for zh, text tokens otherwise) once a
    segment has more than `token_min_n`, and merge a last segment shorter than `merge_len`."""
    def length(t: str) -> int:
        return len(t) if lang == "zh" else len(tokenize(t))

    marks = ["。", "？", "！", "；", "：", "、", ".", "?", "!", ";"] if lang == "zh" else [".", "?", "!", ";", ":"]
    if comma_split:
        marks += ["，", ","]
    if text[-1] not in marks:
        text += "。" if lang == "zh" else "."
    start, utts = 0, []
    for i, c in enumerate(text):
        if c in marks:
            if len(text[start:i]) > 0:
                utts.append(text[start:i] + c)
            if i + 1 < len(text) and text[i + 1] in ['"', "”"]:
                # upstream pops the last sentence even when none was appended (it raises there: kept as text)
                utts.append((utts.pop(-1) if utts else "") + text[i + 1])
                start = i + 2
            else:
                start = i + 1
    final, current = [], ""
    for utt in utts:
        if length(current + utt) > token_max_n and length(current) > token_min_n:
            final.append(current)
            current = ""
        current = current + utt
    if len(current) > 0:
        if length(current) < merge_len and len(final) != 0:
            final[-1] = final[-1] + current
        else:
            final.append(current)
    return final

"""CosyVoice's front end without its heavy dependencies: BPE text tokens, text rules, and the three
features of a reference recording.

- Text tokens: Qwen2 byte-level BPE rebuilt from `CosyVoice-BlankEN/vocab.json` + `merges.txt` with the
  `tokenizers` package, plus upstream's added special tokens in upstream's order (v3 adds ~300 phoneme
  tokens; `<|endofprompt|>` gets id 151646 in the real vocabulary).
- Text normalisation: upstream uses ttsfrd or wetext when installed and otherwise falls back to a few
  rules; we ship that fallback rule set (Chinese: blanks, corner marks, brackets, full stops; English:
  as written, numbers are not spelled out since that needs `inflect`). Text holding `<|...|>` markup is
  left untouched, as upstream does.
- Features (each bit-exact against the upstream function in the fixtures): Whisper's 128-bin log-mel at
  16 kHz (speech tokenizer), Kaldi fbank at 16 kHz (CAM++), Matcha's 80-bin log-mel at 24 kHz (flow prompt).
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

from ..common.checkpoint import load_json, read_text_bounded, tokenizer_errors



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


# ---- text rules (upstream's fallback without ttsfrd / wetext) -------------------------------------------------

_CHINESE = re.compile(r"[\u4e00-\u9fff]+")


def contains_chinese(text: str) -> bool:
    return bool(_CHINESE.search(text))


def _replace_blank(text: str) -> str:
    """Drop spaces except between two ASCII non-space characters."""
    out = []
    for i, c in enumerate(text):
        if c == " ":
            if 0 < i < len(text) - 1 and text[i + 1].isascii() and text[i + 1] != " " and \
                    text[i - 1].isascii() and text[i - 1] != " ":
                out.append(c)
        else:
            out.append(c)
    return "".join(out)


def normalize_text(text: str) -> str:
    """Upstream `text_normalize(split=False)` with no text front-end installed (and no `inflect`)."""
    if "<|" in text and "|>" in text:
        return text
    text = text.strip()
    if not contains_chinese(text):
        return text
    text = text.replace("\n", "")
    text = _replace_blank(text)
    text = text.replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    text = text.replace("（", "").replace("）", "").replace("【", "").replace("】", "").replace("`", "")
    text = text.replace("——", " ")
    return re.sub(r"[，,、]+$", "。", text)


def only_punctuation(text: str) -> bool:
    """Upstream's is_only_punctuation (`^[\\p{P}\\p{S}]*$`), also true for blank text."""
    return all(unicodedata.category(c)[0] in "PSZ" for c in text)




# ---- segments (upstream's text_normalize(split=True) and frontend_utils.split_paragraph) ---------------------

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


def split_segments(text: str, tokenize: Callable[[str], list[int]]) -> list[str]:
    """Upstream's `text_normalize(text, split=True)` with no text front-end installed: the segments the
    LM reads, already normalised (Chinese rules, then split_paragraph by characters; other text split by
    text tokens), those of punctuation only dropped. Numbers are not spelled out (upstream's inflect)."""
    if "<|" in text and "|>" in text:
        return [text]
    text = text.strip()
    if not text:
        return []
    if contains_chinese(text):
        parts = split_paragraph(normalize_text(text), tokenize, "zh")
    else:
        parts = split_paragraph(text, tokenize, "en")
    # upstream's is_only_punctuation: `^[\p{P}\p{S}]*$` (a space is not punctuation there)
    return [p for p in parts if not all(unicodedata.category(c)[0] in "PS" for c in p)]

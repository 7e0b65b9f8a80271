"""OmniVoice's text side: the Qwen tokenizer (tokenizer.json), the style and text prompt, voice-design
instructions, and upstream's rule-based duration estimate (how many 25 Hz frames a text needs).

    tok = TextTokenizer(folder)
    style = tok.encode(style_text(language="en", instruct="female, low pitch", denoise=True))
    text = tok.encode_text(wrap_text(combine_text("Hello there.", ref_text="A reference.")))
    frames = estimate_frames("Hello there.", "A reference.", 75)

Everything here reproduces omnivoice 0.2.1 (`_prepare_inference_inputs`, `_combine_text`,
`_tokenize_with_nonverbal_tags`, `_resolve_instruct`, `add_punctuation`, `RuleDurationEstimator`).
Text normalisation (numbers to words: WeTextProcessing / num2words, off by default upstream) is not
reproduced.
"""
from __future__ import annotations

import bisect
import difflib
import re
import unicodedata
from pathlib import Path

from ..formats.checkpoint import load_tokenizer

NONVERBAL = re.compile(r"\[(laughter|sigh|confirmation-en|question-en|question-ah|question-oh|question-ei|question-yi|"
                       r"surprise-ah|surprise-oh|surprise-wa|surprise-yo|dissatisfaction-hnn)\]")
CJK = re.compile(r"[\u4e00-\u9fff]")
END_PUNCTUATION = frozenset(";:,.!?…)]}\"'“”‘’；：，。！？、）】") | {"……"}


class TextTokenizer:
    """tokenizer.json of the model folder through the `tokenizers` package (no special tokens added,
    as Qwen's tokenizer adds none)."""

    def __init__(self, folder: str | Path) -> None:
        try:
            import tokenizers  # noqa: F401 - only to say what to install
        except ImportError:
            raise ImportError("OmniVoice needs the `tokenizers` package for its text tokenizer "
                              "(pip install tokenizers; ComfyUI already ships it)") from None
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"OmniVoice text tokenizer: {path} not found")
        self.tok = load_tokenizer(path, "OmniVoice text tokenizer")

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_text(self, text: str) -> list[int]:
        """Non-verbal tags ([laughter], ...) are tokenized on their own, so their ids do not depend on
        the surrounding script."""
        ids: list[int] = []
        last = 0
        for m in NONVERBAL.finditer(text):
            ids += self.encode(text[last:m.start()]) if m.start() > last else []
            ids += self.encode(m.group())
            last = m.end()
        if last < len(text):
            ids += self.encode(text[last:])
        return ids


def style_text(language: str | None, instruct: str | None, denoise: bool) -> str:
    """<|denoise|> (cloning only) + language + instruction; absent ones read "None"."""
    return (("<|denoise|>" if denoise else "") + f"<|lang_start|>{language or 'None'}<|lang_end|>"
            + f"<|instruct_start|>{instruct or 'None'}<|instruct_end|>")


def wrap_text(text: str) -> str:
    return f"<|text_start|>{text}<|text_end|>"


def combine_text(text: str, ref_text: str | None = None) -> str:
    """The reference transcript and the text as one string, with upstream's whitespace clean-up."""
    full = f"{ref_text.strip()} {text.strip()}" if ref_text else text.strip()
    full = re.sub(r"[\r\n]+", "", full)
    full = full.replace("\uff08", "(").replace("\uff09", ")")
    full = re.sub(r"[ \t]+", " ", full)
    return re.sub(r"(?<=[\u4e00-\u9fff])\s+|\s+(?=[\u4e00-\u9fff])", "", full)


def add_punctuation(text: str) -> str:
    """A reference transcript gets a full stop ("。" for Chinese) unless it ends in punctuation."""
    text = text.strip()
    if text and text[-1] not in END_PUNCTUATION:
        text += "。" if CJK.search(text) else "."
    return text


# ---- voice design -------------------------------------------------------------------------------------
# Mutually exclusive categories: gender, age, pitch, style (English: Chinese), then accents (English
# only) and dialects (Chinese only).
INSTRUCT_CATEGORIES: tuple[dict[str, str] | frozenset[str], ...] = (
    {"male": "男", "female": "女"},
    {"child": "儿童", "teenager": "少年", "young adult": "青年", "middle-aged": "中年", "elderly": "老年"},
    {"very low pitch": "极低音调", "low pitch": "低音调", "moderate pitch": "中音调", "high pitch": "高音调",
     "very high pitch": "极高音调"},
    {"whisper": "耳语"},
    frozenset({"american accent", "british accent", "australian accent", "chinese accent", "canadian accent",
               "indian accent", "korean accent", "portuguese accent", "russian accent", "japanese accent"}),
    frozenset({"河南话", "陕西话", "四川话", "贵州话", "云南话", "桂林话", "济南话", "石家庄话", "甘肃话", "宁夏话",
               "青岛话", "东北话"}),
)
EN_TO_ZH = {k: v for c in INSTRUCT_CATEGORIES if isinstance(c, dict) for k, v in c.items()}
ZH_TO_EN = {v: k for k, v in EN_TO_ZH.items()}
EXCLUSIVE = [set(c) | set(c.values()) if isinstance(c, dict) else set(c) for c in INSTRUCT_CATEGORIES]
INSTRUCT_ITEMS = frozenset(EN_TO_ZH) | frozenset(ZH_TO_EN) | INSTRUCT_CATEGORIES[-2] | INSTRUCT_CATEGORIES[-1]


def resolve_instruct(instruct: str | None, use_zh: bool = False) -> str | None:
    """Validate a voice-design instruction ("female, low pitch, british accent") and write it the way
    the model was trained: one language (Chinese when the text is Chinese, unless an accent says
    otherwise), upstream's separators. Unknown items raise ValueError with the closest valid one."""
    if instruct is None or not instruct.strip():
        return None
    items = [x for x in re.split(r"\s*[,，]\s*", instruct.strip()) if x]
    normalised, unknown = [], []
    for raw in items:
        n = raw.strip().lower()
        if n in INSTRUCT_ITEMS:
            normalised.append(n)
        else:
            close = difflib.get_close_matches(n, INSTRUCT_ITEMS, n=1, cutoff=0.6)
            unknown.append(f"'{raw}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    if unknown:
        english = sorted(i for i in INSTRUCT_ITEMS if not CJK.search(i))
        raise ValueError(f"instruction: unsupported voice-design items {', '.join(unknown)}; OmniVoice knows "
                         f"{', '.join(english)} (or their Chinese forms), comma-separated")
    dialect = any(n.endswith("话") for n in normalised)
    accent = any(" accent" in n for n in normalised)
    if dialect and accent:
        raise ValueError("instruction: a Chinese dialect and an English accent cannot be combined")
    use_zh = True if dialect else False if accent else use_zh
    normalised = [EN_TO_ZH.get(n, n) if use_zh else ZH_TO_EN.get(n, n) for n in normalised]
    conflicts = [hits for cat in EXCLUSIVE if len(hits := [n for n in normalised if n in cat]) > 1]
    if conflicts:
        raise ValueError("instruction: at most one item per category (gender, age, pitch, style, accent, "
                         f"dialect); got {'; '.join(' vs '.join(c) for c in conflicts)}")
    return ("，" if any(CJK.search(n) for n in normalised) else ", ").join(normalised)


# ---- duration estimate ----------------------------------------------------------------------------------
# Relative speaking time of one character (1.0 = a Latin letter), by script.
WEIGHTS = {"cjk": 3.0, "hangul": 2.5, "kana": 2.2, "ethiopic": 3.0, "yi": 3.0, "indic": 1.8, "thai_lao": 1.5,
           "khmer_myanmar": 1.8, "arabic": 1.5, "hebrew": 1.5, "latin": 1.0, "cyrillic": 1.0, "greek": 1.0,
           "armenian": 1.0, "georgian": 1.0, "punctuation": 0.5, "space": 0.2, "digit": 3.5, "mark": 0.0,
           "default": 1.0}
# (last code point, script) of consecutive Unicode blocks; a code point belongs to the first block
# whose end is >= it (upstream's table with neighbouring blocks of one script merged).
BLOCKS = (
    (0x02AF, "latin"), (0x03FF, "greek"), (0x052F, "cyrillic"), (0x058F, "armenian"), (0x05FF, "hebrew"),
    (0x08FF, "arabic"), (0x0DFF, "indic"), (0x0EFF, "thai_lao"), (0x0FFF, "indic"), (0x109F, "khmer_myanmar"),
    (0x10FF, "georgian"), (0x11FF, "hangul"), (0x139F, "ethiopic"), (0x177F, "default"), (0x17FF, "khmer_myanmar"),
    (0x18FF, "default"), (0x19DF, "indic"), (0x19FF, "khmer_myanmar"), (0x1C7F, "indic"), (0x1C8F, "cyrillic"),
    (0x1CBF, "georgian"), (0x1CFF, "indic"), (0x1DBF, "latin"), (0x1DFF, "default"), (0x1EFF, "latin"),
    (0x30FF, "kana"), (0x312F, "cjk"), (0x318F, "hangul"), (0x9FFF, "cjk"), (0xA4CF, "yi"), (0xA63F, "default"),
    (0xA69F, "cyrillic"), (0xA6FF, "default"), (0xA7FF, "latin"), (0xA82F, "indic"), (0xA87F, "default"),
    (0xA95F, "indic"), (0xA97F, "hangul"), (0xA9DF, "indic"), (0xA9FF, "khmer_myanmar"), (0xAA5F, "indic"),
    (0xAA7F, "khmer_myanmar"), (0xAAFF, "indic"), (0xAB2F, "ethiopic"), (0xAB6F, "latin"), (0xABBF, "default"),
    (0xABFF, "indic"), (0xD7AF, "hangul"), (0xFAFF, "cjk"), (0xFDFF, "arabic"), (0xFE6F, "default"),
    (0xFEFF, "arabic"), (0xFFEF, "latin"),
)
BLOCK_ENDS = [end for end, _ in BLOCKS]


def char_weight(ch: str) -> float:
    code = ord(ch)
    if 65 <= code <= 90 or 97 <= code <= 122:
        return WEIGHTS["latin"]
    if code == 32:
        return WEIGHTS["space"]
    if code == 0x0640:                       # Arabic tatweel: silent
        return WEIGHTS["mark"]
    category = unicodedata.category(ch)
    kind = {"M": "mark", "P": "punctuation", "S": "punctuation", "Z": "space", "N": "digit"}.get(category[0])
    if kind:
        return WEIGHTS[kind]
    i = bisect.bisect_left(BLOCK_ENDS, code)
    if i < len(BLOCKS):
        return WEIGHTS[BLOCKS[i][1]]
    return WEIGHTS["cjk"] if code > 0x20000 else WEIGHTS["default"]


def text_weight(text: str) -> float:
    return sum(char_weight(c) for c in text)


def estimate_frames(text: str, ref_text: str | None = None, ref_frames: int | None = None, speed: float = 1.0,
                    low_threshold: float = 50.0, boost: float = 3.0) -> int:
    """Frames for `text`, at the speaking rate of the reference (transcript, frames) or of upstream's
    default ("Nice to meet you." in 25 frames); short texts are lengthened along a power curve."""
    if not ref_frames or not ref_text:
        ref_text, ref_frames = "Nice to meet you.", 25
    ref_weight = text_weight(ref_text)
    est = 0.0
    if ref_weight != 0:
        est = text_weight(text) / (ref_weight / ref_frames)
        if est < low_threshold:
            est = low_threshold * (est / low_threshold) ** (1.0 / boost)
    if speed > 0 and speed != 1.0:
        est = est / speed
    return max(1, int(est))

"""GPT-SoVITS's segmentation, as TTS_infer_pack/TextPreprocessor.pre_seg_text runs it with api_v2's
default text_split_method "cut5" (TTS_infer_pack/text_segmentation_method.py)."""
from __future__ import annotations

import re

SPLITS = frozenset("，。？！,.?!~:：—…")               # text_segmentation_method.splits
CUT5_MARKS = frozenset(",.;?!、，。？！;：…")          # cut5's punds
MERGE_SHORTER_THAN = 5                                 # pre_seg_text: merge_short_text_in_array(_texts, 5)
MAX_SEGMENT_CHARS = 510                                # split_big_text's max_len (BERT's limit)
_FIRST = re.compile("[" + "".join(re.escape(c) for c in SPLITS) + "]")


def cut5(text: str) -> str:
    """Cut after each punctuation mark (not a "." between digits); pieces of only marks are dropped;
    the pieces joined by newlines."""
    text = text.strip("\n")
    items: list[str] = []
    current: list[str] = []
    for i, char in enumerate(text):
        current.append(char)
        if char in CUT5_MARKS and not (char == "." and 0 < i < len(text) - 1
                                       and text[i - 1].isdigit() and text[i + 1].isdigit()):
            items.append("".join(current))
            current = []
    if current:
        items.append("".join(current))
    return "\n".join(item for item in items if not set(item) <= CUT5_MARKS)


def merge_short(texts: list[str], threshold: int) -> list[str]:
    """merge_short_text_in_array: join consecutive texts until each reaches `threshold` characters."""
    if len(texts) < 2:
        return texts
    result: list[str] = []
    current = ""
    for text in texts:
        current += text
        if len(current) >= threshold:
            result.append(current)
            current = ""
    if current:
        if result:
            result[-1] += current
        else:
            result.append(current)
    return result


def split_big_text(text: str, max_len: int = MAX_SEGMENT_CHARS) -> list[str]:
    """split_big_text: pieces between marks packed up to `max_len` characters."""
    result: list[str] = []
    current = ""
    for piece in re.split("([" + "".join(SPLITS) + "])", text):
        if len(current + piece) > max_len:
            result.append(current)
            current = piece
        else:
            current += piece
    if current:
        result.append(current)
    return result


def pre_seg_text(text: str, language: str) -> list[str]:
    """pre_seg_text(text, lang, "cut5"): a leading stop for a short first sentence, cut5, blank and
    symbol-only lines dropped, short ones merged, a final stop, over-long ones split."""
    stop = "." if language == "en" else "。"
    text = text.strip("\n")
    if not text:
        return []
    if text[0] not in SPLITS and len(_FIRST.split(text)[0].strip()) < 4:
        text = stop + text
    text = cut5(text)
    while "\n\n" in text:
        text = text.replace("\n\n", "\n")
    lines = [t for t in text.split("\n") if t not in (" ", "")]   # filter_text (it raises if none is left)
    out: list[str] = []
    for line in merge_short(lines, MERGE_SHORTER_THAN):
        if not line.strip() or not re.sub(r"\W+", "", line):
            continue
        if line[-1] not in SPLITS:
            line += stop
        out.extend(split_big_text(line) if len(line) > MAX_SEGMENT_CHARS else [line])
    return out

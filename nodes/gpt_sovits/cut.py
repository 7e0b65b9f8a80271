"""GPT-SoVITS's segmentation, as TTS_infer_pack/TextPreprocessor.pre_seg_text runs it with api_v2's
default text_split_method "cut5" (TTS_infer_pack/text_segmentation_method.py), and the webui's other
methods cut0-cut4 (no cut; four sentences; about 50 characters; at "。"; at "." not between digits)."""
from __future__ import annotations

import re
from typing import Callable

SPLITS = frozenset("，。？！,.?!~:：—…")               # text_segmentation_method.splits
CUT5_MARKS = frozenset(",.;?!、，。？！;：…")          # cut5's punds
MERGE_SHORTER_THAN = 5                                 # pre_seg_text: merge_short_text_in_array(_texts, 5)
MAX_SEGMENT_CHARS = 510                                # split_big_text's max_len (BERT's limit)
PUNCTUATION = frozenset("!?…,.- ")                     # text_segmentation_method.punctuation
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


def _marks_only(text: str) -> bool:
    return set(text) <= PUNCTUATION


def _sentences(text: str) -> list[str]:
    """text_segmentation_method.split: "……" -> "。", "——" -> "，", a final "。", cut after each split mark."""
    text = text.replace("……", "。").replace("——", "，")
    if not text:
        raise ValueError("GPT-SoVITS cut1 / cut2: empty text")      # upstream's text[-1] fails
    if text[-1] not in SPLITS:
        text += "。"
    out, tail = [], 0
    for i, char in enumerate(text):
        if char in SPLITS:
            out.append(text[tail:i + 1])
            tail = i + 1
    return out


def cut0(text: str) -> str:
    """No cut (a text of only marks becomes a blank line)."""
    return "\n" if _marks_only(text) else text


def cut1(text: str) -> str:
    """Four sentences a line (the last four to seven together)."""
    text = text.strip("\n")
    sentences = _sentences(text)
    groups = ["".join(sentences[i:i + 4]) for i in range(0, len(sentences), 4)]
    if len(groups) > 1:
        groups[-2:] = [groups[-2] + groups[-1]]   # upstream's split_idx[-1] = None: the last group joins the one before
        lines = groups
    else:
        lines = [text]
    return "\n".join(line for line in lines if not _marks_only(line))


def cut2(text: str) -> str:
    """Sentences gathered until a line passes 50 characters; a short last line joins the one before."""
    text = text.strip("\n")
    sentences = _sentences(text)
    if len(sentences) < 2:
        return text
    lines, total, current = [], 0, ""
    for sentence in sentences:
        total += len(sentence)
        current += sentence
        if total > 50:
            lines.append(current)
            total, current = 0, ""
    if current:
        lines.append(current)
    if len(lines) > 1 and len(lines[-1]) < 50:
        lines[-2:] = [lines[-2] + lines[-1]]
    return "\n".join(line for line in lines if not _marks_only(line))


def cut3(text: str) -> str:
    """At each "。"."""
    text = text.strip("\n")
    return "\n".join(line for line in text.strip("。").split("。") if not _marks_only(line))


def cut4(text: str) -> str:
    """At each "." not next to a digit."""
    text = text.strip("\n")
    return "\n".join(line for line in re.split(r"(?<!\d)\.(?!\d)", text.strip(".")) if not _marks_only(line))


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


METHODS: dict[str, Callable[[str], str]] = {"cut0": cut0, "cut1": cut1, "cut2": cut2, "cut3": cut3, "cut4": cut4,
                                            "cut5": cut5}


def pre_seg_text(text: str, language: str, method: str = "cut5") -> list[str]:
    """pre_seg_text(text, lang, method): a leading stop for a short first sentence, the cut, blank and
    symbol-only lines dropped, short ones merged, a final stop, over-long ones split."""
    if method not in METHODS:
        raise ValueError(f"GPT-SoVITS: text split method {method!r} is not one of {', '.join(METHODS)}")
    stop = "." if language == "en" else "。"
    text = text.strip("\n")
    if not text:
        return []
    if text[0] not in SPLITS and len(_FIRST.split(text)[0].strip()) < 4:
        text = stop + text
    text = METHODS[method](text)
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

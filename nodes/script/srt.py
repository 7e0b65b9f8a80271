"""SRT subtitles: read into cues (with every repair reported), write back exactly.

Accepted as written (no report): a UTF-8 byte-order mark, CRLF or CR line ends, any number of blank
(or whitespace-only) lines between cues, no blank line at the end, one-digit hours, minutes or seconds,
hours above 99 (up to `SrtLimits.max_hours`), and text after the end time (positions such as
``X1:40 X2:600``: kept in `Cue.settings` and written back).

Repaired and reported (`SrtRepair`): a cue without its index line, indices that are not 1, 2, 3, ...
(cues are numbered in file order), a cue that starts right after the previous cue's text with no blank
line between, ``.`` instead of ``,`` before the milliseconds (one report for the file), and a cue that
starts before the previous one ends, whose predecessor is cut to end where it starts (with
``overlap="trim"``, the default; ``"keep"`` keeps both times, ``"error"`` refuses).

Errors (`SrtError`, naming the cue and the line): a timestamp that is not ``H:MM:SS,mmm`` (three
millisecond digits, minutes and seconds below 60), a cue that ends before it starts, a cue that starts
before the previous cue starts (out of order), a line that is neither an index, a timing line nor cue
text, and any bound in `SrtLimits` exceeded. A cue with no text is kept with ``text=""``; one that
starts and ends at the same time is kept too.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Literal

_TIME = r"(\d{1,3}):(\d{1,2}):(\d{1,2})([,.])(\d{3})"
_TIMING = re.compile(rf"\s*{_TIME}\s*-->\s*{_TIME}(?:\s+(.*?))?\s*")   # group 11: positions after the end
_INDEX = re.compile(r"\s*(\d{1,9})\s*")
_ARROW = "-->"


class SrtError(ValueError):
    """Malformed SRT: names the cue (its number in file order, 1-based) and the line (1-based)."""

    def __init__(self, cue: int, line: int, message: str):
        super().__init__(f"SRT cue {cue} (line {line}): {message}")
        self.cue = cue
        self.line = line
        self.message = message


@dataclasses.dataclass(frozen=True)
class SrtLimits:
    """Bounds on one SRT text; each exceeded bound is an error before or where it is read."""

    max_chars: int = 4_000_000
    max_cues: int = 10_000
    max_line_chars: int = 2_000
    max_hours: int = 100             # the latest time a cue may name

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SrtLimits.{field.name}: expected a positive integer, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Cue:
    """One subtitle: times in whole milliseconds (SRT's resolution, so positions on a timeline are
    exact integers), its text lines joined by ``\\n``, and whatever followed the end time."""

    index: int
    start_ms: int
    end_ms: int
    text: str
    settings: str = ""

    @property
    def start_s(self) -> float:
        return self.start_ms / 1000

    @property
    def end_s(self) -> float:
        return self.end_ms / 1000


@dataclasses.dataclass(frozen=True)
class SrtRepair:
    """One thing `parse_srt` changed to read the file, at cue ``cue`` (its new index), line ``line``."""

    cue: int
    line: int
    message: str

    def __str__(self) -> str:
        return f"cue {self.cue} (line {self.line}): {self.message}"


@dataclasses.dataclass(frozen=True)
class Srt:
    """A parsed SRT: its cues, numbered 1..N in file order, and the repairs made to read it."""

    cues: tuple[Cue, ...]
    repairs: tuple[SrtRepair, ...]


def _ms(groups: tuple[str, ...], cue: int, line: int, limits: SrtLimits) -> int:
    h, m, s, ms = (int(groups[k]) for k in (0, 1, 2, 4))    # groups[3] is the ',' or '.'
    if m >= 60 or s >= 60:
        raise SrtError(cue, line, f"timestamp {':'.join(groups[:3])}{groups[3]}{groups[4]}: minutes and "
                                  "seconds must be below 60")
    total = ((h * 60 + m) * 60 + s) * 1000 + ms
    if total > limits.max_hours * 3_600_000:
        raise SrtError(cue, line, f"timestamp past {limits.max_hours} hours")
    return total


def format_time(ms: int) -> str:
    """Milliseconds as an SRT timestamp, ``HH:MM:SS,mmm`` (more hour digits past 99 hours)."""
    s, ms = divmod(ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return f"{h:02d}:{m:02d}:{s:02d},{ms:03d}"


def parse_srt(text: str, *, overlap: Literal["trim", "keep", "error"] = "trim",
              limits: SrtLimits = SrtLimits()) -> Srt:
    """Read SRT text into cues (see the module's description for what is accepted, repaired or refused)."""
    if not isinstance(text, str):
        raise ValueError(f"SRT: expected text (str), got {type(text).__name__}")
    if overlap not in ("trim", "keep", "error"):
        raise ValueError(f"overlap: expected 'trim', 'keep' or 'error', got {overlap!r}")
    if len(text) > limits.max_chars:
        raise ValueError(f"SRT: {len(text)} characters, at most {limits.max_chars}")
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for n, line in enumerate(lines, 1):
        if len(line) > limits.max_line_chars:
            raise SrtError(_cue_at(lines, n), n, f"line longer than {limits.max_line_chars} characters")
    cues: list[Cue] = []
    repairs: list[SrtRepair] = []
    dots: list[int] = []       # lines whose timestamps use '.' before the milliseconds
    i = 0

    def starts_cue(j: int) -> bool:
        return j < len(lines) and (_TIMING.fullmatch(lines[j]) is not None or (
            _INDEX.fullmatch(lines[j]) is not None and j + 1 < len(lines) and
            _TIMING.fullmatch(lines[j + 1]) is not None))

    while True:
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i == len(lines):
            break
        number = len(cues) + 1
        if number > limits.max_cues:
            raise SrtError(number, i + 1, f"more than {limits.max_cues} cues")
        index = _INDEX.fullmatch(lines[i])
        if index is not None and i + 1 < len(lines) and _ARROW in lines[i + 1]:
            if int(index.group(1)) != number:
                repairs.append(SrtRepair(number, i + 1, f"index {index.group(1)} renumbered {number}"))
            i += 1
        elif index is not None:
            raise SrtError(number, i + 2, f"expected a timing line 'HH:MM:SS,mmm --> HH:MM:SS,mmm' after "
                                          f"index {index.group(1)}")
        elif _ARROW in lines[i]:
            repairs.append(SrtRepair(number, i + 1, f"no index line: numbered {number}"))
        else:
            raise SrtError(number, i + 1, f"expected a cue index or a timing line, got {lines[i][:60]!r} "
                                          "(a blank line inside a cue's text ends the cue)")
        timing = _TIMING.fullmatch(lines[i])
        if timing is None or _ARROW in (timing.group(11) or ""):
            raise SrtError(number, i + 1, f"bad timing line {lines[i][:80]!r}: expected 'HH:MM:SS,mmm --> "
                                          "HH:MM:SS,mmm' (three millisecond digits)")
        if "." in (timing.group(4), timing.group(9)):
            dots.append(i + 1)
        start = _ms(timing.groups()[0:5], number, i + 1, limits)
        end = _ms(timing.groups()[5:10], number, i + 1, limits)
        timing_line = i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() and not starts_cue(i):
            body.append(lines[i])
            i += 1
        if i < len(lines) and lines[i].strip():
            repairs.append(SrtRepair(number + 1, i + 1, "no blank line before this cue: read as a new cue"))
        if end < start:
            raise SrtError(number, timing_line, f"ends at {format_time(end)}, before it starts at {format_time(start)}")
        if cues and start < cues[-1].start_ms:
            raise SrtError(number, timing_line, f"starts at {format_time(start)}, before cue {number - 1} "
                                                f"({format_time(cues[-1].start_ms)}): the cues are out of order")
        if cues and start < cues[-1].end_ms:
            if overlap == "error" or (overlap == "trim" and start == cues[-1].start_ms):
                raise SrtError(number, timing_line, f"starts at {format_time(start)}, while cue {number - 1} "
                                                    f"({format_time(cues[-1].start_ms)} --> "
                                                    f"{format_time(cues[-1].end_ms)}) is still showing")
            if overlap == "trim":
                repairs.append(SrtRepair(number - 1, timing_line, f"overlapped cue {number}: end moved from "
                                                                  f"{format_time(cues[-1].end_ms)} to "
                                                                  f"{format_time(start)}"))
                cues[-1] = dataclasses.replace(cues[-1], end_ms=start)
        cues.append(Cue(number, start, end, "\n".join(body), timing.group(11) or ""))
    if dots:
        repairs.append(SrtRepair(_cue_at(lines, dots[0]), dots[0],
                                 f"'.' before the milliseconds read as ',' (timing lines: {len(dots)})"))
    return Srt(tuple(cues), tuple(sorted(repairs, key=lambda r: r.line)))


def _cue_at(lines: list[str], line: int) -> int:
    """The cue number a line falls in, counted by timing lines up to it (for errors before parsing)."""
    return max(1, sum(_ARROW in lines[j] for j in range(min(line, len(lines)))))


def format_srt(cues: Iterable[Cue]) -> str:
    """SRT text for ``cues``: LF line ends, a blank line between cues, one line end at the end.
    `parse_srt` reads it back to equal cues when they are numbered 1..N, in order and not overlapping;
    a cue whose text would not read back (a blank line, a timing line, a carriage return) is an error."""
    blocks = []
    for n, cue in enumerate(cues, 1):
        if not isinstance(cue, Cue):
            raise ValueError(f"cues[{n - 1}]: expected a Cue, got {type(cue).__name__}")
        if not 0 <= cue.start_ms <= cue.end_ms:
            raise ValueError(f"cue {cue.index}: expected 0 <= start_ms <= end_ms, got {cue.start_ms}, {cue.end_ms}")
        body = cue.text.split("\n") if cue.text else []
        if any(not line.strip() or "\r" in line or _TIMING.fullmatch(line) for line in body):
            raise ValueError(f"cue {cue.index}: its text has a blank line, a carriage return or a timing line, "
                             "which SRT cannot hold")
        if any(c in cue.settings for c in ("\n", "\r", _ARROW)) or cue.settings != cue.settings.strip():
            raise ValueError(f"cue {cue.index}: settings {cue.settings!r} must be one line without edge spaces "
                             f"or '{_ARROW}'")
        timing = f"{format_time(cue.start_ms)} --> {format_time(cue.end_ms)}"
        blocks.append("\n".join([str(cue.index), f"{timing} {cue.settings}" if cue.settings else timing, *body]))
    return "\n\n".join(blocks) + "\n" if blocks else ""

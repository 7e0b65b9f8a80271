"""The script format: plain text with bracket tags, parsed once into speech and pause segments.

    [Alice] Hello Bob. [pause:0.5s] How are you?
    [de:Bob] Gut, danke.
    [seed:7] [speed:1.2] This line has its own seed and is spoken faster.

Tags (docs/scripts.md has the full description with examples):

- ``[Name]`` switches the speaking character until the next switch; ``[narrator]`` switches back to the
  narrator (``character=None``). A name the caller does not know is an error listing the known ones, or
  the narrator when the caller passes ``unknown="narrator"``.
- ``[pause:0.5s]``, ``[pause:300ms]``, ``[pause:2]`` (seconds) insert silence.
- ``[lang:de]`` sets the language of everything after it, whoever speaks; ``[lang:default]`` goes back
  to the request's language (``language=None``). ``[de:Bob]`` switches to Bob speaking German: that
  language lasts until the next character switch or ``[lang:...]``.
- ``[speed:X]`` sets the speed until the next ``[speed:...]``; ``[speed:default]`` goes back to the
  request's speed (``speed=None``).
- ``[seed:N]`` pins the seed of the next spoken segment only: every other segment keeps the
  ``seed + i`` rule (`assign_seeds`), so pinning one line changes no other line.
- ``\\[``, ``\\]`` and ``\\\\`` write a literal ``[``, ``]`` and ``\\``; any other backslash is kept as
  written.

A segment ends at every tag and (by default) at every line break, so one edited line is one changed
segment. A segment's text is the text between its cuts with the whitespace at both ends dropped; text
that is only whitespace makes no segment. Tags never span lines.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

SEED_LIMIT = 1 << 64                  # seeds are unsigned 64-bit, as the Speak node's; seed + i wraps here
NARRATOR = "narrator"                 # the reserved name that switches back to the narrator
DEFAULT = "default"                   # [lang:default], [speed:default]: back to the request's value
_KEYWORDS = frozenset({NARRATOR, "pause", "lang", "seed", "speed"})

# One token: an escape, a whole tag (no brackets, backslashes or line breaks inside), a bracket that
# does not form a tag, or a line break. Everything between tokens is literal text.
_TOKEN = re.compile(r"\\([\[\]\\])|\[([^\[\]\\\n]*)\]|([\[\]])|(\n)")
_TAG_BREAK = re.compile(r"[\[\\\n]")      # what ends a '[' that formed no tag
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)?", re.I)
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}")
_NAME_FORBIDDEN = re.compile(r"[:\[\]\\\n]")
_SEED_DIGITS = len(str(SEED_LIMIT - 1))
_SHOWN = 40                           # characters of a bad value quoted back in an error


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


class ScriptError(ValueError):
    """Bad script text: names the line and column (1-based) and what was expected there."""

    def __init__(self, line: int, column: int, message: str):
        super().__init__(f"script line {line}, column {column}: {message}")
        self.line = line
        self.column = column
        self.message = message


@dataclasses.dataclass(frozen=True)
class ScriptLimits:
    """Bounds on what one script may ask for; each exceeded bound is a `ScriptError` at its place."""

    max_chars: int = 500_000
    max_tags: int = 20_000
    max_segments: int = 10_000        # speech and pause segments together
    max_pause_s: float = 60.0         # one [pause:...]
    max_total_pause_s: float = 600.0  # all pauses of the script
    min_speed: float = 0.25           # the Speak node's speed range
    max_speed: float = 4.0
    max_name_chars: int = 64

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"ScriptLimits.{field.name}: expected a positive finite number, got {value!r}")
        if self.min_speed > self.max_speed:
            raise ValueError(f"ScriptLimits: min_speed {self.min_speed} is above max_speed {self.max_speed}")


@dataclasses.dataclass(frozen=True)
class Speech:
    """Text one character speaks. ``None`` means the request's value (narrator, language, speed);
    ``seed`` is the segment's own ``[seed:N]`` until `assign_seeds` fills every segment's."""

    text: str
    character: str | None = None
    language: str | None = None
    seed: int | None = None
    speed: float | None = None
    line: int = 1                     # where the text starts (1-based), for reports
    column: int = 1


@dataclasses.dataclass(frozen=True)
class Pause:
    """Silence of ``seconds`` (> 0) from a ``[pause:...]`` tag at ``line``, ``column``."""

    seconds: float
    line: int = 1
    column: int = 1


Segment = Speech | Pause


@dataclasses.dataclass
class _State:
    """What applies to the text being read: changed by tags, copied into each segment."""

    character: str | None = None
    base_language: str | None = None       # from [lang:...]
    character_language: str | None = None  # from [xx:Name], until the next character switch
    speed: float | None = None
    seed: int | None = None                # pending [seed:N], taken by the next spoken segment
    seed_at: tuple[int, int] = (0, 0)


class _Parser:
    """One parse: the text, the caller's names and limits, the state and the segments so far."""

    def __init__(self, text: str, characters: Mapping[str, str], languages: Mapping[str, str] | None,
                 unknown: str, split_lines: bool, limits: ScriptLimits):
        self.text = text
        self.characters = characters
        self.languages = languages
        self.unknown = unknown
        self.split_lines = split_lines
        self.limits = limits
        self.state = _State()
        self.segments: list[Segment] = []
        self.pieces: list[str] = []
        self.start: tuple[int, int] | None = None   # line, column of the pending text's first non-space
        self.line = 1
        self.line_start = 0
        self.tags = 0
        self.total_pause = 0.0

    def where(self, pos: int) -> tuple[int, int]:
        return self.line, pos - self.line_start + 1

    def error(self, pos: int, message: str) -> ScriptError:
        return ScriptError(*self.where(pos), message)

    def run(self) -> list[Segment]:
        pos = 0
        for m in _TOKEN.finditer(self.text):
            self.add_text(self.text[pos:m.start()], pos)
            pos = m.end()
            escaped, tag, bracket, newline = m.groups()
            if escaped is not None:
                self.add_text(escaped, m.start())
            elif tag is not None:
                self.tags += 1
                if self.tags > self.limits.max_tags:
                    raise self.error(m.start(), f"more than {self.limits.max_tags} tags")
                self.flush()
                self.apply(tag, m.start())
            elif bracket is not None:
                raise self.error(m.start(), self.bracket_message(m.start(), bracket))
            else:
                if self.split_lines:
                    self.flush()
                else:
                    self.add_text(newline, m.start())
                self.line += 1
                self.line_start = m.end()
        self.add_text(self.text[pos:], pos)
        self.flush()
        if self.state.seed is not None:
            raise ScriptError(*self.state.seed_at, "[seed:...] is followed by no text to speak")
        return self.segments

    def bracket_message(self, pos: int, bracket: str) -> str:
        if bracket == "]":
            return r"']' closes no tag: expected a tag such as [Name] before it, or \] for a literal ']'"
        nxt = _TAG_BREAK.search(self.text, pos + 1)
        what = {"[": "another '['", "\\": "a backslash", "\n": "the end of the line"}[nxt.group()] if nxt else \
            "the end of the text"
        return (f"'[' is not closed before {what}: expected ']' (tags hold no brackets, backslashes or line "
                r"breaks), or \[ for a literal '['")

    def add_text(self, piece: str, pos: int) -> None:
        if not piece:
            return
        if self.start is None:
            stripped = piece.lstrip()
            if stripped:
                self.start = self.where(pos + len(piece) - len(stripped))
        self.pieces.append(piece)

    def emit(self, segment: Segment, pos: tuple[int, int]) -> None:
        if len(self.segments) >= self.limits.max_segments:
            raise ScriptError(*pos, f"more than {self.limits.max_segments} segments")
        self.segments.append(segment)

    def flush(self) -> None:
        """End the pending text: a speech segment with the state now, when it holds more than spaces."""
        text = "".join(self.pieces).strip()
        self.pieces.clear()
        start, self.start = self.start, None
        if not text:
            return
        s = self.state
        self.emit(Speech(text=text, character=s.character, language=s.character_language or s.base_language,
                         seed=s.seed, speed=s.speed, line=start[0], column=start[1]), start)
        s.seed = None

    def apply(self, tag: str, pos: int) -> None:
        """Change the state (or add a pause) for the tag ``[tag]`` whose '[' is at ``pos``."""
        head, colon, value = tag.partition(":")
        key = head.strip().lower()
        value = value.strip()
        if not colon and key in _KEYWORDS - {NARRATOR}:
            raise self.error(pos, f"[{head.strip()}] needs a value: expected [{key}:VALUE]")
        if not colon:
            self.switch(head, None, pos)
        elif key == "pause":
            self.pause(value, pos)
        elif key == "lang":
            self.state.base_language = None if value.lower() == DEFAULT else self.language(value, pos, tag=False)
            self.state.character_language = None
        elif key == "speed":
            self.state.speed = self.speed(value, pos)
        elif key == "seed":
            self.state.seed = self.seed(value, pos)
            self.state.seed_at = self.where(pos)
        else:
            self.switch(value, self.language(head.strip(), pos, tag=True), pos)

    def switch(self, name: str, language: str | None, pos: int) -> None:
        self.state.character = self.character(name, pos)
        self.state.character_language = language

    def character(self, name: str, pos: int) -> str | None:
        name = name.strip()
        if not name:
            raise self.error(pos, "empty tag: expected [Name], [pause:...], [lang:...], [seed:...] or [speed:...]")
        if len(name) > self.limits.max_name_chars:
            raise self.error(pos, f"character name longer than {self.limits.max_name_chars} characters")
        if name.lower() == NARRATOR:
            return None
        known = self.characters.get(name.casefold())
        if known is not None:
            return known
        if self.unknown == "narrator":
            return None
        names = ", ".join(sorted(self.characters.values())) or "none"
        raise self.error(pos, f"unknown character {_shown(name)}: known characters are {names} "
                              f"(and [{NARRATOR}]); write \\[ and \\] for literal brackets")

    def language(self, value: str, pos: int, tag: bool) -> str:
        """The code for ``value`` (from ``[lang:value]``, or ``[value:Name]`` when ``tag``)."""
        code = self.languages.get(value.casefold()) if self.languages is not None else \
            value if _LANGUAGE_CODE.fullmatch(value) else None
        if code is not None:
            return code
        expected = "a language code such as de or pt-BR" if self.languages is None else \
            "one of " + ", ".join(sorted(set(self.languages.values())))
        if tag:
            raise self.error(pos, f"[{value[:_SHOWN]}:...] is not a tag: expected pause:, lang:, seed:, speed: "
                                  f"or a language ({expected}) before the ':'")
        raise self.error(pos, f"language {_shown(value)}: expected {expected}, or 'default'")

    def pause(self, value: str, pos: int) -> None:
        m = _DURATION.fullmatch(value)
        if m is None:
            raise self.error(pos, f"pause {_shown(value)}: expected a non-negative duration such as 0.5s, 300ms or 2 "
                                  "(seconds)")
        seconds = float(m.group(1)) / (1000.0 if (m.group(2) or "").lower() == "ms" else 1.0)
        if seconds > self.limits.max_pause_s:
            raise self.error(pos, f"pause {_shown(value)}: at most {self.limits.max_pause_s:g} s per pause")
        self.total_pause += seconds
        if self.total_pause > self.limits.max_total_pause_s:
            raise self.error(pos, f"pauses add up to more than {self.limits.max_total_pause_s:g} s")
        self.flush()
        if seconds > 0:     # [pause:0] only cuts the text there
            self.emit(Pause(seconds, *self.where(pos)), self.where(pos))

    def speed(self, value: str, pos: int) -> float | None:
        if value.lower() == DEFAULT:
            return None
        lo, hi = self.limits.min_speed, self.limits.max_speed
        speed = float(value) if _NUMBER.fullmatch(value) else math.nan
        if not lo <= speed <= hi:
            raise self.error(pos, f"speed {_shown(value)}: expected a number from {lo:g} to {hi:g}, or 'default'")
        return speed

    def seed(self, value: str, pos: int) -> int:
        if not (value.isascii() and value.isdigit() and len(value) <= _SEED_DIGITS and int(value) < SEED_LIMIT):
            raise self.error(pos, f"seed {_shown(value)}: expected an integer from 0 to {SEED_LIMIT - 1}")
        return int(value)


def _name_table(characters: Iterable[str], limits: ScriptLimits) -> dict[str, str]:
    if isinstance(characters, str):
        raise ValueError(f"characters: expected a collection of names, got the string {characters!r}")
    table: dict[str, str] = {}
    for name in characters:
        if not isinstance(name, str) or name != name.strip() or not name or _NAME_FORBIDDEN.search(name) \
                or len(name) > limits.max_name_chars:
            raise ValueError(f"characters: {name!r} is not a usable name (1 to {limits.max_name_chars} characters, "
                             "no brackets, colons, backslashes, line breaks or edge spaces)")
        if name.lower() in _KEYWORDS:
            raise ValueError(f"characters: {name!r} is reserved for a tag")
        if table.setdefault(name.casefold(), name) != name:
            raise ValueError(f"characters: {table[name.casefold()]!r} and {name!r} differ only in case")
    return table


def _language_table(languages: Mapping[str, str] | Iterable[str] | None) -> dict[str, str] | None:
    if languages is None:
        return None
    if isinstance(languages, str):
        raise ValueError(f"languages: expected a collection of codes or a mapping, got the string {languages!r}")
    pairs = languages.items() if isinstance(languages, Mapping) else ((code, code) for code in languages)
    table: dict[str, str] = {}
    for alias, code in pairs:
        if not isinstance(alias, str) or not isinstance(code, str) or not alias or _NAME_FORBIDDEN.search(alias):
            raise ValueError(f"languages: {alias!r} -> {code!r} is not a usable language name and code")
        if alias.lower() in _KEYWORDS or alias.lower() == DEFAULT:
            raise ValueError(f"languages: {alias!r} is reserved for a tag")
        if table.setdefault(alias.casefold(), code) != code:
            raise ValueError(f"languages: {alias!r} names two codes")
        table.setdefault(code.casefold(), code)
    return table


def parse_script(text: str, *, characters: Iterable[str] = (),
                 languages: Mapping[str, str] | Iterable[str] | None = None,
                 unknown: Literal["error", "narrator"] = "error", split_lines: bool = True,
                 limits: ScriptLimits = ScriptLimits()) -> list[Segment]:
    """Parse ``text`` into speech and pause segments, in order.

    ``characters``: the names ``[Name]`` may switch to (matched ignoring case, returned as given here).
    ``languages``: the language codes tags may name (a mapping also accepts names: ``{"German": "de"}``);
    ``None`` accepts any code shaped like ``de`` or ``pt-BR``. ``unknown="narrator"``: an unknown name
    switches to the narrator instead of being an error. ``split_lines=False``: line breaks stay inside
    segments (a hard-wrapped paragraph is one segment).
    """
    if not isinstance(text, str):
        raise ValueError(f"script: expected text (str), got {type(text).__name__}")
    if unknown not in ("error", "narrator"):
        raise ValueError(f"unknown: expected 'error' or 'narrator', got {unknown!r}")
    if len(text) > limits.max_chars:
        raise ValueError(f"script: {len(text)} characters, at most {limits.max_chars}")
    return _Parser(text, _name_table(characters, limits), _language_table(languages), unknown, split_lines,
                   limits).run()


def assign_seeds(segments: Sequence[Segment], seed: int) -> list[Segment]:
    """The per-segment seed rule: spoken segment i (pauses not counted) gets ``(seed + i) mod 2**64``
    unless it has its own ``[seed:N]``; i counts pinned segments too, so a pin moves no other seed."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed: expected an integer from 0 to {SEED_LIMIT - 1}, got {seed!r}")
    out: list[Segment] = []
    i = 0
    for segment in segments:
        if isinstance(segment, Speech):
            if segment.seed is None:
                segment = dataclasses.replace(segment, seed=(seed + i) % SEED_LIMIT)
            i += 1
        out.append(segment)
    return out

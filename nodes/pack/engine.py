"""The engine contract: what an engine declares, and the one method the Speak pipeline calls.

An engine is a loaded checkpoint registered with a ModelManager: its components (`handles`) and
one chunk of speech at a time inside a request context. Everything engines share (validation
against the declaration, seed + i for chunk i, progress, interrupt, the AUDIO dict, meta) lives in
`pipeline.py`; how the text is cut and the audio joined is the engine's upstream's (`split_text`, `join`).

    class MyEngine(Engine):
        engine_id = "my_engine"
        capabilities = Capabilities(sample_rate=24000, languages=("en",), cloning="required",
                                    transcript="required", speed=(0.5, 2.0))
        PHASED = True

        def speak_chunk(self, ctx, chunk):
            prompt = chunk.prompts.get("prompt") or chunk.prompts.setdefault("prompt", self.prompt(ctx, chunk.reference))
            mel = ctx.run("flow", [self.dit], lambda: ..., memory=...)
            return ctx.run("vocoder", [self.vocoder], lambda: ..., memory=...)   # float32 [T] on the CPU

Random numbers: the pipeline seeds `ctx.generator` with `chunk.seed` (seed + chunk index) before each
chunk, or, for an engine whose upstream seeds once and draws every segment from that one stream
(`ONE_STREAM`), only before the first; engines draw from it (or from generators seeded with
`chunk.seed`) so a seed gives the same audio however much was streamed or retried.
"""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from ...runtime import ModelHandle, ModelManager, RequestContext
from .audio import check_audio
from .segments import Join, Segment
from .text import split_sentences

Need = Literal["none", "optional", "required"]
TRANSCRIPT_CHARS_PER_SECOND = 40    # twice fast speech: the most a reference of n seconds can say
_FIELDS = re.compile(r"\{[a-z]+\}")
OPTION_KINDS = (int, float, bool, str, dict)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:          # a lone surrogate: no tokenizer can read it
        return False
    return True


@dataclass(frozen=True)
class Option:
    """One engine option (`Engine.options` maps names to these): its kind, upstream's default and the
    range the pipeline checks before any model work. Every number has a finite range (a request must not
    ask for unbounded work; NaN and infinities are refused), text a length or choices, and `dict` is
    reference-like audio (ComfyUI AUDIO) whose length in seconds is [low, high].

        options = {"steps": Option(int, 32, 1, 256), "temperature": Option(float, 0.8, 0, 2, low_open=True),
                   "method": Option(str, "euler", choices=("euler", "midpoint"))}
    """

    kind: type
    default: Any = None                 # None: not set (the engine's own behaviour, e.g. an estimate)
    low: float | None = None
    high: float | None = None
    low_open: bool = False              # (low, ...: low itself refused
    high_open: bool = False
    choices: tuple[str, ...] = ()
    max_chars: int = 2000               # free text (str without choices)

    def __post_init__(self) -> None:
        if self.kind not in OPTION_KINDS:
            raise ValueError(f"Option.kind: expected one of {[k.__name__ for k in OPTION_KINDS]}, got {self.kind!r}")
        if self.kind in (int, float, dict):
            if self.low is None or self.high is None or not math.isfinite(self.low) \
                    or not math.isfinite(self.high) or not self.low < self.high:
                raise ValueError(f"Option: a {self.kind.__name__} option needs a finite range low < high, got "
                                 f"{self.low}..{self.high}")
        if self.default is not None and self.kind is not dict:
            self.check("default", self.default)

    def describe(self) -> str:
        """What the option accepts, for error messages and documentation."""
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return f"one of {list(self.choices)}" if self.choices else \
                f"Unicode text of at most {self.max_chars} characters"
        lo, hi = "(" if self.low_open else "[", ")" if self.high_open else "]"
        if self.kind is dict:
            return f"reference audio (ComfyUI AUDIO) of {self.low:g} to {self.high:g} s"
        what = "an integer" if self.kind is int else "a finite number"
        return f"{what} in {lo}{self.low:g}, {self.high:g}{hi}"

    def check(self, name: str, value: object) -> Any:
        """`value` as the engine receives it (ints accepted for floats), or a ValueError naming `name`."""
        def refuse() -> ValueError:
            shown = repr(value)
            shown = shown if len(shown) <= 80 else f"{shown[:60]}... ({len(value)} characters)" \
                if isinstance(value, str) else f"{shown[:60]}..."
            return ValueError(f"{name}: expected {self.describe()}, got {shown}")

        if self.kind is bool:
            if not isinstance(value, bool):
                raise refuse()
            return value
        if self.kind is str:
            if not isinstance(value, str) or (self.choices and value not in self.choices) \
                    or len(value) > self.max_chars or not value.isprintable() and not _encodable(value):
                raise refuse()
            return value
        if self.kind is dict:
            return check_audio(value, (self.low, self.high), name)
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise refuse()
            number: float = int(value)
        else:
            try:
                number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
            except OverflowError:           # an integer past float's range
                number = math.nan
            if not math.isfinite(number):
                raise refuse()
        if number < self.low or number > self.high or (self.low_open and number == self.low) \
                or (self.high_open and number == self.high):
            raise refuse()
        return number


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; the pipeline refuses every input outside it with a clear error."""

    sample_rate: int
    languages: tuple[str, ...] = ("auto",)      # codes of LANGUAGES (pipeline.py); "auto": the engine detects
    voices: tuple[str, ...] = ()                # named voices; the first is the default
    voice_required: bool = False                # a voice must be named (no default voice)
    voice_blends: bool = False                  # a voice may be a weighted mix: "af_bella:0.7,af_sky:0.3"
    cloning: Need = "none"                      # reference audio: none / optional / required
    transcript: Need = "none"                   # the reference's transcript, when a reference is given
    instruction: bool = False                   # a free-text instruction (style, voice design)
    speed: tuple[float, float] = (1.0, 1.0)     # speaking-rate range; (1, 1): no rate control
    max_chunk_chars: int = 250                  # text per chunk of the default split_text (sentence ends)
    reference_seconds: tuple[float, float] = (0.5, 60.0)  # accepted reference length
    reference_rate: int | None = None           # rate the reference is resampled to before the engine sees it
    resampler: str = "soxr_hq"                  # how (audio.resample): what the engine's upstream uses
    # Native multi-speaker dialogue: at most `dialogue_speakers` voices in one request (SpeakRequest.speakers),
    # the text one turn per line written as `dialogue_turn` ("{n}": the speaker's index, "{text}": the line)
    dialogue_speakers: int = 0
    dialogue_turn: str = ""
    # The engine hands over a chunk's audio while it is made (Chunk.emit), in pieces of about this many
    # samples; 0: the audio of a chunk comes whole
    piece_samples: int = 0

    @property
    def max_transcript_chars(self) -> int:
        """The longest reference_text: what the longest accepted reference can say (at least a chunk).
        Every chunk reads the whole transcript, so it is bounded as a chunk of text is, not as the text."""
        return max(self.max_chunk_chars, math.ceil(self.reference_seconds[1] * TRANSCRIPT_CHARS_PER_SECOND))

    def __post_init__(self) -> None:
        for name in ("cloning", "transcript"):
            if getattr(self, name) not in ("none", "optional", "required"):
                raise ValueError(f"Capabilities.{name}: expected none, optional or required")
        if bool(self.dialogue_speakers) != bool(self.dialogue_turn) or \
                (self.dialogue_turn and not {"{n}", "{text}"} <= set(_FIELDS.findall(self.dialogue_turn))):
            raise ValueError("Capabilities: dialogue_speakers > 0 needs dialogue_turn naming {n} and {text}")
        if self.piece_samples < 0:
            raise ValueError(f"Capabilities.piece_samples: expected 0 or more samples, got {self.piece_samples}")
        lo, hi = self.speed
        if not 0 < lo <= 1.0 <= hi:
            raise ValueError(f"Capabilities.speed: expected 0 < low <= 1 <= high, got {self.speed}")


MAX_BLEND_VOICES = 8


def parse_voice_blend(text: str, voices: tuple[str, ...]) -> list[tuple[str, float | None]]:
    """`name[:weight],name[:weight],...` (the Kokoro community's mix syntax) -> [(voice, weight or None)],
    each name one of `voices` (case-insensitive, returned as declared), each weight a finite number > 0;
    a ValueError naming `voice` otherwise."""
    by_lower = {v.lower(): v for v in voices}
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= MAX_BLEND_VOICES or not all(parts):
        raise ValueError(f"voice: {text!r}; expected one voice or 2 to {MAX_BLEND_VOICES} voices as "
                         "name:weight separated by commas (af_bella:0.7,af_sky:0.3)")
    out: list[tuple[str, float | None]] = []
    for part in parts:
        name, sep, weight = part.partition(":")
        voice = by_lower.get(name.strip().lower())
        if voice is None:
            raise ValueError(f"voice: {name.strip()!r} is not a voice of this model; expected one of {', '.join(voices)}")
        w: float | None = None
        if sep:
            try:
                w = float(weight)
            except ValueError:
                w = math.nan
            if not math.isfinite(w) or w <= 0 or w > 1e6:
                raise ValueError(f"voice: weight {weight.strip()!r} of {voice}; expected a number above 0")
        out.append((voice, w))
    return out


@dataclass
class Reference:
    """Reference audio as the engine receives it: finite mono float32 [T] in [-1, 1]-scale at `sample_rate`.
    `source` is the audio as it came in, its channels [C, T] at its own rate, when the pipeline resampled
    or mixed it down (an engine whose upstream reads the original another way reads it). `derived` holds
    what an engine computed from it (the same object reaches split_text and every chunk of a request,
    so a preprocessed reference is made once)."""

    wav: Tensor
    sample_rate: int
    source: tuple[Tensor, int] | None = None
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def seconds(self) -> float:
        return self.wav.numel() / self.sample_rate


@dataclass
class Chunk:
    """One chunk of one request, validated against the engine's capabilities."""

    text: str
    seed: int                                   # the request's seed + index (mod 2**63)
    index: int = 0
    count: int = 1
    language: str = "auto"
    voice: str | None = None
    reference: Reference | None = None
    reference_text: str | None = None
    instruction: str | None = None
    speed: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)    # engine-specific, declared in `Engine.options`
    cache: dict[str, Any] = field(default_factory=dict)      # shared by the chunks of one request
    # what the engine derives from the voice alone (reference audio, its transcript) under the request's
    # language, instruction, speed and options, never from the text or seed: shared by the chunks of one
    # request and, through the pack's prompt cache, by later requests with the same voice and settings
    prompts: dict[str, Any] = field(default_factory=dict)
    progress: Callable[[int, int], None] | None = None       # (done, total) within this chunk
    tokens: tuple[str, ...] | None = None       # upstream's tokens of this segment (Segment.tokens), if any
    speakers: tuple[tuple[Reference, str], ...] = ()   # a native dialogue's voices: (reference, transcript) per index
    segmented: bool = False                     # text is a split_text segment, in the form upstream reads it
    # Set when the caller takes audio as it is made and this chunk's can be handed over now (engines with
    # Capabilities.piece_samples): emit(samples, start) hands over samples [start, start + n) of the audio
    # speak_chunk will return, once final, in order; samples emitted again (a retried phase) are dropped
    emit: Callable[[Tensor, int], None] | None = None


class Engine:
    """Base of every engine. Subclasses set the class attributes and implement `speak_chunk`.

    `PHASED = True`: the engine places its components itself, phase by phase (`ctx.run`/`ctx.use`).
    `PHASED = False`: the pipeline places every handle for the whole chunk with `memory_required(chunk)`.
    """

    engine_id: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    PHASED: ClassVar[bool] = True
    options: ClassVar[dict[str, Option]] = {}   # engine-specific options a caller may pass
    # The KV cache layout of the upstream implementation (what compute.kv_cache = auto uses): where the
    # layouts round differently, the default must be the upstream-exact one.
    UPSTREAM_KV_CACHE: ClassVar[str] = "dynamic"
    join: ClassVar[Join] = Join()               # what upstream puts between segments' audio
    # Upstream seeds once per request and its segments draw from that one stream (ctx.generator is then
    # seeded before the first segment only); otherwise each segment's draws start from seed + index.
    ONE_STREAM: ClassVar[bool] = False

    def __init__(self, manager: ModelManager, handles: list[ModelHandle], device: torch.device | str = "cpu",
                 name: str | None = None) -> None:
        self.manager = manager
        self.handles = list(handles)
        self.name = name or self.engine_id
        for h in self.handles:
            manager.register(h, engine=self.engine_id, device=device)

    @property
    def sample_rate(self) -> int:
        return self.capabilities.sample_rate

    @property
    def device(self) -> torch.device:
        return self.handles[0].device

    def finish(self, wav: Tensor, last: Chunk) -> Tensor:
        """The request's audio after its segments were joined (`last`: the last segment, with the
        request's options and cache), for an upstream that post-processes the joined waveform once
        rather than each segment; by default the audio as it is."""
        return wav

    def phase_components(self) -> list[list[ModelHandle]]:
        """The components each segment places, phase by phase, in the order it runs them (phases that
        may be skipped included): lets the last segment's spent components give up memory first. By
        default the PHASED = False call: every handle at once."""
        return [self.handles]

    def option(self, chunk: Chunk, name: str) -> Any:
        """The checked option `name` of this chunk, else its declared default."""
        return chunk.options.get(name, self.options[name].default)

    def segment_order(self, texts: list[str], language: str, speed: float, cache: dict[str, Any]) -> list[int]:
        """The order split_text's segments are synthesised in (indices into `texts`; the audio is joined in
        text order whatever it is): for an upstream that runs them in another order from one random stream
        (ONE_STREAM), which draws each segment takes depends on it. `cache`: the request's Chunk.cache.
        By default the text's order."""
        return list(range(len(texts)))

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """The segments read one per request step, as the engine's upstream cuts its input (some size
        them by the reference and speed, or end them by the language). By default: sentence boundaries within
        `max_chunk_chars`, each segment a slice of `text` (split_sentences)."""
        return list(split_sentences(text, self.capabilities.max_chunk_chars))

    def kv_cache(self, ctx: RequestContext) -> str:
        """The request's KV cache layout, "dynamic" or "static"; one that is not upstream's is named in
        meta["applied"] (it can change numerics)."""
        kind = ctx.policy.get("compute.kv_cache")
        kind = self.UPSTREAM_KV_CACHE if kind == "auto" else kind
        if kind != self.UPSTREAM_KV_CACHE:
            ctx.meta["applied"]["kv_cache"] = kind
        return kind

    def text_warnings(self, text: str) -> list[str]:
        """What of `text` the model will not read as written (words of a script it cannot speak): the
        request still runs, and the pipeline reports these in meta["warnings"]."""
        return []

    def memory_required(self, chunk: Chunk) -> int:
        """Working memory of a whole chunk (only for PHASED = False)."""
        raise NotImplementedError(f"{type(self).__name__} is not PHASED: it must estimate memory_required")

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        """One chunk -> mono float32 waveform [T] on the CPU at `capabilities.sample_rate`."""
        raise NotImplementedError

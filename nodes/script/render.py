"""A parsed script spoken by a cast of voices, through the Speak pipeline, segment by segment.

    segments = assign_seeds(parse_script(text, characters=cast_names), seed)
    steps = plan(segments, cast, model)              # each speech segment's model and SpeakRequest
    performance = perform(steps)                     # every request checked first, then spoken
    performance.audio, performance.sample_rate, performance.report_text()

Every segment is checked against its model's declaration before the first one is spoken, so a bad
line 150 fails before 149 lines of work. Segments are spoken with `speak(..., reuse=True)`: a segment
whose model files, voice, text, settings and seed are unchanged comes from the segment cache, and a
voice's prompt is derived once (the pack's prompt cache), so editing one line of a long script
synthesises one segment. The output rate is the highest of the models' rates; other models' audio is
resampled to it (soxr HQ).
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..pack.audio import resample
from ..pack.pipeline import LoadedModel, SpeakRequest, check_request, reference_audio, speak
from ..pack.voice import Voice
from .parse import Pause, Segment, Speech

NARRATOR_NAME = "narrator"


@dataclasses.dataclass(frozen=True)
class Step:
    """One segment ready to speak: its model and request, or a pause (request None)."""

    segment: Segment
    model: LoadedModel | None = None
    request: SpeakRequest | None = None


@dataclasses.dataclass(frozen=True)
class Spoken:
    """What one segment became, for the report."""

    index: int                      # 1-based, pauses included
    line: int
    who: str                        # the character, "narrator", or "pause"
    text: str
    seed: int | None
    start: int                      # samples into the output
    samples: int
    engine: str = ""
    cached: bool = False            # from the segment cache (no model ran)
    voice_prompt: str = "none"      # computed / reused / none


@dataclasses.dataclass(frozen=True)
class Performance:
    audio: Tensor                   # [1, T] float32
    sample_rate: int
    spoken: tuple[Spoken, ...]

    @property
    def synthesised(self) -> int:
        """Speech segments a model ran for (the rest came from the segment cache)."""
        return sum(1 for s in self.spoken if s.who != "pause" and not s.cached)

    def report_text(self) -> str:
        sr = self.sample_rate
        speech = [s for s in self.spoken if s.who != "pause"]
        head = (f"{len(speech)} speech segments, {len(self.spoken) - len(speech)} pauses, "
                f"{self.audio.shape[-1] / sr:.2f} s at {sr} Hz; {self.synthesised} synthesised, "
                f"{len(speech) - self.synthesised} from the segment cache")
        rows = []
        for s in self.spoken:
            where = f"{s.start / sr:8.3f} s +{s.samples / sr:.3f} s"
            if s.who == "pause":
                rows.append(f"{s.index:4d} line {s.line}: pause {where}")
                continue
            how = ", from the cache" if s.cached else "" if s.voice_prompt == "none" else f", voice prompt {s.voice_prompt}"
            text = s.text if len(s.text) <= 60 else s.text[:57] + "..."
            rows.append(f"{s.index:4d} line {s.line}: {s.who} ({s.engine}, seed {s.seed}{how}) {where}: {text}")
        return "\n".join([head, *rows])


def plan(segments: Sequence[Segment], cast: Mapping[str | None, Voice], model: LoadedModel | None, *,
         language: str = "auto", speed: float = 1.0, settings: dict | None = None,
         options: dict | None = None) -> list[Step]:
    """Each speech segment's voice (its character's, else the narrator's), model (the voice's, else
    `model`) and request; a character without a voice speaks in the narrator's (or the model's default).
    `options` (engine options) go to the segments `model` speaks, not to voices with a model of their own."""
    steps = []
    for segment in segments:
        if isinstance(segment, Pause):
            steps.append(Step(segment))
            continue
        voice = cast.get(segment.character) if segment.character is not None else cast.get(None)
        speaker_model = voice.model if voice is not None and voice.model is not None else model
        if speaker_model is None:
            raise ValueError(f"script line {segment.line}: no model speaks {segment.character or NARRATOR_NAME}; "
                             "connect a model to the node or to that Voice node")
        lang = segment.language or (voice.language if voice is not None else None) or language
        rate = segment.speed if segment.speed is not None else speed
        own = options if speaker_model is model else None
        if voice is not None:
            request = voice.request(segment.text, seed=segment.seed or 0, speed=rate, language=lang, settings=settings,
                                    options=own)
        else:
            request = SpeakRequest(segment.text, seed=segment.seed or 0, speed=rate, language=lang, settings=settings,
                                   options=dict(own or {}))
        steps.append(Step(segment, speaker_model, request))
    return steps


def check(steps: Sequence[Step]) -> int:
    """Every request against its model's declaration (each model loaded once); the first problem is a
    ValueError naming the script line. Returns the output rate (the highest model rate)."""
    rate = 0
    by_model: dict[str, list[Step]] = {}
    models: dict[str, LoadedModel] = {}
    for step in steps:
        if step.model is not None:
            by_model.setdefault(step.model.key, []).append(step)
            models[step.model.key] = step.model
    for key, group in by_model.items():
        with models[key].using() as engine:
            caps = engine.capabilities
            rate = max(rate, caps.sample_rate)
            checked: set[int] = set()
            for step in group:
                try:
                    check_request(caps, step.request, engine.options)
                    reference = step.request.reference
                    if reference is not None and id(reference["waveform"]) not in checked:
                        reference_audio(reference, caps)     # once per voice: length, level, rate
                        checked.add(id(reference["waveform"]))
                except ValueError as e:
                    who = step.segment.character or NARRATOR_NAME
                    raise ValueError(f"script line {step.segment.line} ({who}, {models[key].spec.display_name}): "
                                     f"{e}") from None
    return rate or 24000


def perform(steps: Sequence[Step], *, reuse: bool = True, progress: Callable[[int, int], None] | None = None,
            cancel: threading.Event | None = None, rate: int | None = None,
            on_audio: Callable[[Tensor, int], None] | None = None) -> Performance:
    """Check every step, then speak them in order into one mono track at the highest model rate
    (`rate`: the steps were checked already, speak at this rate). `on_audio` gets each segment's audio
    (and each pause) as it is done, at that rate: their concatenation is the track."""
    rate = check(steps) if rate is None else rate
    pieces: list[Tensor] = []
    spoken: list[Spoken] = []
    at = 0
    for i, step in enumerate(steps):
        segment = step.segment
        if isinstance(segment, Pause):
            n = round(segment.seconds * rate)
            pieces.append(torch.zeros(n))
            spoken.append(Spoken(i + 1, segment.line, "pause", "", None, at, n))
        else:
            assert isinstance(segment, Speech) and step.model is not None and step.request is not None
            wav, meta = speak(step.model, step.request, cancel=cancel, reuse=reuse)
            if meta["sample_rate"] != rate:
                wav = resample(wav, meta["sample_rate"], rate, "soxr_hq")
            pieces.append(wav)
            spoken.append(Spoken(i + 1, segment.line, segment.character or NARRATOR_NAME, segment.text,
                                 segment.seed, at, wav.numel(), step.model.spec.engine_id, meta["cached"],
                                 meta.get("voice_prompt", "none")))
        at += pieces[-1].numel()
        if on_audio is not None:
            on_audio(pieces[-1], rate)
        if progress is not None:
            progress(i + 1, len(steps))
    audio = torch.cat(pieces) if pieces else torch.zeros(0)
    return Performance(audio[None], rate, tuple(spoken))


def perform_each(groups: Sequence[Sequence[Step]], *, reuse: bool = True,
                 progress: Callable[[int, int], None] | None = None,
                 cancel: threading.Event | None = None) -> tuple[list[Tensor], int, list[Performance]]:
    """Several scripts (an SRT file's cues) checked together, then each spoken into its own track, all
    at one rate: (tracks [T], rate, performances)."""
    rate = check([s for group in groups for s in group])
    total = sum(len(g) for g in groups)
    done = 0
    tracks, performances = [], []

    def step_progress(d: int, _: int) -> None:
        if progress is not None:
            progress(done + d, total)

    for group in groups:
        performance = perform(group, reuse=reuse, progress=step_progress, cancel=cancel, rate=rate)
        done += len(group)
        tracks.append(performance.audio[0])
        performances.append(performance)
    return tracks, rate, performances


def dialogue(segments: Sequence[Segment], cast: Mapping[str | None, Voice], model: LoadedModel | None, *,
             seed: int = 0, language: str = "auto", speed: float = 1.0,
             settings: dict | None = None, options: dict | None = None) -> Step:
    """The whole script as one native multi-speaker request (Capabilities.dialogue_speakers): each voice a
    speaker index in order of first appearance, each segment a turn in the engine's `dialogue_turn` form.
    What a native dialogue cannot hold (pauses, per-line seeds, speeds or languages, voices on other
    models or without reference audio) is an error naming the line."""
    speakers: dict[str | None, int] = {}
    voices: list[Voice] = []
    turns: list[tuple[int, str]] = []
    owner = None
    for segment in segments:
        if isinstance(segment, Pause):
            raise ValueError(f"script line {segment.line}: a native dialogue has no [pause:...]; turn "
                             "native_dialogue off to speak the lines one by one")
        for tag, value in (("seed", segment.seed), ("speed", segment.speed), ("lang", segment.language)):
            if value is not None:
                raise ValueError(f"script line {segment.line}: a native dialogue is one request: [{tag}:...] cannot "
                                 "change one line; turn native_dialogue off, or set it on the node")
        who = segment.character
        voice = cast.get(who)
        name = who or NARRATOR_NAME
        if voice is None or voice.audio is None:
            raise ValueError(f"script line {segment.line}: {name} has no reference audio; a native dialogue "
                             "clones every speaker (connect a Voice node with audio for each)")
        speaker_model = voice.model or model
        if owner is None:
            owner = speaker_model
        elif speaker_model is None or speaker_model.key != owner.key:
            raise ValueError(f"script line {segment.line}: {name} speaks on another model; a native dialogue has "
                             "one model for every voice")
        if who not in speakers:
            speakers[who] = len(voices)
            voices.append(voice)
        turns.append((speakers[who], segment.text))
    if owner is None:
        raise ValueError("script: nothing to speak")
    with owner.using() as engine:
        caps = engine.capabilities
    if not caps.dialogue_speakers:
        raise ValueError(f"native_dialogue: {owner.spec.display_name} ({owner.name}) reads no multi-speaker "
                         "dialogue; turn native_dialogue off")
    if len(voices) > caps.dialogue_speakers:
        raise ValueError(f"native_dialogue: {len(voices)} speakers; {owner.spec.display_name} reads at most "
                         f"{caps.dialogue_speakers} in one dialogue")
    text = "\n".join(caps.dialogue_turn.format(n=n, text=line) for n, line in turns)
    pairs = tuple(({"waveform": v.audio[None], "sample_rate": v.sample_rate}, v.transcript) for v in voices)
    request = SpeakRequest(text, seed=seed, speed=speed, language=language, settings=settings, speakers=pairs,
                           options=dict(options or {}) if owner is model else {})
    shown = Speech(text, character=f"dialogue of {len(voices)} speakers", seed=seed, line=segments[0].line)
    return Step(shown, owner, request)

"""The Speak pipeline: everything engines share, around one `Engine.speak_chunk` per chunk.

    model = LoadedModel(spec, LoadRequest(...), runtime)        # what a loader node returns
    wav, meta = speak(model, SpeakRequest(text="Hello.", seed=0), progress=bar)

Per request: the inputs are checked against the engine's declared `Capabilities` (language, voice,
speed, reference audio and transcript, instruction) and engine options against their declared
`Option` ranges before any model runs; the reference audio is checked once (rate, finite samples,
integer PCM scaled, length, level: silence refused, past full scale scaled to peak 1) and resampled the
way the engine's upstream does; the text is split as the engine's upstream splits it (`Engine.split_text`);
chunk i runs with seed + i (the request's generator re-seeded, or once for an engine whose upstream
draws every segment from one stream), in the order `Engine.segment_order` gives, ComfyUI's progress and interrupt per
chunk, inside one runtime request (one `meta`); the chunks are joined as upstream joins them (`Engine.join`). After the request the
runtime service runs its upkeep; after an OOM failure it unloads idle models, as ComfyUI does.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import numbers
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...runtime.oom import is_oom
from .audio import check_level, check_rate, check_samples, resample, to_channels, to_mono
from .caches import model_fingerprint, plain
from .engine import Capabilities, Chunk, Engine, Option, Reference, parse_voice_blend
from .segments import ChunkPieces, Pieces, Segment, join_waves

log = logging.getLogger("mizuoto")

if TYPE_CHECKING:
    from .pack_runtime import PackRuntime
    from .registry import EngineSpec, LoadRequest

MAX_SEED = 0xFFFFFFFFFFFFFFFF     # the Speak node's range (ComfyUI seeds are unsigned 64-bit)
SEED_MODULUS = 1 << 63            # torch generators take signed 64-bit seeds
MAX_TEXT = 200_000                # characters; longer text is almost certainly a mistake (hours of audio)
MAX_INSTRUCTION = 1000            # characters; every chunk reads the whole instruction (styles are a sentence or two)


class LoadedModel:
    """A loader node's output (ComfyUI type MIZUOTO_TTS): which model, never the weights themselves.

    The engine lives in the runtime service, which may evict it at any time it is idle (RAM relief,
    /free, an OOM); `using()` brings it back from the same files, so this object stays valid for as long
    as ComfyUI holds it. When the last one naming a model is gone, the service evicts that model.
    """

    def __init__(self, spec: EngineSpec, request: LoadRequest, runtime: PackRuntime) -> None:
        self.spec = spec
        self.request = request
        self.runtime = runtime
        dtype = str(request.dtype).removeprefix("torch.")
        self.key = f"{spec.engine_id}:{request.model}:{dtype}:{request.device}"
        runtime.service.reference(self.key)
        weakref.finalize(self, runtime.service.dereference, self.key)

    @property
    def name(self) -> str:
        return self.request.model

    def build(self) -> Engine:
        return self.spec.build(self.request, self.runtime.manager)

    def using(self):
        """Context manager yielding the loaded engine for one request (loading it if it was evicted)."""
        return self.runtime.service.using(self.key, self.build)

    def __repr__(self) -> str:
        return f"LoadedModel({self.key!r})"


@dataclass
class SpeakRequest:
    text: str
    seed: int = 0
    speed: float = 1.0
    language: str = "auto"
    voice: str | None = None
    reference: Any = None                 # ComfyUI AUDIO dict, (waveform, sample_rate), or None
    reference_text: str | None = None
    instruction: str | None = None
    settings: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # a native dialogue (Capabilities.dialogue_speakers): (reference audio, transcript) of speaker 0, 1, ...
    speakers: tuple[tuple[Any, str], ...] = ()


def check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"seed: expected an integer from 0 to {MAX_SEED}, got {seed!r}")
    return int(seed)


def _check_unicode(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name}: character {e.start} ({value[e.start]!r}) is not valid Unicode text (a lone "
                         "surrogate); expected text that can be encoded as UTF-8") from None


def check_request(caps: Capabilities, req: SpeakRequest, options: dict[str, Option]) -> dict[str, Any]:
    """Every input against the engine's declaration; the first problem is a ValueError naming the input.
    Returns the checked engine options (see `check_options`)."""
    if not isinstance(req.text, str):
        raise ValueError(f"text: expected a string, got {type(req.text).__name__}")
    if not req.text.strip():
        raise ValueError("text: empty or only whitespace; expected something to read")
    if len(req.text) > MAX_TEXT:
        raise ValueError(f"text: {len(req.text)} characters; expected at most {MAX_TEXT} characters")
    for name in ("text", "reference_text", "instruction", "voice", "language"):
        _check_unicode(name, getattr(req, name))
    if req.settings is not None and not isinstance(req.settings, dict):
        raise ValueError(f"settings: expected the output of a Runtime Settings node (compute.* settings), got "
                         f"{type(req.settings).__name__}")
    check_seed(req.seed)
    if req.language not in caps.languages:
        raise ValueError(f"language: this model speaks {', '.join(caps.languages)}; got {req.language!r}")
    lo, hi = caps.speed
    if isinstance(req.speed, bool) or not isinstance(req.speed, numbers.Real) or not math.isfinite(req.speed):
        raise ValueError(f"speed: expected a number, got {req.speed!r}")
    if not lo <= req.speed <= hi:
        what = "this model has no speaking-rate control; expected 1.0" if lo == hi else \
            f"expected {lo} to {hi} for this model"
        raise ValueError(f"speed: {what} (1.0 = normal pace), got {req.speed}")
    if req.voice:
        if not caps.voices:
            raise ValueError(f"voice: this model has no named voices; leave it empty (got {req.voice!r})")
        if caps.voice_blends:
            parse_voice_blend(req.voice, caps.voices)
        elif req.voice.lower() not in [v.lower() for v in caps.voices]:
            raise ValueError(f"voice: {req.voice!r} is not a voice of this model; expected one of "
                             f"{', '.join(caps.voices)}")
    elif caps.voice_required:
        raise ValueError(f"voice: this model needs a voice name; expected one of {', '.join(caps.voices)}")
    if req.instruction and not caps.instruction:
        raise ValueError("instruction: this model takes no instruction; leave it empty")
    if req.instruction and len(req.instruction) > MAX_INSTRUCTION:
        raise ValueError(f"instruction: {len(req.instruction)} characters; expected at most {MAX_INSTRUCTION} "
                         "(a description of the voice or style)")
    if req.reference is not None and caps.cloning == "none":
        raise ValueError("reference_audio: this model cannot clone a voice; leave it unconnected or use an "
                         "engine that supports reference audio")
    if req.reference is None and caps.cloning == "required":
        raise ValueError("reference_audio: this model clones a voice; connect reference audio (and give "
                         "reference_text, what it says)")
    if req.reference_text and (req.reference is None or caps.transcript == "none"):
        raise ValueError("reference_text: only used with reference audio by a model that reads transcripts; "
                         "leave it empty")
    if req.reference is not None and caps.transcript == "required" and not (req.reference_text or "").strip():
        raise ValueError("reference_text: this model needs the transcript of the reference audio")
    if req.reference_text and len(req.reference_text) > caps.max_transcript_chars:
        raise ValueError(f"reference_text: {len(req.reference_text)} characters; expected at most "
                         f"{caps.max_transcript_chars} (what a reference of at most {caps.reference_seconds[1]:g} s "
                         "says) for this model")
    check_speakers(caps, req)
    return check_options(options, req.options)


def check_speakers(caps: Capabilities, req: SpeakRequest) -> None:
    if not req.speakers:
        return
    if not caps.dialogue_speakers:
        raise ValueError("speakers: this model reads no native multi-speaker dialogue; speak the lines one by one")
    if not isinstance(req.speakers, (list, tuple)) or len(req.speakers) > caps.dialogue_speakers:
        raise ValueError(f"speakers: expected at most {caps.dialogue_speakers} (reference audio, transcript) "
                         f"pairs for this model, got {len(req.speakers) if isinstance(req.speakers, (list, tuple)) else req.speakers!r}")
    if req.reference is not None:
        raise ValueError("reference_audio: a native dialogue takes its voices from speakers; leave it unconnected")
    for i, pair in enumerate(req.speakers):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[1], str):
            raise ValueError(f"speakers[{i}]: expected (reference audio, transcript)")
        _check_unicode(f"speakers[{i}] transcript", pair[1])
        if caps.transcript == "required" and not pair[1].strip():
            raise ValueError(f"speakers[{i}]: this model needs the transcript of each speaker's reference audio")
        if len(pair[1]) > caps.max_transcript_chars:
            raise ValueError(f"speakers[{i}]: transcript of {len(pair[1])} characters; expected at most "
                             f"{caps.max_transcript_chars}")


def dialogue_references(req: SpeakRequest, caps: Capabilities) -> tuple[tuple[Reference, str], ...]:
    """Each speaker's reference checked and resampled as a single reference is."""
    out = []
    for i, (audio, transcript) in enumerate(req.speakers):
        try:
            out.append((reference_audio(audio, caps), transcript))
        except ValueError as e:
            raise ValueError(f"speakers[{i}] {e}") from None
    return tuple(out)


def check_options(declared: dict[str, Option], given: object) -> dict[str, Any]:
    """Engine options against their declaration -> the values the engine receives (None: the default)."""
    if not isinstance(given, dict):
        raise ValueError(f"options: expected a dict of engine options, got {type(given).__name__}")
    unknown = sorted(str(k) for k in set(given) - set(declared))
    if unknown:
        raise ValueError(f"options: {unknown} are not options of this model; expected some of {sorted(declared)}")
    return {name: declared[name].check(f"options: {name}", value) for name, value in given.items()
            if value is not None}


def reference_audio(audio: Any, caps: Capabilities) -> Reference:
    """ComfyUI AUDIO or (waveform, rate) -> a checked mono Reference at the engine's reference rate."""
    if isinstance(audio, dict):
        if "waveform" not in audio or "sample_rate" not in audio:
            raise ValueError("reference_audio: expected ComfyUI AUDIO {'waveform': [B, C, T], 'sample_rate': int}")
        wav, rate = audio["waveform"], audio["sample_rate"]
    elif isinstance(audio, tuple) and len(audio) == 2:
        wav, rate = audio
    else:
        raise ValueError(f"reference_audio: expected ComfyUI AUDIO or (waveform, sample_rate), got "
                         f"{type(audio).__name__}")
    if not isinstance(wav, torch.Tensor):
        raise ValueError(f"reference_audio: expected a waveform tensor, got {type(wav).__name__}")
    rate = check_rate(rate, "reference_audio sample_rate")
    channels = to_channels(wav.detach().cpu())
    mono = check_samples(to_mono(channels), rate, caps.reference_seconds)
    wav = check_level(mono)
    if wav is not mono:                        # past full scale: the channels scaled as the mono copy is
        channels = (channels.double() / float(mono.abs().max())).float()
    resampled = caps.reference_rate is not None and caps.reference_rate != rate
    source = (channels, rate) if resampled or channels.shape[0] > 1 else None
    if resampled:
        return Reference(resample(wav, rate, caps.reference_rate, caps.resampler), caps.reference_rate, source)
    return Reference(wav, rate, source)


def speak(model: LoadedModel, req: SpeakRequest, progress: Callable[[int, int], None] | None = None,
          cancel: threading.Event | None = None, reuse: bool = False,
          on_audio: Callable[[Tensor, int], None] | None = None) -> tuple[Tensor, dict[str, Any]]:
    """Speech for `req` with `model`: (mono float32 waveform [T] on the CPU, the request's meta).

    What the engine derives from a reference voice is kept in the runtime's prompt cache and reused by
    later requests with the same voice and settings (`Chunk.prompts`). `reuse=True` (scripts) also
    returns the audio of an identical earlier request (same model files, inputs and seed) from the
    segment cache without running the model; meta["cached"] says so. `on_audio`: see `synthesize`."""
    runtime = model.runtime
    voiced = req.reference is not None or bool(req.speakers)
    prompt_key, segment_key = request_keys(model, req) if reuse or voiced else (None, None)
    if reuse:
        hit = runtime.segments.get(segment_key)
        if hit is not None:
            wav, meta = hit
            if on_audio is not None:
                on_audio(wav, meta["sample_rate"])
            return wav, {**meta, "cached": True}
    prompt_key = prompt_key if voiced else None
    prompts = runtime.prompts.get(prompt_key) if prompt_key is not None else None
    fresh = prompts is None
    prompts = {} if prompts is None else prompts
    service = runtime.service
    try:
        with model.using() as engine:
            wav, meta = synthesize(engine, req, progress, cancel, prompts=prompts, on_audio=on_audio)
    except Exception as e:
        if is_oom(e):
            service.release_after_oom()  # what ComfyUI does after an OOM, for our models
        raise
    finally:
        service.maintain()
    if prompt_key is not None and fresh and prompts:
        runtime.prompts.put(prompt_key, prompts)
    meta = {"model": model.name, "engine": model.spec.engine_id, **meta,
            "voice_prompt": "none" if prompt_key is None or not prompts else "computed" if fresh else "reused"}
    runtime.last_meta = meta
    if reuse:
        runtime.segments.put(segment_key, (wav, meta))
    return wav, {**meta, "cached": False}


def request_keys(model: LoadedModel, req: SpeakRequest) -> tuple[str, str]:
    """(voice key, segment key): the model (and its files) and every input of `req` but the text and seed,
    which names what a voice prompt depends on (the same voice read with the same settings); then the
    same with the text and seed, which names the request's audio. The files and samples are read once."""
    parts = {"model": model.key, "files": model_fingerprint(model.request.folder), "speed": req.speed,
             "language": req.language, "voice": req.voice, "reference": plain(req.reference),
             "reference_text": req.reference_text, "instruction": req.instruction,
             "options": plain(req.options), "settings": plain(req.settings or {}), "speakers": plain(req.speakers)}
    voice = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    segment = hashlib.sha256(json.dumps([voice, req.text, req.seed]).encode()).hexdigest()
    return voice, segment


def _within(progress, i: int, count: int):
    """Progress inside chunk i as steps of the whole request (ComfyUI's bar takes one total)."""
    if progress is None:
        return None
    return lambda done, total: progress(i * total + done, count * total)


def synthesize(engine: Engine, req: SpeakRequest, progress: Callable[[int, int], None] | None = None,
               cancel: threading.Event | None = None, prompts: dict[str, Any] | None = None,
               on_audio: Callable[[Tensor, int], None] | None = None) -> tuple[Tensor, dict[str, Any]]:
    """The pipeline on an engine already loaded (no service: tests, benchmarks); see `speak`. `prompts`:
    what the engine derived from this voice before (filled in by this request when empty). `on_audio`
    receives (samples, sample rate) as they become final, after each segment: their concatenation is
    the returned waveform exactly (a segment retried after an OOM hands over nothing twice)."""
    started = time.perf_counter()
    caps = engine.capabilities
    options = check_request(caps, req, engine.options)
    reference = reference_audio(req.reference, caps) if req.reference is not None else None
    speakers = dialogue_references(req, caps)
    pieces = engine.split_text(req.text, reference, req.reference_text or None, req.language,
                               float(req.speed))
    segments = [s if isinstance(s, Segment) else Segment(s) for s in pieces]
    texts = [s.text for s in segments]
    if not texts:
        raise ValueError(f"text: nothing speakable in {req.text[:40]!r}")
    warnings = engine.text_warnings(req.text)
    for warning in warnings:
        log.warning("%s: %s", engine.name, warning)
    seed = check_seed(req.seed)
    cache: dict[str, Any] = {}
    prompts = {} if prompts is None else prompts
    out = []
    # an engine whose finish() post-processes the joined audio of several segments hands it over at the end
    holds = len(texts) > 1 and type(engine).finish is not Engine.finish
    stream = Pieces(engine.join, caps.sample_rate, hold_all=holds) if on_audio is not None else None
    first_audio: float | None = None

    def hand(piece: Tensor) -> None:
        nonlocal first_audio
        first_audio = first_audio if first_audio is not None else time.perf_counter() - started
        on_audio(piece, caps.sample_rate)
    order = engine.segment_order(texts, req.language, float(req.speed), cache)
    if sorted(order) != list(range(len(texts))):
        raise RuntimeError(f"{engine.name}: segment_order gave {order}, not an order of {len(texts)} segments")
    done: list[Tensor | None] = [None] * len(texts)
    with engine.manager.request(seed=seed % SEED_MODULUS, cancel=cancel, settings=req.settings) as ctx:
        ctx.plan(engine.phase_components(), len(texts))
        for k, i in enumerate(order):
            ctx.check_cancelled()
            ctx.segment(k)
            chunk = Chunk(text=texts[i], seed=(seed + i) % SEED_MODULUS, index=i, count=len(texts),
                          tokens=segments[i].tokens, segmented=True, language=req.language,
                          voice=req.voice or None, reference=reference,
                          reference_text=req.reference_text or None, instruction=req.instruction or None,
                          speed=float(req.speed), options=dict(options), cache=cache,
                          prompts=prompts, speakers=speakers,
                          progress=_within(progress, k, len(texts)))
            if stream is not None and caps.piece_samples and not holds and i == len(out):
                # the chunk next in the text's order is handed over while it is made
                chunk.emit = ChunkPieces(stream, hand, f"{engine.name}: chunk {i + 1} of {len(texts)}")
            if k == 0:
                ctx.generator.manual_seed(seed % SEED_MODULUS if engine.ONE_STREAM else chunk.seed)
            elif not engine.ONE_STREAM:
                ctx.generator.manual_seed(chunk.seed)
            wav = ctx.call(engine, chunk, lambda: engine.speak_chunk(ctx, chunk))
            if not bool(torch.isfinite(wav).all()):
                raise FloatingPointError(f"{engine.name}: chunk {i + 1} of {len(texts)} produced NaN or infinite "
                                         "samples (corrupt weights, or a precision too low for this model)")
            done[i] = wav.reshape(-1).float().cpu()
            while len(out) < len(texts) and done[len(out)] is not None:     # joined in the text's order
                out.append(done[len(out)])
                if stream is not None:
                    piece = stream.add(out[-1])
                    if piece.numel():
                        hand(piece)
                elif first_audio is None and not holds:
                    first_audio = time.perf_counter() - started
            if progress is not None:
                progress(k + 1, len(texts))
    wav = engine.finish(join_waves(out, engine.join, caps.sample_rate), chunk)
    if stream is not None and stream.rest(wav).numel():
        on_audio(stream.rest(wav), caps.sample_rate)
    elapsed = time.perf_counter() - started
    timing = {"first_audio_s": round(first_audio if first_audio is not None else elapsed, 4),
              "total_s": round(elapsed, 4),
              "realtime_factor": round(wav.numel() / caps.sample_rate / elapsed, 3) if elapsed > 0 else None}
    return wav, {**ctx.meta, "chunks": len(texts), "sample_rate": caps.sample_rate, "warnings": warnings,
                 "timing": timing}

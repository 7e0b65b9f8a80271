"""Qwen3-TTS on the runtime: four components, three phases per request.

    engine = Qwen3TTSEngine(load_qwen3_tts(folder), manager, device="cuda")
    with manager.request(seed=0) as ctx:
        wav = engine.speak(ctx, "Hello.", speaker="Vivian")                          # CustomVoice
        wav = engine.speak(ctx, "Hello.", instruct="A calm, low voice.")             # VoiceDesign
        wav = engine.speak(ctx, "Hello.", ref_audio=(wav, sr), ref_text="...")       # Base: voice clone

Phases:
- "voice prompt" (oneshot; Base models): codec encoder -> reference codes, speaker encoder -> x-vector;
- "talker" (sequence): talker and code predictor together, one component; the code
  predictor (15 forwards per frame) is marked hot so it is placed first and never streams while
  room allows; the text embedding table (151936 rows) stays on the CPU, only looked-up rows move;
- "codec decoder" (oneshot): codes -> 24 kHz waveform in chunks of 300 frames with 25 frames of left
  context (upstream's chunked_decode). If it is still out of memory after the exact retries, and
  `compute.oom_fallback` is on, it decodes in chunks of 50 frames the same way (a quarter of the
  working memory; the audio differs slightly where a sample's receptive field reaches past the 25
  frames of context), named in `applied.fallbacks`.
Working memory comes from the request: the talker's KV cache for prompt + min(16 frames per text
token, max_new_tokens) positions (runtime.lm.cache.peak_bytes), its prefill activations; the
decoder's from the frames of one chunk. Sampling draws from the request's generator (restored on an
OOM retry), so a seed gives the same audio however much was streamed.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...runtime import DeviceService, ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..pack.audio import resample, to_mono
from ..pack.engine import Capabilities, Chunk, Engine, Reference
from ..blocks.transformer import kv_position_bytes
from .generate import Request, Sampling, build_prompt, generate_codes, speaker_embedding
from .loader import Qwen3TTSBundle
from .text import assistant_text, instruct_text, ref_text

log = logging.getLogger("mizuoto")

DECODE_CHUNK = 300           # frames per chunk of upstream's chunked_decode
FALLBACK_CHUNK = 50          # the OOM fallback's chunks (each with the same 25 frames of left context)
FRAMES_PER_TEXT_TOKEN = 16   # 12.5 Hz frames; speech averages ~3-4 per BPE token, the estimate leaves room
SAMPLE_RATE = 24000
MB = 1 << 20


LANGUAGE_NAMES = {"en": "english", "zh": "chinese", "ja": "japanese", "ko": "korean", "de": "german",
                  "fr": "french", "ru": "russian", "pt": "portuguese", "es": "spanish", "it": "italian"}


def capabilities(config, piece_samples: int = 0) -> Capabilities:
    """What a Qwen3-TTS checkpoint can do, from its config: CustomVoice speaks named voices (the 1.7B
    one also takes an instruction), VoiceDesign an instruction, Base clones (transcript optional:
    without it only the speaker embedding is used). `piece_samples`: the audio of one decode chunk,
    handed over as it is decoded."""
    kind = config.model_type
    return Capabilities(
        piece_samples=piece_samples,
        sample_rate=SAMPLE_RATE,
        languages=("auto", *(c for c, n in LANGUAGE_NAMES.items() if n in config.languages)),
        voices=tuple(sorted(config.talker.spk_id)) if kind == "custom_voice" else (),
        voice_required=kind == "custom_voice",
        cloning="required" if kind == "base" else "none",
        transcript="optional" if kind == "base" else "none",
        instruction=kind == "voice_design" or (kind == "custom_voice" and config.model_size != "0b6"),
        reference_seconds=(0.1, 60.0))


class DecodeStream:
    """The codec decoder's audio of one request, made chunk by chunk as upstream's chunked_decode cuts
    it; each chunk is decoded once (it depends only on its own codes and left context, so any order of
    phases and retries gives the same samples) and handed to `emit(samples, start)` past the first
    `skip` samples, `start` counted from there. `skip` None: not known yet (`cut` sets it)."""

    def __init__(self, codec: Any, device: Callable[[], torch.device], emit: Callable[[Tensor, int], None] | None,
                 skip: int | None = 0) -> None:
        self.codec, self.device, self.emit, self.skip = codec, device, emit, skip
        self.done: list[Tensor] = []
        self.frame = 0           # frames decoded
        self.sample = 0          # samples decoded
        self.sent = 0            # samples handed to emit (counted from 0, not from skip)

    def advance(self, codes: Tensor, chunk: int, final: bool = False) -> None:
        """Decode the whole chunks of `codes` [F, 16] (the request's codes so far) not decoded yet, and
        when `final` the last, shorter one too, trimmed as SpeechTokenizer.decode trims."""
        frames = codes.shape[0]
        x = None
        while self.frame < frames and (final or self.frame + chunk <= frames):
            end = min(self.frame + chunk, frames)
            if x is None:
                x = self.codec.decoder_input(codes.to(self.device()))
            with torch.inference_mode():
                wav = self.codec.decoder.window(x, self.frame, end)[0, 0].float().cpu()
            if final:
                wav = wav[:max(frames * self.codec.config.decode_upsample_rate - self.sample, 0)]
            self.done.append(wav)
            self.frame, self.sample = end, self.sample + wav.numel()
            self.hand()

    def cut(self, skip: int) -> None:
        """The audio begins at `skip`: hand over what was decoded past it."""
        self.skip = skip
        self.hand()

    def hand(self) -> None:
        if self.emit is None or self.skip is None or self.sample <= max(self.sent, self.skip):
            return
        first = max(self.sent, self.skip)
        with torch.inference_mode(False):          # the caller's buffers are ordinary tensors
            self.emit(self.audio()[first:], first - self.skip)
        self.sent = self.sample

    def audio(self) -> Tensor:
        """Everything decoded so far (float32, CPU)."""
        if len(self.done) > 1:
            self.done = [torch.cat(self.done)]
        return self.done[0] if self.done else torch.zeros(0)


class Qwen3TTSEngine(Engine):
    engine_id = "qwen3_tts"

    def __init__(self, bundle: Qwen3TTSBundle, manager: ModelManager, device: torch.device | str = "cpu",
                 min_unit_bytes: int | None = None, name: str = "Qwen3-TTS", decode_chunk: int = DECODE_CHUNK) -> None:
        if not isinstance(decode_chunk, int) or decode_chunk < 1:
            raise ValueError(f"decode_chunk: expected a whole number of frames >= 1 (upstream: {DECODE_CHUNK}), "
                             f"got {decode_chunk!r}")
        self.bundle = bundle
        # frames per decode chunk; other values than upstream's 300 change the audio slightly (tests use few)
        self.decode_chunk = decode_chunk
        self.fallback_chunk = max(1, decode_chunk * FALLBACK_CHUNK // DECODE_CHUNK)
        self.capabilities = capabilities(bundle.config, decode_chunk * bundle.codec.config.decode_upsample_rate)
        model, codec = bundle.model, bundle.codec
        DeviceService.pin_to_cpu(model.talker.model.text_embedding)
        self.talker = ModelHandle(model.talker, name="talker", kind="sequence", min_unit_bytes=min_unit_bytes)
        # The code predictor runs 15 times per frame, the talker's layers once: keep it resident first.
        self.talker.mark(model.talker.code_predictor, "hot")
        self.decoder = ModelHandle(codec.decoder, name="codec decoder", kind="oneshot", min_unit_bytes=min_unit_bytes)
        self.encoder = ModelHandle(codec.encoder, name="codec encoder", kind="oneshot", min_unit_bytes=min_unit_bytes)
        self.speaker = (ModelHandle(model.speaker_encoder, name="speaker encoder", kind="oneshot",
                                    min_unit_bytes=min_unit_bytes) if model.speaker_encoder is not None else None)
        handles = [h for h in (self.talker, self.decoder, self.encoder, self.speaker) if h is not None]
        super().__init__(manager, handles, device, name=name)

    @property
    def config(self):
        return self.bundle.config

    # ---- requests ------------------------------------------------------------------------------------
    def tokenize(self, text: str, instruct: str | None = None, ref: str | None = None) -> dict[str, Tensor | None]:
        tok = self.bundle.tokenizer
        ids = lambda s: torch.tensor([tok.encode(s)], dtype=torch.long)  # noqa: E731
        return {"text_ids": ids(assistant_text(text)),
                "instruct_ids": ids(instruct_text(instruct)) if instruct else None,
                "ref_ids": ids(ref_text(ref)) if ref else None}

    def check(self, text: str, language: str, speaker: str | None, instruct: str | None,
              ref_audio: Any, ref_text_: str | None, x_vector_only: bool) -> None:
        """Clear errors for requests the model cannot serve (before anything is placed)."""
        cfg = self.config
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text: empty or only whitespace; expected something to read")
        if not isinstance(language, str) or language.lower() not in cfg.languages:
            raise ValueError(f"language {language!r} is not supported by this model; expected one of "
                             f"{', '.join(cfg.languages)}")
        kind = cfg.model_type
        if kind == "custom_voice":
            if not speaker:
                raise ValueError(f"speaker: a CustomVoice model needs one of {', '.join(sorted(cfg.talker.spk_id))}")
            if speaker.lower() not in cfg.talker.spk_id:
                raise ValueError(f"speaker {speaker!r} is not a voice of this model; expected one of "
                                 f"{', '.join(sorted(cfg.talker.spk_id))}")
        elif speaker:
            raise ValueError(f"speaker: only CustomVoice models have named speakers; this is a {kind} model")
        if kind == "base":
            if ref_audio is None:
                raise ValueError("ref_audio: a Base model clones a voice: give reference audio (and its transcript, "
                                 "or x_vector_only=True)")
            if not x_vector_only and not (ref_text_ and ref_text_.strip()):
                raise ValueError("ref_text: the transcript of the reference audio is needed unless x_vector_only=True")
        elif ref_audio is not None:
            raise ValueError(f"ref_audio: only Base models clone voices; this is a {kind} model")

    # ---- estimates --------------------------------------------------------------------------------------
    def talker_memory(self, prompt_tokens: int, text_tokens: int, max_new_tokens: int) -> int:
        """KV cache of prompt + expected frames, prefill activations, the code predictor, logits."""
        tc = self.config.talker
        cp = tc.code_predictor
        dtype = self.bundle.dtype
        size = torch.empty((), dtype=dtype).element_size()
        frames = min(FRAMES_PER_TEXT_TOKEN * max(text_tokens, 1), max_new_tokens)
        positions = prompt_tokens + frames
        kv = peak_bytes(kv_position_bytes(tc.num_key_value_heads, tc.head_dim, dtype), tc.num_hidden_layers, positions)
        kv += peak_bytes(kv_position_bytes(cp.num_key_value_heads, cp.head_dim, dtype), cp.num_hidden_layers,
                         tc.num_code_groups + 1)
        width = max(tc.intermediate_size * 3, tc.num_attention_heads * tc.head_dim * 2 + tc.hidden_size * 4,
                    tc.text_hidden_size * 3)
        prefill = prompt_tokens * (width * size + tc.vocab_size * size)
        scores = tc.num_attention_heads * prompt_tokens * prompt_tokens * 4     # attention of the prefill (math path)
        return kv + prefill + scores + 4 * tc.vocab_size * 4 + MB

    def decoder_memory(self, frames: int, chunk: int = DECODE_CHUNK) -> int:
        """One chunk (<= `chunk` frames + 25 of context) through the upsampling stack: the widest stage's
        activations times the temporaries of SnakeBeta and a residual unit."""
        dc = self.bundle.codec.config.decoder
        size = next(self.bundle.codec.decoder.parameters()).element_size()
        chunk = min(frames, chunk) + min(frames, 25)
        widest = dc.hidden_size * 8 * chunk                      # the transformer (SwiGLU hidden ~ 3 x width)
        t = chunk
        for f in dc.upsampling_ratios:
            t *= f
        widest = max(widest, dc.latent_dim * 4 * t)              # ConvNeXt's 4x pointwise layer
        ch = dc.decoder_dim
        widest = max(widest, ch * t)
        for r in dc.upsample_rates:
            t *= r
            ch //= 2
            widest = max(widest, ch * t)
        attention = dc.num_attention_heads * chunk * chunk * 4
        return 6 * widest * size + attention + frames * 16 * 8 + chunk * 1920 * 8 + MB

    def prompt_memory(self, samples: int) -> int:
        """Codec encoder and speaker encoder over the reference: a few activations per input sample."""
        ec = self.bundle.codec.config.encoder
        size = next(self.bundle.codec.encoder.parameters()).element_size()
        widest = max(ec.num_filters * samples, 512 * samples // 256 * 4)
        frames = samples // 960 + 1
        attention = ec.num_attention_heads * frames * frames * 4
        return 8 * widest * max(size, 4) + attention + MB

    # ---- the phases ---------------------------------------------------------------------------------------
    def voice_prompt(self, ctx: RequestContext, ref_audio: Any, x_vector_only: bool) -> tuple[Tensor | None, Tensor]:
        """Reference audio -> (reference codes [T, 16] or None, x-vector [D]) in the "voice prompt" phase."""
        wav, sr = ref_audio if isinstance(ref_audio, tuple) else (ref_audio, None)
        if isinstance(ref_audio, dict):                         # ComfyUI AUDIO
            wav, sr = ref_audio["waveform"], ref_audio["sample_rate"]
        if sr is None:
            raise ValueError(f"ref_audio: give (waveform, sample_rate); the model expects {SAMPLE_RATE} Hz and "
                             "resamples other rates")
        wav = to_mono(wav)
        if wav.numel() < 1920:
            raise ValueError(f"ref_audio: {wav.numel()} samples is too short; expected at least 80 ms of speech")
        codec_rate = self.bundle.codec.config.input_sample_rate
        spk_rate = self.config.speaker_encoder.sample_rate
        wav_codec = resample(wav, int(sr), codec_rate, "soxr_hq")    # librosa.resample's default, as upstream
        wav_spk = resample(wav, int(sr), spk_rate, "soxr_hq")
        handles = [self.speaker] if x_vector_only else [self.encoder, self.speaker]

        def run():
            with torch.inference_mode():
                codes = None if x_vector_only else self.bundle.codec.encode(
                    wav_codec.to(self.encoder.device, next(self.bundle.codec.encoder.parameters()).dtype)).cpu()
                spk = speaker_embedding(self.bundle.model, wav_spk).cpu()
            return codes, spk

        return ctx.run("voice prompt", handles, run, memory=self.prompt_memory(max(wav_codec.numel(), wav_spk.numel())))

    def codes(self, ctx: RequestContext, request: Request, sampling: Sampling,
              progress: Callable[[int, int], None] | None = None, stream: DecodeStream | None = None) -> Tensor:
        """The "talker" phase: prompt embeddings and the generation loop -> codes [frames, 16]. With a
        `stream` the codec decoder shares the phase and decodes each chunk as soon as its codes exist
        (the estimate covers both); if that phase stays out of memory after its retries, the talker runs
        alone as without a stream (same codes: the chunks decode afterwards)."""
        text_tokens = max(request.text_ids.numel() - 8, 1)
        prompt_tokens = request.text_ids.numel() + 8 + (request.instruct_ids.numel() if request.instruct_ids is not None else 0)
        prefix = request.ref_code if request.icl else None
        if prefix is not None:
            prompt_tokens += prefix.shape[0] + request.ref_ids.numel()
        kind = self.kv_cache(ctx)
        memory = self.talker_memory(prompt_tokens, text_tokens, sampling.max_new_tokens)

        def run(on_frame: Callable[[list[list[int]]], None] | None = None) -> Tensor:
            with torch.inference_mode():
                prompt = build_prompt(self.bundle.model, request, self.device)
                return generate_codes(self.bundle.model.talker, prompt, sampling, ctx.generator, kind,
                                      check=ctx.check_cancelled, progress=progress, on_frame=on_frame)

        if stream is not None:
            def on_frame(frames: list[list[int]]) -> None:
                made = len(frames) + (prefix.shape[0] if prefix is not None else 0)
                if made >= stream.frame + self.decode_chunk:        # the next chunk's codes are all there
                    new = torch.tensor(frames, dtype=torch.long)
                    stream.advance(new if prefix is None else torch.cat([prefix, new]), self.decode_chunk)

            frames = min(FRAMES_PER_TEXT_TOKEN * text_tokens, sampling.max_new_tokens) + \
                (prefix.shape[0] if prefix is not None else 0)
            rng = ctx.generator.get_state()
            try:
                return ctx.run("talker", [self.talker, self.decoder], lambda: run(on_frame),
                               memory=memory + self.decoder_memory(frames, self.decode_chunk))
            except torch.OutOfMemoryError as e:
                ctx.generator.set_state(rng)            # the same draws as the attempts that failed
                log.warning("%s: the talker with the codec decoder beside it is out of memory (%s); generating "
                            "without decoding meanwhile (the same audio, handed over later)", self.name, e)
        return ctx.run("talker", [self.talker], run, memory=memory)

    def decode(self, ctx: RequestContext, codes: Tensor, emit: Callable[[Tensor, int], None] | None = None,
               skip: int = 0, stream: DecodeStream | None = None) -> Tensor:
        """The "codec decoder" phase: codes [F, 16] -> waveform [F * 1920] (float32, CPU), chunk by chunk
        (DecodeStream: `emit` and `skip` as there), the rest of a `stream` decoded during the talker.
        An OOM retry goes on from the first chunk not yet decoded (each depends only on its own codes:
        bit-equal to decoding all again); the fallback decodes the frames not yet decoded in smaller
        chunks, so what was handed over stays final."""
        stream = stream if stream is not None else self.decode_stream(emit, skip)
        frames = codes.shape[0]

        def run(chunk: int) -> Tensor:
            stream.advance(codes, chunk, final=True)
            return stream.audio()

        fallback = (f"codec decoder in {self.fallback_chunk}-frame chunks", lambda: run(self.fallback_chunk),
                    self.decoder_memory(frames, self.fallback_chunk))
        return ctx.run("codec decoder", [self.decoder], lambda: run(self.decode_chunk),
                       memory=self.decoder_memory(frames, self.decode_chunk), fallback=fallback)

    def decode_stream(self, emit: Callable[[Tensor, int], None] | None, skip: int = 0) -> DecodeStream:
        return DecodeStream(self.bundle.codec, lambda: self.decoder.device, emit, skip)

    def speak(self, ctx: RequestContext, text: str, *, language: str = "auto", speaker: str | None = None,
              instruct: str | None = None, ref_audio: Any = None, ref_text: str | None = None,
              x_vector_only: bool = False, non_streaming: bool | None = None,
              tokens: dict[str, Tensor | None] | None = None, progress: Callable[[int, int], None] | None = None,
              prompt_cache: dict[str, Any] | None = None, emit: Callable[[Tensor, int], None] | None = None,
              **sampling: Any) -> Tensor:
        """Text -> mono float32 waveform [T] at 24 kHz on the CPU.

        `tokens` (text_ids / instruct_ids / ref_ids, templated) skips the BPE tokenizer; sampling options
        (do_sample, temperature, top_k, top_p, repetition_penalty, subtalker_*, max_new_tokens) default
        to the model's generation_config.json, then upstream's defaults. `prompt_cache` keeps the voice
        prompt of the reference across the chunks of one request. `emit(samples, start)` gets the audio
        each decode chunk adds, as it is decoded (Chunk.emit).
        """
        self.check(text, language, speaker, instruct, ref_audio, ref_text, x_vector_only)
        s = Sampling.merged(self.bundle.generate_defaults, **sampling)
        kind = self.config.model_type
        if kind == "custom_voice" and self.config.model_size and self.config.model_size in "0b6":
            instruct = None                                      # upstream: the 0.6B CustomVoice takes no instruction
        if kind == "base":
            instruct = None
        if non_streaming is None:
            non_streaming = kind != "base"                       # upstream's defaults per mode
        ids = tokens if tokens is not None else self.tokenize(text, instruct, None if x_vector_only else ref_text)
        request = Request(ids["text_ids"], language, speaker, ids.get("instruct_ids") if instruct else None,
                          non_streaming=non_streaming)
        if kind == "base":
            cache = prompt_cache if prompt_cache is not None else {}
            if "voice" not in cache:
                cache["voice"] = self.voice_prompt(ctx, ref_audio, x_vector_only)
            ref_code, spk = cache["voice"]
            request.spk_embedding = spk
            if not x_vector_only:
                request.ref_code, request.ref_ids = ref_code, ids["ref_ids"]
        rate = self.bundle.codec.config.decode_upsample_rate
        ref = request.ref_code.shape[0] if request.icl else 0
        # a voice clone's reference is cut where upstream's float arithmetic puts it (its frames, or one
        # sample less, depending on how many frames follow): handed over once the talker is done
        stream = self.decode_stream(emit, None if ref else 0) if emit is not None and self.interleaves() else None
        codes = self.codes(ctx, request, s, progress, stream)
        if codes.shape[0] == 0:
            return torch.zeros(0)
        if request.icl:
            full = torch.cat([request.ref_code, codes], dim=0)
            # upstream cuts the reference's share of the decoded audio (F * 1920 samples long)
            cut = int(ref / max(full.shape[0], 1) * (full.shape[0] * rate))
            if stream is not None:
                stream.cut(cut)
            wav = self.decode(ctx, full, emit, skip=cut, stream=stream)
            return wav[cut:]
        return self.decode(ctx, codes, emit, stream=stream)

    def interleaves(self) -> bool:
        """Whether chunks decoded beside the talker are the final audio: each frame decodes to exactly
        the samples SpeechTokenizer.decode keeps of it (all published configs)."""
        codec = self.bundle.codec
        return codec.decoder.total_upsample == codec.config.decode_upsample_rate

    def split_text(self, text: str, reference: Reference | None = None, reference_text: str | None = None,
                   language: str = "auto", speed: float = 1.0) -> list[str]:
        """Upstream's generate_* reads the whole text in one generation (qwen-tts 0.1.1 cuts nothing;
        max_new_tokens bounds the audio): one segment, the text as written."""
        return [text] if text.strip() else []

    def phase_components(self) -> list[list[ModelHandle]]:
        # the talker phase holds the decoder too when audio is handed over while it is made
        return [[self.encoder, self.speaker] if self.speaker else [], [self.speaker] if self.speaker else [],
                [self.talker, self.decoder], [self.talker], [self.decoder]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        ref = (chunk.reference.wav, chunk.reference.sample_rate) if chunk.reference is not None else None
        return self.speak(ctx, chunk.text, language=LANGUAGE_NAMES.get(chunk.language, chunk.language),
                          speaker=chunk.voice, instruct=chunk.instruction, ref_audio=ref, ref_text=chunk.reference_text,
                          x_vector_only=ref is not None and not chunk.reference_text, progress=chunk.progress,
                          prompt_cache=chunk.prompts, emit=chunk.emit)

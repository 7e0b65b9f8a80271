"""Fish Speech (OpenAudio S1-mini; S2-Pro through FishS2Engine) on the runtime: two components, three
phases per chunk.

    engine = FishSpeechEngine(load_fish_speech(folder), manager, device="cuda")
    with manager.request(seed=0) as ctx:
        wav = engine.speak_chunk(ctx, Chunk("(excited) Hello!", seed=0, reference=ref, reference_text="..."))

- "prompt" (oneshot, cloning only): the codec encodes the reference (44.1 kHz) into codes; computed
  once per voice (`chunk.prompts`) and reused by every chunk;
- "generate" (sequence): the slow LM once per frame, the fast LM (marked hot: it runs once per
  codebook, 10 times per frame) filling the frame's other codebooks;
- "decode" (oneshot): the codec turns the codes into 44.1 kHz audio.
Working memory comes from the request: the slow KV cache for prompt + min(frames per text token x
text tokens, max_new_tokens) positions, the prefill's activations and logits; the codec's from the
reference or frame count. Sampling draws from the request's generator, restored on an OOM retry.
The S1 emotion and tone markers, "(excited)", "(whispering)", are plain text to the model.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import Tensor

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..blocks.decode import frames_estimate
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Segment
from ..blocks.transformer import kv_position_bytes
from .generate import (SPEAKER_TAG, S2Sampling, Sampling, build_chat_prompt, build_prompt, generate_codes,
                       group_batches, split_turns)
from .loader import FishBundle

# The languages S1 was trained on; the model reads the language from the text itself (no language input).
LANGUAGES = ("auto", "en", "zh", "ja", "ko", "fr", "de", "ar", "es", "ru", "nl", "it", "pl", "pt")

# Voices (references) in one native dialogue: every reference sits in the system prompt of every batch,
# so their codes bound the context; five, as many as upstream's batches hold speaker turns
MAX_SPEAKERS = 5
GENERATION_ROOM = 2048  # generate_long (fish-speech 2.0 and S2): a prompt may use max_seq_len minus this
FRAMES_PER_TEXT_TOKEN = 12   # ~21.5 frames/s; BPE text runs 2-4 tokens/s of speech, the estimate leaves room
MB = 1 << 20


class FishSpeechEngine(Engine):
    engine_id = "fish_speech"
    capabilities = Capabilities(sample_rate=44100, languages=LANGUAGES, cloning="optional", transcript="required",
                                reference_seconds=(0.5, 60.0), reference_rate=44100,
                                resampler="torchaudio_sinc")
    # upstream's defaults and ranges (generate.Sampling.validate); max_new_tokens to twice the largest
    # context (8192) at most: the model stops at its own context anyway
    options: ClassVar[dict[str, Option]] = {
        "temperature": Option(float, Sampling.temperature, 0.0, 2.0, low_open=True, high_open=True),
        "top_p": Option(float, Sampling.top_p, 0.0, 1.0, low_open=True),
        "repetition_penalty": Option(float, Sampling.repetition_penalty, 0.0, 2.0, low_open=True, high_open=True),
        "max_new_tokens": Option(int, Sampling.max_new_tokens, 2, 16384),
        "do_sample": Option(bool, Sampling.do_sample)}

    def __init__(self, bundle: FishBundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None) -> None:
        self.bundle = bundle
        self.lm = ModelHandle(bundle.model, name="lm", kind="sequence", min_unit_bytes=min_unit_bytes)
        # The fast transformer and its head run once per codebook (10 times per frame), the slow layers once.
        model = bundle.model
        for part in (*model.fast_layers, model.fast_output, model.fast_project_in):
            if any(True for _ in part.parameters()):
                self.lm.mark(part, "hot")
        self.codec = ModelHandle(bundle.codec, name="codec", kind="oneshot", min_unit_bytes=min_unit_bytes)
        super().__init__(manager, [self.lm, self.codec], device, name)

    # ---- estimates ------------------------------------------------------------------------------------
    def generate_memory(self, prompt_tokens: int, text_tokens: int, max_new_tokens: int) -> int:
        """Slow KV cache of prompt + expected frames, the prefill's activations, attention and logits."""
        c = self.bundle.config
        dtype = self.bundle.dtype
        size = torch.empty((), dtype=dtype).element_size()
        frames = frames_estimate(text_tokens, FRAMES_PER_TEXT_TOKEN, max_new_tokens)
        kv = peak_bytes(kv_position_bytes(c.n_local_heads, c.head_dim, dtype), c.n_layer, prompt_tokens + frames)
        kv += peak_bytes(kv_position_bytes(c.fast_n_local_heads, c.fast_head_dim, dtype), c.n_fast_layer,
                         c.num_codebooks)
        width = max(3 * c.intermediate_size, (c.n_head + 2 * c.n_local_heads) * c.head_dim * 2 + 4 * c.dim)
        prefill = prompt_tokens * (width * max(size, 4) + (c.num_codebooks + 2) * c.dim * size)
        attention = 2 * c.n_head * prompt_tokens * prompt_tokens * 4
        logits = 4 * c.vocab_size * 4
        return kv + prefill + attention + logits + MB

    def codec_memory(self, samples: int) -> int:
        """The codec over `samples` audio samples: the widest stage's activations times the temporaries
        of Snake and a residual unit, plus the quantizer transformers' attention."""
        cc = self.bundle.codec.config
        size = next(self.bundle.codec.parameters()).element_size()
        frames = samples // cc.frame_length + 1
        widest = max(cc.encoder_dim * 2 * samples, 4 * max(cc.downsample_dims) * frames * 4)
        t, ch = frames * 4, cc.decoder_dim
        for r in cc.decoder_rates:
            widest = max(widest, ch * t)
            t, ch = t * r, ch // 2
        steps = samples // cc.hop_length + 1
        attention = 2 * max(cc.latent_dim // 64, 1) * steps * min(steps, 512) * 4 + 16 * frames * frames * 4
        return 6 * widest * max(size, 4) + attention + MB

    # ---- phases ---------------------------------------------------------------------------------------
    def reference_codes(self, ctx: RequestContext, wav: Tensor) -> Tensor:
        """The "prompt" phase: reference audio (44.1 kHz mono) -> codes [num_codebooks, frames]."""
        def run() -> Tensor:
            with torch.inference_mode():
                p = next(self.bundle.codec.parameters())
                return self.bundle.codec.encode(wav.to(self.codec.device, p.dtype)).cpu()
        return ctx.run("prompt", [self.codec], run, memory=self.codec_memory(wav.numel()))

    def codes(self, ctx: RequestContext, prompt: Tensor, text_tokens: int, sampling: Sampling,
              progress=None) -> Tensor:
        """The "generate" phase: prompt [1 + N, T] -> codes [N, frames]."""
        limit = self.bundle.model.config.max_seq_len - GENERATION_ROOM
        if prompt.shape[1] > limit:  # upstream's generate_long refuses it the same way, before generating
            raise ValueError(f"text and reference: the prompt is {prompt.shape[1]} tokens, more than this model's "
                             f"max_seq_len - {GENERATION_ROOM} = {limit} (upstream keeps {GENERATION_ROOM} positions "
                             f"for the speech); use a shorter reference clip or split the text")
        kind = self.kv_cache(ctx)

        def run() -> Tensor:
            with torch.inference_mode():
                return generate_codes(self.bundle.model, prompt, sampling, ctx.generator, self.bundle.im_end_id,
                                      kind, check=ctx.check_cancelled, progress=progress)
        memory = self.generate_memory(prompt.shape[1], text_tokens, sampling.max_new_tokens)
        return ctx.run("generate", [self.lm], run, memory=memory)

    def decode(self, ctx: RequestContext, codes: Tensor) -> Tensor:
        """The "decode" phase: codes [N, F] -> waveform [F x 2048] (float32, CPU)."""
        def run() -> Tensor:
            with torch.inference_mode():
                return self.bundle.codec.decode(codes.to(self.codec.device)).float().cpu()
        samples = codes.shape[1] * self.bundle.codec.config.frame_length
        return ctx.run("decode", [self.codec], run, memory=self.codec_memory(samples))

    sampling = Sampling
    prompt_builder = staticmethod(build_prompt)

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream reads the whole text at once: S1's generate_long (fish-speech 0.1.0) puts it in one
        TextPart (S2's batches: FishS2Engine.split_text)."""
        return [text]

    def voice(self, ctx: RequestContext, chunk: Chunk) -> tuple[str | None, Tensor | None]:
        """The reference transcript and codes the prompt holds. A native dialogue's speakers, as S2's
        generate_long takes several references: each transcript tagged `<|speaker:i|>` unless it has a
        tag, joined by newlines; each reference encoded alone, the codes concatenated in time."""
        if chunk.speakers:
            for i, (reference, _) in enumerate(chunk.speakers):
                if ("reference_codes", i) not in chunk.prompts:
                    chunk.prompts[("reference_codes", i)] = self.reference_codes(ctx, reference.wav)
            texts = [t if SPEAKER_TAG.search(t) else f"<|speaker:{i}|>{t}" for i, (_, t) in enumerate(chunk.speakers)]
            codes = [chunk.prompts[("reference_codes", i)] for i in range(len(chunk.speakers))]
            return "\n".join(texts), torch.cat(codes, dim=1)
        if chunk.reference is None:
            return chunk.reference_text, None
        if "reference_codes" not in chunk.prompts:
            chunk.prompts["reference_codes"] = self.reference_codes(ctx, chunk.reference.wav)
        return chunk.reference_text, chunk.prompts["reference_codes"]

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.codec], [self.lm], [self.codec]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        s = self.sampling(**{k: v for k, v in chunk.options.items() if v is not None})
        s.validate()
        ref_text, ref_codes = self.voice(ctx, chunk)
        tok = self.bundle.tokenizer
        prompt = self.prompt(chunk, ref_text, ref_codes)
        codes = self.codes(ctx, prompt, len(tok.encode(chunk.text)), s, chunk.progress)
        self.generated(chunk, codes)
        if codes.shape[1] == 0:
            return torch.zeros(0)
        return self.decode(ctx, codes)

    def prompt(self, chunk: Chunk, ref_text: str | None, ref_codes: Tensor | None) -> Tensor:
        return self.prompt_builder(self.bundle.tokenizer, chunk.text, self.bundle.config.num_codebooks,
                                   ref_text, ref_codes)

    def generated(self, chunk: Chunk, codes: Tensor) -> None:
        """What a later segment of the same request needs of this one's codes (S2: its batch history)."""



class FishS2Engine(FishSpeechEngine):
    """Fish Audio S2-Pro: the same modules and phases; S2's chat prompt and constrained top-k sampling with
    Repetition Aware Sampling (generate.py). Speaker tags `<|speaker:N|>` and inline `[tag]` instructions
    are text to the model."""
    options: ClassVar[dict[str, Option]] = {
        "temperature": Option(float, S2Sampling.temperature, 0.0, 2.0, low_open=True, high_open=True),
        "top_p": Option(float, S2Sampling.top_p, 0.0, 1.0, low_open=True),
        "top_k": Option(int, S2Sampling.top_k, 1, 1 << 20),     # past the vocabulary: no filter, no more work
        "max_new_tokens": Option(int, S2Sampling.max_new_tokens, 2, 16384),
        "do_sample": Option(bool, S2Sampling.do_sample)}
    capabilities = dataclasses.replace(FishSpeechEngine.capabilities, dialogue_speakers=MAX_SPEAKERS,
                                       dialogue_turn="<|speaker:{n}|>{text}")
    sampling = S2Sampling
    prompt_builder = staticmethod(build_chat_prompt)
    # upstream seeds once per generate_long: every batch draws on from the same stream
    ONE_STREAM = True

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream's batches (split_text_by_speaker, group_turns_into_batches with 5 speakers and 512
        bytes): one segment per batch; text without speaker tags is one segment as it is."""
        turns = split_turns(text)
        return group_batches(turns) if turns else [text]

    def prompt(self, chunk: Chunk, ref_text: str | None, ref_codes: Tensor | None) -> Tensor:
        """The chat prompt with the request's earlier batches as earlier conversation turns (their text and
        the codes generated for them), as upstream's generate_long carries them."""
        history = chunk.cache.get("s2_batches", {})
        earlier = [history[i] for i in range(chunk.index)] if chunk.segmented else []
        more = {"history": earlier} if earlier else {}
        return self.prompt_builder(self.bundle.tokenizer, chunk.text, self.bundle.config.num_codebooks,
                                   ref_text, ref_codes, **more)

    def generated(self, chunk: Chunk, codes: Tensor) -> None:
        if chunk.segmented and chunk.count > 1:     # by index: a segment retried after an OOM replaces its own
            chunk.cache.setdefault("s2_batches", {})[chunk.index] = (chunk.text, codes)

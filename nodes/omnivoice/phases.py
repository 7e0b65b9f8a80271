"""OmniVoice on the runtime: four components, three phases per chunk.

    engine = OmniVoiceEngine(load_omnivoice(folder), manager, device="cuda")
    with manager.request(seed=0) as ctx:
        wav = engine.speak_chunk(ctx, Chunk("Hello.", seed=0, language="en"))                    # auto voice
        wav = engine.speak_chunk(ctx, Chunk("Hello.", seed=0, instruction="female, low pitch"))  # voice design
        wav = engine.speak_chunk(ctx, Chunk("Hello.", seed=0, reference=Reference(wav, 24000),
                                            reference_text="What the reference says."))         # cloning

Phases:
- "prompt" (cloning only; codec encoder + quantizer): the 24 kHz reference through the DAC encoder and
  HuBERT (at 16 kHz) -> reference codes [8, frames]; cached for the request's later chunks;
- "generate" (backbone, oneshot, marked hot): `num_step` (32) unmasking steps, each re-running the whole
  sequence twice (conditional + unconditional rows) -- no KV cache; the 151k-row text embedding table
  stays on the CPU (looked up once per chunk), so only the layers, audio embeddings and heads move;
- "decode" (quantizer + codec decoder): codes -> 24 kHz waveform, then upstream's post-processing
  (pauses over 0.5 s shortened, edges trimmed: nodes/omnivoice/silence.py; loudness; fades and padding).
The reference gets upstream's preprocessing too (silences shortened and trimmed, a full stop added to its
transcript); options `preprocess_prompt` / `postprocess_output` (default True, as upstream) turn them off.
Working memory comes from the request: sequence length x steps' activations for "generate" (the
attention scores of both rows, the logits of every position), reference samples for "prompt",
frames for "decode". The Gumbel noise comes from a generator seeded with the chunk's seed.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ...runtime import DeviceService, ModelHandle, ModelManager, RequestContext
from ..pack.audio import resample
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Join
from .generate import Prompt, Sampling, batch, build_prompt, unmask
from .languages import LANGUAGE_IDS
from .loader import OmniVoiceBundle
from .model import OmniVoiceConfig
from .segments import split_long_text
from ..pack.silence import remove_silence
from .text import CJK, add_punctuation, combine_text, estimate_frames, resolve_instruct, style_text, wrap_text

SAMPLE_RATE = 24000
MB = 1 << 20
# "auto" (no language token: upstream's language-agnostic mode) and every id OmniVoice was trained with.
LANGUAGES = ("auto", *sorted(LANGUAGE_IDS))


class CodecPart(nn.Module):
    """A view of some of the tokenizer's submodules as one component (they keep their places and
    names in the tokenizer; the tokenizer's methods call them). `units` become the streamed units;
    the rest (HuBERT's weight-normalised positional conv, feature projection, norms, codebooks) is
    the fixed part."""

    def __init__(self, parts: dict[str, nn.Module], units: list[nn.Module]) -> None:
        super().__init__()
        for name, module in parts.items():
            self.add_module(name, module)
        self._units = units

    def memory_units(self) -> list[nn.Module]:
        return list(self._units)


class OmniVoiceEngine(Engine):
    engine_id = "omnivoice"
    # Segments are upstream's (split_text); max_chunk_chars only sizes the transcript bound.
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=LANGUAGES, cloning="optional",
                                transcript="required", instruction=True, speed=(0.5, 2.0), max_chunk_chars=150,
                                reference_seconds=(0.5, 30.0), reference_rate=SAMPLE_RATE,
                                resampler="torchaudio_functional")
    PHASED = True
    join = Join(silence_ms=100, fade_ms=100)    # cross_fade_chunks: int(0.3 s * rate) // 3 samples each
    # upstream's defaults (generate.Sampling); ranges generous around them, every step and frame bounded:
    # num_step to 8x the default, t_shift > 0 (0 collapses the schedule), duration (seconds of this chunk;
    # None: estimated from the text) to 120 s, far past what a chunk of text can say
    options: ClassVar[dict[str, Option]] = {
        "num_step": Option(int, Sampling.num_step, 1, 256),
        "guidance_scale": Option(float, Sampling.guidance_scale, 0.0, 20.0),
        "t_shift": Option(float, Sampling.t_shift, 0.0, 10.0, low_open=True),
        "layer_penalty_factor": Option(float, Sampling.layer_penalty_factor, 0.0, 100.0),
        "position_temperature": Option(float, Sampling.position_temperature, 0.0, 100.0),
        "class_temperature": Option(float, Sampling.class_temperature, 0.0, 10.0),
        "denoise": Option(bool, Sampling.denoise),
        "duration": Option(float, None, 0.0, 120.0, low_open=True),
        "preprocess_prompt": Option(bool, True),
        "postprocess_output": Option(bool, True)}

    def __init__(self, bundle: OmniVoiceBundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None) -> None:
        self.bundle = bundle
        model, codec = bundle.model, bundle.codec
        # 151k text rows, read once per chunk: they stay on the CPU and only the looked-up rows move.
        DeviceService.pin_to_cpu(model.llm.embed_tokens)
        self.backbone = ModelHandle(model, name="backbone", kind="oneshot", min_unit_bytes=min_unit_bytes)
        self.backbone.mark(model.llm, "hot")             # every layer runs 2 x num_step times per chunk
        hubert = codec.semantic_model
        self.encoder = ModelHandle(CodecPart(
            {"acoustic_encoder": codec.acoustic_encoder, "semantic_model": hubert,
             "encoder_semantic": codec.encoder_semantic, "fc": codec.fc},
            [*codec.acoustic_encoder.block, *hubert.feature_extractor.conv_layers, *hubert.encoder.layers]),
            name="codec encoder", kind="oneshot", min_unit_bytes=min_unit_bytes)
        self.quantizer = ModelHandle(CodecPart({"quantizer": codec.quantizer}, []), name="codec quantizer",
                                     kind="oneshot", min_unit_bytes=min_unit_bytes)
        self.decoder = ModelHandle(CodecPart({"fc2": codec.fc2, "acoustic_decoder": codec.acoustic_decoder},
                                             list(codec.acoustic_decoder.block)),
                                   name="codec decoder", kind="oneshot", min_unit_bytes=min_unit_bytes)
        super().__init__(manager, [self.backbone, self.encoder, self.quantizer, self.decoder], device, name)

    @property
    def config(self) -> OmniVoiceConfig:
        return self.bundle.config

    # ---- estimates ---------------------------------------------------------------------------------------
    def generate_memory(self, length: int, frames: int) -> int:
        """One step over both rows of a `length`-position sequence: what lives through the step (the text
        embeddings, the hidden state, the mask) plus the largest of its stages -- the 8-codebook embedding
        lookup before its sum, a layer (projections, MLP, attention scores where a backend forms them),
        or the heads' logits of every position with the guidance over the target frames (float32
        slices, log-softmaxes, their combination)."""
        c, lc = self.config, self.config.llm
        size = torch.empty((), dtype=self.bundle.dtype).element_size()
        rows, vocab, d = 2, c.num_audio_codebook * c.audio_vocab_size, lc.hidden_size
        live = rows * length * d * (size + 4) + rows * length * length
        embed = rows * (c.num_audio_codebook + 1) * length * d * size
        layer = rows * length * (2 * d + (lc.num_attention_heads + 2 * lc.num_key_value_heads) * lc.head_dim
                                 + 2 * lc.intermediate_size) * size
        layer += rows * lc.num_attention_heads * length * length * 4
        head = rows * length * vocab * size + 5 * vocab * frames * 4
        return live + max(embed, layer, head) + MB

    def prompt_memory(self, samples: int) -> int:
        """The reference through the widest DAC stage and HuBERT's first conv (float32 codec), a few
        temporaries each (Snake), plus HuBERT's attention over its frames."""
        cc = self.bundle.codec.config
        size = next(self.bundle.codec.parameters()).element_size()
        samples16 = samples * cc.semantic_sample_rate // cc.sample_rate + 320
        widest = max(cc.acoustic.encoder_hidden_size * (samples + cc.hop_length), cc.semantic.conv_dim[0] * samples16 // 4)
        frames16 = samples16 // 320 + 1
        attention = 2 * cc.semantic.num_attention_heads * frames16 * frames16 * 4
        states = (cc.semantic.num_hidden_layers + 3) * frames16 * cc.semantic.hidden_size * 4
        return 6 * widest * size + attention + states + 2 * samples * 4 + MB

    def decode_memory(self, frames: int) -> int:
        """The widest stage of the DAC decoder (channels x samples) a few times over (Snake's temporaries)."""
        a = self.bundle.codec.config.acoustic
        size = next(self.bundle.codec.parameters()).element_size()
        t, ch, widest = frames, a.decoder_hidden_size, a.decoder_hidden_size * frames
        for r in a.upsampling_ratios:
            t, ch = t * r, ch // 2
            widest = max(widest, ch * t)
        return 6 * widest * size + t * 8 + MB

    # ---- the phases --------------------------------------------------------------------------------------
    def encode_reference(self, ctx: RequestContext, wav: Tensor) -> Tensor:
        """The "prompt" phase: a mono 24 kHz reference (already loudness-adjusted, a whole number of hops)
        -> codes [8, frames]."""
        codec = self.bundle.codec
        wav16 = resample(wav, SAMPLE_RATE, codec.config.semantic_sample_rate, "torchaudio_functional")

        def run():
            dtype, device = next(codec.fc.parameters()).dtype, self.encoder.device
            with torch.inference_mode():
                return codec.encode(wav[None, None].to(device, dtype), wav16[None].to(device, dtype))[0].cpu()

        return ctx.run("prompt", [self.encoder, self.quantizer], run, memory=self.prompt_memory(wav.numel()))

    def generate(self, ctx: RequestContext, prompt: Prompt, sampling: Sampling, seed: int | Tensor,
                 progress: Callable[[int, int], None] | None = None,
                 on_step: Callable[[int, Tensor], None] | None = None) -> tuple[Tensor, Tensor]:
        """The "generate" phase: `num_step` unmasking steps -> (codes [8, frames], the generator's state
        after them). `seed`: a seed, or a generator state to continue from."""
        model = self.bundle.model
        ids, _, _ = batch(prompt, self.config, "cpu")
        with torch.inference_mode():
            text_embeds = model.llm.embed_tokens(ids[:, 0])          # on the CPU (pinned table)

        def run():
            generator = torch.Generator()                             # restarted on an OOM retry: same noise
            if isinstance(seed, Tensor):
                generator.set_state(seed)
            else:
                generator.manual_seed(seed)
            with torch.inference_mode():
                codes = unmask(model, prompt, text_embeds.to(self.backbone.device), sampling, generator,
                               check=ctx.check_cancelled, progress=progress, on_step=on_step)
            return codes, generator.get_state()

        return ctx.run("generate", [self.backbone], run, memory=self.generate_memory(prompt.length, prompt.frames))

    def decode(self, ctx: RequestContext, codes: Tensor) -> Tensor:
        """The "decode" phase: codes [8, frames] -> float32 waveform [frames * 960] on the CPU."""
        codec = self.bundle.codec

        def run():
            with torch.inference_mode():
                return codec.decode(codes[None].to(self.decoder.device))[0, 0].float().cpu()

        return ctx.run("decode", [self.quantizer, self.decoder], run, memory=self.decode_memory(codes.shape[1]))

    # ---- a chunk -------------------------------------------------------------------------------------------
    def prepare_reference(self, reference: Reference, transcript: str | None,
                          preprocess: bool = True) -> tuple[Tensor, str, float]:
        """create_voice_clone_prompt before the codec: the reference at 24 kHz, brought up to 0.1 RMS when
        quieter, with `preprocess` (upstream's default) its silences shortened and edges trimmed and a
        full stop added to the transcript; cut to whole codec frames. -> (samples, transcript, RMS); made
        once per Reference and setting (split_text and the voice prompt both read it)."""
        key = ("omnivoice reference", transcript, preprocess)
        if key not in reference.derived:
            reference.derived[key] = self._prepare_reference(reference, transcript, preprocess)
        return reference.derived[key]

    def _prepare_reference(self, reference: Reference, transcript: str | None,
                           preprocess: bool) -> tuple[Tensor, str, float]:
        wav = reference.wav.float()
        if reference.sample_rate != SAMPLE_RATE:
            wav = resample(wav, reference.sample_rate, SAMPLE_RATE, "torchaudio_functional")
        # In numpy float32, as upstream: the same rounding of the RMS and of the scaled samples.
        x = wav.cpu().numpy()
        rms = float(np.sqrt(np.mean(x ** 2)))
        if 0 < rms < 0.1:                                             # quiet references are brought up to 0.1 RMS
            wav = torch.from_numpy(x * 0.1 / rms)
        text = transcript or ""
        if preprocess:                                                # upstream's preprocess_prompt
            wav = remove_silence(wav, SAMPLE_RATE, mid_sil=200, lead_sil=100, trail_sil=200)
            if wav.numel() == 0:
                raise ValueError("reference_audio: nothing louder than -50 dBFS is left after silence removal")
            text = add_punctuation(text)
        hop = self.bundle.codec.config.hop_length
        wav = wav[:wav.numel() - wav.numel() % hop]
        if wav.numel() == 0:
            raise ValueError(f"reference_audio: shorter than one codec frame ({hop} samples at {SAMPLE_RATE} Hz)")
        return wav, text, rms

    def voice_prompt(self, ctx: RequestContext, chunk: Chunk, preprocess: bool = True) -> tuple[Tensor, str, float] | None:
        """Reference codes, transcript and loudness for a cloning chunk, computed once per request."""
        if chunk.reference is None:
            return None
        if "voice" not in chunk.prompts:
            wav, text, rms = self.prepare_reference(chunk.reference, chunk.reference_text, preprocess)
            chunk.prompts["voice"] = (self.encode_reference(ctx, wav), text, rms)
        return chunk.prompts["voice"]

    def split_text(self, text: str, reference: Reference | None = None, reference_text: str | None = None,
                   language: str = "auto", speed: float = 1.0) -> list[str]:
        """Upstream's generate: the whole text, unless its estimated audio is over 30 s; then pieces of
        about 15 s (segments.py). The estimate takes the reference as preprocessed by default (one codec
        frame per hop of its samples) and the speed; a `duration` option does not change the cut."""
        if not text.strip():
            return []
        ref_text = ref_frames = None
        if reference is not None:
            wav, ref_text, _ = self.prepare_reference(reference, reference_text)
            ref_frames = wav.numel() // self.bundle.codec.config.hop_length
        frame_rate = self.bundle.codec.config.frame_rate
        return split_long_text(text, estimate_frames(text, ref_text, ref_frames, speed=speed), frame_rate)

    def make_prompt(self, chunk: Chunk, voice: tuple[Tensor, str, float | None] | None, denoise: bool) -> Prompt:
        tok = self.bundle.tokenizer
        ref_codes, ref_text = (voice[0], voice[1]) if voice is not None else (None, None)
        instruct = resolve_instruct(chunk.instruction, use_zh=bool(CJK.search(chunk.text)))
        language = None if chunk.language in (None, "", "auto") else chunk.language
        duration = chunk.options.get("duration")
        if duration:
            frames = max(1, int(float(duration) * self.bundle.codec.config.frame_rate))
        else:
            frames = estimate_frames(chunk.text, ref_text, ref_codes.shape[1] if ref_codes is not None else None,
                                     speed=chunk.speed)
        style = tok.encode(style_text(language, instruct, denoise and ref_codes is not None))
        text = tok.encode_text(wrap_text(combine_text(chunk.text, ref_text)))
        return build_prompt(style, text, ref_codes, frames, self.config)

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.encoder, self.quantizer], [self.backbone], [self.quantizer, self.decoder]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk,
                    on_step: Callable[[int, Tensor], None] | None = None) -> Tensor:
        """One chunk -> mono float32 [T] at 24 kHz; `on_step(step, tokens)` sees the tokens after each step."""
        options = dict(chunk.options)
        options.pop("duration", None)
        preprocess = options.pop("preprocess_prompt", self.options["preprocess_prompt"].default)
        postprocess_output = options.pop("postprocess_output", self.options["postprocess_output"].default)
        sampling = Sampling.merged(**options)
        voice = self.voice_prompt(ctx, chunk, preprocess)
        if voice is None and chunk.index > 0:
            # Without a reference, later chunks clone the first chunk's voice, as upstream's long-text
            # generation does (its codes and text as the reference; loudness still by peak).
            voice = chunk.cache.get("first")
        prompt = self.make_prompt(chunk, voice, sampling.denoise)
        # The pieces of a long text draw from one random stream, as upstream's do (one manual_seed).
        start = chunk.cache["rng"] if chunk.index > 0 and "rng" in chunk.cache else chunk.seed
        codes, chunk.cache["rng"] = self.generate(ctx, prompt, sampling, start, chunk.progress, on_step)
        if chunk.reference is None and chunk.index == 0 and chunk.count > 1:
            chunk.cache["first"] = (codes, chunk.text, None)
        wav = self.decode(ctx, codes)
        if chunk.count > 1:             # a piece of a long text: post-processed once joined (finish)
            return wav
        return self.postprocess(wav, voice[2] if voice is not None else None, postprocess_output)

    def finish(self, wav: Tensor, last: Chunk) -> Tensor:
        """A long text's pieces, joined by cross_fade_chunks, are post-processed as one, as upstream does."""
        if last.count == 1:
            return wav
        voice = last.prompts.get("voice")
        return self.postprocess(wav, voice[2] if voice is not None else None, self.option(last, "postprocess_output"))

    @staticmethod
    def postprocess(wav: Tensor, ref_rms: float | None, shorten_pauses: bool) -> Tensor:
        """_post_process_audio: long pauses shortened (upstream's default), then loudness and edges."""
        if shorten_pauses:
            wav = remove_silence(wav, SAMPLE_RATE, mid_sil=500, lead_sil=100, trail_sil=100)
        return postprocess(wav, ref_rms)


def postprocess(wav: Tensor, ref_rms: float | None, pad: float = 0.1, fade: float = 0.1) -> Tensor:
    """Upstream's loudness and edges: the reference's loudness when it was quiet, else a 0.5 peak; 0.1 s
    linear fades and 0.1 s of silence on both sides."""
    if ref_rms is not None and ref_rms < 0.1:
        wav = wav * ref_rms / 0.1
    elif ref_rms is None:
        peak = wav.abs().max()
        if peak > 1e-6:
            wav = wav / peak * 0.5
    if wav.numel() == 0:
        return wav
    k = min(int(fade * SAMPLE_RATE), wav.numel() // 2)
    wav = wav.clone()
    if k > 0:                                                         # numpy's linspace, as upstream
        wav[:k] *= torch.from_numpy(np.linspace(0, 1, k, dtype=np.float32))
        wav[-k:] *= torch.from_numpy(np.linspace(1, 0, k, dtype=np.float32))
    silence = torch.zeros(int(pad * SAMPLE_RATE))
    return torch.cat([silence, wav, silence])

"""VoxCPM 2 on the runtime: three components, three phases per chunk.

    engine = VoxCPMEngine(load_voxcpm(folder), manager, device="cuda")
    with manager.request(seed=0) as ctx:
        wav = engine.speak_chunk(ctx, Chunk("Hello.", seed=0))                                  # zero-shot
        wav = engine.speak_chunk(ctx, Chunk("Hello.", seed=0, instruction="a calm, low voice"))  # voice design
        wav = engine.speak_chunk(ctx, Chunk("Hello.", seed=0, reference=Reference(wav16k, 16000)))  # cloning

Phases:
- "prompt" (oneshot; with reference audio): the AudioVAE encoder turns the 16 kHz reference into latent
  patches, once per voice (shared by its chunks and later requests through `chunk.prompts`);
- "generate" (sequence): base LM, residual LM, LocEnc and the LocDiT flow head, one component; the LocDiT
  runs 2 x (steps - 1) times per frame, so it is marked hot (placed first, streamed last); the token
  embedding (73448 x 2048) stays on the CPU and only the prompt's rows move;
- "decode" (oneshot): the AudioVAE decoder, latents -> 48 kHz.
Working memory comes from the request: the KV caches of prompt + the frame limit upstream derives from
the text (ratio x tokens + 10) via runtime.lm.cache.peak_bytes, the prefill's activations, the VAE's
widest activation for the reference's or the output's length.

Modes (upstream's): plain text; `instruction` -> "(instruction)text" (voice design, or controllable
cloning with a reference); reference alone -> isolated reference cloning; reference + transcript ->
"ultimate" cloning (the same clip as isolated reference and as the audio the speech continues from).
"""
from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

import torch
from torch import Tensor

from ...runtime import DeviceService, ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Segment
from ..blocks.transformer import kv_position_bytes
from .generate import ATTENTION_BLOCK, Sampling, build_prompt, decode_latents, encode_audio, generate
from .loader import VoxCPMBundle
from .text import LANGUAGES, normalize_spaces, with_control

MB = 1 << 20


def layer_memory(tokens: int, c, size: int) -> int:
    """Peak activations of one MiniCPM layer over `tokens` positions: the larger of attention (q, k, v, and
    RoPE's float32 temporaries) and the SwiGLU (gate, up, their product, silu), plus the residual stream."""
    q = c.num_attention_heads * c.head_dim
    attention = tokens * (q + 2 * c.num_key_value_heads * c.head_dim) * size
    if not c.no_rope:
        attention += 3 * tokens * q * 4
    return max(attention, 4 * tokens * c.intermediate_size * size) + 2 * tokens * c.hidden_size * size


class VoxCPMEngine(Engine):
    engine_id = "voxcpm"
    capabilities = Capabilities(sample_rate=48000, languages=LANGUAGES, cloning="optional", transcript="optional",
                                instruction=True, reference_seconds=(0.5, 60.0),
                                reference_rate=16000, resampler="soxr_hq")
    PHASED = True
    UPSTREAM_KV_CACHE = "static"    # upstream's StaticKVCache; the dynamic layout rounds otherwise in bf16
    # Sampling's fields, upstream's defaults; ranges: Sampling.validate's, frames to twice upstream's
    # max_len, at most 10 retries of a whole chunk, a frame limit of at most 100 frames per text token
    options = {"inference_timesteps": Option(int, Sampling.inference_timesteps, 1, 100),
               "cfg_value": Option(float, Sampling.cfg_value, 0.1, 10.0),
               "min_len": Option(int, Sampling.min_len, 0, 8192),
               "max_len": Option(int, Sampling.max_len, 1, 8192),
               "retry_badcase": Option(bool, Sampling.retry_badcase),
               "retry_badcase_max_times": Option(int, Sampling.retry_badcase_max_times, 1, 10),
               "retry_badcase_ratio_threshold": Option(float, Sampling.retry_badcase_ratio_threshold, 0.0, 100.0,
                                                       low_open=True)}

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream (VoxCPM._generate, src/voxcpm/core.py) generates the whole text in one call, its
        whitespace collapsed (done in speak_chunk): one segment."""
        return [text]

    def __init__(self, bundle: VoxCPMBundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None,
                 tiny_unit_bytes: int | None = None) -> None:
        """`min_unit_bytes` / `tiny_unit_bytes`: the runtime's unit thresholds (None: ModelHandle's defaults)."""
        self.bundle = bundle
        vae = bundle.vae.config
        # the rates come from the checkpoint (48 kHz out, 16 kHz in for VoxCPM 2)
        self.capabilities = replace(type(self).capabilities, sample_rate=vae.out_sample_rate,
                                    reference_rate=vae.sample_rate)
        model = bundle.model
        DeviceService.pin_to_cpu(model.base_lm.embed_tokens)
        units = dict(min_unit_bytes=min_unit_bytes, tiny_unit_bytes=tiny_unit_bytes)
        self.lm = ModelHandle(model, name="voxcpm", kind="sequence", **units)
        self.lm.mark(model.feat_decoder, "hot")
        self.encoder = ModelHandle(bundle.vae.encoder, name="audiovae encoder", kind="oneshot", **units)
        self.decoder = ModelHandle(bundle.vae.decoder, name="audiovae decoder", kind="oneshot", **units)
        super().__init__(manager, [self.lm, self.decoder, self.encoder], device, name)

    @property
    def config(self):
        return self.bundle.config

    # ---- estimates ------------------------------------------------------------------------------------
    def kv_bytes_per_position(self) -> int:
        """K + V bytes one position costs in both LMs' caches (all layers)."""
        size = kv_position_bytes(self.config.lm.num_key_value_heads, self.config.lm.head_dim, self.bundle.dtype)
        return size * (self.config.lm.num_hidden_layers + self.config.residual.num_hidden_layers)

    def generate_memory(self, prompt_positions: int, frames: int, kv: str = "dynamic") -> int:
        """Both LMs' KV caches for prompt + frames positions, the prompt-wide tensors of the prefill, the
        largest layer's activations in it (the base LM over the prompt, or LocEnc over every prompt patch at
        once: T x (P + 1) tokens), one frame's flow-head batch, the generated patches."""
        c = self.config
        dtype = self.bundle.dtype
        size = torch.empty((), dtype=dtype).element_size()
        positions = min(prompt_positions + frames, c.max_length)
        kind = "static" if kv == "static" else "dynamic"
        initial = min(ATTENTION_BLOCK, c.max_length)
        caches = sum(peak_bytes(kv_position_bytes(m.num_key_value_heads, m.head_dim, dtype), m.num_hidden_layers,
                                positions, kind, initial=initial) for m in (c.lm, c.residual))
        t = prompt_positions
        layers = max(layer_memory(t, c.lm, size), layer_memory(t, c.residual, size),
                     layer_memory(t * (c.patch_size + 1), c.encoder, size))
        prompt = 8 * t * c.lm.hidden_size * size          # embeddings, masks' products, LM outputs, fusion input
        flow = layer_memory(2 * (3 + 2 * c.patch_size), c.dit, size) * 2
        patches = (frames + 4) * c.patch_size * c.feat_dim * 4
        return caches + layers + prompt + flow + patches + MB

    def encode_memory(self, samples: int) -> int:
        """The AudioVAE encoder over `samples` (padded to whole patches): six times its widest activation
        (a snake's and a residual unit's temporaries; measured 5x), or, where more, the largest conv weight
        normalised in its forward plus one activation."""
        v = self.bundle.vae.config
        length = samples + self.config.patch_size * v.hop_length
        widest, ch = 0, v.encoder_dim
        for stride in v.encoder_rates:
            widest = max(widest, ch * length)
            ch, length = ch * 2, math.ceil(length / stride)
        return self.vae_memory(self.bundle.vae.encoder, widest * 4)

    def decode_memory(self, latent_frames: int) -> int:
        """The AudioVAE decoder over `latent_frames`: as `encode_memory`, with the widest stage output of the
        upsampling stack (the last stages: few channels, many samples), plus the waveform."""
        v = self.bundle.vae.config
        length = latent_frames
        widest, ch = v.decoder_dim * length, v.decoder_dim
        for stride in v.decoder_rates:
            ch //= 2
            length *= stride
            widest = max(widest, ch * length)
        return self.vae_memory(self.bundle.vae.decoder, widest * 4) + length * 4

    @staticmethod
    def vae_memory(module: torch.nn.Module, widest: int) -> int:
        conv = max((m.weight_v.numel() * 4 for m in module.modules() if hasattr(m, "weight_v")), default=0)
        return max(6 * widest, conv + widest) + MB

    # ---- phases -----------------------------------------------------------------------------------------
    def prompt(self, ctx: RequestContext, wav: Tensor, transcript: bool) -> tuple[Tensor, Tensor | None]:
        """Reference audio [S] at 16 kHz -> (reference patches, continuation patches or None) in the "prompt"
        phase: the clip padded on the right as an isolated reference and, with a transcript, on the left as
        the audio the speech continues from."""
        vae, patch = self.bundle.vae, self.config.patch_size

        def run():
            device = self.encoder.device
            ref = encode_audio(vae, wav, patch, pad_left=False, device=device)
            return ref, (encode_audio(vae, wav, patch, pad_left=True, device=device) if transcript else None)

        return ctx.run("prompt", [self.encoder], run, memory=self.encode_memory(wav.numel()))

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.encoder], [self.lm], [self.decoder]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        s = self.sampling(chunk.options)
        if chunk.instruction and chunk.reference_text:
            raise ValueError("instruction: VoxCPM 2 does not take a style instruction together with a reference "
                             "transcript (continuation cloning); drop one of them")
        text = with_control(normalize_spaces(chunk.text), chunk.instruction)
        reference = continuation = None
        transcript = chunk.reference_text if (chunk.reference_text or "").strip() else None   # used as given
        if chunk.reference is not None:
            if chunk.reference.sample_rate != self.capabilities.reference_rate:
                raise ValueError(f"reference: expected audio at {self.capabilities.reference_rate} Hz, got "
                                 f"{chunk.reference.sample_rate} Hz")
            key = ("voxcpm prompt", transcript is not None)
            if key not in chunk.prompts:
                chunk.prompts[key] = self.prompt(ctx, chunk.reference.wav.float(), transcript is not None)
            reference, continuation = chunk.prompts[key]
        tok = self.bundle.tokenizer
        target = len(tok(text))
        prompt = build_prompt(tok((transcript or "") + text), self.config.patch_size, self.config.feat_dim,
                              reference=reference, continuation=continuation)
        kv = self.kv_cache(ctx)

        def run():
            return generate(self.bundle.model, prompt, s, ctx.generator, target, kv=kv, device=self.lm.device,
                            check=ctx.check_cancelled, progress=chunk.progress)

        latents, _ = ctx.run("generate", [self.lm], run,
                             memory=self.generate_memory(len(prompt), s.frame_limit(target), kv))
        patch = self.config.patch_size
        return ctx.run("decode", [self.decoder],
                       lambda: decode_latents(self.bundle.vae, latents, prompt.context, patch, self.decoder.device),
                       memory=self.decode_memory(latents.shape[-1]))

    @staticmethod
    def sampling(options: dict[str, Any]) -> Sampling:
        known = {f.name for f in fields(Sampling)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"options: unknown {', '.join(unknown)}; VoxCPM 2 takes {', '.join(sorted(known))}")
        s = Sampling(**options)
        s.validate()
        return s

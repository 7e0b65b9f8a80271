"""VibeVoice-Realtime-0.5B on the runtime: three components, two phases per segment (one when its audio is streamed).

    engine = VibeVoiceEngine(load_realtime(folder), voices, TextTokenizer(folder / "tokenizer.json"), manager)
    wav, meta = synthesize(engine, SpeakRequest("Hello there.", voice="en-Wayne_man"))

Components: "lm" (the base Qwen2.5 LM's lower layers and its embedding; sequence), "tts lm" (the TTS LM's upper
layers with what runs beside them every frame: the input-type embedding, the acoustic connector, the EOS
classifier and the diffusion head, marked hot because it runs `steps` times per frame; sequence) and "decoder"
(the streaming σ-VAE decoder; oneshot). The latent scaling's two scalars stay with the model and move with
each call (RealtimeModel.forward).

Phases, as upstream's demo calls `generate` (the whole text at once, cfg_scale 1.5, 5 DPM-Solver steps):
- "generate" (lm, tts lm): the windowed streaming generation (generate.py) from the voice preset, the noise of
  every frame drawn from the request's generator as upstream draws from torch's after manual_seed; it keeps the
  latents only;
- "decode" (decoder): the latents frame by frame through the streaming decoder, which is the audio generate
  would have decoded inline (the decoder's state never feeds back into the LMs).
When the caller takes the audio as it is made (Chunk.emit), one phase instead, as upstream's generate with an
AudioStreamer runs:
- "stream" (lm, tts lm, decoder): the same generation with each frame decoded at once through the streaming
  decoder and its hop_length samples handed over (Capabilities.piece_samples); the same ops as decode's, frame by
  frame with the same caches, so the pieces join to the plain run's audio exactly.
Working memory comes from the request: the three KV caches for the preset's positions plus the text and the
expected frames (at most the context length), a text window's activations, the diffusion head's 2 rows over
the steps; the decoder's one frame through every stage, its convolution caches and the segment's audio; the
stream phase holds both at once.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..blocks.transformer import kv_position_bytes
from ..pack.engine import Capabilities, Chunk, Engine, Option
from .generate import SPEECH_WINDOW, TEXT_WINDOW, decode_latents, generate
from .model import VibeVoiceRealtime
from .text import TextTokenizer
from .voices import VoicePreset

SAMPLE_RATE = 24000
DEFAULT_STEPS = 5            # upstream demo: model.set_ddpm_inference_steps(num_steps=5)
DEFAULT_CFG = 1.5            # upstream demo: --cfg_scale 1.5
DEFAULT_VOICE = "wayne"      # upstream demo: --speaker_name Wayne (matched case-insensitively in the file names)
FRAMES_PER_TEXT_TOKEN = 4    # 7.5 Hz frames; speech averages ~2 per BPE token, the estimate leaves room
FLOAT = 4
MB = 1 << 20
# upstream's demo normalises typographic quotes before the processor sees the text
QUOTES = str.maketrans({"\u2019": "'", "\u201c": '"', "\u201d": '"'})


class Parts(nn.Module):
    """Modules of the model that form one component, under their own names (they stay the model's too)."""

    def __init__(self, **modules: nn.Module) -> None:
        super().__init__()
        for name, module in modules.items():
            self.add_module(name, module)


def default_first(names: list[str]) -> tuple[str, ...]:
    """The voice names with upstream's default speaker first (the first whose name contains "wayne")."""
    ordered = sorted(names, key=lambda n: (DEFAULT_VOICE not in n.lower(), n))
    return tuple(ordered)


class VibeVoiceEngine(Engine):
    engine_id = "vibevoice"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=("auto", "en"), voices=("en-Wayne_man",),
                                max_chunk_chars=2000)
    options = {"steps": Option(int, DEFAULT_STEPS, 1, 100), "cfg_scale": Option(float, DEFAULT_CFG, 0, 10, low_open=True)}
    ONE_STREAM = True         # upstream seeds once and generates the whole text from that one stream

    def __init__(self, model: VibeVoiceRealtime, voices: dict[str, VoicePreset], tokenizer: TextTokenizer,
                 manager: ModelManager, device: torch.device | str = "cpu") -> None:
        if not voices:
            raise ValueError("voices: a VibeVoice folder needs at least one voices/<name>.pt preset")
        self.model = model
        self.presets = dict(voices)
        self.tokenizer = tokenizer
        self.dtype = model.model.tts_input_types.weight.dtype
        # a piece is one latent frame's audio: what the streaming decoder makes of each frame as it is sampled
        self.capabilities = dataclasses.replace(type(self).capabilities, voices=default_first(list(voices)),
                                                piece_samples=model.config.acoustic.hop_length)
        m = model.model
        self.lm = ModelHandle(m.language_model, name="lm", kind="sequence")
        self.tts = ModelHandle(Parts(tts_language_model=m.tts_language_model, tts_input_types=m.tts_input_types,
                                     acoustic_connector=m.acoustic_connector, prediction_head=m.prediction_head,
                                     tts_eos_classifier=model.tts_eos_classifier), name="tts lm", kind="sequence")
        self.tts.mark(m.prediction_head, "hot")      # runs `steps` times per frame, the TTS LM's layers once
        self.decoder = ModelHandle(m.acoustic_tokenizer, name="decoder", kind="oneshot")
        super().__init__(manager, [self.lm, self.tts, self.decoder], device, name="VibeVoice-Realtime-0.5B")

    def phase_components(self) -> list[list[ModelHandle]]:
        """"stream" when the chunk's audio is handed over as it is made, else "generate" then "decode": which one
        a chunk takes is known only from its Chunk.emit, so the plan names both (a request skips the other)."""
        return [[self.lm, self.tts, self.decoder], [self.lm, self.tts], [self.decoder]]

    def expected_frames(self, preset: VoicePreset, text_tokens: int) -> int:
        """Frames the estimate plans for: FRAMES_PER_TEXT_TOKEN a token and a speech window, at most the context
        generate stops at (max_position_embeddings, the preset's positions included)."""
        room = self.model.config.qwen.max_position_embeddings - preset.tts_lm.length - text_tokens
        return max(1, min(FRAMES_PER_TEXT_TOKEN * text_tokens + SPEECH_WINDOW, room))

    def generate_memory(self, preset: VoicePreset, text_tokens: int, steps: int) -> int:
        """The three KV caches at their final lengths (each a dynamic cache with one layer's copy), a text window
        through both LMs, the diffusion head's 2 rows over the steps and the frame's small tensors."""
        c = self.model.config
        q = c.qwen
        size = torch.empty((), dtype=self.dtype).element_size()
        position = kv_position_bytes(q.num_key_value_heads, q.head_dim, self.dtype)
        frames = self.expected_frames(preset, text_tokens)
        tts_positions = preset.tts_lm.length + text_tokens + frames
        kv = peak_bytes(position, c.lm_layers, preset.lm.length + text_tokens)
        kv += peak_bytes(position, c.tts_layers, tts_positions)
        kv += peak_bytes(position, c.tts_layers, preset.neg_tts_lm.length + frames)
        width = max(q.intermediate_size * 3, q.hidden_size * 6)
        window = TEXT_WINDOW * (width * size + q.num_attention_heads * tts_positions * (size + FLOAT))
        h = c.head
        ffn = int(h.hidden_size * h.head_ffn_ratio)
        diffusion = 2 * steps * (3 * ffn + 12 * h.hidden_size + 8 * h.latent_size) * max(size, FLOAT)
        return kv + window + diffusion + 16 * q.hidden_size * FLOAT + MB

    def decode_memory(self, frames: int) -> int:
        """One frame through every stage (widths and lengths from the config; the FFN's 4x width, a few live at
        once), every convolution's cache of its input, and the segment's audio with its concatenated copy."""
        a = self.model.config.acoustic
        n = len(a.depths)
        widths = [a.n_filters * 2 ** (n - 1 - i) for i in range(n)]
        lengths = [math.prod(a.ratios[:i]) for i in range(n)]
        kernel = 7
        stages = sum(w * (t + 2 * kernel) * 12 for w, t in zip(widths, lengths))
        caches = sum(w * 2 * kernel * (d + 2) for w, d in zip(widths, a.depths))
        audio = 2 * frames * a.hop_length * a.channels
        return (stages + caches + audio) * FLOAT + a.vae_dim * FLOAT * 4 + MB

    def stream_memory(self, preset: VoicePreset, text_tokens: int, steps: int) -> int:
        """The stream phase: generation and the decoder's frame, caches and audio live at once."""
        return self.generate_memory(preset, text_tokens, steps) + \
            self.decode_memory(self.expected_frames(preset, text_tokens))

    def text_ids(self, chunk: Chunk) -> Tensor:
        ids = self.tokenizer.encode(chunk.text.translate(QUOTES))
        return torch.tensor(ids, dtype=torch.long)

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        preset = self.presets[chunk.voice or self.capabilities.voices[0]]
        steps, cfg = self.option(chunk, "steps"), self.option(chunk, "cfg_scale")
        ids = self.text_ids(chunk)
        device, dtype, m = self.device, self.dtype, self.model
        emit = chunk.emit
        if emit is not None:
            def run_stream():
                at = 0          # a retried phase hands over from sample 0 again: the pipeline checks and drops it

                def hand(audio: Tensor) -> None:
                    nonlocal at
                    samples = audio.float().mean(0).cpu()     # per frame what the plain path does to the whole
                    emit(samples, at)
                    at += samples.numel()
                return generate(m, preset, ids, cfg_scale=cfg, steps=steps, generator=ctx.generator, device=device,
                                dtype=dtype, on_audio=hand).audio.float().mean(0).cpu()
            return ctx.run("stream", [self.lm, self.tts, self.decoder], run_stream,
                           memory=self.stream_memory(preset, len(ids), steps))

        def run_generate():
            return generate(m, preset, ids, cfg_scale=cfg, steps=steps, generator=ctx.generator, device=device,
                            dtype=dtype, decode=False).latents
        latents = ctx.run("generate", [self.lm, self.tts], run_generate,
                          memory=self.generate_memory(preset, len(ids), steps))

        def run_decode():
            with torch.inference_mode():
                return decode_latents(m, latents.to(device)).float().mean(0).cpu()
        return ctx.run("decode", [self.decoder], run_decode, memory=self.decode_memory(latents.shape[1]))

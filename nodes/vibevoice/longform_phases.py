"""VibeVoice 1.5B / Large on the runtime: two components, two phases per request.

    engine = VibeVoiceLongformEngine(load_longform(folder), ScriptTokenizer(folder / "tokenizer.json"), manager)
    wav, meta = synthesize(engine, SpeakRequest("Speaker 1: Hi!\\nSpeaker 2: Hello.", speakers=((a, ""), (b, ""))))

Components: "lm" (the Qwen2.5 LM with its head, the semantic connector and the diffusion head, marked hot: it
runs `steps` times per frame; sequence) and "tokenizers" (the acoustic tokenizer's encoder and decoder, the
semantic encoder and the acoustic connector; oneshot). The latent scaling's two scalars stay with the model.

Phases:
- "voices" (tokenizers): the reference clips encoded in one padded batch with their σ-VAE noise (the first
  draws of the request's generator, as upstream's first forward draws them) and projected; skipped without voices;
- "generate" (lm, tokenizers): the whole script in one pass (longform_generate.py), each frame decoded at once
  through the streaming decoder and read back by the streaming semantic encoder, as upstream does.

The text is never cut: upstream reads the whole script (every speaker's turns) in one pass, so `split_text` keeps
it whole. The dialogue form is upstream's: `Speaker <n>: <text>` a line, speaker k spoken in voice k.

Working memory from the request: the prompt's positions (text + the voices' frames) and the frames the text
implies (FRAMES_PER_TEXT_TOKEN a text token, at most `max_new_tokens`) in the three KV caches (positive,
negative, token guidance), the prefill's activations and attention scores, the diffusion head's 2 rows over the
steps, one frame through the decoder and the semantic encoder with their caches, and the audio.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..blocks.transformer import kv_position_bytes
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference, Segment
from .acoustic import AcousticConfig
from .longform import VibeVoiceLongform
from .longform_generate import generate_longform
from .script import MAX_VOICES, SAMPLE_RATE, Prompt, ScriptTokenizer

DEFAULT_STEPS = 10           # upstream demo (inference_from_file.py): set_ddpm_inference_steps(num_steps=10)
DEFAULT_CFG = 1.3            # upstream demo: --cfg_scale 1.3
FRAMES_PER_TEXT_TOKEN = 4    # 7.5 Hz frames; speech averages ~2.5 per BPE token, the cap leaves room
EXTRA_FRAMES = 64            # a short text's pauses and lead-in
FLOAT = 4
MB = 1 << 20


class Parts(nn.Module):
    """Modules of the model that form one component, under their own names (they stay the model's too)."""

    def __init__(self, **modules: nn.Module) -> None:
        super().__init__()
        for name, module in modules.items():
            self.add_module(name, module)


def _stages(c: AcousticConfig, frames: int, decoder: bool) -> int:
    """Floats alive in one pass of `frames` frames through one side's stages (each stage's output, its FFN's 4x
    width, the block's residual copies) and the convolutions' caches."""
    n = len(c.depths)
    widths = [c.n_filters * 2 ** (n - 1 - i) for i in range(n)] if decoder else [c.n_filters * 2 ** i for i in range(n)]
    ratios = list(c.ratios)
    if decoder:
        lengths = [frames * math.prod(ratios[:i]) for i in range(n)]
    else:
        hop = math.prod(ratios)
        lengths = [frames * hop // math.prod(ratios[:i]) for i in range(n)]
    kernel = 7
    return sum(w * (t + 2 * kernel) * 12 for w, t in zip(widths, lengths)) + \
        sum(w * 2 * kernel * (d + 2) for w, d in zip(widths, c.depths))


class VibeVoiceLongformEngine(Engine):
    engine_id = "vibevoice"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=("auto", "en", "zh"), cloning="optional",
                                max_chunk_chars=200_000, reference_seconds=(0.5, 120.0), reference_rate=SAMPLE_RATE,
                                resampler="soxr_hq", dialogue_speakers=MAX_VOICES, dialogue_turn="Speaker {n}: {text}")
    options = {"steps": Option(int, DEFAULT_STEPS, 1, 100), "cfg_scale": Option(float, DEFAULT_CFG, 0, 10, low_open=True),
               "max_new_tokens": Option(int, 0, 0, 1 << 20)}    # 0: FRAMES_PER_TEXT_TOKEN a text token + EXTRA_FRAMES
    ONE_STREAM = True        # upstream seeds once and reads the whole script from that one stream

    def __init__(self, model: VibeVoiceLongform, tokenizer: ScriptTokenizer, manager: ModelManager,
                 device: torch.device | str = "cpu", name: str = "VibeVoice-1.5B") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.dtype = model.model.language_model.embed_tokens.weight.dtype
        m = model.model
        self.lm = ModelHandle(Parts(language_model=m.language_model, lm_head=model.lm_head,
                                    semantic_connector=m.semantic_connector, prediction_head=m.prediction_head),
                              name="lm", kind="sequence")
        self.lm.mark(m.prediction_head, "hot")
        self.codec = ModelHandle(Parts(acoustic_tokenizer=m.acoustic_tokenizer, semantic_tokenizer=m.semantic_tokenizer,
                                       acoustic_connector=m.acoustic_connector), name="tokenizers", kind="oneshot")
        super().__init__(manager, [self.lm, self.codec], device, name=name)

    def split_text(self, text: str, reference: Reference | None = None, reference_text: str | None = None,
                   language: str = "auto", speed: float = 1.0) -> list[str | Segment]:
        """The whole text, never cut: upstream reads a script (all its speakers' turns) in one pass."""
        return [text]

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.codec], [self.lm, self.codec]]

    def voices(self, chunk: Chunk) -> list[Tensor]:
        if chunk.speakers:
            return [ref.wav for ref, _ in chunk.speakers]
        return [chunk.reference.wav] if chunk.reference is not None else []

    def frame_cap(self, prompt: Prompt, chunk: Chunk) -> int:
        """The frames generation may run: the option, else FRAMES_PER_TEXT_TOKEN a text token plus EXTRA_FRAMES;
        at most the context left after the prompt."""
        room = self.model.config.qwen.max_position_embeddings - prompt.ids.numel()
        if room < 1:
            raise ValueError(f"text: the prompt ({prompt.ids.numel()} tokens with the voices' frames) fills the "
                             f"model's context of {self.model.config.qwen.max_position_embeddings} positions")
        given = self.option(chunk, "max_new_tokens")
        text_tokens = int((~prompt.speech_mask).sum())
        want = given if given else FRAMES_PER_TEXT_TOKEN * text_tokens + EXTRA_FRAMES
        return max(1, min(want, room))

    def voices_memory(self, prompt: Prompt) -> int:
        """The padded clips through the encoder at once, their latents, noise and the connector's output."""
        c = self.model.config
        clips, frames = len(prompt.frames), max(prompt.frames)
        enc = _stages(c.acoustic_encoder, frames, decoder=False) * clips
        out = clips * frames * (4 * c.vae_dim + 3 * c.qwen.hidden_size)
        return (enc + out + prompt.audio.numel() * 2) * FLOAT + MB

    def generate_memory(self, prompt: Prompt, frames: int, steps: int) -> int:
        c = self.model.config
        q = c.qwen
        size = torch.empty((), dtype=self.dtype).element_size()
        position = kv_position_bytes(q.num_key_value_heads, q.head_dim, self.dtype)
        t = prompt.ids.numel()
        kv = peak_bytes(position, q.num_hidden_layers, t + frames) + 2 * peak_bytes(position, q.num_hidden_layers, frames + 1)
        width = max(q.intermediate_size * 3, q.hidden_size * 6)
        prefill = t * (width * size + 3 * q.hidden_size * size) + q.num_attention_heads * t * t * (size + FLOAT)
        logits = 8 * q.vocab_size * FLOAT                     # the head's row, two log-softmaxes, the mixed scores
        h = c.head
        ffn = int(h.hidden_size * h.head_ffn_ratio)
        diffusion = 2 * steps * (3 * ffn + 12 * h.hidden_size + 8 * h.latent_size) * max(size, FLOAT)
        frame = (_stages(c.acoustic, 1, decoder=True) + _stages(c.semantic, 1, decoder=False)) * FLOAT
        audio = 2 * frames * c.hop_length * c.acoustic.channels * FLOAT
        return kv + prefill + logits + diffusion + frame + audio + 32 * q.hidden_size * FLOAT + MB

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        steps, cfg = self.option(chunk, "steps"), self.option(chunk, "cfg_scale")
        prompt = self.tokenizer.prompt(chunk.text, self.voices(chunk), self.model.config.hop_length)
        frames = self.frame_cap(prompt, chunk)
        device, dtype, model = self.device, self.dtype, self.model
        voice = None
        if prompt.audio is not None:
            def run_voices():
                with torch.inference_mode():
                    return model.voice_embeds(prompt.audio.to(device=device, dtype=dtype), prompt.frames,
                                              ctx.generator)
            voice = ctx.run("voices", [self.codec], run_voices, memory=self.voices_memory(prompt))

        def run_generate():
            g = generate_longform(model, self.tokenizer, prompt, cfg_scale=cfg, steps=steps, generator=ctx.generator,
                                  max_new_tokens=frames, voice=None if voice is None else voice.to(device),
                                  device=device, dtype=dtype)
            if g.audio is None:
                raise ValueError("text: the model ended the speech before its first frame")
            return g.audio.float().mean(0).cpu()
        return ctx.run("generate", [self.lm, self.codec], run_generate,
                       memory=self.generate_memory(prompt, frames, steps))

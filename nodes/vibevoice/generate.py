"""VibeVoice-Realtime's windowed streaming generation (upstream `VibeVoiceStreamingForConditionalGenerationInference
.generate`, batch 1), from a voice preset (the prefilled prompt) and the text's token ids.

Per window: the next TEXT_WINDOW text tokens go through the base LM and, as its hidden states marked "text",
through the TTS LM; then up to SPEECH_WINDOW speech frames: a latent sampled by the diffusion head from the
TTS LM's last hidden state against the negative branch's (classifier-free guidance), decoded to audio at
once through the streaming acoustic decoder, fed back through the connector as a "speech" position of both
TTS LMs (positive and negative), and the EOS classifier asked whether to stop. Windows repeat after the text
is used up, until EOS or the context length (upstream's `max_length`: max_position_embeddings by default).

Noise: one `torch.randn(2, vae_dim)` per frame from `generator` on the CPU, which is what upstream draws from
the global generator after `torch.manual_seed(seed)`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ...runtime.lm.cache import DynamicCache
from ..blocks.streaming_conv import StreamingConvCache
from .diffusion_head import sample_latents, scheduler_for
from .model import VibeVoiceRealtime
from .voices import Prefilled, VoicePreset

TEXT_WINDOW = 5      # upstream TTS_TEXT_WINDOW_SIZE
SPEECH_WINDOW = 6    # upstream TTS_SPEECH_WINDOW_SIZE


@dataclass(frozen=True)
class Generated:
    audio: Tensor | None   # (channels, samples), the concatenated frames; None when not decoded
    latents: Tensor        # (1, frames, vae_dim), the sampled speech latents (before the decoder's scaling)
    frames: int            # speech frames kept (each hop_length samples)
    stopped: str           # "eos" or "max_length"
    positions: int         # TTS LM positions at the end (upstream's `sequences.shape[1]` less the frames it runs
                           # after EOS to finish the speech window, whose audio it drops)
    eos_logits: tuple[float, ...]   # the EOS classifier's logit after each speech frame (stop when > 0)


def _cache(part: Prefilled, device: torch.device, dtype: torch.dtype) -> DynamicCache:
    """A KV cache holding a preset part's keys / values in the compute dtype and device (presets are bfloat16;
    upstream's first torch.cat promotes them the same way, exactly)."""
    cache = DynamicCache()
    for i, (k, v) in enumerate(zip(part.keys, part.values)):
        cache.update(i, k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype))
    return cache


def _check(model: VibeVoiceRealtime, preset: VoicePreset) -> None:
    c = model.config
    for name, part, layers in (("lm", preset.lm, c.lm_layers), ("tts_lm", preset.tts_lm, c.tts_layers),
                               ("neg_tts_lm", preset.neg_tts_lm, c.tts_layers)):
        k = part.keys[0]
        if len(part.keys) != layers or k.shape[1] != c.qwen.num_key_value_heads or k.shape[3] != c.qwen.head_dim \
                or part.last_hidden_state.shape[2] != c.qwen.hidden_size:
            raise ValueError(f"voice preset '{name}': {len(part.keys)} layers of {tuple(k.shape)} keys, hidden "
                             f"{part.last_hidden_state.shape[2]}; this model needs {layers} layers of "
                             f"(1, {c.qwen.num_key_value_heads}, T, {c.qwen.head_dim}), hidden {c.qwen.hidden_size}")
    if preset.neg_tts_lm.length != 1:   # upstream's negative branch is the one token <|image_pad|>
        raise ValueError(f"voice preset 'neg_tts_lm' holds {preset.neg_tts_lm.length} positions, expected 1")


@torch.no_grad()
def generate(model: VibeVoiceRealtime, preset: VoicePreset, text_ids: Tensor, *, cfg_scale: float, steps: int,
             generator: torch.Generator, max_new_tokens: int | None = None,
             on_audio: Callable[[Tensor], None] | None = None, device: torch.device | str | None = None,
             dtype: torch.dtype | None = None, decode: bool = True) -> Generated:
    """Speech for `text_ids` (1-D token ids of the text, upstream's `tts_text_ids`) in the voice of `preset`.
    `on_audio` receives each frame's audio (channels, hop) as soon as it is decoded. `device` / `dtype`: where
    and in what the activations live (default: those of the model's weights; a runtime that streams the
    weights in passes its compute device). `decode=False`: only the latents (decode_latents turns them into the
    same audio later, as the decoder's state never feeds back into the LMs)."""
    if text_ids.dim() != 1 or text_ids.numel() == 0 or text_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"text_ids {tuple(text_ids.shape)} {text_ids.dtype}: expected a non-empty 1-D integer tensor")
    if not cfg_scale > 0:
        raise ValueError(f"cfg_scale {cfg_scale}: expected a positive number")
    _check(model, preset)
    c = model.config
    weight = model.model.tts_input_types.weight
    device = torch.device(device) if device is not None else weight.device
    dtype = dtype or weight.dtype
    text = text_ids.to(device=device, dtype=torch.long)[None]
    lm_cache, tts_cache, neg_cache = (_cache(p, device, dtype) for p in (preset.lm, preset.tts_lm, preset.neg_tts_lm))
    tts_last = preset.tts_lm.last_hidden_state[:, -1, :].to(device=device, dtype=dtype)
    neg_last = preset.neg_tts_lm.last_hidden_state[:, -1, :].to(device=device, dtype=dtype)
    lm_pos, tts_pos, neg_pos = preset.lm.length, preset.tts_lm.length, preset.neg_tts_lm.length
    # upstream: max_new_tokens defaults to max_position_embeddings - the prompt, and max_length is the prompt plus it
    max_length = preset.tts_lm.length + (max_new_tokens if max_new_tokens is not None
                                         else c.qwen.max_position_embeddings - preset.tts_lm.length)
    scheduler = scheduler_for(c.head)
    decoder = model.model.acoustic_tokenizer
    audio_cache = StreamingConvCache()
    chunks: list[Tensor] = []
    latents: list[Tensor] = []
    logits: list[float] = []
    window = 0
    while True:
        cur = text[:, window * TEXT_WINDOW:(window + 1) * TEXT_WINDOW]
        window += 1
        if cur.shape[1]:
            tts_pos_after = tts_pos + cur.shape[1]
            if tts_pos_after > max_length:
                return _done(chunks, latents, "max_length", tts_pos_after, logits)
            h = model.forward_lm(cur, lm_cache, lm_pos)
            lm_pos += cur.shape[1]
            th, _ = model.forward_tts_lm(h, True, tts_cache, tts_pos)
            tts_pos = tts_pos_after
            tts_last = th[:, -1, :]
        for _ in range(SPEECH_WINDOW):
            noise = torch.randn(2, c.vae_dim, generator=generator)
            latent = sample_latents(model.model.prediction_head, scheduler, tts_last, neg_last, noise, steps,
                                    cfg_scale)[:, None]                       # (1, 1, vae_dim)
            latents.append(latent)
            if decode:
                audio = decoder.decode(model.latents_to_decoder(latent), audio_cache)[0]
                chunks.append(audio)
                if on_audio is not None:
                    on_audio(audio)
            embed = model.model.acoustic_connector(latent)
            if tts_pos + 1 > max_length:
                return _done(chunks, latents, "max_length", tts_pos + 1, logits)
            th, eos = model.forward_tts_lm(embed, False, tts_cache, tts_pos)
            tts_pos += 1
            tts_last = th[:, -1, :]
            nh, _ = model.forward_tts_lm(embed, False, neg_cache, neg_pos)
            neg_pos += 1
            neg_last = nh[:, -1, :]
            logits.append(eos[0, 0].item())
            if torch.sigmoid(eos)[0].item() > 0.5:
                return _done(chunks, latents, "eos", tts_pos, logits)


@torch.no_grad()
def decode_latents(model: VibeVoiceRealtime, latents: Tensor,
                   on_audio: Callable[[Tensor], None] | None = None) -> Tensor:
    """The audio (channels, frames * hop) of `latents` (1, frames, vae_dim) from generate(decode=False): frame by
    frame through the streaming decoder, as generate decodes them."""
    if latents.dim() != 3 or latents.shape[0] != 1 or latents.shape[1] == 0 \
            or latents.shape[2] != model.config.vae_dim:
        raise ValueError(f"latents {tuple(latents.shape)}: expected (1, frames, {model.config.vae_dim})")
    decoder = model.model.acoustic_tokenizer
    cache = StreamingConvCache()
    chunks = []
    for i in range(latents.shape[1]):
        audio = decoder.decode(model.latents_to_decoder(latents[:, i:i + 1]), cache)[0]
        chunks.append(audio)
        if on_audio is not None:
            on_audio(audio)
    return torch.cat(chunks, dim=-1)


def _done(chunks: list[Tensor], latents: list[Tensor], stopped: str, positions: int, logits: list[float]) -> Generated:
    return Generated(torch.cat(chunks, dim=-1) if chunks else None, torch.cat(latents, dim=1), len(latents), stopped,
                     positions, tuple(logits))


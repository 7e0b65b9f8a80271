"""Long-form generation (transformers' `VibeVoiceForConditionalGeneration.generate`, batch 1), one pass over the
whole script: the prompt (script.py) with the voices' acoustic embeddings in place of their `<|vision_pad|>`
positions goes through the LM once; then per step the LM head picks among the four tokens upstream allows
(`<|vision_start|>`, `<|vision_end|>`, `<|vision_pad|>`, `<|endoftext|>`, greedy). On `<|vision_pad|>` a speech
frame: the negative branch (a second KV cache that starts from `<|vision_start|>` alone, then at each frame
reads the input the positive branch read last) steps once, the diffusion head samples a latent from the two last hidden
states (classifier-free guidance), the streaming decoder turns it into a hop of audio, the streaming semantic
encoder reads that audio back, and acoustic connector(latent) + semantic connector(features) is the LM's next
input. `<|endoftext|>` ends it, as does `max_new_tokens`.

Token guidance: transformers' `generate` reads the CFG scale from `guidance_scale`, which also switches on its
stock `UnbatchedClassifierFreeGuidanceLogitsProcessor` (scale != 1): the token is then picked from
scale * (log_softmax(cond) - log_softmax(uncond)) + log_softmax(uncond), `uncond` being the logits of a third LM
pass over the picked token ids alone (its own KV cache, starting from the prompt's last token). That changes
when speech ends, so it is followed here (`token_guidance`, on by default as upstream; off: plain greedy).

Noise: the voice prompts' σ-VAE noise first (a std per clip, then noise shaped as their latents), then one
`torch.randn(2, vae_dim)` per frame, all from `generator` on the CPU: what transformers draws from the global
generator after `torch.manual_seed(seed)`.

Not followed: a `<|vision_start|>` picked mid-generation (upstream then restarts the negative branch; the
long-form models emit it only at the start of speech, which the prompt already holds): refused by name.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ...runtime.lm.cache import DynamicCache
from ..blocks.streaming_conv import StreamingConvCache
from .diffusion_head import sample_latents, scheduler_for
from .longform import VibeVoiceLongform
from .script import Prompt, ScriptTokenizer


@dataclass(frozen=True)
class LongformGenerated:
    audio: Tensor | None    # (channels, samples), the frames' audio joined; None when no frame was made
    latents: Tensor         # (1, frames, vae_dim), the sampled latents (before the decoder's scaling)
    tokens: Tensor          # (steps,) the tokens the LM picked (`<|vision_pad|>` per frame, `<|endoftext|>` last)
    stopped: str            # "eos" or "max_new_tokens"


def allowed_mask(vocab: int, tok: ScriptTokenizer, device: torch.device) -> Tensor:
    """Upstream's logits processor: 0 on the four allowed tokens, -inf elsewhere."""
    mask = torch.full((vocab,), float("-inf"))
    mask[[tok.speech_start, tok.speech_end, tok.speech_pad, tok.eos]] = 0.0
    return mask.to(device)


@torch.no_grad()
def generate_longform(model: VibeVoiceLongform, tok: ScriptTokenizer, prompt: Prompt, *, cfg_scale: float,
                      steps: int, generator: torch.Generator, max_new_tokens: int,
                      on_audio: Callable[[Tensor], None] | None = None, token_guidance: bool = True,
                      voice: Tensor | None = None,
                      device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> LongformGenerated:
    """Speech for `prompt` (ScriptTokenizer.prompt). `on_audio` receives each frame's audio (channels, hop) as it
    is decoded. `voice`: the voice prompts' embeddings when already made (VibeVoiceLongform.voice_embeds with
    the same generator, drawn before anything here), else made here. `device` / `dtype`: where and in what the
    activations live (default: the model's weights')."""
    if not cfg_scale > 0:
        raise ValueError(f"cfg_scale {cfg_scale}: expected a positive number")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens {max_new_tokens!r}: expected a positive integer")
    c = model.config
    weight = model.model.language_model.embed_tokens.weight
    device = torch.device(device) if device is not None else weight.device
    dtype = dtype or weight.dtype
    if prompt.ids.numel() + max_new_tokens > c.qwen.max_position_embeddings:
        raise ValueError(f"prompt of {prompt.ids.numel()} tokens + max_new_tokens {max_new_tokens} exceeds the "
                         f"model's context of {c.qwen.max_position_embeddings} positions")
    m = model.model
    ids = prompt.ids.to(device)[None]
    embeds = model.embed(ids)
    if prompt.audio is not None and prompt.frames:
        if voice is None:
            voice = model.voice_embeds(prompt.audio.to(device=device, dtype=dtype), prompt.frames, generator)
        mask = prompt.speech_mask.to(device)
        if int(mask.sum()) != voice.shape[0]:
            raise ValueError(f"prompt: {int(mask.sum())} voice positions for {voice.shape[0]} voice frames")
        embeds = embeds.clone()
        embeds[0, mask] = voice.to(embeds.dtype)
    allowed = allowed_mask(c.qwen.vocab_size, tok, device)
    cache, neg_cache = DynamicCache(), DynamicCache()
    hidden = model.forward_lm(embeds, cache, 0)
    pos, neg_pos = ids.shape[1], 0
    scheduler = scheduler_for(c.head)
    # transformers' decoder cache starts from zeros (its first frame's transposed convs see kernel - 1 zeros)
    audio_cache, semantic_cache = StreamingConvCache(zero_history=True), StreamingConvCache()
    start = model.embed(torch.full((1, 1), tok.speech_start, dtype=torch.long, device=device))
    last_input: Tensor | None = None     # what the LM read last (None: the prompt)
    chunks: list[Tensor] = []
    latents: list[Tensor] = []
    tokens: list[int] = []
    stopped = "max_new_tokens"
    guide = token_guidance and cfg_scale != 1
    uncond_cache, uncond_pos, uncond_last = DynamicCache(), 0, int(prompt.ids[-1])
    for step in range(max_new_tokens):
        scores = model.logits(hidden)
        if guide:
            scores = F.log_softmax(scores, dim=-1)
            u = model.embed(torch.full((1, 1), uncond_last, dtype=torch.long, device=device))
            uncond = F.log_softmax(model.logits(model.forward_lm(u, uncond_cache, uncond_pos)), dim=-1)
            uncond_pos += 1
            scores = cfg_scale * (scores - uncond) + uncond
        token = int(torch.argmax(scores + allowed, dim=-1)[0])
        uncond_last = token
        tokens.append(token)
        if token == tok.eos:
            stopped = "eos"
            break
        if token == tok.speech_start:
            raise ValueError("generation picked <|vision_start|> mid-speech (upstream restarts its negative branch "
                             "there); not supported")
        if token != tok.speech_pad:          # <|vision_end|>: its embedding is the next input, no frame
            next_input = model.embed(torch.full((1, 1), token, dtype=torch.long, device=device))
        else:
            # upstream feeds the negative branch the positive one's current input, `<|vision_start|>` after the prompt
            neg_input = start if last_input is None else last_input
            neg_hidden = model.forward_lm(neg_input, neg_cache, neg_pos)
            neg_pos += 1
            noise = torch.randn(2, c.vae_dim, generator=generator)
            latent = sample_latents(m.prediction_head, scheduler, hidden[:, -1, :], neg_hidden[:, -1, :], noise,
                                    steps, cfg_scale)[:, None]                      # (1, 1, vae_dim)
            latents.append(latent)
            audio = m.acoustic_tokenizer.decode(m(latent), audio_cache)             # (1, channels, hop)
            chunks.append(audio[0])
            if on_audio is not None:
                on_audio(audio[0])
            if step + 1 == max_new_tokens:
                break                        # the last step's feedback would feed nothing
            semantic = m.semantic_tokenizer.encode(audio, semantic_cache)          # (1, 1, semantic dim)
            next_input = m.acoustic_connector(latent) + m.semantic_connector(semantic)
        hidden = model.forward_lm(next_input, cache, pos)
        pos += 1
        last_input = next_input
    return LongformGenerated(torch.cat(chunks, dim=-1) if chunks else None,
                             torch.cat(latents, dim=1) if latents else torch.zeros(1, 0, c.vae_dim),
                             torch.tensor(tokens, dtype=torch.long), stopped)

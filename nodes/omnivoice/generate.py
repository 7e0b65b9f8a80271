"""OmniVoice's iterative unmasking: every target frame starts as the mask token in all 8 codebooks;
each of `num_step` steps runs the whole sequence twice (conditional and unconditional, one batch),
combines them with classifier-free guidance, and commits the most confident still-masked tokens
(a step's share of the total from a shifted time schedule; lower codebooks preferred).

    prompt = build_prompt(style_ids, text_ids, ref_codes, frames, config)
    codes = unmask(model, prompt, text_embeds, Sampling(), generator)        # [8, frames]

No KV cache: the sequence is bidirectional and changes every step. This is upstream's
`_generate_iterative` for one item (omnivoice 0.2.1), with the same operations in the same order,
so the same seed gives the same tokens; the random numbers (Gumbel noise) come from `generator`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .model import OmniVoiceConfig, OmniVoiceLM


@dataclass
class Sampling:
    num_step: int = 32
    guidance_scale: float = 2.0
    t_shift: float = 0.1
    layer_penalty_factor: float = 5.0
    position_temperature: float = 5.0
    class_temperature: float = 0.0
    denoise: bool = True

    @classmethod
    def merged(cls, **kw: Any) -> Sampling:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise ValueError(f"OmniVoice sampling: unknown options {unknown}; expected some of {sorted(known)}")
        s = cls(**kw)
        if s.num_step < 1:
            raise ValueError(f"num_step: expected at least 1, got {s.num_step}")
        return s


@dataclass
class Prompt:
    """One request's conditional row: ids [C, L] (text ids repeated over the codebooks, then audio
    frames), audio_mask [L], and the target's length (the last `frames` positions)."""

    ids: Tensor
    audio_mask: Tensor
    frames: int

    @property
    def length(self) -> int:
        return self.ids.shape[1]


def build_prompt(style_ids: list[int], text_ids: list[int], ref_codes: Tensor | None, frames: int,
                 config: OmniVoiceConfig) -> Prompt:
    """[style | text | reference codes (C, T_ref) | `frames` mask tokens] as upstream lays it out."""
    c = config.num_audio_codebook
    text = torch.tensor(style_ids + text_ids, dtype=torch.long)[None].repeat(c, 1)
    parts = [text]
    if ref_codes is not None:
        parts.append(ref_codes.long().cpu())
    parts.append(torch.full((c, frames), config.audio_mask_id, dtype=torch.long))
    ids = torch.cat(parts, dim=1)
    audio_mask = torch.zeros(ids.shape[1], dtype=torch.bool)
    audio_mask[text.shape[1]:] = True
    return Prompt(ids, audio_mask, frames)


def batch(prompt: Prompt, config: OmniVoiceConfig, device: torch.device | str) -> tuple[Tensor, Tensor, Tensor]:
    """Conditional row 0 (the whole prompt) and unconditional row 1 (the target frames alone, padded with
    the mask id; padding positions attend only to themselves): ids [2, C, L], audio_mask [2, L],
    attention mask [2, 1, L, L]."""
    length, frames = prompt.length, prompt.frames
    ids = torch.full((2, config.num_audio_codebook, length), config.audio_mask_id, dtype=torch.long)
    audio_mask = torch.zeros(2, length, dtype=torch.bool)
    attention = torch.zeros(2, 1, length, length, dtype=torch.bool)
    ids[0] = prompt.ids
    audio_mask[0] = prompt.audio_mask
    attention[0] = True
    ids[1, :, :frames] = prompt.ids[:, -frames:]
    audio_mask[1, :frames] = prompt.audio_mask[-frames:]
    attention[1, :, :frames, :frames] = True
    pad = torch.arange(frames, length)
    attention[1, :, pad, pad] = True
    return ids.to(device), audio_mask.to(device), attention.to(device)


def time_steps(num_step: int, t_shift: float) -> list[float]:
    t = torch.linspace(0.0, 1.0, num_step + 1)
    return (t_shift * t / (1 + (t_shift - 1) * t)).tolist()


def schedule(frames: int, codebooks: int, num_step: int, t_shift: float) -> list[int]:
    """Tokens committed at each step; they add up to frames * codebooks."""
    total = rem = frames * codebooks
    t = time_steps(num_step, t_shift)
    out = []
    for step in range(num_step):
        n = rem if step == num_step - 1 else min(math.ceil(total * (t[step + 1] - t[step])), rem)
        out.append(int(n))
        rem -= int(n)
    return out


def gumbel(logits: Tensor, temperature: float, generator: torch.Generator) -> Tensor:
    """logits / temperature + Gumbel noise (uniform draws on the generator's device, then moved)."""
    scaled = logits / temperature
    u = torch.rand(scaled.shape, generator=generator, device=generator.device, dtype=scaled.dtype).to(scaled.device)
    return scaled + -torch.log(-torch.log(u + 1e-10) + 1e-10)


def top_k_filter(log_probs: Tensor, ratio: float = 0.1) -> Tensor:
    k = math.ceil(ratio * log_probs.shape[-1])
    val, ind = log_probs.topk(k, dim=-1)
    return torch.full_like(log_probs, float("-inf")).scatter_(-1, ind, val)


def predict(c: Tensor, u: Tensor | None, s: Sampling, mask_id: int,
            generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Conditional and unconditional log-probabilities [1, C, T, V] (u None without guidance) -> the
    guided prediction (never the mask token) and its confidence per position. `c + g * (c - u)` is
    formed in place as ((c - u) * g) + c: the same IEEE operations, two fewer temporaries."""
    if u is not None:
        log_probs = torch.log_softmax(torch.sub(c, u).mul_(s.guidance_scale).add_(c), dim=-1)
    else:
        log_probs = c
    log_probs[..., mask_id] = float("-inf")
    if s.class_temperature > 0.0:
        tokens = gumbel(top_k_filter(log_probs), s.class_temperature, generator).argmax(dim=-1)
    else:
        tokens = log_probs.argmax(dim=-1)
    return tokens, log_probs.max(dim=-1)[0]


def unmask(model: OmniVoiceLM, prompt: Prompt, text_embeds: Tensor, s: Sampling, generator: torch.Generator,
           check: Callable[[], None] | None = None, progress: Callable[[int, int], None] | None = None,
           on_step: Callable[[int, Tensor], None] | None = None) -> Tensor:
    """The unmasking loop -> codes [C, frames] (long, CPU). `text_embeds` [2, L, D]: embed_tokens of
    the batch's first-codebook ids (constant across steps at every text position). `on_step(step,
    tokens)` sees the tokens after each step."""
    cfg = model.config
    device = text_embeds.device
    ids, audio_mask, attention = batch(prompt, cfg, device)
    c_len, frames, mask_id = prompt.length, prompt.frames, cfg.audio_mask_id
    tokens = torch.full((1, cfg.num_audio_codebook, frames), mask_id, dtype=torch.long, device=device)
    layer_ids = torch.arange(cfg.num_audio_codebook, device=device).view(1, -1, 1)
    plan = schedule(frames, cfg.num_audio_codebook, s.num_step, s.t_shift)
    for step in range(s.num_step):
        if check is not None:
            check()
        logits = model(ids, audio_mask, text_embeds, attention)
        k = plan[step]
        if k > 0:
            # Upstream casts every position's logits to float32, then reads these two slices: casting
            # just the slices gives the same values, and the full logits go before the guidance.
            c = F.log_softmax(logits[0:1, :, c_len - frames:c_len, :].float(), dim=-1)
            u = F.log_softmax(logits[1:2, :, :frames, :].float(), dim=-1) if s.guidance_scale != 0 else None
            del logits
            pred, scores = predict(c, u, s, mask_id, generator)
            del c, u
            scores = scores - layer_ids * s.layer_penalty_factor
            if s.position_temperature > 0.0:
                scores = gumbel(scores, s.position_temperature, generator)
            scores.masked_fill_(tokens != mask_id, -float("inf"))
            _, top = torch.topk(scores.flatten(), k)
            flat = tokens.flatten()
            flat[top] = pred.flatten()[top]
            tokens = flat.view_as(tokens)
            ids[0:1, :, c_len - frames:c_len] = tokens
            ids[1:2, :, :frames] = tokens
        if on_step is not None:
            on_step(step, tokens[0].cpu())
        if progress is not None:
            progress(step + 1, s.num_step)
    return tokens[0].cpu()

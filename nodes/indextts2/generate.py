"""Mel-code generation as upstream's `inference_speech` (Hugging Face beam sampling, reproduced).

Upstream calls `generate(do_sample=True, num_beams=3, top_k=30, top_p=0.8, temperature=0.8,
repetition_penalty=10.0, length_penalty=0.0, max_length=prompt + 1500)` on a fake prompt of ones and
the start token: the logits processors work on log-softmax scores and the repetition penalty also
sees those prompt ids (1 and start_mel_token). Decode positions follow upstream exactly: the start
token sits at mel position 0 and the n-th generated code is fed at mel position n + 2.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ...runtime.lm.cache import make_cache
from ..blocks.decode import beam_search
from ..blocks.sampling import repetition_penalty, top_k_filter, top_p_filter
from .gpt import UnifiedVoice


@dataclass(frozen=True)
class Sampling:
    do_sample: bool = True
    top_p: float = 0.8
    top_k: int = 30
    temperature: float = 0.8
    num_beams: int = 3
    repetition_penalty: float = 10.0
    length_penalty: float = 0.0
    max_mel_tokens: int = 1500


def processors(s: Sampling) -> Callable[[Tensor, Tensor], Tensor]:
    """HF's processor list for these settings: repetition penalty, then (sampling) temperature, top-k,
    top-p, each keeping at least 2 tokens under beam search."""
    keep = 2 if s.num_beams > 1 else 1

    def process(ids: Tensor, scores: Tensor) -> Tensor:
        scores = repetition_penalty(scores, ids, s.repetition_penalty)
        if s.do_sample:
            if s.temperature != 1.0:
                scores = scores / s.temperature
            if s.top_k:
                scores = top_k_filter(scores, max(s.top_k, keep))
            scores = top_p_filter(scores, s.top_p, min_keep=keep)
        return scores
    return process


def generate_codes(gpt: UnifiedVoice, prompt: Tensor, s: Sampling, generator: torch.Generator | None, *,
                   cache_kind: str = "dynamic", check: Callable[[], None] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> tuple[list[int], bool]:
    """Mel codes for one prompt (1, S, D) from `UnifiedVoice.prompt`; True when the stop token ended them."""
    c = gpt.config
    beams = s.num_beams
    if beams < 2:
        raise ValueError(f"num_beams: IndexTTS 2 decodes with beam sampling (upstream: 3), got {beams}")
    device = prompt.device
    start = torch.full((1,), c.start_mel_token, dtype=torch.long, device=device)
    first = torch.cat([prompt, gpt.mel_step_embeds(start, 0)], dim=1)
    cache = make_cache(cache_kind)
    logits = gpt.logits(first.expand(beams, -1, -1), cache)
    fed = [0]

    def step(tokens: Tensor, order: Tensor) -> Tensor:
        cache.reorder_rows(order.to(device))
        fed[0] += 1
        return gpt.logits(gpt.mel_step_embeds(tokens.to(device), fed[0] + 1), cache)

    fake_prompt = [1] * prompt.size(1) + [c.start_mel_token]
    return beam_search(logits, processors(s), step, prompt=fake_prompt, eos=c.stop_mel_token,
                       max_new_tokens=s.max_mel_tokens, do_sample=s.do_sample, generator=generator,
                       length_penalty=s.length_penalty, check=check, progress=progress)

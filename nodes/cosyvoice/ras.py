"""Repetition-aware sampling (RAS, CosyVoice/VALL-E 2): nucleus sampling, and a plain draw from the full
distribution when the nucleus pick already fills `tau_r` of the last `win_size` tokens.

Bit-for-bit upstream `cosyvoice.utils.common.ras_sampling`: the nucleus is accumulated in float32 one
probability at a time (not a cumsum, whose CPU kernel accumulates in double), and the draws are
`multinomial(1, replacement=True)` over the unnormalised kept probabilities, from `generator`.
"""
from __future__ import annotations

import torch
from torch import Tensor


def nucleus_sample(logp: Tensor, top_p: float, top_k: int, generator: torch.Generator | None) -> int:
    probs, idx = logp.softmax(dim=0).sort(descending=True, stable=True)
    kept: list[Tensor] = []
    cum = probs.new_zeros(())
    for i in range(min(top_k, probs.numel())):
        if not cum < top_p:
            break
        cum = cum + probs[i]
        kept.append(probs[i])
    pick = torch.stack(kept).multinomial(1, replacement=True, generator=generator)
    return int(idx[pick].item())


def ras_sample(logp: Tensor, decoded: list[int], generator: torch.Generator | None, *, top_p: float = 0.8,
               top_k: int = 25, win_size: int = 10, tau_r: float = 0.1) -> int:
    """The next token from log-probabilities `logp` [V] given the tokens decoded so far."""
    token = nucleus_sample(logp, top_p, top_k, generator)
    repeats = sum(1 for t in decoded[-win_size:] if t == token)
    if repeats >= win_size * tau_r:
        logp = logp.clone()
        logp[token] = -float("inf")
        token = int(logp.softmax(dim=0).multinomial(1, replacement=True, generator=generator).item())
    return token

"""Token selection shared by the autoregressive engines (Hugging Face's logits processors, reproduced).

    scores = repetition_penalty(logits, history, 1.05)
    token = select(scores, do_sample=True, temperature=0.9, top_k=50, top_p=1.0, generator=ctx.generator)

Everything runs on the CPU in float32 and draws from a CPU `torch.Generator`, so a seed gives the same
tokens on any device and however much of the model was streamed.
"""
from __future__ import annotations

import torch
from torch import Tensor


def repetition_penalty(logits: Tensor, history: list[int] | Tensor, penalty: float) -> Tensor:
    """HF's RepetitionPenaltyLogitsProcessor over the ids in `history` (a new float32 CPU tensor)."""
    scores = logits.float().cpu().clone()
    if penalty == 1.0 or len(history) == 0:
        return scores
    ids = torch.as_tensor(history, dtype=torch.long)
    score = scores.gather(-1, ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(-1, ids, score)


def top_k_filter(scores: Tensor, top_k: int) -> Tensor:
    """Keep the `top_k` largest scores (ties with the k-th kept), the rest -inf; 0 = off."""
    if not top_k or top_k <= 0:
        return scores
    k = min(int(top_k), scores.shape[-1])
    kth = torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(scores < kth, float("-inf"))


def top_p_filter(scores: Tensor, top_p: float, min_keep: int = 1) -> Tensor:
    """Nucleus filtering as HF's TopPLogitsWarper (the smallest set with mass > top_p; at least `min_keep`
    tokens: HF keeps 2 under beam search)."""
    if top_p >= 1.0:
        return scores
    sorted_logits, sorted_idx = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - top_p)
    remove[..., -min_keep:] = False
    return scores.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))


def min_p_filter(scores: Tensor, min_p: float, min_keep: int = 1) -> Tensor:
    """HF's MinPLogitsWarper: drop the tokens less likely than `min_p` times the most likely one (at least
    `min_keep` kept); 0 = off."""
    if not min_p or min_p <= 0:
        return scores
    probs = torch.softmax(scores, dim=-1)
    remove = probs < min_p * probs.amax(dim=-1, keepdim=True)
    order = torch.argsort(scores, dim=-1, descending=True)
    sorted_remove = torch.gather(remove, -1, order)
    sorted_remove[..., :min_keep] = False
    return scores.masked_fill(sorted_remove.scatter(-1, order, sorted_remove), float("-inf"))


def select(logits: Tensor, do_sample: bool, temperature: float, top_k: int, top_p: float,
           generator: torch.Generator | None) -> int:
    """Greedy argmax, or temperature -> top-k -> top-p -> one multinomial draw from `generator`."""
    logits = logits.float().cpu()
    if bool(torch.isnan(logits).any()):
        raise FloatingPointError("the model produced NaN scores: its weights are corrupt or its precision is too "
                                 "low for it (try fp32)")
    if not do_sample:
        return int(torch.argmax(logits))
    scores = top_p_filter(top_k_filter(logits / temperature, top_k), top_p)
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def check_sampling(temperature: float, top_k: int, top_p: float, prefix: str = "") -> None:
    """Clear errors for sampling settings no engine can use."""
    if not temperature > 0:
        raise ValueError(f"{prefix}temperature: expected > 0, got {temperature}")
    if int(top_k) < 0:
        raise ValueError(f"{prefix}top_k: expected >= 0 (0 = off), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"{prefix}top_p: expected in (0, 1], got {top_p}")


# ---- CosyVoice's repetition-aware sampling (RAS, from VALL-E 2) -------------------------------------------
# Bit for bit upstream `cosyvoice.utils.common.ras_sampling`: the nucleus is accumulated in float32 one
# probability at a time (not a cumsum, whose CPU kernel accumulates in double), and the draws are
# `multinomial(1, replacement=True)` over the unnormalised kept probabilities, from `generator`.


def nucleus_sample(logp: Tensor, top_p: float, top_k: int, generator: torch.Generator | None) -> int:
    """A draw among the most likely tokens while their mass stays under `top_p`, at most `top_k` of them."""
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
    """The next token from log-probabilities `logp` [V] given the tokens decoded so far (on the CPU, float32)."""
    logp = logp.float().cpu()
    token = nucleus_sample(logp, top_p, top_k, generator)
    repeats = sum(1 for t in decoded[-win_size:] if t == token)
    if repeats >= win_size * tau_r:
        logp = logp.clone()   # the caller's scores stay as they were
        logp[token] = -float("inf")
        token = int(logp.softmax(dim=0).multinomial(1, replacement=True, generator=generator).item())
    return token


# ---- the fish-speech / GPT-SoVITS family (`logits_to_probs` + `multinomial_sample_one_no_sync`) -----------


def top_p_descending(scores: Tensor, top_p: float | Tensor) -> Tensor:
    """Nucleus filtering as fish-speech and GPT-SoVITS write it: sort descending, remove the tokens whose
    cumulative probability exceeds `top_p` (a float, or a scalar tensor where upstream rounds it to the
    model's dtype), always keep the first. Applied whatever `top_p` is: fish-speech filters even at 1.0
    (where float rounding can drop the tail), GPT-SoVITS skips the call there."""
    sorted_logits, sorted_idx = torch.sort(scores, descending=True)
    remove = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1) > top_p
    remove[..., 0] = False
    return scores.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))


def exponential_draw(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    """argmax(probs / Exp(1) noise): a draw from `probs` without a device sync (upstream's
    `multinomial_sample_one_no_sync`), the noise from `generator`. Index tensor over the last dim."""
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return torch.argmax(probs / q, dim=-1)

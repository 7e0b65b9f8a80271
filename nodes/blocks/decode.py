"""The autoregressive decode loop every LM engine shares: prefill, then choose / stop / step.

    logits = prefill()                                        # the prompt through the model (KV cache filled)
    tokens = autoregress(logits, choose, step, stop=lambda tok: tok == eos, max_new_tokens=2048,
                         check=ctx.check_cancelled, progress=chunk.progress)

`choose(logits, history)` picks the next token (sampling.py); `step(token, i)` feeds it back through the
model (called normally, so the runtime's streaming hooks fire) and returns the next logits. As Hugging
Face's `generate`, the loop never runs the model for the last token it emits (the stop token, or the
token that reaches `max_new_tokens`). Tokens may be anything a step understands (an int, a frame of
codes); `stop` sees each one.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


def autoregress(logits: Tensor, choose: Callable[[Tensor, list[T]], T], step: Callable[[T, int], Tensor],
                stop: Callable[[T], bool], max_new_tokens: int, *, check: Callable[[], None] | None = None,
                progress: Callable[[int, int], None] | None = None, keep_stop: bool = False) -> list[T]:
    """Generated tokens, without the stop token unless `keep_stop` (at most `max_new_tokens`)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected >= 1, got {max_new_tokens}")
    history: list[T] = []
    for i in range(max_new_tokens):
        if check is not None:
            check()
        token = choose(logits, history)
        history.append(token)
        if stop(token):
            return history if keep_stop else history[:-1]
        if i == max_new_tokens - 1:
            break
        logits = step(token, i)
        if progress is not None:
            progress(i + 1, max_new_tokens)
    return history


def frames_estimate(text_tokens: int, per_token: float, max_new_tokens: int, floor: int = 16) -> int:
    """Expected generated positions for a request (for memory estimates): never the worst case."""
    return int(min(max(per_token * max(text_tokens, 1), floor), max_new_tokens))



class BeamHypotheses:
    """Finished beams of one sequence, as Hugging Face's BeamHypotheses (score = sum log-prob / length^penalty)."""

    def __init__(self, num_beams: int, length_penalty: float) -> None:
        self.num_beams, self.length_penalty = num_beams, length_penalty
        self.beams: list[tuple[float, list[int]]] = []
        self.worst_score = 1e9

    def add(self, hyp: list[int], sum_logprobs: float, generated_len: int) -> None:
        score = sum_logprobs / (generated_len ** self.length_penalty)
        if len(self.beams) < self.num_beams or score > self.worst_score:
            self.beams.append((score, hyp))
            if len(self.beams) > self.num_beams:
                ranked = sorted((s, i) for i, (s, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst_score = ranked[1][0]
            else:
                self.worst_score = min(score, self.worst_score)

    def is_done(self, best_sum_logprobs: float, generated_len: int) -> bool:
        """HF's `early_stopping=False` rule: no running beam can still beat the worst finished one."""
        if len(self.beams) < self.num_beams:
            return False
        return self.worst_score >= best_sum_logprobs / generated_len ** self.length_penalty

    def best(self) -> list[int]:
        return sorted(self.beams, key=lambda x: x[0])[-1][1]


def beam_search(logits: Tensor, process: Callable[[Tensor, Tensor], Tensor], step: Callable[[Tensor, Tensor], Tensor],
                *, prompt: list[int], eos: int, max_new_tokens: int, do_sample: bool,
                generator: torch.Generator | None, length_penalty: float = 1.0,
                check: Callable[[], None] | None = None,
                progress: Callable[[int, int], None] | None = None) -> tuple[list[int], bool]:
    """Hugging Face's beam search / beam sample (`generate(num_beams=n, do_sample=...)`, one sequence).

    logits: (beams, vocab) next-token logits of the prompt, one identical row per beam.
    process(ids, logprobs): the logits processors, applied to log-softmax scores (ids: (beams, length),
        the prompt's ids and the tokens generated so far, for repetition penalties).
    step(tokens, order): feed one token per beam after reordering the model's cache rows by `order`;
        returns the next (beams, vocab) logits.
    Returns the best hypothesis's tokens (without eos) and whether it ended with eos.
    """
    beams = logits.shape[0]
    ids = torch.tensor([prompt] * beams, dtype=torch.long)
    scores = torch.zeros(beams, dtype=torch.float)
    scores[1:] = -1e9
    hyps = BeamHypotheses(beams, length_penalty)
    done = False
    keep = 2 * beams    # HF: max(2, 1 + number of eos ids) candidates per beam, one eos id here
    for i in range(max_new_tokens):
        if check is not None:
            check()
        logp = torch.log_softmax(logits.float().cpu(), dim=-1)
        processed = process(ids, logp)
        vocab = processed.shape[-1]
        flat = (processed + scores[:, None].expand_as(processed)).view(1, beams * vocab)
        if do_sample:
            picked = torch.multinomial(torch.softmax(flat, dim=-1), num_samples=keep, generator=generator)
            top = torch.gather(flat, -1, picked)
            top, order = torch.sort(top, descending=True, dim=1)
            picked = torch.gather(picked, -1, order)
        else:
            top, picked = torch.topk(flat, keep, dim=1, largest=True, sorted=True)
        rows = torch.div(picked, vocab, rounding_mode="floor")[0]
        tokens = (picked % vocab)[0]
        top = top[0]
        generated = ids.shape[1] + 1 - len(prompt)
        next_scores, next_tokens, next_rows = [], [], []
        for rank in range(keep):
            token, row, score = int(tokens[rank]), int(rows[rank]), top[rank]
            if token == eos:
                if rank < beams:
                    hyps.add(ids[row].tolist()[len(prompt):], score.item(), generated)
            else:
                next_scores.append(score)
                next_tokens.append(token)
                next_rows.append(row)
            if len(next_tokens) == beams:
                break
        done = hyps.is_done(top.max().item(), generated)
        scores = torch.stack(next_scores)
        order = torch.tensor(next_rows, dtype=torch.long)
        chosen = torch.tensor(next_tokens, dtype=torch.long)
        ids = torch.cat([ids[order], chosen[:, None]], dim=-1)
        if done or i == max_new_tokens - 1:
            break
        logits = step(chosen, order)
        if progress is not None:
            progress(i + 1, max_new_tokens)
    if not done:
        for b in range(beams):
            hyps.add(ids[b].tolist()[len(prompt):], scores[b].item(), ids.shape[1] - len(prompt))
    best = hyps.best()
    return best, len(best) < max_new_tokens   # HF appends eos to any hypothesis shorter than max_length

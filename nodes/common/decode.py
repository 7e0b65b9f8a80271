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


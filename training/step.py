"""Applying a stage's tools to a model and running one optimisation step with them."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .memory import HostAdamW, Tools

HALF_FOR_FROZEN = torch.bfloat16


def prepare(model: nn.Module, tools: Tools, blocks: Sequence[nn.Module] = (),
            frozen: Sequence[nn.Module] = ()) -> None:
    """Freeze `frozen` (in half with `frozen_half`), checkpoint each of `blocks`, and with the host
    optimizer under mixed precision keep the trainable device weights in the autocast dtype."""
    for m in frozen:
        m.requires_grad_(False)
        if tools.frozen_half:
            m.to(HALF_FOR_FROZEN)
    if tools.gradient_checkpointing:
        for block in blocks:
            inner = block.forward

            def forward(*args: Any, _inner: Callable = inner, **kwargs: Any) -> Any:
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)
            block.forward = forward
    if tools.host_optimizer and tools.mixed_precision is not None:
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.to(tools.mixed_precision)


def make_optimizer(model: nn.Module, tools: Tools,
                   host_context: Callable[[], AbstractContextManager[Any]] = nullcontext,
                   **adamw: Any) -> torch.optim.Optimizer | HostAdamW:
    """AdamW over the trainable parameters: on the host with `host_optimizer` (its host-side work under
    `host_context`, e.g. `DeviceService.host`), else torch's."""
    params = [p for p in model.parameters() if p.requires_grad]
    if tools.host_optimizer:
        return HostAdamW(params, host_context=host_context, **adamw)
    return torch.optim.AdamW(params, **adamw)


def train_step(model: nn.Module, loss_fn: Callable[[nn.Module, Any], Tensor], batch: Any,
               optimizer: torch.optim.Optimizer | HostAdamW, tools: Tools,
               clip: float | None = None) -> float:
    """Forward under the tools' autocast, backward, (clip,) step; returns the loss."""
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=tools.mixed_precision or torch.float32,
                        enabled=tools.mixed_precision is not None):
        loss = loss_fn(model, batch)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())

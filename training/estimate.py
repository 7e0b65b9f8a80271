"""Peak memory of a training step, estimated from the model's sizes and the batch.

    weights      trainable x (2 on the host-optimizer path with half device weights, else 4) bytes
                 + frozen x (2 with frozen parts in half, else 4)
    autocast     trainable x 2 (the half copies autocast makes of float32 weights for the matmuls)
    gradients    trainable x the device weight size
    optimizer    trainable x the method's state bytes per parameter (AdamW: 8); 0 with the host optimizer
    activations  per layer, the tensors a post-norm transformer block saves for backward, in
                 elements per token: input 1, q k v 3, attention output 1, residual and norm 2,
                 MLP hidden 4, second residual 1 = 12 x hidden (scaled-dot-product attention keeps no
                 tokens x tokens matrix); with gradient checkpointing only each block's input (1 x hidden)
                 plus one block recomputed; plus the logits and their log-softmax (2 x vocab per token)
    attention    a method whose attention keeps its score matrices (a float mask with dropout: SDPA's math
                 path keeps the probabilities, the dropout mask and their product) adds `saved_scores` x
                 heads x tokens^2 per sample and layer, and `extra_saved_per_token` x hidden for dropout
                 masks; with checkpointing, for the one block recomputed (scores counted in float32: SDPA's math
                 path on the CPU computes them so under autocast)
    optimizer    a step's transient bytes per trainable parameter (`optimizer_temp_bytes`; ScaledAdam stacks
                 the parameters and their grads: 8) count against the activations, which are gone by then
    total        weights + grads + state + max(activations, optimizer temporaries), plus a tenth (allocator
                 rounding, temporaries)

`MethodInfo.memory_mb(preset, batch)` answers it per preset; `fitting(free_mb, batch)` names the presets
that fit and, when none does, the largest batch that fits the smallest preset.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .memory import PRESETS, Tools, resolve_tools

MB = 1 << 20
BLOCK_SAVED_PER_TOKEN = 12   # hidden-sized tensors a block keeps for backward (see the module docstring)


@dataclass(frozen=True)
class TransformerSizes:
    """What the estimate needs of a transformer method's model and one sample."""

    trainable: int            # trainable parameters (count)
    frozen: int               # frozen parameters (count)
    layers: int
    hidden: int
    vocab: int
    tokens_per_sample: int    # sequence length of one sample in the recipe's batches
    heads: int = 0                  # attention heads (with saved_scores)
    saved_scores: int = 0           # tokens x tokens matrices per head a layer keeps for backward
    extra_saved_per_token: int = 0  # further hidden-sized tensors per token a layer keeps (dropout masks)


@dataclass(frozen=True)
class MethodInfo:
    """A training method: its name, sizes, and its own hyperparameters (these win over presets)."""

    name: str
    sizes: TransformerSizes
    hyper: Mapping[str, Any] = field(default_factory=dict)
    optimizer_state_bytes: int = 8   # per trainable parameter (AdamW: two float32 moments)
    optimizer_temp_bytes: int = 0    # per trainable parameter, transient in the optimizer step

    def tools(self, preset: str) -> Tools:
        return resolve_tools(preset, self.hyper)

    def memory_bytes(self, preset: str, batch: int) -> int:
        if batch < 1:
            raise ValueError(f"batch_size = {batch}; expected at least 1")
        t, s = self.tools(preset), self.sizes
        half = t.mixed_precision is not None
        device_weight = 2 if (t.host_optimizer and half) else 4
        weights = s.trainable * device_weight + s.frozen * (2 if t.frozen_half else 4)
        autocast = s.trainable * 2 if half and device_weight == 4 else 0
        grads = s.trainable * device_weight
        optimizer = 0 if t.host_optimizer else s.trainable * self.optimizer_state_bytes
        act = 2 if half else 4
        tokens = batch * s.tokens_per_sample
        per_block = ((BLOCK_SAVED_PER_TOKEN + s.extra_saved_per_token) * s.hidden * tokens * act
                     + s.saved_scores * s.heads * batch * s.tokens_per_sample ** 2 * 4)   # scores: float32 (math path)
        if t.gradient_checkpointing:
            blocks = s.layers * s.hidden * tokens * act + per_block
        else:
            blocks = s.layers * per_block
        logits = 2 * s.vocab * tokens * 4   # cross-entropy runs in float32 under autocast
        transient = max(blocks + logits, s.trainable * self.optimizer_temp_bytes)
        return int(1.1 * (weights + autocast + grads + optimizer + transient))

    def memory_mb(self, preset: str, batch: int) -> float:
        return self.memory_bytes(preset, batch) / MB

    def fitting(self, free_mb: float, batch: int) -> tuple[list[str], int]:
        """(presets whose estimate fits `free_mb` at `batch`, the largest batch that fits the last preset)."""
        fits = [p for p in PRESETS if self.memory_mb(p, batch) <= free_mb]
        last = list(PRESETS)[-1]
        largest = 0
        while largest < 1 << 16 and self.memory_mb(last, largest + 1) <= free_mb:
            largest += 1
        return fits, largest


def check_fits(method: MethodInfo, preset: str, batch: int, free_mb: float, device: str) -> None:
    """Refuse a job whose estimate exceeds `free_mb` before it starts, naming the presets that fit (with
    this method's presets) or, when none does, the largest batch that fits the smallest one."""
    need = method.memory_mb(preset, batch)
    if need <= free_mb:
        return
    fits, largest = method.fitting(free_mb, batch)
    if fits:
        hint = f"presets that fit: {', '.join(fits)}"
    elif largest:
        hint = f"no preset fits batch_size {batch}; the largest batch that fits {list(PRESETS)[-1]} is {largest}"
    else:
        hint = "no preset fits even batch_size 1"
    raise ValueError(f"training {method.name} with preset {preset}, batch_size {batch}: estimated {need:.0f} MB, "
                     f"{device} has {free_mb:.0f} MB free; {hint}")

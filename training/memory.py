"""Memory presets for a training stage and the tools they select.

`training.memory` names a preset; a preset is data: which tools a step uses.

    preset     mixed precision   gradient checkpointing   frozen parts in half   host-side optimizer
    fast       the method's      no                       no                     no
    balanced   yes               no                       yes                    no
    low        yes               yes                      yes                    no
    lowest     yes               yes                      yes                    yes (AdamW on the CPU)

A method's own hyperparameters win over the preset (`resolve_tools(preset, method_overrides)`): a
recipe that trains in float32 keeps float32 under `balanced`. Tools that change numerics (mixed
precision, frozen half, the host optimizer's rounding to the device dtype) are listed by
`Tools.numerics_changes()` for the job's report.

The host-side optimizer (`HostAdamW`) keeps the float32 master weights and their gradients in one
host buffer each; each step the gradients come off the device and the updated weights go back through
one staging buffer per device dtype (pinned on CUDA), with a single wait per step (after the gradient
copies), and AdamW runs on the CPU (torch.optim.AdamW, single-tensor, over views of the master buffer).
Documented rounding: the device weights are the float32 master rounded (round-to-nearest-even) to the
device dtype after every step. With float32 device weights nothing is rounded and the weights equal
torch.optim.AdamW's on the same parameters bit for bit (tests/training/test_memory.py): the host
optimizer is then a numerics change only under mixed precision (`Tools.numerics_changes`).

`HostAdamW(..., host_context=devices.host)` runs its host-side work (the buffers, AdamW and its moments)
inside that context, so a simulated device's tracker counts only what lives on the device.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Tools:
    """What a training step uses. `mixed_precision` is the autocast dtype, or None for the weights' own."""

    mixed_precision: torch.dtype | None = None
    gradient_checkpointing: bool = False
    frozen_half: bool = False
    host_optimizer: bool = False

    def numerics_changes(self) -> list[str]:
        """The tools in use that make the numbers differ from a plain float32 step (for the report)."""
        out = []
        if self.mixed_precision is not None:
            out.append(f"mixed precision ({str(self.mixed_precision).removeprefix('torch.')})")
        if self.frozen_half:
            out.append("frozen parts in half precision")
        if self.host_optimizer and self.mixed_precision is not None:
            # only half device weights are rounded from the master; with float32 ones the host AdamW is
            # torch's AdamW bit for bit
            out.append("host-side AdamW (device weights rounded from a float32 master)")
        return out


@dataclass(frozen=True)
class MemoryPreset:
    name: str
    tools: Tools


HALF = torch.bfloat16
PRESETS: Mapping[str, MemoryPreset] = {
    "fast": MemoryPreset("fast", Tools()),
    "balanced": MemoryPreset("balanced", Tools(mixed_precision=HALF, frozen_half=True)),
    "low": MemoryPreset("low", Tools(mixed_precision=HALF, gradient_checkpointing=True, frozen_half=True)),
    "lowest": MemoryPreset("lowest", Tools(mixed_precision=HALF, gradient_checkpointing=True, frozen_half=True,
                                           host_optimizer=True)),
}
_TOOL_NAMES = {f.name for f in fields(Tools)}


def resolve_tools(preset: str, method: Mapping[str, Any] | None = None) -> Tools:
    """The preset's tools with the method's own hyperparameters on top (they win)."""
    if preset not in PRESETS:
        raise ValueError(f"training.memory = {preset!r}; expected one of {', '.join(PRESETS)}")
    method = dict(method or {})
    unknown = sorted(set(method) - _TOOL_NAMES)
    if unknown:
        raise ValueError(f"method hyperparameters {unknown} are not memory tools ({', '.join(sorted(_TOOL_NAMES))})")
    return replace(PRESETS[preset].tools, **method)


class HostAdamW:
    """AdamW on the CPU over a float32 master copy of `params` (see the module docstring).

    `params` are the device parameters (any floating dtype, one device), or param groups as torch's
    optimizers take them (dicts with "params" and their own options); their `.grad` after backward is
    read by `step()`, which then writes the rounded new weights into them and clears the grads. A
    parameter with no gradient is skipped that step, as torch.optim.AdamW skips it (no decay, no moments).
    `host_context` (e.g. `DeviceService.host`) wraps every piece of host-side work: building the buffers,
    `step`, `state_dict`, `load_state_dict`. `fused` runs torch's fused AdamW kernel over the master
    (default: the single-tensor one).
    """

    def __init__(self, params: Iterable[nn.Parameter] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 host_context: Callable[[], AbstractContextManager[Any]] = nullcontext, fused: bool = False) -> None:
        self.host_context = host_context
        with host_context():
            self._build(params, lr, betas, eps, weight_decay, fused)

    def _build(self, params: Iterable[nn.Parameter] | Iterable[dict[str, Any]], lr: float,
               betas: tuple[float, float], eps: float, weight_decay: float, fused: bool = False) -> None:
        given = list(params)
        groups = given if given and isinstance(given[0], Mapping) else [{"params": given}]
        groups = [{**g, "params": [p for p in g["params"] if p.requires_grad]} for g in groups]
        self.params = [p for g in groups for p in g["params"]]
        if not self.params:
            raise ValueError("HostAdamW: no trainable parameters")
        devices = {p.device for p in self.params}
        if len(devices) != 1:
            raise ValueError(f"HostAdamW: parameters on several devices {sorted(map(str, devices))}")
        self.device = devices.pop()
        pin = self.device.type == "cuda"
        total = sum(p.numel() for p in self.params)
        self.master = torch.empty(total, dtype=torch.float32, pin_memory=pin)
        self.grads = torch.zeros(total, dtype=torch.float32, pin_memory=pin)
        self.offsets: list[int] = []
        by_dtype: dict[torch.dtype, int] = {}
        self.staging_offsets: list[int] = []
        at = 0
        for p in self.params:
            self.offsets.append(at)
            self.staging_offsets.append(by_dtype.get(p.dtype, 0))
            by_dtype[p.dtype] = by_dtype.get(p.dtype, 0) + p.numel()
            at += p.numel()
        # one staging buffer per device dtype (float32 device weights still stage: the copy is the wait point)
        self.staging = {dt: torch.empty(n, dtype=dt, pin_memory=pin) for dt, n in by_dtype.items()}
        masters = []
        with torch.no_grad():
            for p, off in zip(self.params, self.offsets):
                self.master[off:off + p.numel()].copy_(p.detach().reshape(-1))
                view = nn.Parameter(self.master[off:off + p.numel()].view(p.shape))  # shares the master's storage
                view.grad = self.grads[off:off + p.numel()].view(p.shape)
                masters.append(view)
        self.views = masters
        view_groups, at = [], 0
        for g in groups:
            view_groups.append({**g, "params": masters[at:at + len(g["params"])]})
            at += len(g["params"])
        # fused: the CPU kernel a recipe's AdamW(fused=True) runs (F5-TTS), so float32 device weights still equal it
        self.optimizer = torch.optim.AdamW(view_groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                           foreach=False, fused=fused)

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def _view(self, p: nn.Parameter, i: int) -> torch.Tensor:
        start = self.staging_offsets[i]
        return self.staging[p.dtype][start:start + p.numel()]

    def step(self) -> None:
        with self.host_context():
            self._step()

    @torch.no_grad()
    def _step(self) -> None:
        async_copy = self.device.type == "cuda"
        for i, p in enumerate(self.params):
            staged = self._view(p, i)
            if p.grad is None:
                staged.zero_()
            else:
                staged.copy_(p.grad.reshape(-1), non_blocking=async_copy)
        if async_copy:
            torch.cuda.current_stream(self.device).synchronize()  # the one wait of the step
        for i, p in enumerate(self.params):
            off = self.offsets[i]
            self.grads[off:off + p.numel()].copy_(self._view(p, i))
            # no gradient: AdamW skips the master view too (the rounded copy back then leaves p as it was)
            self.views[i].grad = None if p.grad is None else self.grads[off:off + p.numel()].view(p.shape)
        self.optimizer.step()
        for i, p in enumerate(self.params):
            off = self.offsets[i]
            staged = self._view(p, i)
            staged.copy_(self.master[off:off + p.numel()])          # rounding to the device dtype happens here
            p.copy_(staged.view(p.shape), non_blocking=async_copy)  # stream-ordered before the next step's copies
            p.grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        with self.host_context():
            return {"master": self.master.clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with self.host_context(), torch.no_grad():
            self.master.copy_(state["master"])
            for i, p in enumerate(self.params):
                off = self.offsets[i]
                p.copy_(self.master[off:off + p.numel()].view(p.shape))
            self.optimizer.load_state_dict(state["optimizer"])   # its moments are host tensors too

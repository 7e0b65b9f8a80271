"""Run a toy model through the runtime on the strict simulated device."""
from __future__ import annotations

import copy

import torch

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy

MB = 1 << 20
WORKING = 16 * MB


def residency_capacity(handle: ModelHandle, residency: str, async_offload: int = 1,
                       working: int = WORKING) -> tuple[str, int]:
    """(vram_mode, simulated capacity) giving all-streamed, half-way, or fully resident placement."""
    slots = 1 if handle.kind == "sequence" else async_offload + 1
    sizes = sorted((u.nbytes for u in handle.layout.units), reverse=True)
    min_ws = handle.layout.fixed_bytes + sum(sizes[:slots])
    if residency == "none":
        return "none", handle.size_bytes + 4 * working
    if residency == "half":
        return "normal", min_ws + (handle.size_bytes - min_ws) // 2 + working
    return "normal", handle.size_bytes + 4 * working


def run_streamed(model: torch.nn.Module, fn, kind: str, residency: str, *, seed: int = 0,
                 working: int = WORKING, **handle_kw):
    """Run fn(model, ctx) on a copy of `model` registered on a strict simulated device."""
    model = copy.deepcopy(model)
    handle = ModelHandle(model, name="toy", kind=kind, **handle_kw)
    mode, capacity = residency_capacity(handle, residency, working=working)
    devices = DeviceService(simulate={"cpu": capacity}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    manager.register(handle, engine="test", device="cpu")
    with manager.request(seed=seed) as ctx:
        out = ctx.run("toy", [handle], lambda: fn(model, ctx), memory=working)
    return out, ctx, handle, devices

"""ComfyUI's memory queries answered from one of our simulated devices, so that ComfyUI arbitrates it
as its GPU: the set tests/test_bridge.py and bench/coresidency.py apply in-process (the end-to-end
eviction test's simgpu_node applies the same set inside a server).

Works on the real `comfy.model_management` and on `comfy_standin.model_management` alike. ComfyUI's
fixed reserves (`EXTRA_RESERVED_VRAM` 400 MiB, `minimum_inference_memory` 0.8 GiB plus that
reserve) are divided by `scale`, like every
size in these scaled scenarios ("GiB" = 16 MiB at 1/64).
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from types import ModuleType

import torch

MB = 1 << 20


def pretend_gpu(mm: ModuleType, devices, device: torch.device, total: int, scale: int,
                setattr: Callable = setattr) -> weakref.WeakSet:
    """Patch `mm` so `device` is ComfyUI's only GPU with `total` bytes, its free memory what `devices`
    says; returns the set to add ComfyUI's own models on it to (their loaded bytes count as held by
    others on our side). `setattr` may be pytest's `monkeypatch.setattr`, to undo it afterwards."""
    others: weakref.WeakSet = weakref.WeakSet()
    devices.memory(device).external = lambda: sum(p.loaded_size() for p in list(others))
    is_cpu = mm.is_device_cpu

    def free(dev=None, torch_free_too=False):
        f = devices.free(device)
        return (f, 0) if torch_free_too else f

    def total_memory(dev=None, torch_total_too=False):
        return (total, 0) if torch_total_too else total

    setattr(mm, "get_free_memory", free)
    setattr(mm, "get_total_memory", total_memory)
    setattr(mm, "get_all_torch_devices", lambda exclude_current=False: [] if exclude_current else [device])
    setattr(mm, "is_device_cpu", lambda d: is_cpu(d) and d != device)
    setattr(mm, "vram_state", mm.VRAMState.NORMAL_VRAM)
    setattr(mm, "EXTRA_RESERVED_VRAM", (400 * MB) // scale)
    setattr(mm, "minimum_inference_memory", lambda: int(0.8 * (1 << 30)) // scale + mm.extra_reserved_memory())
    return others

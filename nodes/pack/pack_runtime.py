"""The pack's runtime inside ComfyUI (or the command line): one DeviceService, ModelManager and
RuntimeService per process, created on first use, wired to ComfyUI's memory arbitration when
ComfyUI is running. `build_runtime` is the one way to build it (nodes, command line, benchmarks);
tests build their own and install it with `use_runtime`.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ...runtime import DeviceService, ModelManager, VramPolicy
from ...runtime.allocator import apply_cuda_allocator
from ...runtime.service import RuntimeService
from .caches import ByteCache

MB = 1 << 20
PROMPT_CACHE_MB = 256
SEGMENT_CACHE_MB = 512   # about 90 minutes of 24 kHz mono float32


@dataclass
class PackRuntime:
    devices: DeviceService
    manager: ModelManager
    service: RuntimeService
    device: torch.device
    last_meta: dict[str, Any] = field(default_factory=dict)  # the last request's meta, for the panel
    # what engines derived from a voice (reference codes, speaker embeddings), per voice, model and settings
    prompts: ByteCache = field(default_factory=lambda: ByteCache(PROMPT_CACHE_MB * MB))
    # finished segments' audio, for scripts re-run after an edit (pipeline.speak(..., reuse=True))
    segments: ByteCache = field(default_factory=lambda: ByteCache(SEGMENT_CACHE_MB * MB))

    def __post_init__(self) -> None:
        # RAM relief clears these before it drops a host copy or evicts a model
        self.service.caches.update({"segments": self.segments, "prompts": self.prompts})


_lock = threading.Lock()
_runtime: PackRuntime | None = None


def in_comfyui() -> bool:
    """ComfyUI is running this process (never imported here, only detected)."""
    return "comfy.model_management" in sys.modules and "folder_paths" in sys.modules


def build_runtime(policy: VramPolicy | None = None, strict: bool = False) -> PackRuntime:
    """The runtime for `policy`: ComfyUI's device and arbitration inside ComfyUI, a simulated GPU of
    `compute.simulate_vram_mb` (strict: offloaded weights on `meta`), else the first accelerator or the CPU."""
    policy = policy if policy is not None else VramPolicy()
    apply_cuda_allocator(policy)  # before our first CUDA use (inside ComfyUI: from the next start)
    arbiter = None
    if in_comfyui():
        import comfy.cli_args
        import comfy.model_management as mm

        from ...runtime.comfy.bridge import ComfyArbiter, apply_comfy_defaults
        policy = apply_comfy_defaults(policy, mm, comfy.cli_args.args)
        arbiter = ComfyArbiter(mm)
        device = mm.get_torch_device()
    simulate = policy.get("compute.simulate_vram_mb")
    if simulate:
        # Inside ComfyUI on a CPU device, simulate ComfyUI's own device object: plain `cpu` (which
        # ComfyUI never arbitrates), or the `cpu:0` the end-to-end tests make it report as its GPU.
        sim = device if arbiter is not None and device.type == "cpu" else torch.device("cpu")
        devices, device = DeviceService(simulate={str(sim): simulate * MB}, strict=strict), sim
    else:
        devices = DeviceService()
        if arbiter is None:
            device = next((d for d in devices.devices() if d.type != "cpu"), torch.device("cpu"))
    manager = ModelManager(devices, policy, arbiter=arbiter)
    service = RuntimeService(manager)
    minutes = policy.get("compute.unload_after_minutes")
    if minutes is not None:  # idle models unload on time even while nobody speaks
        service.start_upkeep(interval=min(60.0, minutes * 15.0))
    return PackRuntime(devices, manager, service, torch.device(device))


def get_runtime() -> PackRuntime:
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = build_runtime()
        return _runtime


@contextmanager
def use_runtime(runtime: PackRuntime) -> Iterator[PackRuntime]:
    """Make `runtime` the process's pack runtime for the block (tests: a simulated device for the nodes)."""
    global _runtime
    with _lock:
        previous, _runtime = _runtime, runtime
    try:
        yield runtime
    finally:
        with _lock:
            _runtime = previous

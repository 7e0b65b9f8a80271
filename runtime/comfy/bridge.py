"""The ComfyUI bridge: our components take part in ComfyUI's own memory arbitration.

Each component gets a duck-typed patcher registered in ComfyUI's `current_loaded_models` (a
`LoadedModel`, as `load_models_gpu` makes one), so ComfyUI's `free_memory` (run when a diffusion model
loads) takes our units back byte-accurately through `partially_unload`, and `unload_all_models` (the
"Free memory" button, after an OOM) unloads ours. Before a phase places its components, the manager
asks ComfyUI for exactly the bytes it lacks (`free_memory`): diffusion models are offloaded by
ComfyUI's own order and partial unloading. Our patchers never claim to be dynamic.

This is the only module that touches ComfyUI; it takes the `comfy.model_management` module as an
argument so tests can run it against a real ComfyUI and against an in-repo stand-in.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from types import ModuleType
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..handles import ModelHandle
    from ..policy import VramPolicy

log = logging.getLogger("mizuoto.runtime")

MB = 1 << 20


class ComponentPatcher:
    """What ComfyUI's LoadedModel needs from a model, backed by one of our ModelHandles."""

    def __init__(self, handle: ModelHandle, load_device: torch.device, lock=None) -> None:
        self.lock = lock if lock is not None else threading.RLock()  # the manager's placement lock
        self.handle = handle
        self.model = handle.module  # weak-referenced by ComfyUI; the handle holds it strongly
        self.load_device = load_device
        self.offload_device = torch.device("cpu")
        self.parent = None
        self.clone_base_uuid = uuid.uuid4()
        self.is_multigpu_base_clone = False
        self.freed_log: deque[tuple[int, int]] = deque(maxlen=32)  # (asked, freed) of ComfyUI's last requests

    # ---- identity and description ------------------------------------------------------------
    def is_clone(self, other: object) -> bool:
        return other is self or getattr(other, "model", None) is self.model

    def is_dynamic(self) -> bool:
        return False  # never: dynamic models are not evicted for other dynamic models

    def model_patches_models(self) -> list:
        return []

    def model_patches_to(self, device_or_dtype) -> None:
        return None

    def model_dtype(self) -> torch.dtype | None:
        return next((t.dtype for t in self.handle.layout.fixed), None)

    def lowvram_patch_counter(self) -> int:
        return 0

    def get_nested_additional_models(self) -> list:
        return []

    # ---- sizes ----------------------------------------------------------------------------------
    def model_size(self) -> int:
        return self.handle.size_bytes

    def loaded_size(self) -> int:
        return self.handle.loaded_bytes

    def current_loaded_device(self) -> torch.device:
        return self.load_device if self.handle.loaded_bytes else self.offload_device

    # ---- moves ----------------------------------------------------------------------------------
    def partially_load(self, device, extra_memory, force_patch_weights: bool = False) -> int:
        # Registration only: the manager places the phase's components itself right after, whole or
        # partially, because it knows their units, working memory and minimum working set.
        return 0

    def partially_unload(self, device_to, memory_to_free: int) -> int:
        with self.lock:
            if self.handle.in_use:
                return 0  # a running phase never yields; ComfyUI then drops only its list entry
            freed = self.handle.partially_unload(int(memory_to_free))
        self.freed_log.append((int(memory_to_free), freed))
        if freed:
            self.handle.gave_up_for = "ComfyUI"
        log.info("ComfyUI took back %.1f MB of %s (asked %.1f MB)", freed / MB, self.handle.name,
                 memory_to_free / MB)
        return freed

    def detach(self, unpatch_all: bool = True) -> None:
        # unpatch_all=False comes with every re-request of the same model: keep the weights.
        with self.lock:
            if unpatch_all and not self.handle.in_use:
                self.handle.unload()
                self.handle.cap_bytes = None


class ComfyArbiter:
    """Registers components with ComfyUI and asks it for room before our phases place them."""

    def __init__(self, mm: ModuleType | None = None) -> None:
        if mm is None:
            import comfy.model_management as mm  # only when running inside ComfyUI
        self.mm = mm
        self.patchers: dict[ModelHandle, ComponentPatcher] = {}
        self.lock = threading.RLock()  # replaced by the manager's lock when a ModelManager takes this arbiter

    def register(self, handle: ModelHandle) -> ComponentPatcher:
        patcher = ComponentPatcher(handle, handle.device, self.lock)
        self.patchers[handle] = patcher  # ComfyUI keeps weak references only
        return patcher

    def forget(self, handle: ModelHandle) -> None:
        """Remove the component from ComfyUI's list (so no "potential memory leak" is reported)."""
        patcher = self.patchers.pop(handle, None)
        if patcher is None:
            return
        models = self.mm.current_loaded_models
        for i in range(len(models) - 1, -1, -1):
            if models[i].model is patcher:
                entry = models.pop(i)
                if getattr(entry, "model_finalizer", None) is not None:
                    entry.model_finalizer.detach()

    def make_room(self, device: torch.device, handles: list[ModelHandle], need: int) -> None:
        """Register the phase's components with ComfyUI and let it free `need` bytes on `device` (what
        the phase will place: weights not yet loaded, working memory, reserve), by its own eviction
        order and partial unloading, the phase's own components kept.

        Not through `load_models_gpu`: that frees 1.1x the request plus ComfyUI's minimum inference
        memory (1.2 GiB) on every call, a margin for activations it cannot estimate. We know ours
        (estimates, and an exact retry on OOM), so ComfyUI's models give back only what we lack.
        """
        patchers = [self.patchers[h] for h in handles if h in self.patchers and h.managed]
        if not patchers:  # a simulated CPU is managed too: "Free memory" must reach it
            return
        mm = self.mm
        mm.cleanup_models_gc()
        entries = []
        for patcher in patchers:
            found = [i for i, e in enumerate(mm.current_loaded_models) if e.model is patcher]
            entry = mm.current_loaded_models.pop(found[0]) if found else mm.LoadedModel(patcher)
            if not found:
                entry.model_load(0)  # our partially_load only registers; sets ComfyUI's finalizer
            entry.currently_used = True
            mm.current_loaded_models.insert(0, entry)  # most recently used first, as load_models_gpu does
            entries.append(entry)
        if mm.get_free_memory(device) < need:
            mm.free_memory(need, device, keep_loaded=entries)

    def interrupted(self) -> None:
        """Raise ComfyUI's InterruptProcessingException (a BaseException) if the user pressed cancel."""
        self.mm.throw_exception_if_processing_interrupted()


def policy_from_comfy(mm: ModuleType, args) -> dict:
    """ComfyUI's --lowvram/--novram/--highvram/--gpu-only/--reserve-vram as our settings."""
    state = mm.vram_state
    names = {"LOW_VRAM": "low", "NO_VRAM": "none", "HIGH_VRAM": "high", "SHARED": "shared", "NORMAL_VRAM": "normal"}
    out = {"compute.vram_mode": names.get(getattr(state, "name", ""), "normal")}
    if getattr(args, "gpu_only", False):
        out["compute.vram_mode"] = "high"
    if getattr(args, "reserve_vram", None) is not None:
        out["compute.vram_reserve_mb"] = int(args.reserve_vram * 1024)
    return out


def apply_comfy_defaults(policy: VramPolicy, mm: ModuleType, args) -> VramPolicy:
    """ComfyUI's command line fills in what the user's own settings leave at their defaults."""
    mapped = {k: v for k, v in policy_from_comfy(mm, args).items() if policy.source(k) == "default"}
    return policy.with_overrides(mapped) if mapped else policy

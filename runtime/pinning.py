"""Page-locked host copies of streamed weights, within a byte budget (`compute.max_pinned_mb`).

On NVIDIA, whole storages of at least 1 MB are registered in place with `cudaHostRegister` (no copy,
link-speed transfers); a finalizer on the storage waits for every device this budget served and
unregisters it before its memory can be reused. Smaller tensors, views and other devices get a copy
in pinned memory instead (page-locked memory must not overlap, and small tensors share pages with
other allocations).

What is charged is what is really page-locked: a registration pins whole pages; a `pin_memory()` copy
comes from torch's caching host allocator, which rounds every block up to a power of two and keeps
it pinned after the copy dies, until its cache is emptied (`release_cache`, which the streamer calls
when it drops or forgets components). Inside ComfyUI the budget is also bounded by what ComfyUI's own
pin budget has left (`MAX_PINNED_MEMORY - TOTAL_PINNED_MEMORY`).

A failed `cudaHostRegister` leaves its error pending in the CUDA runtime (torch's binding returns the
code and does not consume it; the next unrelated kernel would raise it): it is consumed as ComfyUI
does, and registration is not tried again by this budget.
"""
from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Callable

import torch

from .oom import discard_pending_error

log = logging.getLogger("mizuoto.runtime")

REGISTER_MIN_BYTES = 1 << 20
# Registrations must not overlap: this one fails for a tensor sharing a page with another registration
# (someone else's, or ours when the allocator put two storages side by side), not for want of support.
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
PAGE_BYTES = 4096
_CUDA_HOST_REGISTER_PORTABLE = 1


def comfy_pin_allowance() -> int | None:
    """Bytes ComfyUI's pin budget has left when ComfyUI is running (None outside ComfyUI)."""
    mm = sys.modules.get("comfy.model_management")
    limit, total = getattr(mm, "MAX_PINNED_MEMORY", None), getattr(mm, "TOTAL_PINNED_MEMORY", None)
    if limit is None or total is None:
        return None
    return max(0, int(limit) - int(total))


def host_block_bytes(nbytes: int) -> int:
    """What torch's caching host allocator really pins for a request: the next power of two."""
    return 0 if nbytes <= 0 else 1 << (nbytes - 1).bit_length()


def span_bytes(t: torch.Tensor) -> int:
    """Bytes a copy of `t` occupies (`pin_memory()` keeps its strides): its extent, not its storage."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))) * t.element_size()


def registered_bytes(ptr: int, nbytes: int) -> int:
    """Registration locks whole pages."""
    start = ptr - ptr % PAGE_BYTES
    return -(-(ptr + nbytes - start) // PAGE_BYTES) * PAGE_BYTES


def _pinned_copy(t: torch.Tensor) -> torch.Tensor:
    # Outside inference mode: an inference tensor could not become a parameter's data later.
    with torch.inference_mode(False), torch.no_grad():
        return t.pin_memory()


def _empty_host_cache() -> None:
    empty = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    empty = empty or getattr(torch._C, "_host_emptyCache", None)
    if empty is not None and torch.cuda.is_initialized():
        empty()


class PinBudget:
    """Pins host tensors while the budget lasts; everything past it stays pageable."""

    def __init__(self, max_bytes: int, allowance: Callable[[], int | None] = comfy_pin_allowance) -> None:
        self.max_bytes = max_bytes
        self.allowance = allowance
        self.used = 0  # registered pages + host-allocator blocks of live copies + dead ones still cached
        self.cached = 0  # blocks of dead copies that torch's host cache keeps pinned until released
        self.register_available = True
        self._registered: dict[int, int] = {}  # pointer -> bytes charged
        self._devices: set[int] = set()  # CUDA device indices whose streams may read pinned memory
        self._lock = threading.Lock()  # finalizers run on whichever thread frees the storage

    def serve(self, device: torch.device | str) -> None:
        """A CUDA device copies from these pins: finalizers synchronise it before unregistering."""
        device = torch.device(device)
        if device.type == "cuda":
            self._devices.add(device.index if device.index is not None else torch.cuda.current_device())

    def room(self) -> int:
        """Bytes that may still be pinned: our budget, and ComfyUI's remaining one when inside ComfyUI."""
        limit = self.max_bytes
        outside = self.allowance()
        if outside is not None:  # ComfyUI does not count our pins: what it has left is shared with ours
            limit = min(limit, outside)
        return max(0, limit - self.used)

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        """Return `t` page-locked (in place when possible), or `t` itself when over budget or not CUDA."""
        if not torch.cuda.is_available() or t.device.type != "cpu" or t.is_pinned() or t.numel() == 0:
            return t
        storage = t.untyped_storage()
        if self.register_available and torch.version.hip is None and _whole_storage(t) \
                and storage.nbytes() >= REGISTER_MIN_BYTES:
            ptr = storage.data_ptr()
            charge = registered_bytes(ptr, storage.nbytes())
            if ptr not in self._registered and charge <= self.room():
                if self._register(storage, ptr, charge):
                    return t
        charge = host_block_bytes(span_bytes(t))
        if charge > self.room():
            return t
        pinned = _pinned_copy(t)
        with self._lock:
            self.used += charge
        finalizer = weakref.finalize(pinned.untyped_storage(), self._copy_died, charge)
        finalizer.atexit = False
        return pinned

    def _register(self, storage: torch.UntypedStorage, ptr: int, charge: int) -> bool:
        err = int(torch.cuda.cudart().cudaHostRegister(ptr, storage.nbytes(), _CUDA_HOST_REGISTER_PORTABLE))
        if err != 0:
            discard_pending_error([torch.device("cuda", i) for i in sorted(self._devices)])
            if err == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:  # this memory shares a page with a registration
                log.debug("cudaHostRegister: memory already registered; a pinned copy instead")
                return False
            self.register_available = False
            log.info("cudaHostRegister failed (error %d): weights are copied to pinned memory instead "
                     "from now on", err)
            return False
        with self._lock:
            self._registered[ptr] = charge
            self.used += charge
        finalizer = weakref.finalize(storage, self._unregister, ptr)
        finalizer.atexit = False  # at interpreter exit the driver releases everything itself
        return True

    def _unregister(self, ptr: int) -> None:
        if sys.is_finalizing():
            return
        with self._lock:
            self.used -= self._registered.pop(ptr, 0)
        # Copies still in flight on any device we served may read this memory.
        for index in sorted(self._devices):
            torch.cuda.synchronize(index)
        err = int(torch.cuda.cudart().cudaHostUnregister(ptr))
        if err != 0:
            discard_pending_error([torch.device("cuda", i) for i in sorted(self._devices)])
            log.warning("cudaHostUnregister failed (error %d) for a weight's host memory", err)

    def _copy_died(self, charge: int) -> None:
        # Its block stays pinned in torch's host cache until that is emptied (not from here: the
        # block returns to the cache only after this callback, and emptying synchronises).
        with self._lock:
            self.cached += charge

    def release_cache(self) -> int:
        """Give the pinned blocks of dead copies back to the system; returns the bytes released."""
        with self._lock:
            released, self.cached = self.cached, 0
            self.used -= released
        if released:
            for index in sorted(self._devices):
                torch.cuda.synchronize(index)  # blocks of copies still in flight are not released
            _empty_host_cache()
        return released


def _whole_storage(t: torch.Tensor) -> bool:
    return t.storage_offset() == 0 and t.is_contiguous() and t.nbytes == t.untyped_storage().nbytes()

"""Page-locked host copies of streamed weights, within a byte budget (`compute.max_pinned_mb`).

On NVIDIA, whole storages of at least 1 MB are registered in place with `cudaHostRegister` (no copy,
link-speed transfers); a finalizer on the storage waits for the device and unregisters it before its
memory can be reused. Smaller tensors, and other devices, get a copy in pinned memory instead
(page-locked memory must not overlap, and small tensors share pages with other allocations).
"""
from __future__ import annotations

import logging
import weakref

import torch

log = logging.getLogger("mizuoto.runtime")

REGISTER_MIN_BYTES = 1 << 20
_CUDA_HOST_REGISTER_PORTABLE = 1


def _unregister(ptr: int) -> None:
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaHostUnregister(ptr)


class PinBudget:
    """Pins host tensors while the budget lasts; everything past it stays pageable."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._registered: set[int] = set()

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        """Return `t` page-locked (in place when possible), or `t` itself when over budget or not CUDA."""
        if not torch.cuda.is_available() or t.device.type != "cpu" or t.is_pinned():
            return t
        nbytes = t.untyped_storage().nbytes()
        if self.used + nbytes > self.max_bytes:
            return t
        if nbytes >= REGISTER_MIN_BYTES and torch.version.hip is None and self._whole_storage(t):
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in self._registered:
                err = torch.cuda.cudart().cudaHostRegister(ptr, nbytes, _CUDA_HOST_REGISTER_PORTABLE)
                if int(err) == 0:
                    self._registered.add(ptr)
                    self.used += nbytes
                    weakref.finalize(storage, self._release, ptr, nbytes)
                    return t
                log.debug("cudaHostRegister failed (%s); copying to pinned memory instead", err)
        pinned = t.pin_memory()
        self.used += pinned.untyped_storage().nbytes()
        weakref.finalize(pinned.untyped_storage(), self._give_back, pinned.untyped_storage().nbytes())
        return pinned

    @staticmethod
    def _whole_storage(t: torch.Tensor) -> bool:
        return t.storage_offset() == 0 and t.is_contiguous() and t.nbytes == t.untyped_storage().nbytes()

    def _release(self, ptr: int, nbytes: int) -> None:
        self._registered.discard(ptr)
        self.used -= nbytes
        _unregister(ptr)

    def _give_back(self, nbytes: int) -> None:
        self.used -= nbytes

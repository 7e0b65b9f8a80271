"""Stand-ins for the CUDA pieces the runtime calls, so the CUDA code paths run on a CPU (tests only).

- `SimSideStream`: the streamer's side stream on the strict simulated device. Copies are made at
  once (the simulated device has no streams); each carries an event that records whether the compute
  stream waited for it, and every copy's storage checks, when it dies, that its event was waited
  for first (ComfyUI's rule: an unused copy is dropped only after the compute stream waited on it).
- `FakeCudart`: `cudaHostRegister`/`cudaHostUnregister` with chosen return codes, recording calls.
- `FakeAllocatorStats`: `torch.cuda`-like allocator statistics for `DeviceService.tracking`.
"""
from __future__ import annotations

import threading
import weakref

import torch


class SimEvent:
    def __init__(self) -> None:
        self.waited = False


class SimSideStream:
    def __init__(self, devices, device) -> None:
        self.devices = devices
        self.device = torch.device(device)
        self.copies = 0
        self.waits = 0
        self.live = 0  # copies made here whose storage is alive
        self.max_live = 0
        self.violations: list[str] = []
        self.fail_next: int = 0  # that many next copies raise torch.OutOfMemoryError

    def copy(self, hosts):
        if self.fail_next:
            self.fail_next -= 1
            raise torch.OutOfMemoryError("simulated side stream: out of memory")
        tensors = self.devices.place_many(hosts, self.device, non_blocking=True)
        event = SimEvent()
        self.copies += 1
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        weakref.finalize(tensors[0].untyped_storage(), self._died, event)
        return tensors, event

    def wait(self, event: SimEvent) -> None:
        self.waits += 1
        event.waited = True

    def _died(self, event: SimEvent) -> None:
        self.live -= 1
        if not event.waited:
            self.violations.append("a prefetched copy was dropped before the compute stream waited on it")


class FakeCudart:
    """`torch.cuda.cudart()` with scripted results (0 is success)."""

    def __init__(self, register: int = 0, unregister: int = 0) -> None:
        self.register_result = register
        self.unregister_result = unregister
        self.registered: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []

    def cudaHostRegister(self, ptr: int, nbytes: int, flags: int) -> int:
        self.calls.append(("register", ptr))
        if self.register_result == 0:
            self.registered[ptr] = nbytes
        return self.register_result

    def cudaHostUnregister(self, ptr: int) -> int:
        self.calls.append(("unregister", ptr))
        self.registered.pop(ptr, None)
        return self.unregister_result


class FakeAllocatorStats:
    """memory_allocated / max_memory_allocated / reset_peak_memory_stats of one device, thread-safe."""

    def __init__(self) -> None:
        self.allocated = 0
        self.peak = 0
        self.resets = 0
        self._lock = threading.Lock()

    def alloc(self, nbytes: int) -> None:
        with self._lock:
            self.allocated += nbytes
            self.peak = max(self.peak, self.allocated)

    def free(self, nbytes: int) -> None:
        with self._lock:
            self.allocated -= nbytes

    def memory_allocated(self, device=None) -> int:
        return self.allocated

    def max_memory_allocated(self, device=None) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device=None) -> None:
        with self._lock:
            self.resets += 1
            self.peak = self.allocated

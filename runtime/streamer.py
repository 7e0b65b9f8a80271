"""Per-device weight streaming: copies of units that are not resident, made when they run.

A unit's hooks call `acquire` before its forward and `release` after. Acquire swaps each streamed
parameter's data to a device copy (made now, reused from the cache, or prefetched on a side stream);
release swaps it back to the offloaded tensor. The cache keeps `async_offload + 1` copies per
component (one for sequence components): a unit that runs again before its copy is dropped (CFG
halves, beams) costs nothing. On CUDA/ROCm the streamer learns which unit runs after which and
copies the next one on a side stream while the current one computes; a unit entered out of that
order is copied on the spot, so correctness never depends on the order.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .devices import DeviceService, assign
from .pinning import PinBudget
from .units import Unit

if TYPE_CHECKING:
    from .handles import ModelHandle


@dataclass(eq=False)
class _Copy:
    tensors: list[torch.Tensor]
    event: object | None = None  # torch.cuda.Event when made on the side stream


class Streamer:
    def __init__(self, devices: DeviceService, device: torch.device, async_offload: int = 1,
                 pin_budget: PinBudget | None = None) -> None:
        self.devices = devices
        self.device = torch.device(device)
        self.async_offload = async_offload
        self.pin_budget = pin_budget
        self.cancel_check: Callable[[], None] | None = None
        self._cache: dict[ModelHandle, OrderedDict[Unit, _Copy]] = {}
        self._next: dict[Unit, Unit] = {}
        self._last: Unit | None = None
        self._side = None
        if self.device.type == "cuda" and async_offload > 0:
            self._side = torch.cuda.Stream(self.device)

    def slots(self, handle: ModelHandle) -> int:
        """Copies held at once for a component: one for sequence models, async_offload + 1 otherwise."""
        return 1 if handle.kind == "sequence" else self.async_offload + 1

    # ---- called by the hooks ----------------------------------------------------------------
    def acquire(self, handle: ModelHandle, unit: Unit) -> None:
        cache = self._cache.setdefault(handle, OrderedDict())
        copy = cache.get(unit)
        if copy is None:
            self._trim(handle, cache, room_for=1)
            copy = self._copy(handle, unit, side=False)
            cache[unit] = copy
        else:
            cache.move_to_end(unit)
            if copy.event is not None:
                stream = torch.cuda.current_stream(self.device)
                stream.wait_event(copy.event)
                for t in copy.tensors:
                    t.record_stream(stream)
                copy.event = None
        for p, t in zip(unit.params, copy.tensors):
            assign(p, t)
        if self._last is not None and self._last is not unit:
            self._next[self._last] = unit
        self._last = unit
        if self._side is not None and handle.kind != "sequence":
            self._prefetch(handle, cache, self._next.get(unit))

    def release(self, handle: ModelHandle, unit: Unit) -> None:
        for p in unit.params:
            handle._release(p)

    # ---- copies -------------------------------------------------------------------------------
    def _copy(self, handle: ModelHandle, unit: Unit, side: bool) -> _Copy:
        if self.cancel_check is not None:
            self.cancel_check()
        hosts = [handle._host_for_stream(p, self.pin_budget) for p in unit.params]
        if side:
            with torch.cuda.stream(self._side):
                tensors = [self.devices.place(h, self.device, non_blocking=True) for h in hosts]
                event = torch.cuda.Event()
                event.record(self._side)
            copy = _Copy(tensors, event)
        else:
            non_blocking = self.device.type == "cuda"
            copy = _Copy([self.devices.place(h, self.device, non_blocking=non_blocking) for h in hosts])
        handle.streamed_bytes += unit.nbytes
        return copy

    def _prefetch(self, handle: ModelHandle, cache: OrderedDict, nxt: Unit | None) -> None:
        if nxt is None or nxt in cache or nxt.hot or nxt not in handle._streamed_units():
            return
        self._trim(handle, cache, room_for=1)
        cache[nxt] = self._copy(handle, nxt, side=True)

    def _trim(self, handle: ModelHandle, cache: OrderedDict, room_for: int = 0) -> None:
        """Drop the oldest copies so `room_for` more fit in the component's slots; never one in use."""
        excess = len(cache) + room_for - self.slots(handle)
        for unit in list(cache):
            if excess <= 0:
                break
            if unit.depth == 0:
                del cache[unit]
                excess -= 1

    def drop(self, handle: ModelHandle | None = None, unit: Unit | None = None) -> None:
        """Forget cached copies: of one unit, of one component, or all (after an OOM)."""
        if handle is None:
            self._cache.clear()
        elif unit is not None:
            self._cache.get(handle, {}).pop(unit, None)
        else:
            self._cache.pop(handle, None)

    def cached_bytes(self, handle: ModelHandle | None = None) -> int:
        caches = [self._cache.get(handle, {})] if handle is not None else list(self._cache.values())
        return sum(u.nbytes for c in caches for u in c)

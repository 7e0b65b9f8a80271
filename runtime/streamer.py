"""Per-device weight streaming: copies of units that are not resident, made when they run.

A unit's hooks call `acquire` before its forward and `release` after. Acquire swaps each streamed
parameter's data to a device copy (made now, reused from the cache, or prefetched on a side stream);
release swaps it back to the offloaded tensor. The cache keeps `async_offload + 1` copies per
component (one for sequence components): a unit that runs again before its copy is dropped (CFG
halves, beams) costs nothing. On CUDA/ROCm the streamer learns which unit runs after which and
copies the next one on a side stream while the current one computes; a unit entered out of that
order is copied on the spot, so correctness never depends on the order.

Prefetching follows ComfyUI's `cast_to` (see `DeviceService.place_many`): the copy's memory comes from
the compute stream's pool, the side stream waits for the compute stream, copies and records an
event; the compute stream waits on that event before the copy is used, and before an unused copy is
dropped. There is no `record_stream`, so a dropped copy's block is reusable at once in stream order:
however far the CPU runs ahead of the GPU, the allocator holds no more copies than the cache does
(with `record_stream`, every dropped copy would wait for the compute stream to catch up, and each
new prefetch would take a fresh block). A prefetch that runs out of memory is skipped: the unit is
copied when it runs, and the phase neither fails nor gets capped for a speculative copy.

Streamed and resident units run the same kernels on the same dtypes; on a GPU, "exact" additionally
assumes library heuristics pick the same algorithms in both runs, which cuDNN does not promise under
memory pressure (see bench/README.md, "What exact means on a GPU").
"""
from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from .devices import DeviceService, assign
from .oom import is_oom
from .pinning import PinBudget
from .units import Unit

log = logging.getLogger("mizuoto.runtime")


class Streamed(Protocol):
    """What the streamer needs of a component (ModelHandle is one): its host tensors and its counters.
    The component owns where its weights are; the streamer only lends device copies while a unit runs."""

    name: str
    kind: str
    async_offload: int | None  # the running request's compute.async_offload, None outside a request
    streamed_bytes: int

    def host_tensor(self, p: torch.Tensor, pin_budget: PinBudget | None) -> torch.Tensor: ...

    def return_to_host(self, p: torch.Tensor) -> None: ...

    def streamed_units(self) -> list[Unit]: ...


@dataclass(eq=False)
class _Copy:
    tensors: list[torch.Tensor]
    event: object | None = None  # set while the compute stream has not waited for a side-stream copy


class SideStream:
    """A CUDA/ROCm side stream for prefetch copies of one device (its own index, never the current one)."""

    def __init__(self, devices: DeviceService, device: torch.device) -> None:
        self.devices = devices
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def copy(self, hosts: list[torch.Tensor]) -> tuple[list[torch.Tensor], object]:
        tensors = self.devices.place_many(hosts, self.device, non_blocking=True, stream=self.stream)
        event = torch.cuda.Event()
        event.record(self.stream)
        return tensors, event

    def wait(self, event: object) -> None:
        """The compute stream waits for the copy (a GPU-side wait; the CPU goes on)."""
        torch.cuda.current_stream(self.device).wait_event(event)


class Streamer:
    def __init__(self, devices: DeviceService, device: torch.device, async_offload: int = 1,
                 pin_budget: PinBudget | None = None) -> None:
        self.devices = devices
        self.device = torch.device(device)
        self.async_offload = async_offload
        self.pin_budget = pin_budget
        self.cancel_check: Callable[[], None] | None = None
        # Per component, weakly: an unregistered component that nobody holds takes its units (and so
        # its modules and weights) with it even if `forget` was not called.
        self._cache: weakref.WeakKeyDictionary[Streamed, OrderedDict[Unit, _Copy]] = weakref.WeakKeyDictionary()
        self._next: weakref.WeakKeyDictionary[Streamed, dict[Unit, Unit]] = weakref.WeakKeyDictionary()
        self._last: weakref.WeakKeyDictionary[Streamed, Unit] = weakref.WeakKeyDictionary()
        self.prefetch_skipped = 0  # prefetches given up because the device was out of memory
        self.side: SideStream | None = None
        if self.device.type == "cuda" and async_offload > 0:
            self.side = SideStream(devices, self.device)
        if pin_budget is not None:
            pin_budget.serve(self.device)

    def slots(self, handle: Streamed) -> int:
        """Copies held at once for a component: one for sequence models, async_offload + 1 otherwise (the
        running request's compute.async_offload while a phase holds it, else the process setting)."""
        if handle.kind == "sequence":
            return 1
        return (self.async_offload if handle.async_offload is None else handle.async_offload) + 1

    # ---- called by the hooks ----------------------------------------------------------------
    def acquire(self, handle: Streamed, unit: Unit) -> None:
        cache = self._cache.setdefault(handle, OrderedDict())
        copy = cache.get(unit)
        if copy is None:
            self._trim(handle, cache, room_for=1)
            copy = self._copy(handle, unit)
            cache[unit] = copy
        else:
            cache.move_to_end(unit)
            self._ready(copy)
        for p, t in zip(unit.params, copy.tensors):
            assign(p, t)
        order = self._next.setdefault(handle, {})
        last = self._last.get(handle)
        if last is not None and last is not unit:
            order[last] = unit
        self._last[handle] = unit
        if self.side is not None and handle.kind != "sequence":
            self._prefetch(handle, cache, order.get(unit))

    def release(self, handle: Streamed, unit: Unit) -> None:
        for p in unit.params:
            handle.return_to_host(p)

    # ---- copies -------------------------------------------------------------------------------
    def _hosts(self, handle: Streamed, unit: Unit) -> list[torch.Tensor]:
        if self.cancel_check is not None:
            self.cancel_check()
        return [handle.host_tensor(p, self.pin_budget) for p in unit.params]

    def _copy(self, handle: Streamed, unit: Unit) -> _Copy:
        hosts = self._hosts(handle, unit)
        copy = _Copy(self.devices.place_many(hosts, self.device, non_blocking=self.device.type == "cuda"))
        handle.streamed_bytes += unit.nbytes
        return copy

    def _prefetch(self, handle: Streamed, cache: OrderedDict, nxt: Unit | None) -> None:
        if nxt is None or nxt in cache or nxt.hot or nxt not in handle.streamed_units():
            return
        self._trim(handle, cache, room_for=1)
        hosts = self._hosts(handle, nxt)
        try:
            tensors, event = self.side.copy(hosts)
        except Exception as e:
            if not is_oom(e, [self.device]):
                raise
            # Speculative: the unit is copied when it runs (and a real shortage fails there).
            self.prefetch_skipped += 1
            log.debug("%s: no memory to prefetch %s; it is copied when it runs", handle.name, nxt.name)
            return
        cache[nxt] = _Copy(tensors, event)
        handle.streamed_bytes += nxt.nbytes

    def _ready(self, copy: _Copy) -> None:
        """Make the compute stream wait for a side-stream copy (before its use, or before dropping it)."""
        if copy.event is not None:
            self.side.wait(copy.event)
            copy.event = None

    def _trim(self, handle: Streamed, cache: OrderedDict, room_for: int = 0) -> None:
        """Drop the oldest copies so `room_for` more fit in the component's slots; never one in use."""
        excess = len(cache) + room_for - self.slots(handle)
        for unit in list(cache):
            if excess <= 0:
                break
            if unit.depth == 0:
                self._ready(cache.pop(unit))
                excess -= 1

    def drop(self, handle: Streamed | None = None, unit: Unit | None = None) -> None:
        """Forget cached copies: of one unit, of one component, or all (after an OOM)."""
        if handle is None:
            caches = list(self._cache.values())
        elif unit is not None:
            copy = self._cache.get(handle, {}).pop(unit, None)
            caches = [{unit: copy}] if copy is not None else []
        else:
            caches = [self._cache.get(handle, {})]
        for cache in caches:
            for copy in cache.values():
                self._ready(copy)
        if handle is None:
            self._cache.clear()
        elif unit is None:
            self._cache.pop(handle, None)
        if unit is None and self.pin_budget is not None and self.pin_budget.cached:
            self.pin_budget.release_cache()

    def forget(self, handle: Streamed) -> None:
        """Everything about a component leaving management (unregister, eviction): its copies and the
        run order learned from its units, so the streamer keeps none of its modules or weights alive."""
        self.drop(handle)
        self._next.pop(handle, None)
        self._last.pop(handle, None)

    def cached_bytes(self, handle: Streamed | None = None) -> int:
        caches = [self._cache.get(handle, {})] if handle is not None else list(self._cache.values())
        return sum(u.nbytes for c in caches for u in c)

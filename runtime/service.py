"""RuntimeService: which models stay loaded at all (above the per-phase ModelManager).

A model is a named group of components (an engine's loaded checkpoint). The service keeps at most
`compute.max_resident_models` on devices, unloads models idle for `compute.unload_after_minutes`,
relieves RAM when free RAM drops under `compute.ram_reserve_mb` (host copies of whole components
first, then idle models least recently used; never pinned or busy ones), frees a device for other
work, and after an OOM failure unloads every idle model (what ComfyUI's unload_all_models does).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
import torch

from .handles import ModelHandle
from .manager import ModelManager

log = logging.getLogger("mizuoto.runtime")


@dataclass(eq=False)
class Model:
    name: str
    handles: list[ModelHandle]
    pinned: bool = False
    on_evict: Callable[[], None] | None = None  # forget the weights in RAM (the engine reloads later)
    evicted: bool = field(default=False)

    @property
    def busy(self) -> bool:
        return any(h.in_use for h in self.handles)

    @property
    def last_used(self) -> float:
        return max((h.last_used for h in self.handles), default=0.0)

    @property
    def loaded_bytes(self) -> int:
        return sum(h.loaded_bytes for h in self.handles)


class RuntimeService:
    def __init__(self, manager: ModelManager, clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.clock = clock
        self.models: dict[str, Model] = {}

    @property
    def policy(self):
        return self.manager.policy

    def add(self, name: str, handles: list[ModelHandle], *, pinned: bool = False,
            on_evict: Callable[[], None] | None = None) -> Model:
        model = Model(name, list(handles), pinned, on_evict)
        self.models[name] = model
        return model

    def _idle_lru(self) -> list[Model]:
        return sorted((m for m in self.models.values() if not m.busy and not m.pinned and not m.evicted),
                      key=lambda m: m.last_used)

    def _unload(self, model: Model) -> None:
        for h in model.handles:
            h.unload()

    def _evict(self, model: Model) -> None:
        self._unload(model)
        for h in model.handles:
            if h in self.manager.handles:
                self.manager.unregister(h)
        model.evicted = True
        if model.on_evict is not None:
            model.on_evict()
        self.models.pop(model.name, None)
        log.info("unloaded model %s to relieve RAM", model.name)

    def enforce_resident_limit(self) -> list[str]:
        """Unload the least recently used idle models beyond `compute.max_resident_models`."""
        limit = self.policy.get("compute.max_resident_models")
        if limit is None:
            return []
        resident = [m for m in self.models.values() if m.loaded_bytes]
        unloaded = []
        for model in self._idle_lru():
            if len(resident) <= limit:
                break
            if model in resident:
                self._unload(model)
                resident.remove(model)
                unloaded.append(model.name)
        return unloaded

    def unload_idle(self) -> list[str]:
        """Unload models idle for longer than `compute.unload_after_minutes` (never pinned or busy)."""
        minutes = self.policy.get("compute.unload_after_minutes")
        if minutes is None:
            return []
        now = self.clock()
        stale = [m for m in self._idle_lru() if m.loaded_bytes and now - m.last_used > minutes * 60]
        for model in stale:
            self._unload(model)
        return [m.name for m in stale]

    def relieve_ram(self, available: int | None = None) -> list[str]:
        """Free RAM below the reserve: drop host copies of whole components, then evict idle models LRU.

        Returns what it did, in order ("host:<component>" or "model:<name>").
        """
        reserve = self.policy.ram_reserve_bytes()
        free = psutil.virtual_memory().available if available is None else available
        actions = []
        if free >= reserve:
            return actions
        for model in sorted(self.models.values(), key=lambda m: m.last_used):
            for h in model.handles:
                if free >= reserve:
                    return actions
                dropped = h.drop_host_copies()
                if dropped:
                    free += dropped
                    actions.append(f"host:{h.name}")
        for model in self._idle_lru():
            if free >= reserve:
                break
            free += sum(h.host_bytes for h in model.handles)
            self._evict(model)
            actions.append(f"model:{model.name}")
        return actions

    def maintain(self) -> list[str]:
        """After each request: the resident-model limit, idle unloading and RAM relief, in that order."""
        return self.enforce_resident_limit() + self.unload_idle() + self.relieve_ram()

    def release_device(self, device: torch.device | str) -> None:
        """Take every idle component off `device` (before another job needs all of it)."""
        for h in self.manager.yield_order(device):
            h.unload()
        self.manager.devices.empty_cache(device)

    def release_after_oom(self) -> None:
        """After an OOM failure: every idle component off every device."""
        self.manager.unload_all()
        for device in {str(h.device) for h in self.manager.handles}:
            self.manager.devices.empty_cache(device)

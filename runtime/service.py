"""RuntimeService: which models stay loaded at all (above the per-phase ModelManager).

A model is a named group of components (an engine's loaded checkpoint). The service keeps at most
`compute.max_resident_models` on devices, unloads models idle for `compute.unload_after_minutes`,
relieves RAM when free RAM drops under `compute.ram_reserve_mb` (host copies of whole components
first, then idle models least recently used; never pinned or busy ones), frees a device for other
work, and after an OOM failure unloads every idle model (what ComfyUI's unload_all_models does).

Models are loaded through the service (`load` / `using`): it owns the only strong reference to a loaded
engine, so evicting a model (RAM relief, `evict`, a model nobody refers to any more) really frees its
weights, and the next use builds it again from the same files. Callers keep a name and a way to build,
never the engine itself:

    with service.using("hibari:fp32", build=lambda: HibariEngine(...)) as engine:   # loads if needed
        ...                                                                         # never evicted meanwhile
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    engine: Any = None      # what `load` built; the service holds the only strong reference
    active: int = 0         # requests using the model now, between their phases too
    refs: int = 0           # live references (loader outputs) that may use it again
    serial: threading.Lock = field(default_factory=threading.Lock)   # one request at a time

    @property
    def busy(self) -> bool:
        return self.active > 0 or any(h.in_use for h in self.handles)

    @property
    def last_used(self) -> float:
        return max((h.last_used for h in self.handles), default=0.0)

    @property
    def loaded_bytes(self) -> int:
        return sum(h.loaded_bytes for h in self.handles)


class Releasable(Protocol):
    """Memory a caller keeps that can be dropped and rebuilt (the pack's prompt and segment caches)."""

    @property
    def bytes(self) -> int: ...

    def clear(self) -> None: ...


class RuntimeService:
    def __init__(self, manager: ModelManager, clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.clock = clock
        self.models: dict[str, Model] = {}
        self.caches: dict[str, Releasable] = {}   # dropped first when RAM runs short (cheapest to rebuild)
        # The manager's lock: upkeep, RAM relief, releases and evictions never interleave with placement.
        self._lock = manager.lock
        self._refs: dict[str, int] = {}
        self._upkeep: tuple[threading.Thread, threading.Event] | None = None

    @property
    def policy(self):
        return self.manager.policy

    def add(self, name: str, handles: list[ModelHandle], *, pinned: bool = False,
            on_evict: Callable[[], None] | None = None) -> Model:
        with self._lock:
            model = Model(name, list(handles), pinned, on_evict)
            self.models[name] = model
            return model

    # ---- loaded engines ------------------------------------------------------------------------
    def load(self, name: str, build: Callable[[], Any],
             handles: Callable[[Any], list[ModelHandle]] = lambda engine: engine.handles) -> Any:
        """The engine called `name`, built with `build()` (which registers its handles) if it is not loaded."""
        with self._lock:
            model = self.models.get(name)
            if model is None or model.evicted or model.engine is None:
                engine = build()
                parts = list(handles(engine))
                model = Model(name, parts, pinned=any(h.pinned for h in parts), engine=engine,
                              refs=self._refs.get(name, 0))
                self.models[name] = model
                log.info("loaded model %s", name)
            return model.engine

    @contextmanager
    def using(self, name: str, build: Callable[[], Any],
              handles: Callable[[Any], list[ModelHandle]] = lambda engine: engine.handles) -> Iterator[Any]:
        """The loaded engine for one request: no upkeep evicts or unloads it until the block ends."""
        with self._lock:
            engine = self.load(name, build, handles)
            model = self.models[name]
            model.active += 1
        try:
            with model.serial:             # two requests on one model take turns (shared hooks and caches)
                yield engine
        finally:
            with self._lock:
                model.active -= 1

    def reference(self, name: str) -> None:
        """A loader output that names the model was created (its finalizer calls `dereference`)."""
        with self._lock:
            self._refs[name] = self._refs.get(name, 0) + 1
            if name in self.models:
                self.models[name].refs = self._refs[name]

    def dereference(self, name: str) -> None:
        """Safe from a finalizer: only counts; `maintain` evicts models nobody refers to."""
        with self._lock:
            self._refs[name] = max(0, self._refs.get(name, 0) - 1)
            if name in self.models:
                self.models[name].refs = self._refs[name]

    def evict(self, name: str) -> bool:
        """Unregister a model and drop the service's reference to it; False when it is busy or unknown."""
        with self._lock:
            model = self.models.get(name)
            if model is None or model.busy:
                return False
            self._evict(model, "on request")
            return True

    def unload_all(self) -> None:
        """Every idle component off its device (ComfyUI's unload_all_models, the /free route)."""
        with self._lock:
            self.manager.unload_all()

    def evict_unreferenced(self) -> list[str]:
        """Loaded engines no loader output refers to any more (ComfyUI dropped the node's output)."""
        with self._lock:
            gone = [m for m in self.models.values() if m.engine is not None and m.refs == 0 and not m.busy]
            for model in gone:
                self._evict(model, "no longer referenced")
            return [m.name for m in gone]

    def _idle_lru(self) -> list[Model]:
        return sorted((m for m in self.models.values() if not m.busy and not m.pinned and not m.evicted),
                      key=lambda m: m.last_used)

    def _unload(self, model: Model) -> None:
        for h in model.handles:
            h.unload()

    def _evict(self, model: Model, why: str) -> None:
        self._unload(model)
        for h in model.handles:
            if h in self.manager.handles:
                self.manager.unregister(h)
        model.evicted = True
        model.engine = None
        if model.on_evict is not None:
            model.on_evict()
        self.models.pop(model.name, None)
        log.info("evicted model %s (%s)", model.name, why)

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
        """Free RAM below the reserve: clear the registered caches, drop host copies of whole components,
        then evict idle models LRU.

        Returns what it did, in order ("cache:<name>", "host:<component>" or "model:<name>").
        """
        reserve = self.policy.ram_reserve_bytes()
        free = psutil.virtual_memory().available if available is None else available
        actions = []
        if free >= reserve:
            return actions
        for name, cache in self.caches.items():
            if free >= reserve:
                return actions
            if cache.bytes:
                free += cache.bytes
                cache.clear()
                actions.append(f"cache:{name}")
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
            self._evict(model, "to relieve RAM")
            actions.append(f"model:{model.name}")
        return actions

    def maintain(self) -> list[str]:
        """After each request: unreferenced models, the resident-model limit, idle unloading and RAM
        relief, in that order."""
        with self._lock:
            return (self.evict_unreferenced() + self.enforce_resident_limit() + self.unload_idle()
                    + self.relieve_ram())

    def release_device(self, device: torch.device | str) -> None:
        """Take every idle component off `device` (before another job needs all of it)."""
        with self._lock:
            for h in self.manager.yield_order(device):
                h.unload()
            self.manager.devices.empty_cache(device)

    def release_after_oom(self) -> None:
        """After an OOM failure: every idle component off every device."""
        with self._lock:
            self.manager.unload_all()
            for device in {str(h.device) for h in self.manager.handles}:
                self.manager.devices.empty_cache(device)

    # ---- upkeep on its own timer ------------------------------------------------------------------
    def start_upkeep(self, interval: float = 30.0) -> None:
        """Run `maintain` every `interval` seconds on a daemon thread (idle models unload even while
        nobody speaks); `stop_upkeep` ends it."""
        if self._upkeep is not None:
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                try:
                    self.maintain()
                except Exception:  # upkeep must never die: log and try again next time
                    log.exception("runtime upkeep failed")

        thread = threading.Thread(target=loop, name="mizuoto-upkeep", daemon=True)
        self._upkeep = (thread, stop)
        thread.start()

    def stop_upkeep(self) -> None:
        if self._upkeep is not None:
            thread, stop = self._upkeep
            stop.set()
            thread.join()
            self._upkeep = None

"""ModelManager: decides, per phase, which components go on the device and how much of each.

`load(handles, memory)` per device: need = bytes not yet placed + working memory (estimate x
calibration factor) + reserve. If free memory is short, idle components yield (partially loaded
first, then models not pinned, then least recently used; unit by unit in normal/low modes, whole in
high/shared), then free memory is measured again. Components load whole when they fit, else
partially within free - working - reserve. Estimates never refuse a load: below the minimum working
set it still tries (and warns); only a real allocation failure is an error.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psutil
import torch

from .calibration import Calibration
from .devices import DeviceService, Tracking, default_vram_reserve
from .handles import ModelHandle
from .phases import Cancelled, RequestContext
from .pinning import PinBudget
from .policy import VramPolicy
from .streamer import Streamer

if TYPE_CHECKING:
    from .comfy.bridge import ComfyArbiter

log = logging.getLogger("mizuoto.runtime")

MB = 1 << 20
GPU_JOB_WAIT_S = 600.0


class ModelManager:
    def __init__(self, devices: DeviceService, policy: VramPolicy | None = None, *,
                 calibration: Calibration | None = None, arbiter: ComfyArbiter | None = None) -> None:
        self.devices = devices
        self.arbiter = arbiter  # ComfyUI's memory arbitration, when running inside ComfyUI
        self._policy = policy if policy is not None else VramPolicy()
        self.calibration = calibration if calibration is not None else Calibration()
        self.handles: list[ModelHandle] = []
        self._streamers: dict[str, Streamer] = {}
        self._pins = PinBudget(self.policy.max_pinned_bytes())
        self._cond = threading.Condition(threading.RLock())
        if arbiter is not None:
            arbiter.lock = self._cond
        self._owners: dict[ModelHandle, object] = {}  # handle -> request using it
        self._working: dict[object, int] = {}         # request -> working memory of its current phase (gpu_jobs)
        self._waiting: dict[object, list[ModelHandle]] = {}  # request -> components it waits for (in use)

    @property
    def lock(self) -> threading.Condition:
        """Held by every placement change: phases' loads and releases, upkeep, evictions, ComfyUI's frees."""
        return self._cond

    @property
    def policy(self) -> VramPolicy:
        """The process policy; a request's own (with its per-call overrides) is passed explicitly."""
        return self._policy

    @policy.setter
    def policy(self, policy: VramPolicy) -> None:
        self._policy = policy

    # ---- registry -----------------------------------------------------------------------------
    def register(self, handle: ModelHandle, engine: str, device: torch.device | str = "cpu") -> ModelHandle:
        """Put a component under management on `device` (where it computes)."""
        with self._cond:
            if handle in self.handles:
                raise ValueError(f"register: component {handle.name!r} is already registered")
            device = self.devices.normalize(device)  # `cuda` and `cuda:0` are one device, with one streamer
            handle.engine = engine
            handle.pinned = handle.name in self.policy.get(f"engines.{engine}.pinned_models")
            handle.attach(self.devices, device, self.streamer(device))
            self.handles.append(handle)
            if self.arbiter is not None:
                self.arbiter.register(handle)
            return handle

    def unregister(self, handle: ModelHandle) -> None:
        with self._cond:
            if handle.in_use:
                raise RuntimeError(f"unregister: component {handle.name!r} is in use")
            self.streamer(handle.device).forget(handle)  # copies and learned order: nothing kept alive
            if self.arbiter is not None:
                self.arbiter.forget(handle)
            handle.detach()
            self.handles.remove(handle)

    def streamer(self, device: torch.device | str) -> Streamer:
        key = str(torch.device(device))
        if key not in self._streamers:
            self._streamers[key] = Streamer(self.devices, torch.device(device),
                                            self.policy.get("compute.async_offload"), self._pins)
        return self._streamers[key]

    # ---- the budget ---------------------------------------------------------------------------
    def reserve_bytes(self, device: torch.device | str, policy: VramPolicy | None = None) -> int:
        mb = (policy or self._policy).get("compute.vram_reserve_mb")
        if mb is None:
            return default_vram_reserve(device, self.devices.is_simulated(device))
        return mb * MB

    def free_bytes(self, device: torch.device | str, policy: VramPolicy | None = None) -> int:
        limit = (policy or self._policy).get("compute.vram_limit_mb")
        return self.devices.free(device, None if limit is None else limit * MB)

    def working_bytes(self, handles: Iterable[ModelHandle], memory: int) -> int:
        """The estimate times the largest calibration factor of the phase's components."""
        factors = [self.calibration.factor(self.calibration_key(h)) for h in handles]
        return int(memory * max(factors, default=1.0))

    @staticmethod
    def calibration_key(handle: ModelHandle) -> str:
        return f"{handle.engine}:{handle.name}"

    def load(self, handles: list[ModelHandle], memory: int = 0, *, owner: object = None,
             spent: Iterable[ModelHandle] = ()) -> dict[str, dict]:
        """Place a phase's components for `memory` bytes of working memory; marks them in use. `spent`:
        components the request is done with, which give up memory first (before ComfyUI's models)."""
        decisions: dict[str, dict] = {}
        policy = getattr(owner, "policy", None) or self._policy
        owner = owner if owner is not None else threading.current_thread()  # calls without a request: per thread
        with self._cond:
            for h in handles:
                if h not in self.handles:
                    raise ValueError(f"load: component {h.name!r} is not registered with this manager")
            self._wait_for_holds(handles, owner)
            self._wait_for_components(handles, owner)
            for h in handles:  # in use before placement starts: no upkeep or other request takes them meanwhile
                h.in_use += 1
                h.async_offload = policy.get("compute.async_offload")
                self._owners[h] = owner
            try:
                for device in {str(h.device) for h in handles}:
                    group = [h for h in handles if str(h.device) == device]
                    if self.devices.is_managed(device):
                        self._wait_for_room(group, memory, owner, policy)
                        decisions |= self._load_group(torch.device(device), group, memory, policy, spent)
            except BaseException:
                self.release(handles)
                raise
            for h in handles:
                h.touch()
        return decisions

    def _wait_for_holds(self, handles: list[ModelHandle], owner: object) -> None:
        """Wait (cancellable) while an exclusive job (training) holds one of the phase's devices."""
        devices = {str(h.device) for h in handles if self.devices.is_managed(h.device)}
        held = {d: self.devices.holder(d) for d in devices}
        held = {d: who for d, who in held.items() if who is not None}
        if not held:
            return
        log.info("waiting for %s: held by %s", ", ".join(held), ", ".join(sorted(set(held.values()))))
        while any(self.devices.holder(d) is not None for d in held):
            if getattr(owner, "cancelled", False):
                raise Cancelled("request cancelled while waiting for a device held by a training job")
            self._cond.wait(timeout=0.1)

    @contextmanager
    def exclusive(self, device: torch.device | str, holder: str) -> Iterator[None]:
        """Hold `device` for one job: new phases there wait, running ones finish, then every idle
        component leaves it; the hold drops (and waiting phases go on) when the block ends."""
        device = self.devices.normalize(device)
        with self._cond:
            self.devices.take_hold(device, holder)
            try:
                while any(h.in_use for h in self.handles if str(h.device) == str(device)):
                    self._cond.wait(timeout=0.1)
                for h in self.yield_order(device):
                    h.unload()
                self.devices.empty_cache(device)
            except BaseException:
                self.devices.drop_hold(device, holder)
                raise
        log.info("%s holds %s", holder, device)
        try:
            yield
        finally:
            with self._cond:
                self.devices.drop_hold(device, holder)
                self._cond.notify_all()

    def _wait_for_components(self, handles: list[ModelHandle], owner: object) -> None:
        """Wait (cancellable) while another request uses one of `handles`: placing it for this request
        would move its weights under the other's forward, and its units' streaming state is per use."""
        busy = self._busy(handles, owner)
        if not busy:
            return
        log.info("waiting for %s, in use by another request", ", ".join(h.name for h in busy))
        self._waiting[owner] = handles
        try:
            while busy:
                cycle = self._waits_on(owner, busy)
                if cycle:
                    raise RuntimeError(
                        f"requests wait for each other: this one needs {', '.join(h.name for h in busy)} while "
                        f"holding {', '.join(h.name for h in cycle)} that the other needs; use the components "
                        f"of one phase together (one ctx.use) rather than nesting phases in different orders")
                if getattr(owner, "cancelled", False):
                    raise Cancelled("request cancelled while waiting for a component in use")
                self._cond.wait(timeout=0.1)
                busy = self._busy(handles, owner)
        finally:
            del self._waiting[owner]

    def _busy(self, handles: list[ModelHandle], owner: object) -> list[ModelHandle]:
        return [h for h in handles if h.in_use and self._owners.get(h) is not owner]

    def _waits_on(self, owner: object, busy: list[ModelHandle]) -> list[ModelHandle]:
        """Components `owner` holds that the holders of `busy` wait for, directly or through others."""
        seen, frontier = set(), [self._owners[h] for h in busy]
        while frontier:
            other = frontier.pop()
            if id(other) in seen:
                continue
            seen.add(id(other))
            wanted = self._waiting.get(other, [])
            mine = [h for h in wanted if h.in_use and self._owners.get(h) is owner]
            if mine:
                return mine
            frontier += [self._owners[h] for h in wanted if h.in_use and h in self._owners]
        return []

    def release(self, handles: list[ModelHandle]) -> None:
        with self._cond:
            for h in handles:
                h.in_use -= 1
                h.touch()
                if h.in_use == 0:
                    h.settle()
                    self._owners.pop(h, None)
                    h.async_offload = None
                    self.streamer(h.device).drop(h)  # idle copies would hold memory nobody accounts for
            for owner in [o for o in self._working if o not in self._owners.values()]:
                del self._working[owner]
            self._cond.notify_all()

    def _load_group(self, device: torch.device, group: list[ModelHandle], memory: int,
                    policy: VramPolicy, spent: Iterable[ModelHandle] = ()) -> dict[str, dict]:
        mode = policy.get("compute.vram_mode")
        working = self.working_bytes(group, memory)
        reserve = self.reserve_bytes(device, policy)
        pending = sum(h.size_bytes - h.loaded_bytes for h in group)
        if mode == "none":
            pending = sum(max(0, h.min_working_set - h.loaded_bytes) for h in group)
        need = pending + working + reserve
        reason = ", ".join(h.name for h in group)
        free = self.free_bytes(device, policy)
        if spent and free < need:
            self.make_room(device, need - free, exclude=group, among=spent, reason=reason, policy=policy)
        if self.arbiter is not None:
            self.arbiter.make_room(device, group, need)
        free = self.free_bytes(device, policy)
        if free < need:
            self.make_room(device, need - free, exclude=group, reason=reason, policy=policy)
            free = self.free_bytes(device, policy)
        # Room for the weights: free memory plus what the group already holds.
        room = free + sum(h.loaded_bytes for h in group) - working - reserve
        decisions = {}
        remaining = sorted(group, key=lambda h: h.size_bytes)
        while remaining:
            h = remaining.pop(0)
            others_min = sum(o.min_working_set for o in remaining)
            budget = room - others_min if remaining else room
            decisions[h.name] = self._place(h, mode, budget, free, working, reserve, policy)
            room -= h.loaded_bytes
        return decisions

    def _place(self, h: ModelHandle, mode: str, budget: int, free: int, working: int, reserve: int,
               policy: VramPolicy) -> dict:
        if mode == "none":
            budget = h.layout.fixed_bytes  # every unit streams
        elif mode == "low":
            budget = max(h.min_working_set, min(budget, h.size_bytes // 2))  # at most half resident
        elif mode in ("high", "shared"):
            budget = None
        elif budget < h.min_working_set:
            log.warning("%s: %.0f MB available is below its minimum working set of %.0f MB; trying anyway",
                        h.name, max(budget, 0) / MB, h.min_working_set / MB)   # short by more than all: 0
            budget = h.min_working_set
        h.keep_host = self.keep_host_copies(policy)
        h.load(budget)
        decision = {"loaded_mb": h.loaded_bytes / MB, "size_mb": h.size_bytes / MB}
        if h.partial:
            if mode in ("none", "low"):
                reason = f"vram_mode {mode}"
            elif h.cap_bytes is not None and (budget is None or h.cap_bytes < budget):
                reason = "capped after OOM"
            else:
                reason = "budget"
            decision |= {"reason": reason, "mode": mode, "free_mb": free / MB, "working_mb": working / MB,
                         "reserve_mb": reserve / MB, "gave_up_for": None}
            log.info("%s partially loaded (%s): %.1f of %.1f MB; free %.1f MB, working %.1f MB, reserve %.1f MB",
                     h.name, reason, decision["loaded_mb"], decision["size_mb"], free / MB, working / MB, reserve / MB)
        return decision

    def keep_host_copies(self, policy: VramPolicy | None = None) -> bool:
        """compute.host_copies: on, off, or auto (keep while free RAM is above compute.ram_reserve_mb)."""
        policy = policy or self._policy
        setting = policy.get("compute.host_copies")
        if setting == "auto":
            return psutil.virtual_memory().available > policy.ram_reserve_bytes()
        return setting == "on"

    def yield_order(self, device: torch.device | str, exclude: Iterable[ModelHandle] = (),
                    among: Iterable[ModelHandle] | None = None) -> list[ModelHandle]:
        """Idle components on the device (of `among`, when given) in the order they give up memory."""
        excluded = set(exclude)
        wanted = None if among is None else set(among)
        candidates = self.handles if wanted is None else [h for h in self.handles if h in wanted]
        idle = [h for h in candidates if str(h.device) == str(torch.device(device))
                and h not in excluded and h.in_use == 0 and h.loaded_bytes > 0]
        return sorted(idle, key=lambda h: (not h.partial, h.pinned, h.last_used))

    def make_room(self, device: torch.device | str, nbytes: int, exclude: Iterable[ModelHandle] = (),
                  reason: str = "", policy: VramPolicy | None = None,
                  among: Iterable[ModelHandle] | None = None) -> int:
        """Idle components (of `among`, when given) yield `nbytes` (unit by unit, or whole in high/shared mode)."""
        whole = (policy or self._policy).get("compute.vram_mode") in ("high", "shared")
        freed = 0
        for h in self.yield_order(device, exclude, among):
            if freed >= nbytes:
                break
            got = h.unload() if whole else h.partially_unload(nbytes - freed)
            if got:
                h.gave_up_for = reason
                log.info("%s gave up %.1f MB for %s", h.name, got / MB, reason or "another component")
            freed += got
        if freed:
            self.devices.empty_cache(device)
        return freed

    def _wait_for_room(self, group: list[ModelHandle], memory: int, owner: object, policy: VramPolicy) -> None:
        """With gpu_jobs > 1, wait (cancellable, up to 10 min) while another request holds the device:
        the room counts what the running requests' phases will still allocate (their working memory)."""
        if policy.get("compute.gpu_jobs") <= 1:
            return
        device = group[0].device
        deadline = time.monotonic() + GPU_JOB_WAIT_S
        self._working[owner] = self.working_bytes(group, memory)
        while True:
            minimum = sum(h.size_bytes if policy.get("compute.vram_mode") == "high" else h.min_working_set
                          for h in group) + self._working[owner] + self.reserve_bytes(device, policy)
            available = self.free_bytes(device, policy) + sum(h.loaded_bytes for h in self.yield_order(device, group))
            available += sum(h.loaded_bytes for h in group)
            busy = [h for h, o in self._owners.items() if o is not owner and str(h.device) == str(device)]
            available -= sum(w for o, w in self._working.items() if o is not owner and o in self._owners.values())
            if available >= minimum or not busy:
                return
            if owner is not None and getattr(owner, "cancelled", False):
                raise Cancelled("request cancelled while waiting for the device")
            if time.monotonic() >= deadline:
                log.warning("waited %.0f s for %s; trying anyway", GPU_JOB_WAIT_S, device)
                return
            self._cond.wait(timeout=0.1)

    # ---- after an OOM -------------------------------------------------------------------------
    def after_oom(self, handles: list[ModelHandle]) -> None:
        """Other idle components off the device, streamer copies dropped, each listed one capped to half."""
        with self._cond:
            for device in {str(h.device) for h in handles}:
                for other in self.yield_order(device, handles):
                    other.unload()
                self.streamer(device).drop()
                self.devices.empty_cache(device)
            for h in handles:
                h.cap_bytes = max(h.min_working_set, h.loaded_bytes // 2)

    def after_success(self, handles: list[ModelHandle]) -> None:
        """A phase ran: each OOM cap doubles, and lifts once it would hold the whole component, so a
        transient shortage costs a few requests' residency, not the component's stay on the device."""
        with self._cond:
            for h in handles:
                if h.cap_bytes is not None:
                    h.cap_bytes = None if 2 * h.cap_bytes >= h.size_bytes else 2 * h.cap_bytes

    def unload_all(self) -> None:
        with self._cond:
            for h in self.handles:
                if h.in_use == 0:
                    h.unload()
                    h.cap_bytes = None

    # ---- what a request asks of its manager (phases.Placer) ------------------------------------
    @contextmanager
    def streaming_cancel(self, devices: set[str], check: Callable[[], None]) -> Iterator[None]:
        """Streamed copies on `devices` check `check` (the request's cancel) while the block runs."""
        streamers = [self.streamer(d) for d in devices]
        previous = [s.cancel_check for s in streamers]
        for s in streamers:
            s.cancel_check = check
        try:
            yield
        finally:
            for s, p in zip(streamers, previous):
                s.cancel_check = p

    def check_interrupted(self) -> None:
        """ComfyUI's interrupt, when running inside ComfyUI (raises its exception)."""
        if self.arbiter is not None:
            self.arbiter.interrupted()

    def observe_phase(self, handles: list[ModelHandle], memory: int, tracker: Tracking) -> int:
        """A phase's working memory on the tracker's device (peak above placed weights, less streamer
        copies and what stays allocated after it), fed to calibration; returns the bytes measured."""
        on_device = [h for h in handles if str(h.device) == tracker.device]
        streamer = self.streamer(tracker.device)
        copies = sum(streamer.slots(h) * max((u.nbytes for u in h.streamed_units()), default=0) for h in on_device)
        cached = sum(streamer.cached_bytes(h) for h in on_device)
        stays = max(0, tracker.end - tracker.start - cached)
        measured = max(0, tracker.peak_bytes - copies - stays)
        for h in on_device:
            key = self.calibration_key(h)
            factor = self.calibration.observe(key, memory, measured)
            if factor is not None:
                log.info("%s: working memory %.1f MB measured vs %.1f MB estimated; calibration factor %.2f",
                         key, measured / MB, memory / MB, factor)
                self.calibration.save()
        return measured

    def request(self, seed: int = 0, cancel: threading.Event | None = None,
                settings: dict | None = None) -> RequestContext:
        """A request: its generator, cancellation, per-call setting overrides, phases and meta."""
        return RequestContext(self, seed=seed, cancel=cancel, settings=settings)


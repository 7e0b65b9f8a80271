"""Requests and phases: the only place components are placed and used.

`ctx.use(handles, memory)` places the components (whole or partially) with room for `memory` bytes
of working memory and keeps them from yielding until the block ends. `ctx.run(name, handles, fn,
memory, generators=(), fallback=None)` does the same for a pure function and adds the exact retry:
on OOM it leaves the failed frame, lets the manager free memory and cap the phase's components,
restores every random-number state the phase may draw from, and runs again (same random numbers,
same result, slower). At most two retries; then an opt-in `fallback=(what, fn[, memory])`.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ContextManager, Protocol

import torch

from .devices import DeviceService, Tracking
from .handles import ModelHandle
from .oom import is_oom
from .policy import VramPolicy

log = logging.getLogger("mizuoto.runtime")

MB = 1 << 20
MAX_OOM_RETRIES = 2


class Cancelled(Exception):
    """The request was cancelled (checked before each streamed copy and while waiting for a device)."""


class Placer(Protocol):
    """What a request asks of the manager that runs it (ModelManager is one): placement around each
    phase, what follows a success or an OOM, and calibration from the phase's measured peak."""

    policy: VramPolicy
    devices: DeviceService

    def load(self, handles: list[ModelHandle], memory: int = 0, *, owner: object = None,
             spent: Iterable[ModelHandle] = ()) -> dict[str, dict]: ...

    def release(self, handles: list[ModelHandle]) -> None: ...

    def after_success(self, handles: list[ModelHandle]) -> None: ...

    def after_oom(self, handles: list[ModelHandle]) -> None: ...

    def streaming_cancel(self, devices: set[str], check: Callable[[], None]) -> ContextManager[None]: ...

    def check_interrupted(self) -> None: ...

    def observe_phase(self, handles: list[ModelHandle], memory: int, tracker: Tracking) -> int: ...


class Plan:
    """The components each segment of a request uses, phase by phase, in order: what tells the manager,
    while the last segment runs, which of them the request is done with (they give up memory before
    ComfyUI's models, which the next node will need). A phase the plan does not name, or one out of
    order, voids it: from then on every component counts as still needed, as without a plan."""

    def __init__(self, phases: Sequence[Sequence[ModelHandle]], segments: int = 1) -> None:
        self.phases = [frozenset(p) for p in phases if p]
        self.components = frozenset().union(*self.phases)
        self.segments = segments
        self.segment = 0
        self.position = 0  # phases[position] is the next one expected
        self.void = False

    def start(self, segment: int) -> None:
        self.segment, self.position = segment, 0

    def enter(self, handles: Sequence[ModelHandle]) -> frozenset[ModelHandle]:
        """`handles` are about to be placed: the planned components this request will not use again."""
        group = frozenset(handles)
        if not group or self.void:
            return frozenset()
        if self.position and self.phases[self.position - 1] == group:  # a retry of the same phase
            index = self.position - 1
        else:
            index = next((i for i in range(self.position, len(self.phases)) if self.phases[i] == group), None)
        if index is None:
            self.void = True
            return frozenset()
        self.position = index + 1
        if self.segment < self.segments - 1:
            return frozenset()
        return self.components - group - frozenset().union(*self.phases[self.position:])


class RequestContext:
    def __init__(self, manager: Placer, seed: int = 0, cancel: threading.Event | None = None,
                 settings: dict[str, Any] | None = None) -> None:
        self.manager = manager
        self.policy = manager.policy.for_request(settings) if settings is not None else manager.policy
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.cancel_event = cancel if cancel is not None else threading.Event()
        self.meta: dict[str, Any] = {
            # phases: per phase name, its tightest run (the working-memory estimate against the
            # measured working memory, both MB)
            "memory": {"streamed_mb": 0.0, "loaded_mb": 0.0, "size_mb": 0.0, "partial": {}, "phases": {}},
            "applied": {"oom_retries": 0, "fallbacks": []},
        }
        self._used: dict[ModelHandle, dict] = {}  # handle -> streamed bytes at first use, peak loaded
        self._plan: Plan | None = None

    # ---- request lifetime -------------------------------------------------------------------------
    def __enter__(self) -> RequestContext:
        return self

    def __exit__(self, *exc) -> None:
        self._finish()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def cancel(self) -> None:
        self.cancel_event.set()

    def check_cancelled(self) -> None:
        """Between streamed copies and chunks: our cancel flag, then ComfyUI's interrupt."""
        if self.cancel_event.is_set():
            raise Cancelled("request cancelled")
        self.manager.check_interrupted()

    # ---- phases -------------------------------------------------------------------------------
    def plan(self, phases: Sequence[Sequence[ModelHandle]], segments: int = 1) -> None:
        """Declare the components each of the request's `segments` uses, phase by phase (see Plan)."""
        self._plan = Plan(phases, segments)

    def segment(self, index: int) -> None:
        """Segment `index` (from 0) of the planned ones starts."""
        if self._plan is not None:
            self._plan.start(index)

    @contextlib.contextmanager
    def use(self, handles: Sequence[ModelHandle], memory: int = 0, name: str | None = None) -> Iterator[None]:
        """Place `handles` with room for `memory` bytes of working memory for the block (no retry)."""
        handles = list(handles)
        self.check_cancelled()
        for h in handles:
            self._used.setdefault(h, {"streamed": h.streamed_bytes, "loaded": 0})
        spent = self._plan.enter(handles) if self._plan is not None else frozenset()
        decisions = self.manager.load(handles, memory, owner=self, spent=spent)
        for h in handles:
            self._used[h]["loaded"] = max(self._used[h]["loaded"], h.loaded_bytes)
            decision = decisions.get(h.name, {})
            if "reason" in decision:
                self.meta["memory"]["partial"][h.name] = decision
        devices = {str(h.device) for h in handles}
        try:
            with self.manager.streaming_cancel(devices, self.check_cancelled), contextlib.ExitStack() as stack:
                trackers = [stack.enter_context(self.manager.devices.tracking(d)) for d in devices]
                yield
            # Only readings of its own: another thread's phase on the device would inflate them.
            self._measured(name, handles, memory, [t for t in trackers if t is not None and t.own])
            self.manager.after_success(handles)
        finally:
            self.manager.release(handles)

    def run(self, name: str, handles: Sequence[ModelHandle], fn: Callable[[], Any], memory: int = 0,
            generators: Sequence[torch.Generator] = (),
            fallback: tuple[str, Callable[[], Any]] | tuple[str, Callable[[], Any], int] | None = None) -> Any:
        """Run a pure function as a phase, with the exact OOM retry and the optional fallback:
        `(what, fn)` or `(what, fn, memory)` when the frugal function needs less working memory
        (placement then leaves more of the weights on the device)."""
        policy = self.policy
        retries = MAX_OOM_RETRIES if policy.get("compute.oom_retry") else 0
        states = _RngStates(self.generator, generators)
        attempt = 0
        while True:
            failure = None
            try:
                with self.use(handles, memory, name=name):
                    return fn()
            except Exception as e:
                if not is_oom(e, {h.device for h in handles}):
                    raise
                failure = str(e)  # keep only the text: the traceback holds the failed attempt's tensors
            if attempt >= retries:
                break
            attempt += 1
            log.warning("%s: out of memory (%s); retrying with less of it on the device (%d/%d)",
                        name, failure.splitlines()[0], attempt, retries)
            self.manager.after_oom(list(handles))
            states.restore()
            self.meta["applied"]["oom_retries"] += 1
        if fallback is not None and policy.get("compute.oom_fallback"):
            what, fallback_fn = fallback[:2]
            fallback_memory = fallback[2] if len(fallback) > 2 else memory
            log.warning("%s: still out of memory after %d retries; using the %s fallback (output differs slightly)",
                        name, attempt, what)
            self.manager.after_oom(list(handles))
            states.restore()
            self.meta["applied"]["fallbacks"].append(what)
            with self.use(handles, fallback_memory, name=name):
                return fallback_fn()
        raise torch.OutOfMemoryError(f"{name}: out of memory after {attempt} retries: {failure}")

    def call(self, engine: Any, task: Any, fn: Callable[[], Any]) -> Any:
        """An engine's whole call. PHASED engines place their components phase by phase inside `fn`;
        the others get every handle (`engine.handles`) for the whole call, with working memory
        `engine.memory_required(task)`."""
        if getattr(engine, "PHASED", False):
            return fn()
        with self.use(engine.handles, engine.memory_required(task), name="call"):
            return fn()

    # ---- reporting -----------------------------------------------------------------------------
    def _measured(self, name: str | None, handles: list[ModelHandle], memory: int, trackers: list) -> None:
        if name is None:
            return
        for tracker in trackers:
            self._record_phase(name, memory, self.manager.observe_phase(handles, memory, tracker))

    def _record_phase(self, name: str, estimate: int, measured: int) -> None:
        phases = self.meta["memory"]["phases"]
        seen = phases.get(name)
        if seen is None or measured * seen["estimate_mb"] > seen["measured_mb"] * estimate:   # a tighter ratio
            phases[name] = {"estimate_mb": estimate / MB, "measured_mb": measured / MB}

    def _finish(self) -> None:
        mem = self.meta["memory"]
        mem["streamed_mb"] = sum(h.streamed_bytes - u["streamed"] for h, u in self._used.items()) / MB
        mem["loaded_mb"] = sum(u["loaded"] for u in self._used.values()) / MB
        mem["size_mb"] = sum(h.size_bytes for h in self._used) / MB
        if self._plan is not None:
            mem["plan"] = "void" if self._plan.void else "followed"
        for h in self._used:
            if h.gave_up_for and h.partial and h.name not in mem["partial"]:
                mem["partial"][h.name] = {"reason": "yielded to another", "gave_up_for": h.gave_up_for,
                                          "loaded_mb": h.loaded_bytes / MB, "size_mb": h.size_bytes / MB}


class _RngStates:
    """Every random-number state a phase may draw from: the request's, the listed ones, torch's global."""

    def __init__(self, request: torch.Generator, generators: Sequence[torch.Generator]) -> None:
        self.generators = [request, *generators]
        self.states = [g.get_state() for g in self.generators]
        self.cpu = torch.random.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        for g, s in zip(self.generators, self.states):
            g.set_state(s)
        torch.random.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)

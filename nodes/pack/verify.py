"""The conformance check on a real model: one request run resident, half-resident, all-streamed and
with an OOM injected into every phase, on a strict simulated device sized from the model itself, or
on a real GPU bounded by `compute.vram_limit_mb`.

    report = verify(spec, load, request)          # the model is loaded once
    print(report.table()); sys.exit(0 if report.ok else 1)

On the simulated device an OOM is injected at chosen allocations of each phase (its first, middle and
last); a real GPU's allocator cannot be intercepted, so there the OOM is raised as the phase begins to
compute, its weights placed (`PhaseFaults`).

Every run's audio must be `torch.equal` to the resident run's, and every phase's working-memory
estimate must cover what it measured (calibration is off, so an estimate is never corrected quietly).
Faults are named per run: a weight read outside its unit's forward (StrictDeviceError), an output
that differs (with the first differing sample), an estimate below the measured peak, an OOM that was
not retried. tests/engines_native/test_conformance.py runs the same injections on the tiny models.
"""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...runtime import Calibration, DeviceService, ModelManager, RequestContext, VramPolicy
from .pipeline import SpeakRequest, synthesize
from .registry import EngineSpec, LoadRequest

MB = 1 << 20


class FaultInjector:
    """Counts a simulated device's allocations and where each phase starts; raises the simulated OOM at
    chosen allocations (`fail`) or from one on (`from_`: a persistent shortage). `install` wraps the
    device's accounting and RequestContext.use; `remove` puts both back."""

    def __init__(self, memory) -> None:
        self.memory, self.count, self.starts = memory, 0, []
        self.fail: set[int] = set()
        self.from_: int | None = None
        self._allocate: Callable | None = None
        self._use: Callable | None = None

    def install(self) -> FaultInjector:
        self._allocate, self._use = self.memory.allocate, RequestContext.use
        use = self._use

        def recording_use(ctx, handles, memory=0, name=None):
            self.starts.append((name, self.count))
            return use(ctx, handles, memory, name)
        self.memory.allocate = self
        RequestContext.use = recording_use
        return self

    def remove(self) -> None:
        self.memory.allocate = self._allocate
        RequestContext.use = self._use

    def __enter__(self) -> FaultInjector:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()

    def __call__(self, storage) -> None:
        self.count += 1
        if self.count in self.fail or (self.from_ is not None and self.count >= self.from_):
            raise torch.OutOfMemoryError(f"injected at allocation {self.count}")
        self._allocate(storage)

    def points(self, start: int, end: int) -> dict[str, dict[str, int]]:
        """Per phase name, its first run's first, middle and last allocation (counted from `start`)."""
        runs = [(name, a) for name, a in self.starts if start <= a < end]
        bounds = [a for _, a in runs[1:]] + [end]
        points: dict[str, dict[str, int]] = {}
        for (name, a), b in zip(runs, bounds):
            if b > a and name not in points:
                points[name] = {"first": a + 1 - start, "middle": (a + b + 1) // 2 - start, "last": b - start}
        return points


class PhaseFaults:
    """For a real device: raises an OOM inside the chosen `use` blocks (counted from 1 across the runs),
    after placement and before the block's first computation, as a real shortage there would."""

    def __init__(self) -> None:
        self.count, self.fail, self.starts = 0, set(), []
        self._use: Callable | None = None

    def install(self) -> PhaseFaults:
        self._use = use = RequestContext.use

        @contextlib.contextmanager
        def failing_use(ctx, handles, memory=0, name=None):
            self.count += 1
            self.starts.append((name, self.count))
            with use(ctx, handles, memory, name):
                if self.count in self.fail:
                    raise torch.OutOfMemoryError(f"injected as phase {name} began")
                yield
        RequestContext.use = failing_use
        return self

    def remove(self) -> None:
        RequestContext.use = self._use

    def points(self, start: int, end: int) -> dict[str, dict[str, int]]:
        """Per phase name, its first block in the counting run (counted from `start`)."""
        points: dict[str, dict[str, int]] = {}
        for name, k in self.starts:
            if start < k <= end and name not in points:
                points[name] = {"first": k - start}
        return points


@dataclass
class Run:
    """One run of the request: how it was placed, and how its audio compares with the resident run's."""

    mode: str
    seconds: float = 0.0
    streamed_mb: float = 0.0
    oom_retries: int = 0
    equal: bool | None = None               # None: the resident run itself, or no audio (error)
    first_difference: int | None = None     # the first differing sample (or -1: other length)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.equal is not False


@dataclass
class Report:
    engine: str
    model: str
    device: str = "cpu (simulated, strict)"
    runs: list[Run] = field(default_factory=list)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)   # tightest estimate vs measured
    versions: dict[str, str] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)     # the model folder: bytes, sha256

    @property
    def faults(self) -> list[str]:
        out = [f"{r.mode}: {r.error}" for r in self.runs if r.error]
        out += [f"{r.mode}: output differs from the resident run at sample {r.first_difference}"
                for r in self.runs if r.equal is False]
        out += [f"phase {name}: estimate {p['estimate_mb']:.2f} MB below the measured {p['measured_mb']:.2f} MB"
                for name, p in self.phases.items() if p["measured_mb"] > p["estimate_mb"]]
        return out

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.faults

    def table(self) -> str:
        lines = [f"{self.engine} {self.model} on {self.device}", f"{'run':<34} {'seconds':>8} {'streamed MB':>12} {'retries':>7}  result"]
        for r in self.runs:
            result = r.error or ("reference" if r.equal is None else "equal" if r.equal
                                 else f"differs at sample {r.first_difference}")
            lines.append(f"{r.mode:<34} {r.seconds:>8.2f} {r.streamed_mb:>12.2f} {r.oom_retries:>7}  {result}")
        lines.append(f"{'phase':<34} {'estimate MB':>12} {'measured MB':>12}  estimate / measured")
        for name, p in sorted(self.phases.items()):
            ratio = p["estimate_mb"] / p["measured_mb"] if p["measured_mb"] else float("inf")
            lines.append(f"{name:<34} {p['estimate_mb']:>12.2f} {p['measured_mb']:>12.2f}  {ratio:.2f}")
        lines.append("OK: every run equals the resident run and every estimate covers its phase" if self.ok
                     else "FAULTS:\n  " + "\n  ".join(self.faults))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok, "faults": self.faults}


def first_difference(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """None when equal; the first differing sample; -1 when the lengths differ."""
    if a.shape != b.shape:
        return -1
    diff = (a != b).nonzero()
    return int(diff[0, 0]) if diff.numel() else None


def versions() -> dict[str, str]:
    import platform

    from importlib.metadata import PackageNotFoundError, version
    try:
        pack = version("comfyui-mizuoto")
    except PackageNotFoundError:
        pack = "unknown"
    return {"torch": torch.__version__, "mizuoto": pack, "python": platform.python_version(),
            "machine": platform.machine(), "threads": str(torch.get_num_threads())}


Progress = Callable[[str, int, int], None]     # (run, steps done, steps in all)


def verify(spec: EngineSpec, load: LoadRequest, request: SpeakRequest, progress: Progress | None = None,
           cancel: threading.Event | None = None, oom_points: tuple[str, ...] = ("first", "middle", "last"),
           device: torch.device | str = "cpu") -> Report:
    """The report for `request` on the model of `load`, loaded once. On the CPU it is placed on a strict
    simulated device whose size each run sets; on a GPU (`device="cuda:N"`) each run's budget is a
    `compute.vram_limit_mb`. `oom_points`: which allocations of each phase get an injected OOM (some of
    first, middle, last; none: the placement runs only; a real GPU has only "first")."""
    device = torch.device(device)
    with tempfile.TemporaryDirectory(prefix="mizuoto-verify-") as tmp:
        calibration = Calibration(Path(tmp) / "calibration.json")
        if device.type == "cpu":
            devices = DeviceService(simulate={"cpu": 1 << 50}, strict=True)
        else:
            devices = DeviceService()
        manager = ModelManager(devices, VramPolicy({}), calibration=calibration)
        engine = spec.build(dataclasses.replace(load, device=device), manager)
        try:
            return _runs(spec, load, engine, devices, device, request, progress, cancel, oom_points)
        finally:
            manager.unload_all()


def model_files(folder: Path | None) -> dict[str, dict[str, Any]]:
    """Every file of the model folder with its size and sha256: which exact model a report is about."""
    from ..formats.download import sha256_of

    if folder is None:
        return {}
    return {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


class _Budget:
    """How a run's device size is set: the simulated device's capacity, or a real device's
    compute.vram_limit_mb; and the peak each run reached."""

    def __init__(self, devices: DeviceService, device: torch.device) -> None:
        self.devices, self.device = devices, device
        self.simulated = devices.is_simulated(device)

    def settings(self, capacity: int) -> dict[str, Any]:
        if self.simulated:
            memory = self.devices.memory(self.device)
            memory.capacity, memory.peak = capacity, memory.used
            return {}
        torch.cuda.reset_peak_memory_stats(self.device)
        return {"compute.vram_limit_mb": max(capacity // MB, 1)}

    def used(self) -> int:
        return (self.devices.memory(self.device).used if self.simulated
                else torch.cuda.memory_allocated(self.device))

    def peak(self) -> int:
        return (self.devices.memory(self.device).peak if self.simulated
                else torch.cuda.max_memory_allocated(self.device))


def _runs(spec, load, engine, devices, device, request, progress, cancel, oom_points: tuple[str, ...]) -> Report:
    budget = _Budget(devices, device)
    where = "cpu (simulated, strict)" if budget.simulated else f"{device} ({torch.cuda.get_device_name(device)})"
    report = Report(spec.engine_id, load.model, where, versions=versions(), files=model_files(load.folder))
    total = sum(h.size_bytes for h in engine.handles)

    def run(mode: str, capacity: int, vram_mode: str = "normal") -> tuple[Run, torch.Tensor | None]:
        if progress is not None:
            progress(mode, 0, 1)
        engine.manager.unload_all()
        settings = {**(request.settings or {}), **budget.settings(capacity), "compute.vram_mode": vram_mode}
        result, start = Run(mode), time.monotonic()
        steps = None if progress is None else (lambda done, n: progress(mode, done, n))
        try:
            wav, meta = synthesize(engine, dataclasses.replace(request, settings=settings), steps, cancel=cancel)
        except torch.OutOfMemoryError as e:
            result.error = f"out of memory: {str(e).splitlines()[0]}"
            return result, None
        except (ValueError, RuntimeError) as e:        # StrictDeviceError is a RuntimeError
            result.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return result, None
        finally:
            result.seconds = time.monotonic() - start
        result.streamed_mb, result.oom_retries = meta["memory"]["streamed_mb"], meta["applied"]["oom_retries"]
        for name, p in meta["memory"]["phases"].items():
            seen = report.phases.get(name)
            if seen is None or p["measured_mb"] * seen["estimate_mb"] > seen["measured_mb"] * p["estimate_mb"]:
                report.phases[name] = p
        return result, wav

    def compare(result: Run, wav: torch.Tensor | None, reference: torch.Tensor) -> None:
        if wav is not None:
            result.first_difference = first_difference(wav, reference)
            result.equal = result.first_difference is None
        report.runs.append(result)

    roomy = 4 * total + 256 * MB
    resident, reference = run("resident", roomy)
    report.runs.append(resident)
    if reference is None:
        return report
    working = max(budget.peak() - total, 0)
    half = max(h.min_working_set + (h.size_bytes - h.min_working_set) // 2 for h in engine.handles) + working
    compare(*run("half-resident", half), reference)
    compare(*run("all streamed", roomy, "none"), reference)
    points = oom_points if budget.simulated else tuple(p for p in oom_points if p == "first")
    if not points:
        return report
    faults = FaultInjector(devices.memory(device)) if budget.simulated else PhaseFaults()
    faults.install()
    try:
        start = faults.count
        run("count allocations" if budget.simulated else "count phases", roomy, "low")
        phases = faults.points(start, faults.count)
        for phase, at in phases.items():
            for k in sorted({at[p] for p in points}):
                faults.fail = {faults.count + k}
                what = f"allocation {k}" if budget.simulated else "as it began"
                result, wav = run(f"OOM in {phase} ({what})", roomy, "low")
                if wav is not None and result.oom_retries == 0:
                    result.error = "the injected OOM was not retried"
                compare(result, wav, reference)
    finally:
        faults.remove()
    return report

"""Devices: which ones exist, how much memory is free, and the simulated device used by tests.

`DeviceService(simulate={"cpu": nbytes}, strict=True)` makes the CPU act as a GPU of `nbytes`:
placing a weight copies it and counts its bytes, and while a phase runs every tensor the engine's
own code allocates is counted too (a TorchDispatchMode sees each op's new storages; a finalizer on
the storage gives the bytes back when it dies). Going past the capacity raises a real
`torch.OutOfMemoryError` from that accounting. In strict mode a weight that is not on the device is
a `meta` tensor, so using it outside a phase or outside its unit's forward fails loudly.
Host-side work inside a tracked block (a host optimizer's float32 master and AdamW moments) runs under
`DeviceService.host()`: what it allocates is host memory and is not counted against the simulated device.
"""
from __future__ import annotations

import contextlib
import logging
import platform
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import psutil
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

log = logging.getLogger("mizuoto.runtime")

PINNED_CPU_ATTR = "_mizuoto_pinned_cpu"


class StrictDeviceError(RuntimeError):
    """A weight was used while it is not on the (strict, simulated) device."""


@dataclass
class Transfers:
    """Copies the runtime made, so tests can count them (offloading with host copies makes none)."""

    h2d: int = 0
    h2d_bytes: int = 0
    d2h: int = 0
    d2h_bytes: int = 0


class SimulatedMemory:
    """Byte accounting of a simulated device: live storages keyed by data pointer."""

    def __init__(self, capacity: int, name: str) -> None:
        self.capacity = int(capacity)
        self.name = name
        self.used = 0
        self.peak = 0
        self._live: dict[int, int] = {}
        # Bytes others hold on this device (another library's models, another process), for tests
        # that share a simulated device with ComfyUI.
        self.external: Callable[[], int] = lambda: 0

    def allocate(self, storage: torch.UntypedStorage) -> None:
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if nbytes == 0 or ptr in self._live:
            return
        external = self.external()
        if self.used + external + nbytes > self.capacity:
            raise torch.OutOfMemoryError(
                f"simulated device {self.name}: out of memory allocating {nbytes / 2**20:.2f} MiB "
                f"({self.used / 2**20:.2f} MiB in use, {external / 2**20:.2f} MiB held by others, "
                f"of {self.capacity / 2**20:.2f} MiB)"
            )
        self._live[ptr] = nbytes
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        weakref.finalize(storage, self._release, ptr)

    def _release(self, ptr: int) -> None:
        self.used -= self._live.pop(ptr, 0)


def _tensors(tree, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors in an aten op's arguments or result (nested tuples, lists and dicts), in order.

    Aten schemas hold nothing else that can contain a tensor; pytree's generic flatten, called for every
    op, was most of the strict simulated device's cost."""
    if isinstance(tree, torch.Tensor):
        out.append(tree)
        return out
    for item in tree.values() if isinstance(tree, dict) else tree if isinstance(tree, (tuple, list)) else ():
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (tuple, list, dict)):
            _tensors(item, out)
    return out


class _AllocationMode(TorchDispatchMode):
    """Counts storages created by ops on the simulated device; in strict mode rejects meta inputs."""

    def __init__(self, memory: SimulatedMemory, strict: bool, names: Mapping[int, str],
                 on_host: Callable[[], bool] = lambda: False) -> None:
        super().__init__()
        self.memory = memory
        self.strict = strict
        self.names = names
        self.on_host = on_host   # True inside DeviceService.host(): new storages are host memory, not counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _tensors(kwargs, _tensors(args, []))
        if self.strict:
            for t in inputs:
                if t.device.type == "meta":
                    what = self.names.get(id(t), "a weight")
                    raise StrictDeviceError(
                        f"{what} is not on the device (strict simulated device): it was read outside "
                        f"its unit's forward or its component is not placed for this phase ({func})"
                    )
        out = func(*args, **kwargs)
        if self.on_host():
            return out
        seen = {t.untyped_storage().data_ptr() for t in inputs if t.device.type == "cpu"}
        for t in _tensors(out, []):
            if t.device.type == "cpu":
                storage = t.untyped_storage()
                if storage.data_ptr() not in seen:
                    self.memory.allocate(storage)
        return out


@dataclass
class Tracking:
    """What a tracked block allocated: peak bytes above the bytes live at entry, and what was live after."""

    device: str
    start: int = 0
    peak_bytes: int = 0
    end: int = 0
    # False when the reading may include other work: another thread's tracked block ran on the device
    # meanwhile (the allocator's statistics are per device), or, on CUDA/XPU, the block was nested in
    # another one, whose peak it could not reset. Calibration learns only from readings of its own.
    own: bool = True


def _same_mode(value: torch.Tensor, inference: bool) -> torch.Tensor:
    """`value`'s storage as an inference tensor or a normal one, as `inference` says, without a copy.

    A weight built under inference mode (ComfyUI runs loaders in it) that is given a normal tensor's data
    is left with neither kind's version counter: any view taken of it in Python (`weight.t()`) fails."""
    if value.is_inference() == inference:
        return value
    with torch.inference_mode(inference), torch.no_grad():
        out = torch.empty(0, dtype=value.dtype, device=value.device)
        return out.set_(value.untyped_storage(), value.storage_offset(), value.shape, value.stride())


def assign(t: torch.Tensor, value: torch.Tensor) -> None:
    """Make `t` (a parameter or buffer, identity kept) hold `value`'s data.

    `.data` cannot move a tensor between `meta` and a real device, so strict mode swaps the tensor
    objects' contents instead; other devices use a plain `.data` swap.
    """
    value = _same_mode(value, t.is_inference())
    if (t.device.type == "meta") == (value.device.type == "meta"):
        t.data = value
        return
    if isinstance(t, nn.Parameter):
        value = nn.Parameter(value, requires_grad=t.requires_grad)
    elif type(value) is not type(t):
        value = value.as_subclass(type(t))
    try:
        torch.utils.swap_tensors(t, value)
    except RuntimeError as e:
        raise StrictDeviceError(
            f"cannot move a weight on the strict simulated device while something else references it "
            f"(an autograd graph of an earlier output?); run inference under torch.no_grad(): {e}"
        ) from None


class DeviceService:
    """Enumerates devices and answers free/total memory; optionally simulates a GPU on the CPU."""

    def __init__(self, simulate: Mapping[str, int] | None = None, strict: bool = False) -> None:
        self.simulated: dict[str, SimulatedMemory] = {
            str(torch.device(name)): SimulatedMemory(nbytes, str(torch.device(name)))
            for name, nbytes in (simulate or {}).items()
        }
        if strict and not self.simulated:
            raise ValueError("DeviceService(strict=True) needs simulate={'cpu': nbytes}")
        for name in self.simulated:
            if torch.device(name).type != "cpu":
                raise ValueError(f"simulate: only the CPU ('cpu' or 'cpu:N') can be simulated, got {name!r}")
        self.strict = strict
        self.transfers = Transfers()
        self._lock = threading.Lock()
        self._active: dict[str, list[tuple[Tracking, int]]] = {}  # device -> tracked blocks, by thread
        # id(parameter) -> "component.param" for strict-mode error messages
        self.names: dict[int, str] = {}
        self._holds: dict[str, str] = {}  # device -> the exclusive job holding all of it (training)
        self._host = threading.local()    # depth of host() blocks, per thread (dispatch modes are per thread too)

    # ---- exclusive holds (a training job has its device to itself) ----------------------------
    def holder(self, device: torch.device | str) -> str | None:
        """The job holding `device` exclusively, or None."""
        with self._lock:
            return self._holds.get(str(self.normalize(device)))

    def take_hold(self, device: torch.device | str, holder: str) -> None:
        """Mark `device` as held by `holder` (ModelManager.exclusive takes it under the manager's lock)."""
        key = str(self.normalize(device))
        with self._lock:
            if key in self._holds:
                raise RuntimeError(f"{key} is already held by {self._holds[key]!r}; {holder!r} cannot take it")
            self._holds[key] = holder

    def drop_hold(self, device: torch.device | str, holder: str) -> None:
        key = str(self.normalize(device))
        with self._lock:
            if self._holds.get(key) != holder:
                raise RuntimeError(f"{key} is not held by {holder!r} (held by {self._holds.get(key)!r})")
            del self._holds[key]

    # ---- enumeration and memory -------------------------------------------------------------
    def devices(self) -> list[torch.device]:
        found = [torch.device(n) for n in self.simulated]
        if torch.cuda.is_available():
            found += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            found += [torch.device("xpu", i) for i in range(torch.xpu.device_count())]
        if torch.backends.mps.is_available():
            found.append(torch.device("mps"))
        if not self.simulated:
            found.append(torch.device("cpu"))
        return found

    def normalize(self, device: torch.device | str) -> torch.device:
        """One name per device: `cuda`/`xpu` without an index become `cuda:<current index>` (fixed
        now, so a component does not follow later changes of the current device); others unchanged."""
        device = torch.device(device)
        if device.index is None and device.type in ("cuda", "xpu") and not self.is_simulated(device):
            return torch.device(device.type, getattr(torch, device.type).current_device())
        return device

    def is_simulated(self, device: torch.device | str) -> bool:
        return str(torch.device(device)) in self.simulated

    def is_managed(self, device: torch.device | str) -> bool:
        """Whether the manager moves and counts anything there (not on a real CPU)."""
        device = torch.device(device)
        return self.is_simulated(device) or device.type != "cpu"

    def strict_on(self, device: torch.device | str) -> bool:
        return self.strict and self.is_simulated(device)

    def memory(self, device: torch.device | str) -> SimulatedMemory:
        return self.simulated[str(torch.device(device))]

    def total(self, device: torch.device | str) -> int:
        device = torch.device(device)
        if self.is_simulated(device):
            return self.memory(device).capacity
        if device.type == "cuda":
            return torch.cuda.mem_get_info(device)[1]
        if device.type == "xpu":
            return torch.xpu.get_device_properties(device).total_memory
        if device.type == "mps":
            return torch.mps.recommended_max_memory()
        return psutil.virtual_memory().total

    def process_bytes(self, device: torch.device | str) -> int:
        """Bytes this process holds allocated on the device (not the allocator's cache)."""
        device = torch.device(device)
        if self.is_simulated(device):
            return self.memory(device).used
        if device.type == "cuda":
            return torch.cuda.memory_allocated(device)
        if device.type == "xpu":
            return torch.xpu.memory_allocated(device)
        if device.type == "mps":
            return torch.mps.current_allocated_memory()
        return 0

    def free(self, device: torch.device | str, limit: int | None = None) -> int:
        """Driver free + cached-but-unused; with `limit`, at most limit minus what we hold."""
        device = torch.device(device)
        if self.is_simulated(device):
            mem = self.memory(device)
            free = mem.capacity - mem.used - mem.external()
        elif device.type == "cuda":
            driver_free, _ = torch.cuda.mem_get_info(device)
            free = driver_free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        elif device.type == "xpu":
            driver_free, _ = torch.xpu.mem_get_info(device)
            free = driver_free + torch.xpu.memory_reserved(device) - torch.xpu.memory_allocated(device)
        elif device.type == "mps":
            free = torch.mps.recommended_max_memory() - torch.mps.current_allocated_memory()
        else:
            free = psutil.virtual_memory().available
        if limit is not None:
            free = min(free, limit - self.process_bytes(device))
        return max(0, free)

    def empty_cache(self, device: torch.device | str) -> None:
        device = torch.device(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        elif device.type == "xpu":
            torch.xpu.empty_cache()
        elif device.type == "mps":
            torch.mps.empty_cache()

    # ---- copies -------------------------------------------------------------------------------
    def place(self, host: torch.Tensor, device: torch.device | str, non_blocking: bool = False) -> torch.Tensor:
        """Copy a host tensor to the device (counted); made outside inference mode, same dtype."""
        return self.place_many([host], device, non_blocking)[0]

    def place_many(self, hosts: list[torch.Tensor], device: torch.device | str, non_blocking: bool = False,
                   stream=None) -> list[torch.Tensor]:
        """Copy host tensors to the device (counted); made outside inference mode, same dtype.

        With `stream` (a CUDA side stream) the copies are made ComfyUI's way (`cast_to`): the
        destinations come from the compute stream's pool, the side stream waits for the compute
        stream's work queued so far (which may still use those blocks), then copies. No
        `record_stream`: the caller makes the compute stream wait for the copies (an event) before
        they are used or dropped, so a dropped copy's block is reusable at once in stream order and
        the allocator never holds more blocks than there are live copies.
        """
        device = torch.device(device)
        with _disable_current_modes(), torch.inference_mode(False), torch.no_grad():
            if self.is_simulated(device):
                copies = []
                for host in hosts:
                    copy = host.detach().clone()
                    self.memory(device).allocate(copy.untyped_storage())
                    copies.append(copy)
            elif stream is None:
                copies = [host.detach().to(device, non_blocking=non_blocking) for host in hosts]
            else:
                copies = [torch.empty_like(host, device=device) for host in hosts]
                stream.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(stream):
                    for copy, host in zip(copies, hosts):
                        copy.copy_(host.detach(), non_blocking=non_blocking)
        self.transfers.h2d += len(hosts)
        self.transfers.h2d_bytes += sum(host.nbytes for host in hosts)
        return copies

    def to_host(self, t: torch.Tensor) -> torch.Tensor:
        """Copy a device tensor back to the host (counted)."""
        with _disable_current_modes(), torch.inference_mode(False), torch.no_grad():
            host = t.detach().clone() if t.device.type == "cpu" else t.detach().to("cpu")
        self.transfers.d2h += 1
        self.transfers.d2h_bytes += t.nbytes
        return host

    def offload(self, t: torch.Tensor, host: torch.Tensor, device: torch.device | str) -> None:
        """Make `t` what a weight that is not on `device` looks like: meta in strict mode, else `host`.

        A weight still referenced elsewhere (an autograd graph of an earlier output) cannot become
        meta; it then points at its host tensor: same values, only the strictness check is lost.
        """
        if self.strict_on(device):
            with _disable_current_modes():
                meta = torch.empty_strided(host.shape, host.stride(), dtype=host.dtype, device="meta")
            try:
                assign(t, meta)
                return
            except StrictDeviceError:
                log.debug("weight referenced by an autograd graph stays a host tensor while offloaded")
        assign(t, host)

    # ---- phase accounting -----------------------------------------------------------------------
    @contextlib.contextmanager
    def host(self) -> Iterator[None]:
        """Host-side work inside a tracked block: what this thread allocates here is host memory (a host
        optimizer's float32 master weights, gradients, staging buffers and AdamW moments), so a simulated
        device does not count it (the strict check of device weights stays on). On CUDA/XPU the allocator
        never sees host tensors: nothing to do there."""
        self._host.depth = getattr(self._host, "depth", 0) + 1
        try:
            yield
        finally:
            self._host.depth -= 1

    def _on_host(self) -> bool:
        return getattr(self._host, "depth", 0) > 0

    @contextlib.contextmanager
    def tracking(self, device: torch.device | str) -> Iterator[Tracking | None]:
        """Measure the block's allocations on a simulated device (counted op by op) or on CUDA/XPU
        (the allocator's peak statistics); yields None where nothing can be measured (CPU, MPS).

        Thread-safe: blocks on the same device from several threads (compute.gpu_jobs > 1) share the
        device's statistics, so each of their readings is marked not its own (`Tracking.own`)."""
        device = torch.device(device)
        simulated = self.is_simulated(device)
        backend = None if simulated else self._backend(device)
        if not simulated and backend is None:
            yield None
            return
        key = str(device)
        mem = self.memory(device) if simulated else None
        result = Tracking(key)
        with self._lock:
            active = self._active.setdefault(key, [])
            me = threading.get_ident()
            for other, thread in active:
                if thread != me:
                    other.own = result.own = False
                elif not simulated:
                    result.own = False  # nested: the outer block's peak cannot be reset under it
            if simulated:
                result.start, outer_peak = mem.used, mem.peak
                mem.peak = mem.used
            else:
                result.start = backend.memory_allocated(device)
                if not active:
                    backend.reset_peak_memory_stats(device)
            active.append((result, me))
        try:
            if simulated:
                with _AllocationMode(mem, self.strict, self.names, self._on_host):
                    yield result
            else:
                yield result
        finally:
            with self._lock:
                del active[next(i for i, (t, _) in enumerate(active) if t is result)]
                if simulated:
                    result.peak_bytes, result.end = mem.peak - result.start, mem.used
                    mem.peak = max(outer_peak, mem.peak)
                else:
                    result.peak_bytes = backend.max_memory_allocated(device) - result.start
                    result.end = backend.memory_allocated(device)

    @staticmethod
    def _backend(device: torch.device):
        """The module answering allocator statistics for `device` (torch.cuda, torch.xpu), or None."""
        return getattr(torch, device.type, None) if device.type in ("cuda", "xpu") else None

    # ---- pinned-to-CPU subtrees -------------------------------------------------------------------
    @staticmethod
    def pin_to_cpu(module: nn.Module) -> nn.Module:
        """Keep this subtree on the CPU forever: never placed, never streamed, never counted."""
        setattr(module, PINNED_CPU_ATTR, True)
        return module


def default_vram_reserve(device: torch.device | str, simulated: bool) -> int:
    """ComfyUI's default reserve on a real GPU (400 MB, 600 MB on Windows); none when simulated."""
    if simulated or torch.device(device).type == "cpu":
        return 0
    return (600 if platform.system() == "Windows" else 400) << 20

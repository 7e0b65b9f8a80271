"""Streaming on a real GPU (DESIGN.md §7): the link, our streaming vs resident, vs diffusers and accelerate.

    python bench/gpu.py [--quick] [--device cuda|cpu] [--repeats N] [--warmups N] [--arms A,B] [--models M,N]

Measures, side by side in one run, each arm in its own subprocess (fresh CUDA context; peak memory
from `torch.cuda.max_memory_allocated`):
1. the host->device link: a 1 GiB buffer copied pageable, after a `pin_memory()` copy, and registered
   in place with `cudaHostRegister` (as runtime/pinning.py does); the best of the three is "the link";
2. the two bench models (bench/mizuoto_bench_models.py) at their real sizes in bf16 -- the Qwen3-TTS 0.6B talker
   (greedy decoding, one forward per token) and the F5-TTS base DiT (Euler steps, CFG batch 2) --
   run resident (`model.to(device)`, no runtime), then through our runtime on the real device
   (`DeviceService()`, `ModelManager`): 100 % resident, 50 % (`compute.vram_limit_mb`) and 0 %
   (`compute.vram_mode none`); then diffusers' group offloading (block level, one block per group,
   `use_stream=True`) and accelerate's `cpu_offload`, both with every block offloaded (our 0 %);
3. per arm: tokens/s or steps/s, time ÷ resident, bytes streamed per call, achieved GB/s (bytes
   streamed ÷ run time) ÷ the link, peak VRAM, and the output vs resident: `exact` (torch.equal)
   or the max abs difference.
Prints one table; with $OUT set, writes it (gpu-<device>[-quick].txt) and the rows as JSON there.

`--device cpu` runs the same control flow on a CPU: our arms on a strict simulated device
(`DeviceService(simulate={"cpu": n}, strict=True)`; the 50 % budget is its capacity), the peers
with `onload_device=cpu` (diffusers without streams), the link is a host memcpy. Peers whose package
is missing are "not installed" rows. Not a test (`tests/test_bench_gpu.py` runs `--quick --device cpu`).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20
GiB = 1 << 30


def _import_runtime() -> None:
    """Make `mizuoto` this checkout: the installed package if it is this folder, else this folder
    as a bare package (its __init__, which registers the ComfyUI nodes, is not needed here)."""
    if "mizuoto" in sys.modules:
        return
    spec = importlib.util.find_spec("mizuoto")
    if spec is not None and spec.origin and Path(spec.origin).resolve().parent == ROOT:
        return
    package = types.ModuleType("mizuoto")
    package.__path__ = [str(ROOT)]
    package.__file__ = str(ROOT / "__init__.py")
    sys.modules["mizuoto"] = package


_import_runtime()
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/mizuoto_bench_models.py, also when loaded by path
from mizuoto.runtime import Calibration, DeviceService, ModelHandle, ModelManager, VramPolicy  # noqa: E402
from mizuoto.runtime.loading import load_module  # noqa: E402
from mizuoto_bench_models import (  # noqa: E402
    DIT_QUICK, F5_TTS_BASE, QWEN3_TTS_TALKER, TALKER_QUICK, DiTDims, F5DiT, Talker, TalkerDims, flow, talk,
)

ARMS = {
    "plain": "resident: model.to(device), no runtime",
    "ours100": "ours, 100 % resident",
    "ours50": "ours, 50 % resident",
    "ours0": "ours, 0 % resident",
    "diffusers": "diffusers group offloading",
    "accelerate": "accelerate cpu_offload",
}
OURS = {"ours100": 1.0, "ours50": 0.5, "ours0": 0.0}
PEERS = {"diffusers": ("diffusers", "accelerate"), "accelerate": ("accelerate",)}  # diffusers' hooks need accelerate
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
REFERENCE = "plain"


# ---- what is measured ---------------------------------------------------------------------------------
@dataclass
class ModelCfg:
    name: str  # "talker" | "dit"
    kind: str  # "sequence" | "oneshot"
    dims: dict
    calls: int  # forwards per run: tokens generated or Euler steps
    per: str  # "token" | "step"
    prompt: int = 0  # talker: prompt tokens (the first forward is their prefill)
    working: int = 64 * MB  # working memory estimate given to ctx.run
    handle_kw: dict = field(default_factory=dict)
    checkpoint: str = ""

    def build(self):
        if self.name == "talker":
            return Talker(TalkerDims(**self.dims)).eval()
        return F5DiT(DiTDims(**self.dims)).eval()

    def text(self) -> str:
        if self.name == "talker":
            return f"{TalkerDims(**self.dims).text()}; {self.prompt}-token prompt, {self.calls} generated"
        return f"{DiTDims(**self.dims).text()}; {self.calls} steps"


def model_cfgs(quick: bool) -> list[ModelCfg]:
    if quick:
        kw = {"min_unit_bytes": 64 << 10}  # tiny shapes: let sub-megabyte layers (DiT blocks: 116 KB) be units
        return [ModelCfg("talker", "sequence", asdict(TALKER_QUICK), 8, "token", prompt=4, working=32 * MB,
                         handle_kw=kw),
                ModelCfg("dit", "oneshot", asdict(DIT_QUICK), 4, "step", working=32 * MB, handle_kw=kw)]
    # Real sizes: the Qwen3-TTS 0.6B talker (852 MB in bf16) and the F5-TTS base DiT (643 MB) with
    # 1024 frames (about 11 s of audio at 93.75 frames/s), CFG batch 2.
    return [ModelCfg("talker", "sequence", asdict(QWEN3_TTS_TALKER), 32, "token", prompt=64, working=64 * MB),
            ModelCfg("dit", "oneshot", asdict(replace(F5_TTS_BASE, frames=1024)), 16, "step", working=256 * MB)]


def make_inputs(cfg: ModelCfg, device: str, dtype: torch.dtype) -> dict:
    g = torch.Generator().manual_seed(1)
    if cfg.name == "talker":
        d = TalkerDims(**cfg.dims)
        return {"prompt": torch.randint(0, d.vocab, (1, cfg.prompt), generator=g).to(device)}
    d = DiTDims(**cfg.dims)
    noise = torch.randn(1, d.frames, d.mel, generator=g)
    cond = torch.randn(1, d.frames, d.mel, generator=g)
    cond[:, d.frames // 2:] = 0
    text = torch.randint(1, d.text_vocab + 1, (1, d.frames), generator=g)
    return {"noise": noise.to(device, dtype), "cond": cond.to(device, dtype), "text": text.to(device)}


def run_model(cfg: ModelCfg, model, inputs: dict):
    if cfg.name == "talker":
        return talk(model, inputs["prompt"], cfg.calls)
    return flow(model, inputs["noise"], inputs["cond"], inputs["text"], cfg.calls)


def write_checkpoint(cfg: ModelCfg, path: str, dtype: torch.dtype, seed: int = 3) -> int:
    """Random weights in the run dtype: matrices and kernels ~N(0, 0.02), biases 0, norm scales 1."""
    from safetensors.torch import save_file

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in cfg.build().state_dict().items()}
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k, s in shapes.items():
        if len(s) > 1:
            state[k] = (torch.randn(s, generator=g) * 0.02).to(dtype)
        else:
            state[k] = (torch.zeros(s) if k.endswith("bias") else torch.ones(s)).to(dtype)
    save_file(state, path)
    nbytes = sum(t.nbytes for t in state.values())
    del state
    gc.collect()
    return nbytes


# ---- outputs --------------------------------------------------------------------------------------------
def to_cpu(out):
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu", copy=True)
    return type(out)(to_cpu(o) for o in out)


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def _leaves(out) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for o in out for t in _leaves(o)]


def compare(out, ref) -> dict:
    """exact (torch.equal everywhere), else the max abs difference of the floating outputs and how many
    integer outputs (the talker's tokens) agree."""
    if same(out, ref):
        return {"exact": True, "check": "exact", "max_abs_diff": 0.0}
    a, b = _leaves(out), _leaves(ref)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return {"exact": False, "check": "DIFFERENT (shapes)", "max_abs_diff": None}
    diff, notes = 0.0, []
    for x, y in zip(a, b):
        if x.is_floating_point():
            d = (x.float() - y.float()).abs()
            diff = max(diff, float(d.nan_to_num(float("inf")).max()) if d.numel() else 0.0)
        else:
            notes.append(f"{int((x == y).sum())}/{x.numel()} tokens equal")
    return {"exact": False, "check": f"max abs diff {diff:.3g}" + "".join(f", {n}" for n in notes),
            "max_abs_diff": diff}


# ---- the child: one arm, every model, in a fresh process -----------------------------------------------
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> int | None:
    return torch.cuda.max_memory_allocated() if device.startswith("cuda") else None


class H2DCounter:
    """Counts host->device bytes of `.to()`/`copy_` while active (a TorchDispatchMode; one untimed run).

    Used for the peers, whose copies are plain `.to(device)` calls; ours are counted by the runtime."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func is torch.ops.aten._to_copy.default:
                    src, dst = args[0], out
                elif func is torch.ops.aten.copy_.default:
                    dst, src = args[0], args[1]
                else:
                    return out
                if (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device.type == "cpu"
                        and dst.device.type not in ("cpu", "meta")):
                    counter.bytes += src.nbytes
                return out

        self.bytes = 0
        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def residency_plan(handle: ModelHandle, r: float, slots: int, working: int) -> tuple[int, int]:
    """(k, capacity): the first k units in placement order hold about `r` of the units' bytes, and the
    device capacity (weights + working memory) under which the planner keeps exactly those resident:
    fixed part + the k units + room for `slots` streamed copies + working memory + half a unit of slack."""
    units = list(handle.layout.units)
    n = len(units)
    if r >= 1 or not n:
        return n, handle.size_bytes + 4 * working
    if handle.kind == "oneshot":
        units.sort(key=lambda u: -u.nbytes)  # as ModelHandle._plan: largest first (stable)
    else:
        units.sort(key=lambda u: u.order)  # run order
    target = r * sum(u.nbytes for u in units)
    k, acc = 0, 0
    while k < n and acc + units[k].nbytes / 2 <= target:
        acc += units[k].nbytes
        k += 1
    # A partial placement keeps room for `slots` streamed copies, so at most n - slots - 1 resident.
    k = max(0, min(k, n - slots - 1)) if r > 0 else 0
    rest = sorted((u.nbytes for u in units[k:]), reverse=True)
    slack = min(u.nbytes for u in units) // 2
    return k, handle.layout.fixed_bytes + sum(u.nbytes for u in units[:k]) + sum(rest[:slots]) + working + slack


def _time_runs(device: str, fn, warmups: int, repeats: int, first=None):
    """Warm-ups (the first one inside `first`, a context manager, when given), then timed runs.

    Returns the timed runs' outputs (on the CPU) and times, the warm-ups' times, and the peak device
    memory: the largest `max_memory_allocated` read after each run (our runtime resets the allocator's
    peak statistics when a phase starts, so one reading at the end would see the last run only)."""
    outs, times, warm, peaks = [], [], [], []
    for i in range(warmups + repeats):
        ctx = first if (i == 0 and first is not None) else None
        _sync(device)
        t0 = time.perf_counter()
        if ctx is not None:
            with ctx:
                out = fn()
        else:
            out = fn()
        _sync(device)
        dt = time.perf_counter() - t0
        peaks.append(_peak(device))
        out = to_cpu(out)
        (warm if i < warmups else times).append(dt)
        if i >= warmups:
            outs.append(out)
    return outs, times, warm, (max(peaks) if None not in peaks else None)


def child_model(arm: str, cfg: ModelCfg, plan: dict, tmp: Path) -> dict:
    device, dtype = plan["device"], DTYPES[plan["dtype"]]
    cuda = device.startswith("cuda")
    model = load_module(cfg.build, cfg.checkpoint, dtype)
    inputs = make_inputs(cfg, device, dtype)
    size = sum(t.nbytes for t in list(model.parameters()) + list(model.buffers()))
    res: dict[str, Any] = {"model": cfg.name, "size_bytes": size}
    warmups, repeats = plan["warmups"], plan["repeats"]
    fn = lambda: run_model(cfg, model, inputs)  # noqa: E731
    if cuda:
        torch.cuda.empty_cache()
    _reset_peak(device)
    t_setup = time.perf_counter()

    if arm == "plain":
        model.to(device)
        res["setup_s"] = time.perf_counter() - t_setup
        outs, times, warm, peak = _time_runs(device, fn, warmups, repeats)
        res |= {"setting": f"whole model on the device ({size / MB:.0f} MB)", "per_run_bytes": 0}

    elif arm in OURS:
        r = OURS[arm]
        handle = ModelHandle(model, name=cfg.name, kind=cfg.kind, **cfg.handle_kw)
        n = len(handle.layout.units)
        slots = 1 if cfg.kind == "sequence" else 2  # compute.async_offload = 1 (the default)
        k, capacity = residency_plan(handle, r, slots, cfg.working)
        settings: dict[str, Any] = {"compute.vram_mode": "none" if r == 0 else "normal", "compute.vram_reserve_mb": 0}
        ballast = None
        if cuda:
            devices = DeviceService()
            if 0 < r < 1:
                # The limit counts all this process holds: the inputs, and cuBLAS/cuBLASLt workspaces, which
                # the allocator hands out at the first matmuls (made now, so that every request sees the same
                # free memory). A ballast takes up the MB rounding of the limit, so that the planner sees
                # exactly `capacity`.
                x = torch.ones(8, 8, device=device, dtype=dtype)
                torch.nn.functional.linear(x, x, x[0]) @ x
                del x
                torch.cuda.synchronize()
                held = torch.cuda.memory_allocated()
                limit_mb = math.ceil((capacity + held) / MB)
                settings["compute.vram_limit_mb"] = limit_mb
                ballast = torch.empty(limit_mb * MB - capacity - held, dtype=torch.uint8, device=device)
                res["ballast_bytes"] = ballast.nbytes
        else:
            # The 50 % budget is the simulated device's capacity (MB granularity is too coarse for tiny shapes).
            devices = DeviceService(simulate={"cpu": capacity if 0 < r < 1 else handle.size_bytes + 4 * cfg.working},
                                    strict=True)
        calibration = Calibration(tmp / f"cal-{arm}-{cfg.name}.json")
        manager = ModelManager(devices, VramPolicy(settings), calibration=calibration)
        manager.register(handle, engine="bench", device=device)
        samples: list[dict] = []

        def request():
            tr = devices.transfers
            before = (tr.h2d_bytes, handle.streamed_bytes)
            with manager.request(seed=0) as ctx:
                out = ctx.run(cfg.name, [handle], fn, memory=cfg.working)
            out = to_cpu(out)  # outside the phase: the copy holds no (simulated) device memory
            samples.append({"h2d": tr.h2d_bytes - before[0], "streamed": handle.streamed_bytes - before[1],
                            "loaded": handle.loaded_bytes, "resident_units": len(handle._placement),
                            "hooks": handle.hook_count, "oom_retries": ctx.meta["applied"]["oom_retries"],
                            "partial": ctx.meta["memory"]["partial"].get(cfg.name, {}).get("reason")})
            return out

        res["setup_s"] = time.perf_counter() - t_setup
        outs, times, warm, peak = _time_runs(device, request, warmups, repeats)
        timed = samples[warmups:]
        loaded_units = {s["loaded"] - handle.layout.fixed_bytes for s in timed}
        resident = {s["resident_units"] for s in timed}
        unit_bytes = handle.layout.unit_bytes
        setting = (f"{max(resident)}/{n} units resident ({max(loaded_units) / MB:.0f} of {unit_bytes / MB:.0f} MB"
                   f" of units, {max(loaded_units) / max(unit_bytes, 1):.0%})")
        if max(resident) != k:
            setting += f", planned {k}"
        if "compute.vram_limit_mb" in settings:
            setting += f"; vram_limit_mb {settings['compute.vram_limit_mb']}"
        if r == 0:
            setting += "; vram_mode none"
        if not cuda:
            setting += f"; simulated {devices.memory('cpu').capacity / MB:.1f} MB"
        pins = manager._pins  # what the streamer page-locked: registered in place, or copied
        if pins.used:
            setting += f"; pinned {pins.used / MB:.0f} MB ({len(pins._registered)} registered in place)"
        res["pinned_bytes"], res["registered_storages"] = pins.used, len(pins._registered)
        res |= {"setting": setting, "units": n, "resident_units": sorted(resident), "planned_units": k,
                "resident_unit_bytes": sorted(loaded_units),
                "fixed_bytes": handle.layout.fixed_bytes, "unit_bytes": unit_bytes,
                "per_run_bytes": statistics.median(s["streamed"] for s in timed),
                "h2d_per_run": statistics.median(s["h2d"] for s in timed),
                "oom_retries": sum(s["oom_retries"] for s in samples),
                "hooks": max(s["hooks"] for s in timed), "samples": samples,
                "settings": settings}
        if len(loaded_units) > 1 or len(resident) > 1:
            res["note"] = f"resident bytes changed between timed runs: {sorted(b / MB for b in loaded_units)} MB"
        if not cuda:
            res["sim_peak"] = devices.memory("cpu").peak
        manager.unregister(handle)

    elif arm == "diffusers":
        from diffusers.hooks import apply_group_offloading

        use_stream = cuda
        apply_group_offloading(model, onload_device=torch.device(device), offload_type="block_level",
                               num_blocks_per_group=1, use_stream=use_stream)
        res["setup_s"] = time.perf_counter() - t_setup
        counter = H2DCounter()
        outs, times, warm, peak = _time_runs(device, fn, warmups, repeats, first=counter)
        import diffusers

        res |= {"setting": f"diffusers {diffusers.__version__}: block_level, 1 block/group, "
                           f"use_stream={use_stream}, non_blocking=False (default)",
                "per_run_bytes": counter.bytes if cuda else None}

    elif arm == "accelerate":
        import accelerate
        from accelerate import cpu_offload

        cpu_offload(model, execution_device=torch.device(device))
        res["setup_s"] = time.perf_counter() - t_setup
        counter = H2DCounter()
        outs, times, warm, peak = _time_runs(device, fn, warmups, repeats, first=counter)
        res |= {"setting": f"accelerate {accelerate.__version__}: every module with weights, synchronous copies",
                "per_run_bytes": counter.bytes if cuda else None}
    else:
        raise ValueError(f"unknown arm {arm!r}")

    res["peak_bytes"] = (peak - res.get("ballast_bytes", 0)) if cuda and peak is not None else res.get("sim_peak")
    res["times"], res["warmup_times"] = times, warm
    res["runs_agree"] = all(same(o, outs[0]) for o in outs)
    torch.save(outs[0], tmp / f"out-{arm}-{cfg.name}.pt")
    return res  # the model and its hooks go with this frame; the caller collects


def child_bandwidth(plan: dict) -> dict:
    """Host->device copies of one buffer: pageable, a pin_memory() copy, registered in place."""
    device, nbytes, reps = plan["device"], plan["bandwidth_bytes"], plan["bandwidth_reps"]
    src = torch.ones(nbytes, dtype=torch.uint8)  # written, so every page is really there
    cuda = device.startswith("cuda")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device if cuda else "cpu")

    def measure(host: torch.Tensor, non_blocking: bool) -> dict:
        times = []
        for i in range(reps + 1):  # the first copy warms up
            _sync(device)
            t0 = time.perf_counter()
            dst.copy_(host, non_blocking=non_blocking)
            _sync(device)
            if i:
                times.append(time.perf_counter() - t0)
        if cuda:
            assert bool((dst[:: max(1, nbytes // 4096)] == 1).all())
        return {"gbps": nbytes / min(times) / 1e9, "median_gbps": nbytes / statistics.median(times) / 1e9,
                "reps": reps}

    out: dict[str, Any] = {"bytes": nbytes, "device": device}
    out["pageable"] = measure(src, non_blocking=False)
    if not cuda:
        why = "no CUDA: the simulated device copies host memory"
        out["pinned"] = {"na": why}
        out["registered"] = {"na": why}
        return out
    try:
        t0 = time.perf_counter()
        pinned = src.pin_memory()
        pin_s = time.perf_counter() - t0
        out["pinned"] = measure(pinned, non_blocking=True) | {"setup_s": pin_s}
        del pinned
    except Exception as e:  # keep the other rows
        out["pinned"] = {"na": f"pin_memory() failed: {type(e).__name__}: {e}"}
    try:
        cudart = torch.cuda.cudart()
        t0 = time.perf_counter()
        err = cudart.cudaHostRegister(src.data_ptr(), nbytes, 1)  # cudaHostRegisterPortable, as runtime/pinning.py
        reg_s = time.perf_counter() - t0
    except Exception as e:
        err, reg_s = f"{type(e).__name__}: {e}", 0.0
    if not isinstance(err, str) and int(err) == 0:
        try:
            out["registered"] = measure(src, non_blocking=True) | {"setup_s": reg_s,
                                                                   "is_pinned": bool(src.is_pinned())}
        finally:
            torch.cuda.synchronize()
            cudart.cudaHostUnregister(src.data_ptr())
    else:
        out["registered"] = {"na": f"cudaHostRegister failed: {err}"}
    return out


def child_main(arm: str, plan_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    tmp = Path(plan["tmp"])
    if plan.get("threads"):
        torch.set_num_threads(plan["threads"])
    result: dict[str, Any] = {"arm": arm, "torch": torch.__version__}
    if plan["device"].startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name()
    if arm == "bandwidth":
        result["bandwidth"] = child_bandwidth(plan)
    else:
        result["models"] = []
        for raw in plan["models"]:
            cfg = ModelCfg(**raw)
            t0 = time.perf_counter()
            try:
                res = child_model(arm, cfg, plan, tmp)
            except Exception as e:  # one model failing must not lose the other's figures
                if isinstance(e, ImportError) and arm in PEERS:  # installed, but it does not import
                    res = {"model": cfg.name, "import_error": f"{type(e).__name__}: {e}"}
                else:
                    import traceback

                    traceback.print_exc()
                    first = str(e).splitlines()[0] if str(e) else ""
                    res = {"model": cfg.name, "error": f"{type(e).__name__}: {first}"}
            gc.collect()  # the model, its hooks and pinned host memory, before the next model
            if plan["device"].startswith("cuda"):
                torch.cuda.empty_cache()
            res["wall_s"] = time.perf_counter() - t0
            res["process_s"] = time.perf_counter() - T0
            result["models"].append(res)
    (tmp / f"result-{arm}.json").write_text(json.dumps(result))


# ---- the parent: plan, children, table ------------------------------------------------------------------
def _missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _run_child(arm: str, plan_path: Path, tmp: Path, timeout: float) -> tuple[dict | None, str]:
    t0 = time.perf_counter()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", arm, str(plan_path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        print(f"  {arm}: timed out after {timeout:.0f} s", flush=True)
        if err.strip():
            print("    " + err.strip()[-3000:].replace("\n", "\n    "), flush=True)
        return None, f"timed out after {timeout:.0f} s"
    result_path = tmp / f"result-{arm}.json"
    print(f"  {arm}: {time.perf_counter() - t0:.1f} s" + ("" if proc.returncode == 0 else f" (exit {proc.returncode})"),
          flush=True)
    if proc.stderr.strip():
        tail = proc.stderr.strip()[-3000:]
        print("    " + tail.replace("\n", "\n    "), flush=True)
    if proc.returncode != 0 or not result_path.exists():
        return None, f"exit {proc.returncode}: " + (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(result_path.read_text()), ""


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    return f"{n / MB:.1f} MB" if n >= 0.1 * MB else f"{n / 1024:.0f} KB" if n >= 1024 else f"{n:.0f} B"


def _blank(figure: str, model: str, arm: str, check: str, **extra) -> dict:
    row = {"figure": figure, "model": model, "arm": arm, "label": ARMS.get(arm, arm), "setting": "",
           "per_s": None, "speed": "—", "ratio": None, "per_call_bytes": None, "gbps": None, "of_link": None,
           "peak_bytes": None, "exact": None, "max_abs_diff": None, "check": check}
    return row | extra


def bandwidth_rows(result: dict | None, error: str, device: str) -> tuple[list[dict], float | None]:
    names = {"pageable": "pageable", "pinned": "pin_memory() copy", "registered": "cudaHostRegister in place"}
    if result is None:
        return [_blank("host→device copy", "link", k, f"FAILED: {error.splitlines()[0]}", label=v)
                for k, v in names.items()], None
    bw = result["bandwidth"]
    link = max(bw[k]["gbps"] for k in names if "gbps" in bw[k])
    rows = []
    for key, label in names.items():
        m = bw[key]
        if "na" in m:
            rows.append(_blank("host→device copy", "link", key, "n/a", label=label, setting=m["na"]))
            continue
        setting = f"{_fmt_bytes(bw['bytes'])}, best of {m['reps']} (median {m['median_gbps']:.1f} GB/s)"
        if "setup_s" in m:
            setting += f"; {'pinning' if key == 'pinned' else 'registering'} took {m['setup_s'] * 1e3:.0f} ms"
        if device == "cpu":
            setting += "; host memcpy (no GPU)"
        rows.append(_blank("host→device copy", "link", key, "the link" if m["gbps"] == link else "—", label=label,
                           setting=setting, gbps=m["gbps"], of_link=m["gbps"] / link, median_gbps=m["median_gbps"]))
    return rows, link


def model_rows(cfgs: list[ModelCfg], results: dict[str, tuple[dict | None, str]], tmp: Path,
               link: float | None) -> tuple[list[dict], list[str]]:
    rows, notes = [], []
    by_model: dict[str, dict[str, dict]] = {c.name: {} for c in cfgs}
    for arm, (result, error) in results.items():
        for cfg in cfgs:
            if result is None:
                by_model[cfg.name][arm] = {"error": error}
            else:
                by_model[cfg.name][arm] = next((m for m in result["models"] if m["model"] == cfg.name),
                                               {"error": "no result"})
    for cfg in cfgs:
        ref = by_model[cfg.name].get(REFERENCE, {})
        ref_time = statistics.median(ref["times"]) if ref.get("times") else None
        ref_path = tmp / f"out-{REFERENCE}-{cfg.name}.pt"
        ref_out = torch.load(ref_path) if ref.get("times") and ref_path.exists() else None
        for arm in ARMS:
            res = by_model[cfg.name].get(arm)
            if res is None:
                continue
            if "missing" in res:
                rows.append(_blank("streaming", cfg.name, arm, "not installed",
                                   setting=f"missing: {', '.join(res['missing'])}"))
                continue
            if "import_error" in res:
                rows.append(_blank("streaming", cfg.name, arm, "not installed", setting=res["import_error"]))
                continue
            if "error" in res:
                error = res["error"]
                check = error if error.startswith("skipped") else f"FAILED: {error}"
                rows.append(_blank("streaming", cfg.name, arm, check))
                continue
            t = statistics.median(res["times"])
            per_s = cfg.calls / t
            row = _blank("streaming", cfg.name, arm, "", setting=res["setting"], per_s=per_s,
                         speed=f"{per_s:.1f} {cfg.per}/s", ratio=(t / ref_time if ref_time else None),
                         peak_bytes=res.get("peak_bytes"), time_s=t, times_s=res["times"],
                         warmup_times_s=res["warmup_times"], setup_s=res.get("setup_s"))
            per_run = res.get("per_run_bytes")
            if per_run is not None:
                row["per_call_bytes"] = per_run / cfg.calls
                if per_run:
                    row["gbps"] = per_run / t / 1e9
                    row["of_link"] = row["gbps"] / link if link else None
            for key in ("units", "resident_units", "planned_units", "resident_unit_bytes", "fixed_bytes", "unit_bytes",
                        "h2d_per_run", "pinned_bytes", "registered_storages",
                        "oom_retries", "hooks", "settings", "size_bytes"):
                if key in res:
                    row[key] = res[key]
            out = torch.load(tmp / f"out-{arm}-{cfg.name}.pt")
            cmp = compare(out, ref_out) if ref_out is not None else {"exact": None, "check": "no reference",
                                                                     "max_abs_diff": None}
            check = cmp["check"]
            if not res["runs_agree"]:
                check += " (runs differ)"
            if res.get("oom_retries"):
                check += f" (oom retries {res['oom_retries']})"
            row |= {"exact": cmp["exact"] and res["runs_agree"] and not res.get("oom_retries"),
                    "max_abs_diff": cmp["max_abs_diff"], "check": check}
            rows.append(row)
            if res.get("note"):
                notes.append(f"{cfg.name} {arm}: {res['note']}")
            if arm in OURS and res.get("h2d_per_run", 0) > res.get("per_run_bytes", 0):
                notes.append(f"{cfg.name} {arm}: copied {_fmt_bytes(res['h2d_per_run'])}/run, "
                             f"more than it streamed ({_fmt_bytes(res['per_run_bytes'])})")
    return rows, notes


COLUMNS = (("model", "model"), ("label", "arm"), ("setting", "setting"), ("speed", "speed"),
           ("ratio", "time ÷ resident"), ("per_call_bytes", "streamed / call"), ("gbps", "GB/s"),
           ("of_link", "÷ link"), ("peak_bytes", "peak VRAM"), ("check", "output vs resident"))


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None:
        return "—"
    if key in ("ratio", "of_link"):
        return f"{v:.2f}"
    if key == "gbps":
        return f"{v:.1f}"
    if key in ("per_call_bytes", "peak_bytes"):
        return _fmt_bytes(v)
    return str(v)


def format_table(rows: list[dict]) -> str:
    cells = [[h for _, h in COLUMNS]] + [[_cell(r, k) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 1 warm-up, 1 timed run")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="cuda (default when available) or cpu: the control flow on a strict simulated device")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per arm (default 3, quick 1)")
    parser.add_argument("--warmups", type=int, default=None, help="untimed runs first (default 2, quick 1)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {','.join(ARMS)}")
    parser.add_argument("--models", default="talker,dit", help="comma-separated subset of talker,dit")
    parser.add_argument("--tokens", type=int, default=None, help="talker: tokens generated (default 32, quick 8)")
    parser.add_argument("--steps", type=int, default=None, help="DiT: Euler steps (default 16, quick 4)")
    parser.add_argument("--frames", type=int, default=None, help="DiT: mel frames (default 1024, quick 16)")
    parser.add_argument("--bandwidth-mb", type=int, default=None, help="buffer size (default 1024, quick 64)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads in the arms (default: torch's)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per arm's process")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds for the whole bench: arms that would start later are skipped, and no "
                             "arm's process may run past it (a device call's own limit, say)")
    parser.add_argument("--child", nargs=2, metavar=("ARM", "PLAN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(*args.child)
        return []
    return _run(args)


def _run(args) -> list[dict]:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (use --device cpu for the simulated path)")
    quick = args.quick
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown}; expected a subset of {list(ARMS)}")
    if REFERENCE not in arms:
        arms.insert(0, REFERENCE)  # every figure is relative to it
    cfgs = [c for c in model_cfgs(quick) if c.name in args.models.split(",")]
    for c in cfgs:
        if c.name == "talker" and args.tokens:
            c.calls = args.tokens
        if c.name == "dit" and args.steps:
            c.calls = args.steps
        if c.name == "dit" and args.frames:
            c.dims = c.dims | {"frames": args.frames}
    repeats = args.repeats or (1 if quick else 3)
    # At least one: the first run places (and pins) weights, and for the peers it is the one counting copies.
    warmups = max(1, args.warmups if args.warmups is not None else (1 if quick else 2))
    bandwidth_bytes = (args.bandwidth_mb or (64 if quick else 1024)) * MB
    t_start = time.perf_counter()
    # The parent never touches the GPU (no CUDA context of its own): the device's name comes from a child.
    header = [f"mizuoto GPU streaming bench: torch {torch.__version__}, device {device}"
              + ("" if device == "cuda" else " (strict simulated device)")
              + f", {args.dtype}, {'QUICK shapes' if quick else 'real shapes'}; median of {repeats} run(s) "
                f"after {warmups} warm-up(s); each arm in its own process"]
    for c in cfgs:
        header.append(f"  {c.name} ({c.kind}): {c.text()}")
    print("\n".join(header), flush=True)

    rows: list[dict] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mizuoto-gpu-bench-") as tmp_name:
        tmp = Path(tmp_name)
        for c in cfgs:
            c.checkpoint = str(tmp / f"{c.name}.safetensors")
            nbytes = write_checkpoint(c, c.checkpoint, DTYPES[args.dtype])
            header.append(f"  {c.name} checkpoint: {_fmt_bytes(nbytes)} of random {args.dtype} weights")
        plan = {"device": device, "dtype": args.dtype, "tmp": str(tmp), "warmups": warmups, "repeats": repeats,
                "models": [asdict(c) for c in cfgs], "bandwidth_bytes": bandwidth_bytes,
                "bandwidth_reps": 3 if quick else 5, "threads": args.threads}
        plan_path = tmp / "plan.json"
        plan_path.write_text(json.dumps(plan))
        print(f"checkpoints written ({time.perf_counter() - t_start:.1f} s); arms:", flush=True)

        def timeout() -> float:
            if args.deadline is None:
                return args.timeout
            return max(0.0, min(args.timeout, args.deadline - (time.perf_counter() - t_start)))

        bw, err = _run_child("bandwidth", plan_path, tmp, timeout())
        brows, link = bandwidth_rows(bw, err, device)
        rows += brows
        if bw is not None and bw.get("gpu"):
            header[0] += f"; GPU: {bw['gpu']}"
            print(f"  GPU: {bw['gpu']}", flush=True)
        results: dict[str, tuple[dict | None, str]] = {}
        for arm in arms:
            missing = _missing(PEERS.get(arm, ()))
            if missing:
                results[arm] = ({"models": [{"model": c.name, "missing": missing} for c in cfgs]}, "")
                print(f"  {arm}: not installed ({', '.join(missing)})", flush=True)
                continue
            if args.deadline is not None and timeout() < 5:
                results[arm] = (None, f"skipped: --deadline {args.deadline:.0f} s reached")
                print(f"  {arm}: skipped (deadline)", flush=True)
                continue
            results[arm] = _run_child(arm, plan_path, tmp, timeout())
        mrows, notes = model_rows(cfgs, results, tmp, link)
        rows += mrows

    if link:
        header.append(f"  the link: {link:.1f} GB/s (best host->device copy of a {_fmt_bytes(bandwidth_bytes)} "
                      f"buffer); GB/s = bytes streamed per run ÷ run time")
    header.append("  time ÷ resident: median run time ÷ the resident arm's; output vs resident: torch.equal "
                  "of every output (talker: tokens and logits; DiT: the mel) with the resident arm's")
    table = format_table(rows)
    footer = [f"note: {n}" for n in notes] + [f"({time.perf_counter() - t_start:.0f} s wall)"]
    text = "\n".join(header) + "\n\n" + table + "\n" + "\n".join(footer) + "\n"
    print()
    print(table)
    print("\n".join(footer), flush=True)
    out_dir = os.environ.get("OUT")
    if out_dir:
        stem = f"gpu-{device}" + ("-quick" if quick else "")
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"{stem}.txt").write_text(text)
        meta = {"torch": torch.__version__, "device": device, "dtype": args.dtype, "quick": quick,
                "repeats": repeats, "warmups": warmups, "link_gbps": link, "header": header, "notes": notes,
                "models": [asdict(c) | {"checkpoint": None} for c in cfgs]}
        (Path(out_dir) / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1,
                                                               default=str))
        print(f"wrote {Path(out_dir) / stem}.txt and .json")
    return rows


if __name__ == "__main__":
    main()

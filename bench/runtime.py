"""Runtime figures (DESIGN.md §7), measured side by side in one run on this machine's CPU.

    python bench/runtime.py [--quick] [--repeats N] [--threads N] [--clock cpu|wall]

Prints one table:
1. resident path ÷ plain model: the same model run through `ctx.run` on a real CPU device (the
   manager moves nothing, no hooks) and on a strict simulated device with the whole model resident;
2. streamed ÷ resident at 0/25/50/75/100 % residency on the strict simulated device, bytes copied per
   token (sequence) or per step (oneshot) ÷ the minimum, and whether the output is bit-identical;
3. peak host RSS of loading a bf16 checkpoint ÷ its bytes: naive, meta + to_empty, `load_module`.
The 100 % rows repeat the resident configuration: their distance from 1.00 is the noise of the run.
The models (a Qwen3-TTS talker, an F5-TTS DiT) are in bench/mizuoto_bench_models.py, shared with bench/gpu.py.
Not a test (`tests/test_bench_runtime.py` only runs `--quick` and checks the table's rows).
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mizuoto.runtime import Calibration, DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.loading import load_module


sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/mizuoto_bench_models.py, also when loaded by path
from mizuoto_bench_models import (  # noqa: E402
    DIT, DIT_QUICK, F5_TTS_BASE, QWEN3_TTS_TALKER, TALKER, TALKER_QUICK, DiTDims, F5DiT, Talker, TalkerDims, flow,
    rope_inv_freq, talk,
)

MB = 1 << 20
RESIDENCIES = (0.0, 0.25, 0.5, 0.75, 1.0)
RSS_TALKER = replace(QWEN3_TTS_TALKER, layers=10)  # real layer shapes, 10 of 28 layers: ~330 MB in bf16
RSS_TALKER_QUICK = TalkerDims(256, 2, 4, 2, 64, 768, 512)


# ---- measuring ------------------------------------------------------------------------------------------
@dataclass
class Spec:
    name: str
    kind: str
    dims: str
    build: Callable[[], nn.Module]
    run: Callable[[nn.Module], Any]
    calls: int  # forward calls per run
    per: str  # "token" | "step"
    working: int  # working memory estimate given to ctx.run (and room left for it on the device)
    handle_kw: dict = field(default_factory=dict)


def talker_spec(d: TalkerDims, tokens: int, prompt_len: int, handle_kw: dict) -> Spec:
    prompt = torch.randint(0, d.vocab, (1, prompt_len), generator=torch.Generator().manual_seed(1))

    def build():
        torch.manual_seed(0)
        return Talker(d).eval()

    return Spec("talker", "sequence", f"{d.text()}; {prompt_len}-token prompt, {tokens} generated",
                build, lambda m: talk(m, prompt, tokens), tokens, "token", 32 * MB, handle_kw)


def dit_spec(d: DiTDims, steps: int, handle_kw: dict) -> Spec:
    g = torch.Generator().manual_seed(2)
    noise = torch.randn(1, d.frames, d.mel, generator=g)
    cond = torch.randn(1, d.frames, d.mel, generator=g)
    cond[:, d.frames // 2:] = 0
    text = torch.randint(1, d.text_vocab + 1, (1, d.frames), generator=g)

    def build():
        torch.manual_seed(0)
        return F5DiT(d).eval()

    return Spec("dit", "oneshot", f"{d.text()}; {steps} steps", build,
                lambda m: flow(m, noise, cond, text, steps), steps, "step", 32 * MB, handle_kw)


def snapshot(out):
    """A copy made outside any phase: outputs kept for the exactness check hold no simulated device memory."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    return type(out)(snapshot(o) for o in out)


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


class Arm:
    """One way of running a spec's model: plain, or registered with a manager on some device."""

    def __init__(self, spec: Spec, model: nn.Module, label: str, devices: DeviceService | None = None,
                 mode: str = "normal", calibration_dir: str | None = None, handle: ModelHandle | None = None,
                 clock: Callable[[], float] = time.process_time):
        self.spec, self.model, self.label, self.clock = spec, model, label, clock
        self.devices, self.handle, self.manager = devices, None, None
        self.acquires = 0
        self.times: list[float] = []
        self.samples: list[dict] = []
        self.warmups: list[dict] = []
        self.outputs: list[Any] = []
        if devices is None:
            return
        self.handle = handle or ModelHandle(model, name=spec.name, kind=spec.kind, **spec.handle_kw)
        calibration = Calibration(Path(calibration_dir or tempfile.mkdtemp()) / f"{id(self)}.json")
        self.manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}), calibration=calibration)
        self.manager.register(self.handle, engine="bench", device="cpu")
        streamer = self.manager.streamer("cpu")
        acquire = streamer.acquire

        def counting_acquire(handle, unit):
            self.acquires += 1
            return acquire(handle, unit)

        streamer.acquire = counting_acquire

    def __call__(self, timed: bool = True) -> Any:
        if self.manager is None:
            t0 = self.clock()
            out = self.spec.run(self.model)
            dt = self.clock() - t0
            sample = {}
        else:
            tr, h = self.devices.transfers, self.handle
            before = (tr.h2d_bytes, tr.d2h_bytes, h.streamed_bytes, self.acquires)
            t0 = self.clock()
            with self.manager.request(seed=0) as ctx:
                out = ctx.run(self.spec.name, [h], lambda: self.spec.run(self.model), memory=self.spec.working)
            dt = self.clock() - t0
            sample = {"h2d": tr.h2d_bytes - before[0], "d2h": tr.d2h_bytes - before[1],
                      "streamed": h.streamed_bytes - before[2], "acquires": self.acquires - before[3],
                      "hooks": h.hook_count, "loaded": h.loaded_bytes, "partial": h.partial,
                      "oom_retries": ctx.meta["applied"]["oom_retries"]}
        out = snapshot(out)  # the original's storages leave the simulated device now
        if timed:
            self.times.append(dt)
            self.samples.append(sample)
        else:
            self.warmups.append(sample)
        self.outputs.append(out)
        return out

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def capacity_for(handle: ModelHandle, k: int, slots: int, working: int) -> int:
    """A simulated capacity under which the planner keeps exactly `k` units resident (equal-size units).

    Fixed part + the k units + room for `slots` streamed copies + working memory, plus half a unit of
    slack (anything the caller keeps on the device between requests must not cost a unit)."""
    units = list(handle.layout.units)
    if k >= len(units):
        return handle.size_bytes + 4 * working
    if handle.kind == "oneshot":
        units.sort(key=lambda u: -u.nbytes)
    rest = sorted((u.nbytes for u in units[k:]), reverse=True)
    slack = min(u.nbytes for u in units) // 2
    return handle.layout.fixed_bytes + sum(u.nbytes for u in units[:k]) + sum(rest[:slots]) + working + slack


def build_arms(spec: Spec, tmp: str, clock) -> tuple[dict[str, Arm], list[tuple[float, int, Arm]]]:
    base = spec.build()
    fresh = lambda: copy.deepcopy(base)  # noqa: E731
    arms = {"plain": Arm(spec, fresh(), "plain", clock=clock),
            "real": Arm(spec, fresh(), "real CPU device", DeviceService(), calibration_dir=tmp, clock=clock)}
    m = fresh()
    whole = ModelHandle(m, spec.name, spec.kind, **spec.handle_kw)
    arms["sim"] = Arm(spec, m, "simulated, whole",
                      DeviceService(simulate={"cpu": whole.size_bytes + 4 * spec.working}, strict=True),
                      calibration_dir=tmp, handle=whole, clock=clock)
    residency = []
    for r in RESIDENCIES:
        m = fresh()
        handle = ModelHandle(m, name=spec.name, kind=spec.kind, **spec.handle_kw)
        n = len(handle.layout.units)
        slots = 1 if spec.kind == "sequence" else 2  # compute.async_offload = 1 (the default)
        if r == 0:
            k, mode, capacity = 0, "none", handle.size_bytes + 4 * spec.working
        else:
            # A partial placement keeps room for `slots` streamed copies, so at most n - slots - 1 resident.
            k = n if r == 1 else min(round(r * n), n - slots - 1)
            mode, capacity = "normal", capacity_for(handle, k, slots, spec.working)
        devices = DeviceService(simulate={"cpu": capacity}, strict=True)
        residency.append((r, k, Arm(spec, m, f"{r:.0%}", devices, mode, tmp, handle, clock=clock)))
    return arms, residency


WARMUPS = 2  # the first request places the weights; see "second request" in the notes


def measure(arms: list[Arm], repeats: int, warmups: int = WARMUPS) -> None:
    for _ in range(warmups):
        for arm in arms:
            arm(timed=False)
    for i in range(repeats):  # round robin, so drift and other load hit every arm alike
        gc.collect()
        for arm in arms[i % len(arms):] + arms[:i % len(arms)]:
            arm()


def _fmt_bytes(n: float) -> str:
    return f"{n / MB:.1f} MB" if n >= 0.1 * MB else f"{n / 1024:.0f} KB" if n >= 1024 else f"{n:.0f} B"


def _check(arm: Arm, reference: Any) -> str:
    if any(s.get("oom_retries") for s in arm.samples + arm.warmups):
        return "DIFFERENT (oom retry)"
    return "exact" if all(same(o, reference) for o in arm.outputs) else "DIFFERENT"


def bench_model(spec: Spec, repeats: int, tmp: str, clock, notes: list[str], warmups: int = WARMUPS) -> list[dict]:
    arms, residency = build_arms(spec, tmp, clock)
    measure(list(arms.values()) + [a for _, _, a in residency], repeats, warmups)
    plain, rows = arms["plain"], []
    reference = plain.outputs[0]
    for key, figure in (("real", "resident ÷ plain, real CPU device (headline)"),
                        ("sim", "resident ÷ plain, simulated strict device (counts allocations)")):
        arm = arms[key]
        hooks = max(s["hooks"] for s in arm.samples)
        acquires = sum(s["acquires"] for s in arm.samples)
        copied = statistics.median(s["h2d"] for s in arm.samples)
        streamed = sum(s["streamed"] for s in arm.samples)
        rows.append({
            "figure": figure, "model": spec.name, "setting": arm.label,
            "ratio": arm.median / plain.median,
            "time": f"{arm.median * 1e3:.0f} / {plain.median * 1e3:.0f} ms",
            "copied": f"{_fmt_bytes(copied)}/run",
            "runtime": f"hooks {hooks}, acquires {acquires}, streamed {_fmt_bytes(streamed)}",
            "check": _check(arm, reference),
        })
    baseline = arms["sim"]
    for r, k, arm in residency:
        h = arm.handle
        n = len(h.layout.units)
        loaded_units = {s["loaded"] - h.layout.fixed_bytes for s in arm.samples}
        minimum = (h.layout.unit_bytes - max(loaded_units)) * spec.calls  # one copy per streamed unit per call
        copied = statistics.median(s["h2d"] for s in arm.samples)
        sizes = {u.nbytes for u in h.layout.units}
        resident = round(max(loaded_units) / max(sizes)) if len(sizes) == 1 else None
        where = f"{resident}/{n} units" if resident is not None else f"{max(loaded_units) / MB:.1f} MB of units"
        if resident is not None and resident != k:
            where += f" (asked {k})"
        check = _check(arm, baseline.outputs[0])
        if not same(arm.outputs[0], reference):
            check += " (differs from plain)"
        rows.append({
            "figure": "streamed ÷ resident, simulated strict device", "model": spec.name,
            "setting": f"{r:.0%}: {where}",
            "ratio": arm.median / baseline.median,
            "time": f"{arm.median * 1e3:.0f} / {baseline.median * 1e3:.0f} ms",
            "copied": (f"{copied / minimum:.2f}x min ({_fmt_bytes(copied / spec.calls)}/{spec.per})" if minimum
                       else f"{_fmt_bytes(copied / spec.calls)}/{spec.per} (min 0)"),
            "runtime": f"hooks {h.hook_count}, acquires/{spec.per} "
                       f"{statistics.median(s['acquires'] for s in arm.samples) / spec.calls:.1f}",
            "check": check,
        })
        # Diagnostics that do not fit the table.
        if len(loaded_units) > 1:
            notes.append(f"{spec.name} {r:.0%}: resident bytes changed between timed runs: "
                         f"{sorted(b / MB for b in loaded_units)} MB")
        odd = [s for s in arm.samples if s["h2d"] != s["streamed"] or s["d2h"]]
        if odd:
            notes.append(f"{spec.name} {r:.0%}: {len(odd)} timed run(s) copied more than they streamed "
                         f"(h2d {odd[0]['h2d']} B, streamed {odd[0]['streamed']} B, d2h {odd[0]['d2h']} B)")
        second = arm.warmups[1] if len(arm.warmups) > 1 else None
        if second and second["h2d"] > second["streamed"]:
            notes.append(f"{spec.name} {r:.0%}: the second request re-placed "
                         f"{_fmt_bytes(second['h2d'] - second['streamed'])} of resident units "
                         f"(placement follows the run order learned from streamed units only)")
    return rows


# ---- host memory of loading ---------------------------------------------------------------------------
RSS_ARMS = {
    "naive": "float32 module, load_state_dict(load_file), .to(bf16)",
    "to_empty": "meta, to_empty, load_state_dict(load_file, assign=True), .to(bf16)",
    "load_module": "runtime.loading.load_module (params on meta, read into bf16)",
}


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(field + ":")), None)
    except OSError:
        return None


def _reset_peak() -> bool:
    """Linux: make VmHWM (this process's peak RSS) restart from the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss_child(arm: str, path: str, dims: dict) -> dict:
    """Runs in its own process: peak RSS above the RSS after imports, then a bit-exact check.

    The peak is VmHWM, reset after the imports. ru_maxrss is only the fallback: a child started by
    fork/vfork + exec inherits the parent's high-water mark in ru_maxrss (the bench's parent holds
    the models of the other figures), so it can read hundreds of MB too high."""
    from safetensors.torch import load_file

    d = TalkerDims(**dims)
    torch.empty(1, device="meta") + 1  # the meta device's one-time imports happen before the baseline
    gc.collect()
    baseline = _status_kb("VmRSS")
    anon0, file0 = _status_kb("RssAnon"), _status_kb("RssFile")
    source = "VmHWM" if baseline is not None and _reset_peak() else "ru_maxrss"
    if source == "ru_maxrss":
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if arm == "naive":
        model = Talker(d)
        model.load_state_dict(load_file(path))
        model = model.to(torch.bfloat16)
    elif arm == "to_empty":
        with torch.device("meta"):
            model = Talker(d)
        model.to_empty(device="cpu")
        model.load_state_dict(load_file(path), assign=True)
        model.inv_freq = rope_inv_freq(d.head_dim, d.rope_theta)  # to_empty left it uninitialised
        model = model.to(torch.bfloat16)
    elif arm == "load_module":
        model = load_module(lambda: Talker(d), path, torch.bfloat16)
    else:
        raise ValueError(arm)
    seconds = time.perf_counter() - t0
    read_peak = (lambda: _status_kb("VmHWM")) if source == "VmHWM" else \
        (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    load_peak = read_peak()
    # Touch every weight once (as the first inference or the first placement on a GPU would):
    # safetensors' load_file maps the file copy-on-write and reads pages only when they are used.
    for t in model.state_dict().values():
        torch.sum(t)
    peak = read_peak()
    anon, file = _status_kb("RssAnon"), _status_kb("RssFile")
    anon, file = (anon - anon0, file - file0) if None not in (anon, file, anon0, file0) else (None, None)
    # Checked after the peak was read: loading the file again would raise it.
    reference = load_file(path)
    state = model.state_dict()
    inv = rope_inv_freq(d.head_dim, d.rope_theta).to(torch.bfloat16)
    exact = (state.keys() == reference.keys() and all(same(state[k], v) for k, v in reference.items())
             and same(model.inv_freq, inv))
    return {"baseline_kb": baseline, "load_peak_kb": load_peak, "peak_kb": peak, "source": source,
            "anon_kb": anon, "file_kb": file, "seconds": seconds, "exact": exact}


def write_checkpoint(d: TalkerDims, path: str) -> int:
    from safetensors.torch import save_file

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in Talker(d).state_dict().items()}
    g = torch.Generator().manual_seed(3)
    state = {k: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16) if len(s) > 1
             else torch.ones(s, dtype=torch.bfloat16) for k, s in shapes.items()}
    save_file(state, path)
    del state
    gc.collect()
    return os.path.getsize(path)


def bench_rss(d: TalkerDims, threads: int, tmp: str, parallel: bool = False) -> Callable[[], list[dict]]:
    """Each arm in its own process. With `parallel` all start now, alongside whatever the caller does
    next (peaks are per process; load times suffer); the returned function waits and gives the rows."""
    path = os.path.join(tmp, "talker-bf16.safetensors")
    size = write_checkpoint(d, path)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))

    def start(arm: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rss-arm", arm, path,
                                 json.dumps(asdict(d)), "--threads", str(threads)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def finish(arm: str, proc: subprocess.Popen) -> dict:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"RSS arm {arm} failed:\n{err[-4000:]}")
        return json.loads(out.strip().splitlines()[-1])

    procs = {arm: start(arm) for arm in RSS_ARMS} if parallel else {}
    return lambda: _rss_rows(procs, start, finish, size)


def _rss_rows(procs: dict, start, finish, size: int) -> list[dict]:
    results = {arm: finish(arm, procs[arm] if arm in procs else start(arm)) for arm in RSS_ARMS}
    rows = []
    for arm, label in RSS_ARMS.items():
        res = results[arm]
        extra = (res["peak_kb"] - res["baseline_kb"]) * 1024
        load_only = (res["load_peak_kb"] - res["baseline_kb"]) * 1024
        split = ""
        if res["anon_kb"] is not None:
            split = f"; then +{res['anon_kb'] / 1024:.0f} MB anon, +{res['file_kb'] / 1024:.0f} MB file-backed"
        rows.append({
            "figure": "host peak RSS ÷ checkpoint bytes (bf16)", "model": "talker",
            "setting": label, "ratio": extra / size, "time": f"{res['seconds'] * 1e3:.0f} ms",
            "copied": f"+{_fmt_bytes(extra)} / {_fmt_bytes(size)} (load alone +{_fmt_bytes(load_only)})",
            "runtime": f"own process, {res['source']}{split}",
            "check": "exact" if res["exact"] else "DIFFERENT",
        })
    return rows


# ---- the table -------------------------------------------------------------------------------------------
COLUMNS = (("figure", "figure"), ("model", "model"), ("setting", "setting"), ("ratio", "ratio"),
           ("time", "time (median)"), ("copied", "bytes copied / RSS"), ("runtime", "runtime"),
           ("check", "output"))


def format_table(rows: list[dict]) -> str:
    cells = [[h for _, h in COLUMNS]]
    for row in rows:
        cells.append([f"{row[k]:.2f}" if k == "ratio" else str(row[k]) for k, _ in COLUMNS])
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 1 repeat (used by the test suite)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per arm (default 5, quick 1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1: on a small shared machine more threads wait "
                             "for a scheduler slice in every parallel op)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: process CPU time (default; robust to other load), wall: perf_counter")
    parser.add_argument("--rss-arm", nargs=2, metavar=("ARM", "CHECKPOINT"), help=argparse.SUPPRESS)
    parser.add_argument("rss_dims", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        if args.rss_arm:
            print(json.dumps(_rss_child(args.rss_arm[0], args.rss_arm[1], json.loads(args.rss_dims))))
            return []
        return _run(args)
    finally:
        torch.set_num_threads(previous_threads)


def _run(args) -> list[dict]:
    quick = args.quick
    repeats = args.repeats or (1 if quick else 5)
    warmups = 1 if quick else WARMUPS
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    # Quick shapes have sub-megabyte layers: let them be units anyway (the default rule wants 1 MB).
    handle_kw = {"min_unit_bytes": 128 << 10} if quick else {}
    if quick:
        specs = [talker_spec(TALKER_QUICK, 8, 4, handle_kw), dit_spec(DIT_QUICK, 4, handle_kw)]
    else:
        specs = [talker_spec(TALKER, 64, 16, handle_kw), dit_spec(DIT, 8, handle_kw)]
    rss_dims = RSS_TALKER_QUICK if quick else RSS_TALKER
    print(f"mizuoto runtime bench: torch {torch.__version__}, torch.set_num_threads({torch.get_num_threads()}), "
          f"{args.clock} clock ({'process CPU time' if args.clock == 'cpu' else 'wall time'}), median of "
          f"{repeats} run(s) after {warmups} warm-up(s), round robin; float32 compute; "
          f"{'QUICK shapes' if quick else 'full shapes'}")
    for spec in specs:
        print(f"  {spec.name} ({spec.kind}): {spec.dims}")
    print(f"  scaled from: talker {QWEN3_TTS_TALKER.text()} (Qwen3-TTS 0.6B); "
          f"dit {F5_TTS_BASE.text(shape_only=True)} (F5-TTS base)")
    print(f"  RSS checkpoint: talker {rss_dims.text()}, random bf16 weights, safetensors")
    rows: list[dict] = []
    notes: list[str] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mizuoto-bench-") as tmp:
        # Quick: the RSS processes run alongside the timed figures (their times do not matter there).
        rss = bench_rss(rss_dims, args.threads, tmp, parallel=True) if quick else None
        for spec in specs:
            rows += bench_model(spec, repeats, tmp, clock, notes, warmups)
        rows += (rss or bench_rss(rss_dims, args.threads, tmp))()
    order = ["resident ÷ plain, real", "resident ÷ plain, simulated", "streamed", "host"]
    rows.sort(key=lambda r: next(i for i, o in enumerate(order) if r["figure"].startswith(o)))
    print()
    print(format_table(rows))
    for note in notes:
        print(f"note: {note}")
    print(f"({time.perf_counter() - t0:.0f} s wall)")
    return rows


if __name__ == "__main__":
    main()

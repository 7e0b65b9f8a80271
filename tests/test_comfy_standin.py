"""Conformance of the in-repo stand-in (tests/comfy_standin) with ComfyUI's real memory API.

Every scenario runs against the stand-in and, when COMFYUI_PATH points at a ComfyUI checkout that
this Python can import, against the real `comfy.model_management` + `comfy.model_patcher`. A
scenario writes a trace: each call ComfyUI makes on our recording patchers (duck-typed, like the
bridge's, or ModelPatchers around plain nn.Modules), the loaded sizes, the order of
`current_loaded_models` and ComfyUI's own log lines. The traces are checked against the expected
text (what ComfyUI 0.33, commit 783545f6, did), so CI without ComfyUI still guards the stand-in,
and, with ComfyUI, stand-in and real traces are compared exactly (unrounded numbers).

Run with ComfyUI:  COMFYUI_PATH=/path/to/ComfyUI <ComfyUI's python> -m pytest tests/test_comfy_standin.py
(that Python needs this package installed, e.g. `pip install -e . --no-deps`, plus pytest).

The device is the fake `cpu:0` with 8 "GiB"; sizes are ComfyUI's arithmetic scaled by 1/64
("GiB" = 16 MiB), so the 0.8 GiB + reserve of `minimum_inference_memory` is patched to match.
"""
from __future__ import annotations

import gc
import importlib
import logging
import math
import os
import sys
import textwrap
import uuid
import weakref

import pytest
import torch
from torch import nn

GiB = (1 << 30) // 64
FAKE = torch.device("cpu", 0)  # != torch.device("cpu"), so ComfyUI frees memory for it
HOST = torch.device("cpu")
_real: dict = {}


def _standin():
    from comfy_standin import model_management, model_patcher
    return model_management, model_patcher.ModelPatcher


def _comfyui():
    if "mm" not in _real:
        path = os.environ.get("COMFYUI_PATH")
        if not path:
            _real["skip"] = "COMFYUI_PATH is not set: only the stand-in runs (set it to a ComfyUI checkout " \
                            "and use ComfyUI's Python to compare against the real API)"
        else:
            added = path not in sys.path
            if added:
                sys.path.append(path)
            try:
                import comfy.cli_args
                comfy.cli_args.args.cpu = True  # before model_management is imported: no CUDA needed
                _real["mm"] = importlib.import_module("comfy.model_management")
                _real["patcher"] = importlib.import_module("comfy.model_patcher").ModelPatcher
            except Exception as e:  # e.g. this Python lacks ComfyUI's requirements
                _real["skip"] = f"ComfyUI at {path} cannot be imported by {sys.executable}: {e!r}"
                _real["mm"] = None
                for mod in [n for n in sys.modules if n == "comfy" or n.startswith("comfy.")]:
                    del sys.modules[mod]
                if added:
                    sys.path.remove(path)
        _real.setdefault("mm", None)
    if _real["mm"] is None:
        pytest.skip(_real["skip"])
    return _real["mm"], _real["patcher"]


BACKENDS = {"standin": _standin, "comfyui": _comfyui}


# ---- the world: a backend with the fake device installed, and the trace ---------------------------
def _num(x):
    if x >= 1e30:
        return "all"
    if abs(x) < 1:
        return f"{x}B"
    return f"{x / GiB:.3f}"


class World:
    def __init__(self, mm, patcher_cls, mp: pytest.MonkeyPatch, total_gib=8):
        self.mm, self.patcher_cls, self.mp, self.total = mm, patcher_cls, mp, total_gib * GiB
        self.patchers = weakref.WeakSet()  # everything resident on FAKE, registered or not
        self.keep = []  # patchers that must outlive the scenario (their __del__ would write)
        self.raw, self.lines, self.closed = [], [], False
        orig_is_cpu = mm.is_device_cpu

        def free(dev=None, torch_free_too=False):
            f = self.total - sum(p.loaded_size() for p in self.patchers if p.load_device == FAKE)
            return (f, 0) if torch_free_too else f

        def total(dev=None, torch_total_too=False):
            return (self.total, 0) if torch_total_too else self.total

        mp.setattr(mm, "get_free_memory", free)
        mp.setattr(mm, "get_total_memory", total)
        mp.setattr(mm, "get_all_torch_devices", lambda exclude_current=False: [] if exclude_current else [FAKE])
        mp.setattr(mm, "is_device_cpu", lambda d: orig_is_cpu(d) and d != FAKE)
        mp.setattr(mm, "vram_state", mm.VRAMState.NORMAL_VRAM)
        mp.setattr(mm, "MIN_WEIGHT_MEMORY_RATIO", 0.4)
        mp.setattr(mm, "EXTRA_RESERVED_VRAM", int(0.4 * GiB))
        mp.setattr(mm, "minimum_inference_memory", lambda: 0.8 * GiB + mm.extra_reserved_memory())

    def log(self, *event):
        """One trace line: a name, then numbers (sizes in bytes) or words."""
        if self.closed:
            return
        self.raw.append(event)
        self.lines.append(" ".join(_num(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)
                                   for x in event))

    def state(self, tag):
        rows = [f"{name(e.model)}={_num(e.model.loaded_size()) if e.model else '-'}"
                for e in self.mm.current_loaded_models]
        self.log(f"[{tag}]", "list:", " ".join(rows) or "empty", "free:", self.mm.get_free_memory(FAKE))

    def load(self, models, **kw):
        self.log("load_models_gpu", "[" + ",".join(name(m) for m in models) + "]",
                 *(f"{k}={v if isinstance(v, bool) else _num(v)}" for k, v in kw.items()))
        self.mm.load_models_gpu(models, **kw)

    def text(self):
        return "\n".join(self.lines)


def name(patcher):
    return "<dead>" if patcher is None else getattr(patcher, "name", "?")


class _ComfyLog(logging.Handler):
    """ComfyUI's own INFO/WARNING lines from model_management go into the trace."""

    def __init__(self, world):
        super().__init__(logging.INFO)
        self.world = world

    def emit(self, record):
        if record.module == "model_management":
            self.world.log(f"log {record.levelname}:", record.getMessage())


def run(backend, scenario, mp):
    mm, patcher_cls = BACKENDS[backend]()
    mm.unload_all_models()
    mm.current_loaded_models.clear()
    world = World(mm, patcher_cls, mp, **getattr(scenario, "world", {}))
    root, handler = logging.getLogger(), _ComfyLog(world)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        scenario(world)
    finally:
        world.closed = True
        root.removeHandler(handler)
        root.setLevel(level)
        mm.unload_all_models()
        mm.current_loaded_models.clear()
        mm.interrupt_current_processing(False)
        world.keep.clear()
    return world


# ---- recording patchers -----------------------------------------------------------------------------
class Weights(nn.Module):
    """What a duck patcher exposes as `.model` (ComfyUI weak-references it)."""


class Duck:
    """A duck-typed patcher with byte accounting only, like the bridge's ComponentPatcher.

    mode: "exact" frees what it is asked (rounded up), "stingy" half of it, "busy" nothing and
    keeps its bytes on detach (a running phase). cap: the most it accepts to load."""

    def __init__(self, w: World, name, gib, mode="exact", cap=None, load_device=FAKE, model=None):
        self.w, self.name, self.size, self.mode, self.cap = w, name, int(gib * GiB), mode, cap
        self.loaded = 0
        self.model = Weights() if model is None else model
        self.load_device, self.offload_device = load_device, HOST
        self.parent = None
        self.clone_base_uuid = uuid.uuid4()
        self.patch_models = []
        w.patchers.add(self)

    def model_patches_models(self):
        return list(self.patch_models)

    def model_patches_to(self, device_or_dtype):
        pass

    def model_dtype(self):
        return torch.float16

    def is_dynamic(self):
        return False

    def is_clone(self, other):
        return getattr(other, "model", None) is self.model

    def model_size(self):
        return self.size

    def loaded_size(self):
        return self.loaded

    def lowvram_patch_counter(self):
        return 0

    def loaded_ram_size(self):
        return 0

    def current_loaded_device(self):
        return self.load_device if self.loaded else self.offload_device

    def partially_load(self, device, extra_memory, force_patch_weights=False):
        room = self.size if self.cap is None else int(self.cap * GiB)
        take = int(max(-self.loaded, min(extra_memory, room - self.loaded)))
        self.loaded += take
        self.w.log(f"{self.name}.partially_load", extra_memory, "->", take)
        return take

    def partially_unload(self, device_to, memory_to_free):
        want = {"exact": math.ceil(memory_to_free), "stingy": int(memory_to_free // 2), "busy": 0}[self.mode]
        freed = min(self.loaded, want)
        self.loaded -= freed
        self.w.log(f"{self.name}.partially_unload", memory_to_free, "->", freed)
        return freed

    def detach(self, unpatch_all=True):
        self.w.log(f"{self.name}.detach(unpatch_all={unpatch_all})")
        if unpatch_all and self.mode != "busy":
            self.loaded = 0
        return self.model


def expect(text, **world):
    """Attach the expected trace (ComfyUI 0.33) to a scenario."""
    def wrap(fn):
        fn.expected, fn.world = textwrap.dedent(text).strip(), world
        return fn
    return wrap


# ---- scenarios with duck-typed patchers ---------------------------------------------------------------
@expect("""
    load_models_gpu [A] memory_required=1.000 minimum_memory_required=0.500
    log INFO: Requested to load Weights
    A.partially_load 6.800 -> 6.000
    [A] list: A=6.000 free: 2.000
    load_models_gpu [B] memory_required=1.000 minimum_memory_required=0.500
    log INFO: Requested to load Weights
    A.partially_unload 4.900 -> 4.900
    B.partially_load 5.700 -> 5.000
    [B] list: B=5.000 A=1.100 free: 1.900
    load_models_gpu [A] memory_required=1.000
    A.detach(unpatch_all=False)
    B.partially_unload 4.890 -> 4.890
    A.partially_load 5.390 -> 4.900
    [A again] list: A=6.000 B=0.110 free: 1.890
    load_models_gpu [C]
    log INFO: Requested to load Weights
    B.detach(unpatch_all=True)
    A.detach(unpatch_all=True)
    C.partially_load 6.800 -> 6.800
    [C] list: C=6.800 free: 1.200
    C.detach(unpatch_all=True)
    [unload_all_models] list: empty free: 8.000
""")
def evict_and_reload(w):
    """A second model partially evicts the first; re-requesting the first pops and detach(False)s it,
    then the other is asked; a model that does not fit detaches everyone; unload_all detaches."""
    a, b = Duck(w, "A", 6), Duck(w, "B", 5)
    w.load([a], memory_required=1 * GiB, minimum_memory_required=GiB // 2)
    w.state("A")
    w.load([b], memory_required=1 * GiB, minimum_memory_required=GiB // 2)
    w.state("B")
    w.load([a], memory_required=1 * GiB)
    w.state("A again")
    c = Duck(w, "C", 7.5)
    w.load([c])
    w.state("C")
    w.mm.unload_all_models()
    w.state("unload_all_models")


@expect("""
    load_models_gpu [E]
    log INFO: Requested to load Weights
    E.partially_load 6.800 -> 3.000
    load_models_gpu [S]
    log INFO: Requested to load Weights
    S.partially_load 3.800 -> 3.000
    [E, S] list: S=3.000 E=3.000 free: 2.000
    load_models_gpu [C]
    log INFO: Requested to load Weights
    S.partially_unload 1.400 -> 0.700
    S.detach(unpatch_all=True)
    C.partially_load 3.800 -> 2.000
    [C] list: C=2.000 E=3.000 free: 3.000
    load_models_gpu [D]
    log INFO: Requested to load Weights
    C.detach(unpatch_all=True)
    E.partially_unload 1.150 -> 1.150
    D.partially_load 4.950 -> 4.500
    [D] list: D=4.500 E=1.850 free: 1.650
""")
def freed_less_than_asked(w):
    """An entry stays registered only if partially_unload freed at least what was asked."""
    e, s, c, d = Duck(w, "E", 3), Duck(w, "S", 3, mode="stingy"), Duck(w, "C", 2), Duck(w, "D", 4.5)
    w.load([e])
    w.load([s])
    w.state("E, S")
    w.load([c])  # S is asked first (most recent) and frees too little: detached
    w.state("C")
    w.load([d])  # C (smaller) goes whole, E frees exactly what it is asked and stays
    w.state("D")


@expect("""
    load_models_gpu [K]
    log INFO: Requested to load Weights
    K.partially_load 14.800 -> 1.000
    load_models_gpu [P]
    log INFO: Requested to load Weights
    P.partially_load 13.800 -> 1.000
    load_models_gpu [Q]
    log INFO: Requested to load Weights
    Q.partially_load 12.800 -> 1.500
    load_models_gpu [R]
    log INFO: Requested to load Weights
    R.partially_load 11.300 -> 1.500
    load_models_gpu [T1]
    log INFO: Requested to load Weights
    T1.partially_load 9.800 -> 1.000
    load_models_gpu [T2]
    log INFO: Requested to load Weights
    T2.partially_load 8.800 -> 1.000
    [all] list: T2=1.000 T1=1.000 R=1.500 Q=1.500 P=1.000 K=1.000 free: 9.000
    loaded_models(only_currently_used=True): ['T2']
    load_models_gpu [K]
    K.detach(unpatch_all=False)
    K.partially_load 7.800 -> 0B
    loaded_models(only_currently_used=True): ['K']
    free_memory(device=None) -> []
    loaded_models(only_currently_used=True): ['K']
    loaded_models(): ['K', 'T2', 'T1', 'R', 'Q', 'P']
    P.detach(unpatch_all=True)
    T2.detach(unpatch_all=True)
    T1.detach(unpatch_all=True)
    Q.detach(unpatch_all=True)
    R.detach(unpatch_all=True)
    free_memory(16, keep K) -> ['P', 'Q', 'R', 'T1', 'T2']
    [after] list: K=1.000 free: 15.000
""", total_gib=16)
def candidate_order_and_keep_loaded(w):
    """free_memory: most offloaded first, then fewer references, then smaller, then more recent;
    keep_loaded entries are neither asked nor marked unused; device=None only marks."""
    k, p, q, r = Duck(w, "K", 1), Duck(w, "P", 2, cap=1), Duck(w, "Q", 1.5), Duck(w, "R", 1.5)
    t1, t2 = Duck(w, "T1", 1), Duck(w, "T2", 1)
    more_refs = [r, r]  # noqa: F841  (R has more references than Q)
    for x in (k, p, q, r, t1, t2):
        w.load([x])
    del x  # T2 would have one more reference than T1
    w.state("all")
    w.log("loaded_models(only_currently_used=True):", [name(m) for m in w.mm.loaded_models(True)])
    w.load([k])  # every load marks the other models of the device as not used
    w.log("loaded_models(only_currently_used=True):", [name(m) for m in w.mm.loaded_models(True)])
    keep = [e for e in w.mm.current_loaded_models if e.model is k]
    w.log("free_memory(device=None) ->", [name(e.model) for e in w.mm.free_memory(1 * GiB, None, keep_loaded=keep)])
    w.log("loaded_models(only_currently_used=True):", [name(m) for m in w.mm.loaded_models(True)])
    w.log("loaded_models():", [name(m) for m in w.mm.loaded_models()])
    gone = w.mm.free_memory(16 * GiB, FAKE, keep_loaded=keep)
    w.log("free_memory(16, keep K) ->", [name(e.model) for e in gone])
    w.state("after")


@expect("""
    load_models_gpu [A,B]
    log INFO: Requested to load Weights
    log INFO: Requested to load Weights
    log INFO: Requested to load Weights
    B.partially_load 6.800 -> 1.000
    C.partially_load 5.800 -> 1.000
    A.partially_load 4.800 -> 1.000
    [A,B] list: A=1.000 C=1.000 B=1.000 free: 5.000
    load_models_gpu [A2]
    log INFO: Requested to load Weights
    A.detach(unpatch_all=False)
    A2.partially_load 3.800 -> 1.000
    [A2 (clone of A)] list: A2=1.000 C=1.000 B=1.000 free: 4.000
    load_models_gpu [B]
    B.detach(unpatch_all=False)
    B.partially_load 2.800 -> 0B
    [B again] list: B=1.000 A2=1.000 C=1.000 free: 4.000
""")
def patch_models_and_clones(w):
    """The list is deduplicated with each model's model_patches_models(), then served in reverse;
    loading a clone (same .model) pops the registered original with detach(unpatch_all=False)."""
    a, b, c = Duck(w, "A", 1), Duck(w, "B", 1), Duck(w, "C", 1)
    a.patch_models = [c, b]
    w.load([a, b])
    w.state("A,B")
    a2 = Duck(w, "A2", 1, model=a.model)
    w.load([a2])
    w.state("A2 (clone of A)")
    w.load([b])
    w.state("B again")


@expect("""
    load_models_gpu [X[normal]] memory_required=1.000
    log INFO: Requested to load Weights
    X[normal].partially_load 6.600 -> 3.000
    X[normal].detach(unpatch_all=True)
    load_models_gpu [X[low]] memory_required=1.000
    log INFO: Requested to load Weights
    X[low].partially_load 6.600 -> 3.000
    X[low].detach(unpatch_all=True)
    load_models_gpu [X[no_vram]] memory_required=1.000
    log INFO: Requested to load Weights
    X[no_vram].partially_load 0.1B -> 0B
    X[no_vram].detach(unpatch_all=True)
    load_models_gpu [X[high_vram]] memory_required=1.000
    log INFO: Requested to load Weights
    X[high_vram].partially_load all -> 3.000
    X[high_vram].detach(unpatch_all=True)
    load_models_gpu [X[disabled]] memory_required=1.000
    log INFO: Requested to load Weights
    X[disabled].partially_load all -> 3.000
    X[disabled].detach(unpatch_all=True)
    load_models_gpu [X[shared]] memory_required=1.000
    log INFO: Requested to load Weights
    X[shared].partially_load all -> 3.000
    X[shared].detach(unpatch_all=True)
    load_models_gpu [X[force_full_load]] memory_required=1.000 force_full_load=True
    log INFO: Requested to load Weights
    X[force_full_load].partially_load all -> 3.000
    X[force_full_load].detach(unpatch_all=True)
    load_models_gpu [X[host device]] memory_required=1.000
    log INFO: Requested to load Weights
    X[host device].partially_load all -> 3.000
    load_models_gpu [X[tight, ratio 0.4]] memory_required=1.000
    log INFO: Requested to load Weights
    X[tight, ratio 0.4].partially_load 0.300 -> 0.300
    X[tight, ratio 0.4].detach(unpatch_all=True)
    load_models_gpu [X[tight, ratio 0.0]] memory_required=1.000
    log INFO: Requested to load Weights
    X[tight, ratio 0.0].partially_load 0.100 -> 0.100
    X[tight, ratio 0.0].detach(unpatch_all=True)
    load_models_gpu [X[nothing left]] memory_required=1.000
    log INFO: Requested to load Weights
    log INFO: 0 models unloaded.
    X[nothing left].partially_load 0.1B -> 0B
    X[nothing left].detach(unpatch_all=True)
    load_models_gpu [X[resident, again]] memory_required=1.000
    log INFO: Requested to load Weights
    X[resident, again].partially_load 6.600 -> 3.000
    load_models_gpu [X[resident, again]] memory_required=1.000
    X[resident, again].detach(unpatch_all=False)
    log INFO: 0 models unloaded.
    X[resident, again].partially_load -0.900 -> -0.900
    X[resident, again].detach(unpatch_all=True)
""")
def budgets(w):
    """The extra memory load_models_gpu hands to partially_load in each mode."""
    mm = w.mm

    def one(tag, gib=3, external=0, again=False, load_device=FAKE, **kw):
        x, ext = Duck(w, f"X[{tag}]", gib, load_device=load_device), Duck(w, "ext", 8)
        if again:
            w.load([x], memory_required=1 * GiB)
        ext.loaded = int(external * GiB)  # bytes on the device that ComfyUI does not manage
        w.load([x], memory_required=1 * GiB, **kw)
        mm.unload_all_models()

    one("normal")
    w.mp.setattr(mm, "vram_state", mm.VRAMState.LOW_VRAM)
    one("low")
    w.mp.setattr(mm, "vram_state", mm.VRAMState.NO_VRAM)
    one("no_vram")
    for state in ("HIGH_VRAM", "DISABLED", "SHARED"):
        w.mp.setattr(mm, "vram_state", mm.VRAMState[state])
        one(state.lower())
    w.mp.setattr(mm, "vram_state", mm.VRAMState.NORMAL_VRAM)
    one("force_full_load", force_full_load=True)
    one("host device", load_device=HOST)  # not on the fake device: unload_all_models leaves it
    one("tight, ratio 0.4", external=6.5)
    w.mp.setattr(mm, "MIN_WEIGHT_MEMORY_RATIO", 0.0)
    one("tight, ratio 0.0", external=6.5)
    w.mp.setattr(mm, "MIN_WEIGHT_MEMORY_RATIO", 0.4)
    one("nothing left", external=7)
    one("resident, again", external=4.5, again=True)


@expect("""
    load_models_gpu [B]
    log INFO: Requested to load Weights
    B.partially_load 6.800 -> 1.000
    load_models_gpu [A]
    log INFO: Requested to load Weights
    A.partially_load 5.800 -> 5.000
    [B, A] list: A=5.000 B=1.000 free: 2.000
    load_models_gpu [B] minimum_memory_required=3.000
    B.detach(unpatch_all=False)
    A.partially_unload 1.400 -> 1.400
    log INFO: 0 models unloaded.
    B.partially_load 0.760 -> 0B
    [B with minimum 3] list: B=1.000 A=3.600 free: 3.400
""")
def minimum_second_pass(w):
    """minimum_memory_required above memory_required triggers a second free_memory."""
    b, a = Duck(w, "B", 1), Duck(w, "A", 5)
    w.load([b])
    w.load([a])
    w.state("B, A")
    w.load([b], minimum_memory_required=3 * GiB)
    w.state("B with minimum 3")


@expect("""
    load_models_gpu [A]
    log INFO: Requested to load Weights
    A.partially_load 6.800 -> 2.000
    [A's patcher dropped] list: <dead>=- free: 8.000
    loaded_models(): ['<dead>']
    load_models_gpu [B]
    log INFO: Potential memory leak detected with model Weights, doing a full garbage collect, for maximum performance avoid circular references in the model code.
    log WARNING: WARNING, memory leak with model Weights. Please make sure it is not being referenced from somewhere.
    log INFO: Requested to load Weights
    log INFO: Potential memory leak detected with model Weights, doing a full garbage collect, for maximum performance avoid circular references in the model code.
    log WARNING: WARNING, memory leak with model Weights. Please make sure it is not being referenced from somewhere.
    B.partially_load 6.800 -> 6.800
    [B] list: B=6.800 <dead>=- free: 1.200
    [A's module dropped] list: B=6.800 free: 1.200
""")
def leaks_and_cleanup(w):
    """A patcher dropped while its module lives is a 'potential memory leak' (full gc, warnings on
    every later call, entry kept and never evicted); the module dying removes the entry."""
    a = Duck(w, "A", 2)
    module = a.model
    w.load([a])
    del a
    w.state("A's patcher dropped")
    w.log("loaded_models():", [name(m) for m in w.mm.loaded_models()])
    b = Duck(w, "B", 7)
    w.load([b])
    w.state("B")
    del module
    gc.collect()
    w.state("A's module dropped")


@expect("""
    interrupted: False
    interrupted: True
    raised InterruptProcessingException BaseException: True Exception: False
    interrupted: False
""")
def interrupt(w):
    mm = w.mm
    w.log("interrupted:", mm.processing_interrupted())
    mm.throw_exception_if_processing_interrupted()
    mm.interrupt_current_processing()
    w.log("interrupted:", mm.processing_interrupted())
    try:
        try:
            mm.throw_exception_if_processing_interrupted()
        except Exception:
            w.log("caught as Exception")
    except mm.InterruptProcessingException as e:
        w.log("raised", type(e).__name__, "BaseException:", isinstance(e, BaseException),
              "Exception:", isinstance(e, Exception))
    w.log("interrupted:", mm.processing_interrupted())


# ---- scenarios with ModelPatcher around plain nn.Modules -----------------------------------------------
def _net(gib):
    """gib "GiB" of 1 MiB Linear layers (16 per GiB), without touching memory."""
    with torch.device("meta"):
        net = nn.Sequential(*[nn.Linear(512, 512, bias=False) for _ in range(int(gib * 16))])
    return net.to_empty(device="cpu")


class Mixed(nn.Module):
    """Units of 1, 2 and 4 MiB, and a parent with its own parameter (never a unit of its own)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(1 << 18))
        self.layers = nn.Sequential(*[nn.Linear(512, 512 * k, bias=False) for k in (1, 4, 2, 1, 2, 4, 1, 4, 2)])


def _patchers(w, **nets):
    names = weakref.WeakKeyDictionary()
    cls = w.patcher_cls
    for fn in ("partially_load", "partially_unload", "detach"):
        orig = getattr(cls, fn)

        def traced(self, *args, _orig=orig, _fn=fn, **kw):
            out = _orig(self, *args, **kw)
            if self in names:
                shown = [a for a in args if not isinstance(a, torch.device)] + list(kw.values())
                w.log(f"{names[self]}.{_fn}", *shown, "->", "self" if out is self.model else out)
            return out
        w.mp.setattr(cls, fn, traced)
    out = []
    for key, net in nets.items():
        p = cls(net, load_device=FAKE, offload_device=HOST)
        p.name = key
        names[p] = key
        w.patchers.add(p)
        w.keep.append(p)
        out.append(p)
    return out


def _resident(p):
    units = [m for m in p.model.modules() if getattr(m, "comfy_patched_weights", False) is True]
    return sum(sum(t.nbytes for t in m.state_dict().values()) for m in units)


def _show(w, tag, ps):
    w.state(tag)
    for p in ps:
        w.log(f"  {p.name}: loaded", p.loaded_size(), "of", p.model_size(), "units on device", _resident(p),
              "lowvram", p.model.model_lowvram, "at", p.current_loaded_device())


@expect("""
    load_models_gpu [A] memory_required=0.500
    log INFO: Requested to load Sequential
    A.partially_load 6.800 False -> 6.000
    [A] list: A=6.000 free: 2.000
      A: loaded 6.000 of 6.000 units on device 6.000 lowvram False at cpu:0
      B: loaded 0B of 5.000 units on device 0B lowvram False at cpu
      C: loaded 0B of 7.500 units on device 0B lowvram False at cpu
    load_models_gpu [B] memory_required=0.500
    log INFO: Requested to load Sequential
    A.partially_unload 4.700 -> 4.812
    B.partially_load 5.613 False -> 5.000
    [B] list: B=5.000 A=1.188 free: 1.812
      A: loaded 1.188 of 6.000 units on device 1.188 lowvram True at cpu:0
      B: loaded 5.000 of 5.000 units on device 5.000 lowvram False at cpu:0
      C: loaded 0B of 7.500 units on device 0B lowvram False at cpu
    load_models_gpu [A] memory_required=0.500
    A.detach False -> self
    B.partially_unload 4.681 -> 4.750
    A.partially_load 5.363 False -> 4.812
    [A again] list: A=6.000 B=0.250 free: 1.750
      A: loaded 6.000 of 6.000 units on device 6.000 lowvram False at cpu:0
      B: loaded 0.250 of 5.000 units on device 0.250 lowvram True at cpu:0
      C: loaded 0B of 7.500 units on device 0B lowvram False at cpu
    load_models_gpu [C] memory_required=0.500
    log INFO: Requested to load Sequential
    B.detach True -> self
    A.detach True -> self
    C.partially_load 6.800 False -> 6.688
    [C] list: C=6.688 free: 1.312
      A: loaded 0B of 6.000 units on device 0B lowvram False at cpu
      B: loaded 0B of 5.000 units on device 0B lowvram False at cpu
      C: loaded 6.688 of 7.500 units on device 6.688 lowvram False at cpu:0
    load_models_gpu [C] memory_required=0.500
    C.detach False -> self
    C.partially_load 0.113 False -> 0B
    [C again] list: C=6.688 free: 1.312
      A: loaded 0B of 6.000 units on device 0B lowvram False at cpu
      B: loaded 0B of 5.000 units on device 0B lowvram False at cpu
      C: loaded 6.688 of 7.500 units on device 6.688 lowvram False at cpu:0
    C.partially_load 1.000 -> 0B
    [C offered 1 more] list: C=6.688 free: 1.312
      A: loaded 0B of 6.000 units on device 0B lowvram False at cpu
      B: loaded 0B of 5.000 units on device 0B lowvram False at cpu
      C: loaded 6.688 of 7.500 units on device 6.688 lowvram False at cpu:0
    C.detach True -> self
    [unload_all_models] list: empty free: 8.000
      A: loaded 0B of 6.000 units on device 0B lowvram False at cpu
      B: loaded 0B of 5.000 units on device 0B lowvram False at cpu
      C: loaded 0B of 7.500 units on device 0B lowvram False at cpu
""")
def model_patcher_plain(w):
    """Real ModelPatcher accounting with plain Linear layers: whole-unit moves, smallest-first
    partial unloads that free more than asked, partial loads that are never extended."""
    a, b, c = _patchers(w, A=_net(6), B=_net(5), C=_net(7.5))
    for step, p in (("A", a), ("B", b), ("A again", a), ("C", c), ("C again", c)):
        w.load([p], memory_required=GiB // 2)
        _show(w, step, (a, b, c))
    c.partially_load(FAKE, 1 * GiB)  # room is offered, yet a plain partial load is not extended
    _show(w, "C offered 1 more", (a, b, c))
    w.mm.unload_all_models()
    _show(w, "unload_all_models", (a, b, c))


@expect("""
    load_models_gpu [M] force_full_load=True
    log INFO: Requested to load Mixed
    M.partially_load all False -> 1.375
    [M full] list: M=1.375 free: 0.625
      M: loaded 1.375 of 1.375 units on device 1.312 lowvram False at cpu:0
      N: loaded 0B of 0.250 units on device 0B lowvram False at cpu
    M.partially_unload 0.500 -> 0.812
    [M asked for 0.5] list: M=0.562 free: 1.438
      M: loaded 0.562 of 1.375 units on device 0.500 lowvram True at cpu:0
      N: loaded 0B of 0.250 units on device 0B lowvram False at cpu
    load_models_gpu [N]
    log INFO: Requested to load Sequential
    M.partially_unload 0.037 -> 0.250
    N.partially_load 0.488 False -> 0.250
    [N] list: N=0.250 M=0.312 free: 1.438
      M: loaded 0.312 of 1.375 units on device 0.250 lowvram True at cpu:0
      N: loaded 0.250 of 0.250 units on device 0.250 lowvram False at cpu:0
    load_models_gpu [M] memory_required=0.125
    M.detach False -> self
    N.detach True -> self
    M.partially_load 0.488 False -> 0.188
    [M again] list: M=0.500 free: 1.500
      M: loaded 0.500 of 1.375 units on device 0.500 lowvram False at cpu:0
      N: loaded 0B of 0.250 units on device 0B lowvram False at cpu
    M.partially_load 0.250 True -> 0.438
    [force_patch_weights] list: M=0.438 free: 1.562
      M: loaded 0.438 of 1.375 units on device 0.438 lowvram False at cpu:0
      N: loaded 0B of 0.250 units on device 0B lowvram False at cpu
    M.partially_unload 0.000 -> 0.062
    [1 byte] list: M=0.375 free: 1.625
      M: loaded 0.375 of 1.375 units on device 0.375 lowvram True at cpu:0
      N: loaded 0B of 0.250 units on device 0B lowvram False at cpu
    M.partially_unload 0.062 False -> 0.125
    M.partially_load -0.062 -> 0B
    [partially_load(-1/16)] list: M=0.250 free: 1.750
      M: loaded 0.250 of 1.375 units on device 0.250 lowvram True at cpu:0
      N: loaded 0B of 0.250 units on device 0B lowvram False at cpu
""", total_gib=2)
def model_patcher_mixed(w):
    """Largest units load first within the budget (with the offload-buffer headroom), the smallest
    go back first; a negative budget gives back; a stale load reloads with force_patch_weights."""
    m, n = _patchers(w, M=Mixed(), N=_net(0.25))
    w.load([m], force_full_load=True)
    _show(w, "M full", (m, n))
    w.mm.free_memory(0.5 * GiB + w.mm.get_free_memory(FAKE), FAKE)
    _show(w, "M asked for 0.5", (m, n))
    w.load([n])
    _show(w, "N", (m, n))
    w.load([m], memory_required=GiB // 8)
    _show(w, "M again", (m, n))
    m.partially_load(FAKE, GiB // 4, force_patch_weights=True)
    _show(w, "force_patch_weights", (m, n))
    w.mm.free_memory(w.mm.get_free_memory(FAKE) + 1, FAKE)  # one byte: a whole unit
    _show(w, "1 byte", (m, n))
    m.partially_load(FAKE, -(GiB // 16))
    _show(w, "partially_load(-1/16)", (m, n))


SCENARIOS = {fn.__name__: fn for fn in (
    evict_and_reload, freed_less_than_asked, candidate_order_and_keep_loaded, patch_models_and_clones,
    budgets, minimum_second_pass, leaks_and_cleanup, interrupt, model_patcher_plain, model_patcher_mixed)}


@pytest.fixture
def mp():
    with pytest.MonkeyPatch.context() as m:
        yield m


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(backend, scenario, mp):
    fn = SCENARIOS[scenario]
    world = run(backend, fn, mp)
    assert world.text() == fn.expected


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_standin_equals_comfyui(scenario):
    traces = {}
    for backend in ("comfyui", "standin"):
        with pytest.MonkeyPatch.context() as m:
            traces[backend] = run(backend, SCENARIOS[scenario], m).raw
    assert traces["standin"] == traces["comfyui"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_surface(backend):
    """Defaults and signatures outside the scenarios (no fake device installed here)."""
    mm, _ = BACKENDS[backend]()
    assert [(s.name, s.value) for s in mm.VRAMState] == [
        ("DISABLED", 0), ("NO_VRAM", 1), ("LOW_VRAM", 2), ("NORMAL_VRAM", 3), ("HIGH_VRAM", 4), ("SHARED", 5)]
    assert mm.EXTRA_RESERVED_VRAM == mm.extra_reserved_memory() == 400 * 1024 * 1024
    assert mm.minimum_inference_memory() == 0.8 * (1 << 30) + 400 * 1024 * 1024
    assert mm.MIN_WEIGHT_MEMORY_RATIO == 0.4  # no NVIDIA GPU (0.0 there)
    assert mm.get_torch_device() == HOST
    assert mm.get_all_torch_devices() == [HOST] and mm.get_all_torch_devices(exclude_current=True) == []
    assert mm.is_device_cpu(FAKE) and mm.is_device_cpu(HOST) and not mm.is_device_cpu(torch.device("meta"))
    free, free_torch = mm.get_free_memory(HOST, torch_free_too=True)
    total, total_torch = mm.get_total_memory(HOST, torch_total_too=True)
    assert 0 < free == free_torch <= total == total_torch == mm.get_total_memory()
    assert isinstance(mm.get_free_memory(), int)
    assert issubclass(mm.InterruptProcessingException, BaseException)
    assert not issubclass(mm.InterruptProcessingException, Exception)
    assert isinstance(mm.current_loaded_models, list)
    mm.soft_empty_cache()


def test_standin_is_not_comfy():
    mm, patcher_cls = _standin()
    assert mm.__name__ == "comfy_standin.model_management"
    assert mm.vram_state == mm.VRAMState.NORMAL_VRAM  # ComfyUI started with --cpu has DISABLED
    assert patcher_cls.__module__ == "comfy_standin.model_patcher"

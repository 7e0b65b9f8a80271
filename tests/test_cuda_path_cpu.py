"""What the CUDA path does that a CPU can observe (issue 21): eviction frees, a prefetch OOM is skipped,
OOMs are classified as ComfyUI does, pins are counted as torch and the driver really lock them,
calibration ignores readings shared with another thread, device names are normalised, the allocator
setting is applied the only way that works, and the GPU bench imports without the pack installed.
CUDA calls are faked here (tests only; `cuda_fakes`)."""
import gc
import json
import logging
import os
import subprocess
import sys
import threading
import types
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

import mizuoto.runtime.oom as oom
import mizuoto.runtime.pinning as pinning
from cuda_fakes import FakeAllocatorStats, FakeCudart, SimSideStream
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.calibration import Calibration
from mizuoto.runtime.pinning import PinBudget, host_block_bytes, registered_bytes, span_bytes
from mizuoto.runtime.service import RuntimeService
from toy_models import TinyDiT, sample

MB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


def sim_manager(capacity, settings=None, prefetch=True):
    devices = DeviceService(simulate={"cpu": capacity}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": "none", **(settings or {})}))
    if prefetch:
        manager.streamer("cpu").side = SimSideStream(devices, "cpu")
    return manager


# ---- evicted models are really freed ------------------------------------------------------------------
@pytest.mark.parametrize("how", ["unregister", "evict"])
def test_unregistered_component_is_collected(how, one_thread):
    manager = sim_manager(256 * MB)
    model = TinyDiT(depth=4).eval()
    h = manager.register(ModelHandle(model, "dit"), engine="test", device="cpu")
    noise = torch.randn(1, 8, 32)
    for _ in range(2):
        with manager.request() as ctx:
            ctx.run("dit", [h], lambda: sample(model, noise, 2), memory=8 * MB)
    streamer = h.streamer
    assert streamer._next.get(h) and streamer.side.copies > 0  # it learned the order and prefetched
    # Weak references to the weights' host storages (a parameter with a weak reference could not be
    # swapped back on the strict device), the module and the handle.
    alive = {"n": 0}

    def watch(obj):
        alive["n"] += 1
        weakref.finalize(obj, lambda: alive.update(n=alive["n"] - 1))
    list(map(watch, (t.untyped_storage() for t in h._host.values())))  # no loop variable left holding one
    watch(model)
    watch(h)
    assert alive["n"] == len(h._host) + 2
    if how == "unregister":
        manager.unregister(h)
    else:
        service = RuntimeService(manager)
        service.add("dit", [h])
        assert service.evict("dit")
    del model, h, ctx
    gc.collect()
    assert alive["n"] == 0
    assert len(streamer._next) == len(streamer._last) == len(streamer._cache) == 0


def test_forget_purges_the_learned_order_while_the_handle_lives(one_thread):
    manager = sim_manager(256 * MB)
    model = TinyDiT(depth=4).eval()
    h = manager.register(ModelHandle(model, "dit"), engine="test", device="cpu")
    with manager.request() as ctx:
        ctx.run("dit", [h], lambda: sample(model, torch.randn(1, 8, 32), 2), memory=8 * MB)
    streamer = h.streamer
    assert h in streamer._next and h in streamer._last
    manager.unregister(h)  # h itself is still referenced here
    assert h not in streamer._next and h not in streamer._last and h not in streamer._cache


def test_ram_relief_releases_the_pinned_host_cache(monkeypatch):
    """Dropped host copies that were pinned copies stay page-locked in torch's host cache until it is
    emptied: RAM relief empties it."""
    manager = sim_manager(256 * MB, {"compute.vram_mode": "normal", "compute.host_copies": "on"}, prefetch=False)
    h = manager.register(ModelHandle(TinyDiT(depth=2), "dit"), engine="test", device="cpu")
    h.load()
    released = []
    monkeypatch.setattr(h.streamer.pin_budget, "release_cache", lambda: released.append(1) or 0)
    assert h.drop_host_copies() > 0 and released == [1]


# ---- a speculative prefetch never fails a phase ---------------------------------------------------------
def test_prefetch_out_of_memory_is_skipped_not_retried(one_thread):
    torch.manual_seed(0)
    model = TinyDiT(depth=4).eval()
    noise = torch.randn(1, 8, 32)
    with torch.no_grad():
        ref = sample(model, noise, 3)
    manager = sim_manager(256 * MB)
    h = manager.register(ModelHandle(model, "dit"), engine="test", device="cpu")
    mem = manager.devices.memory("cpu")
    # Another process takes every free byte between block 1's end and block 2's acquire, i.e. exactly
    # while block 2 prefetches block 3 (the streamer's pre-hook runs before the ones added here).
    # From the second step on (the first one learns the order; block 2 is then prefetched).
    pressure = {"on": False, "step": 0}
    mem.external = lambda: mem.capacity if pressure["on"] else 0

    def squeeze(*args):
        pressure["step"] += 1
        pressure["on"] = pressure["step"] > 1
    model.blocks[1].register_forward_hook(squeeze)
    model.blocks[2].register_forward_pre_hook(lambda *a: pressure.update(on=False))
    with manager.request() as ctx:
        out = ctx.run("dit", [h], lambda: sample(model, noise, 3), memory=8 * MB)
    assert torch.equal(out, ref)
    assert h.streamer.prefetch_skipped >= 2  # steps 2 and 3 (step 1 is still learning the order)
    assert ctx.meta["applied"]["oom_retries"] == 0 and h.cap_bytes is None
    assert h.streamer.side.violations == []


def test_unused_prefetch_is_waited_for_before_it_is_dropped(one_thread):
    """A prefetched copy whose unit does not run next (the order changed) is trimmed unused: the compute
    stream must wait on its copy first, or its block could be reused while the copy is in flight."""
    manager = sim_manager(256 * MB)
    model = TinyDiT(depth=4).eval()
    h = manager.register(ModelHandle(model, "dit"), engine="test", device="cpu")
    x = torch.randn(1, 8, 32)
    with manager.request() as ctx:
        ctx.run("dit", [h], lambda: sample(model, x, 2), memory=8 * MB)  # learns 0 -> 1 -> 2 -> 3 -> 0
    side = h.streamer.side
    copies = side.copies

    def skip_block_1():
        with torch.no_grad():
            c = model.time(torch.zeros(1, 1))
            y = model.proj_in(x)
            for i in (0, 2, 3):  # block 0 prefetches block 1, which never runs
                y = model.blocks[i](y, c)
            return y
    with manager.request() as ctx:
        ctx.run("dit", [h], skip_block_1, memory=8 * MB)
    assert side.copies > copies and side.violations == []


def test_prefetch_error_that_is_not_an_oom_still_fails(one_thread):
    manager = sim_manager(256 * MB)
    model = TinyDiT(depth=3).eval()
    h = manager.register(ModelHandle(model, "dit"), engine="test", device="cpu")
    side = h.streamer.side

    def broken(hosts):
        raise ValueError("not a memory problem")
    with manager.request() as ctx:
        ctx.run("dit", [h], lambda: sample(model, torch.randn(1, 8, 32), 1), memory=8 * MB)  # learn
        side.copy = broken
        with pytest.raises(ValueError, match="not a memory problem"):
            ctx.run("dit", [h], lambda: sample(model, torch.randn(1, 8, 32), 1), memory=8 * MB)
    assert ctx.meta["applied"]["oom_retries"] == 0


# ---- OOM classification --------------------------------------------------------------------------------
def accelerator_error(message, code=None):
    e = oom.accelerator_error()(message)
    if code is not None:
        e.error_code = code
    return e


@pytest.mark.parametrize("error, expected", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (accelerator_error("CUDA error: out of memory"), True),
    (accelerator_error("cuFFT error: CUFFT_ALLOC_FAILED"), True),
    (accelerator_error("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), True),
    (accelerator_error("CUDA error", code=2), True),
    (accelerator_error("CUDA error: an illegal memory access was encountered", code=700), False),
    (ValueError("out of memory"), False),
])
def test_oom_classification(error, expected, monkeypatch):
    cleared = []
    monkeypatch.setattr(oom, "discard_pending_error", lambda devices=(): cleared.append(list(devices)))
    assert oom.is_oom(error, ["cuda:1"]) is expected
    # A pending accelerator error is consumed before the retry; the allocator's own OOM leaves none.
    assert cleared == ([["cuda:1"]] if expected and not isinstance(error, torch.OutOfMemoryError) else [])


@pytest.mark.parametrize("message, retried", [("CUDA error: out of memory", True),
                                              ("CUDA error: an illegal memory access was encountered", False)])
def test_phase_retries_accelerator_oom_only(message, retried, monkeypatch):
    cleared = []
    monkeypatch.setattr(oom, "discard_pending_error", lambda devices=(): cleared.append(sorted(map(str, devices))))
    manager = sim_manager(256 * MB, prefetch=False)
    h = manager.register(ModelHandle(nn.Linear(8, 8), "lin"), engine="test", device="cpu")
    attempts = []

    def fn():
        attempts.append(1)
        if len(attempts) == 1:
            raise accelerator_error(message)
        return "done"
    with manager.request() as ctx:
        if retried:
            assert ctx.run("lin", [h], fn) == "done"
        else:
            with pytest.raises(oom.accelerator_error(), match="illegal memory access"):
                ctx.run("lin", [h], fn)
    assert ctx.meta["applied"]["oom_retries"] == (1 if retried else 0)
    assert cleared == ([["cpu"]] if retried else [])


def test_discard_pending_error_is_a_no_op_without_cuda():
    oom.discard_pending_error(["cuda:0"])  # nothing initialised: nothing to consume, nothing raised


# ---- pins counted honestly -----------------------------------------------------------------------------
@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda as PinBudget sees it on an NVIDIA machine, recorded."""
    state = types.SimpleNamespace(cudart=FakeCudart(), synced=[], emptied=0, cleared=[])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: state.cudart)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: state.synced.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: self.clone())
    monkeypatch.setattr(pinning, "_empty_host_cache", lambda: setattr(state, "emptied", state.emptied + 1))
    monkeypatch.setattr(pinning, "discard_pending_error", lambda devices=(): state.cleared.append(list(devices)))
    return state


def test_pin_arithmetic_views_rounding_and_release(fake_cuda):
    budget = PinBudget(64 * MB, allowance=lambda: None)
    budget.serve("cuda:0")
    budget.serve("cuda:1")
    whole = torch.ones(MB)  # a 4 MB storage: registered in place, whole pages charged
    assert budget.pin(whole) is whole
    charged = registered_bytes(whole.data_ptr(), 4 * MB)
    assert charged % pinning.PAGE_BYTES == 0 and charged >= 4 * MB
    assert budget.used == charged and fake_cuda.cudart.registered == {whole.data_ptr(): 4 * MB}

    big = torch.zeros(16 * MB)  # 64 MB storage, larger than what is left of the budget
    view = big[1000:2000]  # a 4000-byte view of it: a copy, charged its own 4 KiB host block
    pinned_view = budget.pin(view)
    assert pinned_view is not view and torch.equal(pinned_view, view)
    assert budget.used == charged + 4096
    small = torch.ones(3000)  # 12000 bytes -> a 16 KiB block
    pinned_small = budget.pin(small)
    assert budget.used == charged + 4096 + 16384
    assert span_bytes(big[::2][:10]) == (1 + 9 * 2) * 4 and host_block_bytes(12000) == 16384

    # A dead copy stays pinned in torch's host cache until released; then the budget comes down.
    del pinned_view, pinned_small
    gc.collect()
    assert budget.cached == 4096 + 16384 and budget.used == charged + 4096 + 16384
    assert budget.release_cache() == 4096 + 16384
    assert fake_cuda.emptied == 1 and budget.used == charged and budget.cached == 0

    # The registered storage dies: every device this budget served is synchronised, then unregistered.
    ptr = whole.data_ptr()
    del whole
    gc.collect()
    assert budget.used == 0 and fake_cuda.cudart.calls[-1] == ("unregister", ptr)
    assert {0, 1} <= set(fake_cuda.synced)


def test_pin_budget_leaves_comfyui_its_share(fake_cuda, monkeypatch):
    mm = types.SimpleNamespace(MAX_PINNED_MEMORY=10 * MB, TOTAL_PINNED_MEMORY=7 * MB)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    budget = PinBudget(1 << 40)
    t = torch.ones(MB)  # 4 MB: more than the 3 MB ComfyUI has left
    assert budget.pin(t) is t and budget.used == 0 and fake_cuda.cudart.calls == []
    small = torch.ones(1000)
    kept = budget.pin(small)
    assert kept is not small and budget.used == 4096
    mm.MAX_PINNED_MEMORY = 0  # ComfyUI runs with pinned memory disabled: so do we
    other = torch.ones(1000)
    assert budget.pin(other) is other and budget.used == 4096
    assert budget.room() == 0


def test_failed_register_is_cleared_and_not_retried(fake_cuda, caplog):
    fake_cuda.cudart.register_result = 801  # cudaErrorNotSupported: registration does not work here
    budget = PinBudget(1 << 30, allowance=lambda: None)
    budget.serve("cuda:0")
    a, b = torch.ones(MB), torch.ones(MB)
    with caplog.at_level(logging.INFO, "mizuoto.runtime"):
        pinned_a = budget.pin(a)
    assert pinned_a is not a  # a pinned copy instead
    assert fake_cuda.cleared == [[torch.device("cuda", 0)]] and budget.register_available is False
    assert "cudaHostRegister failed (error 801)" in caplog.text
    budget.pin(b)
    assert [c for c, _ in fake_cuda.cudart.calls] == ["register"]  # never tried again
    assert budget.used == 2 * host_block_bytes(4 * MB)


def test_register_overlapping_another_registration_falls_back_for_that_tensor_only(fake_cuda):
    fake_cuda.cudart.register_result = pinning.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    budget = PinBudget(1 << 30, allowance=lambda: None)
    a = torch.ones(MB)
    assert budget.pin(a) is not a and fake_cuda.cleared and budget.register_available
    fake_cuda.cudart.register_result = 0
    b = torch.ones(MB)
    assert budget.pin(b) is b and [c for c, _ in fake_cuda.cudart.calls] == ["register", "register"]


def test_failed_unregister_is_reported_and_cleared(fake_cuda, caplog):
    fake_cuda.cudart.unregister_result = 1
    budget = PinBudget(1 << 30, allowance=lambda: None)
    budget.serve("cuda:0")
    t = torch.ones(MB)
    budget.pin(t)
    del t
    with caplog.at_level(logging.WARNING, "mizuoto.runtime"):
        gc.collect()
    assert "cudaHostUnregister failed (error 1)" in caplog.text and fake_cuda.cleared
    assert budget.used == 0


def test_finalizers_do_nothing_at_interpreter_exit(fake_cuda, monkeypatch):
    budget = PinBudget(1 << 30, allowance=lambda: None)
    budget.serve("cuda:0")
    t = torch.ones(MB)
    budget.pin(t)
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    del t
    gc.collect()
    assert fake_cuda.synced == [] and [c for c, _ in fake_cuda.cudart.calls] == ["register"]
    finalizers = [f for f in list(weakref.finalize._registry) if getattr(f, "__self__", None) is budget]
    assert all(not f.atexit for f in finalizers)


def test_pinned_copies_are_made_outside_inference_mode(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: self.clone())
    with torch.inference_mode():
        copy = pinning._pinned_copy(torch.ones(4))
    assert not copy.is_inference()


# ---- calibration under concurrency, device names ------------------------------------------------------
def test_calibration_ignores_phases_that_overlapped_on_the_device(tmp_path):
    devices = DeviceService(simulate={"cpu": 512 * MB}, strict=True)
    calibration = Calibration(tmp_path / "cal.json")
    manager = ModelManager(devices, VramPolicy({"compute.gpu_jobs": 2}), calibration=calibration)
    handles = [manager.register(ModelHandle(nn.Linear(8, 8), f"c{i}"), engine="test", device="cpu")
               for i in range(2)]
    work = 32 * MB
    barrier = threading.Barrier(2)
    errors = []

    def phase(h):
        def fn():
            x = torch.empty(work, dtype=torch.uint8)  # exactly the estimate
            barrier.wait(timeout=30)  # both phases hold their working memory at once
            barrier.wait(timeout=30)
            return x.numel()
        try:
            with manager.request() as ctx:
                ctx.run(h.name, [h], fn, memory=work)
        except Exception as e:  # surfaced below
            errors.append(e)
    threads = [threading.Thread(target=phase, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    # Each phase's reading held the other's 32 MB too (a factor of ~2.2 before the fix).
    assert calibration.factor("test:c0") == calibration.factor("test:c1") == 1.0

    # Alone, the same measurement still calibrates.
    with manager.request() as ctx:
        ctx.run("c0", [handles[0]], lambda: torch.empty(2 * work, dtype=torch.uint8).numel(), memory=work)
    assert calibration.factor("test:c0") == pytest.approx(2 * 1.1, rel=0.05)


def test_cuda_tracking_is_thread_safe_and_marks_shared_and_nested_readings(monkeypatch):
    stats = FakeAllocatorStats()
    monkeypatch.setattr(DeviceService, "_backend", staticmethod(lambda device: stats))
    devices = DeviceService()
    entered, leave = threading.Barrier(2), threading.Event()
    readings = {}

    def block(name):
        with devices.tracking("cuda:0") as t:
            stats.alloc(10)
            entered.wait(10)
            leave.wait(10)
            stats.free(10)
        readings[name] = t
    threads = [threading.Thread(target=block, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    leave.set()
    for t in threads:
        t.join(10)
    assert not readings["a"].own and not readings["b"].own
    assert stats.resets == 1  # only the first block resets the device's peak
    assert devices._active["cuda:0"] == []

    with devices.tracking("cuda:0") as outer:
        with devices.tracking("cuda:0") as inner:
            stats.alloc(5)
        stats.free(5)
    assert outer.own and not inner.own and outer.peak_bytes == 5


def test_device_names_are_normalised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    devices = DeviceService()
    assert devices.normalize("cuda") == torch.device("cuda", 1)
    assert devices.normalize("cuda:0") == torch.device("cuda", 0)
    assert devices.normalize("cpu") == torch.device("cpu")
    sim = DeviceService(simulate={"cpu": 64 * MB}, strict=True)
    manager = ModelManager(sim, VramPolicy({}))
    seen = []
    original = sim.normalize
    sim.normalize = lambda d: seen.append(d) or original(d)
    h = manager.register(ModelHandle(nn.Linear(4, 4), "x"), engine="test", device="cpu")
    assert seen == ["cpu"] and str(h.device) == "cpu"


# ---- the allocator setting, in a fresh interpreter ------------------------------------------------------
ALLOCATOR_PROBE = """
import json, logging, os, sys, torch
from mizuoto.runtime import VramPolicy
from mizuoto.runtime.allocator import apply_cuda_allocator
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
env_before = {k: v for k, v in os.environ.items() if "ALLOC_CONF" in k}
applied = apply_cuda_allocator(VramPolicy({"compute.cuda_allocator": sys.argv[1]}))
print(json.dumps({"applied": applied, "settings": torch._C._accelerator_getAllocatorSettings(),
                  "env_unchanged": env_before == {k: v for k, v in os.environ.items() if "ALLOC_CONF" in k},
                  "cuda_initialized": torch.cuda.is_initialized()}))
"""


@pytest.mark.parametrize("choice, env, applied", [
    ("expandable", {}, "expandable_segments:True"),
    ("async", {}, None),
    ("native", {}, None),
    ("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, None),
])
def test_cuda_allocator_setting_in_a_subprocess(choice, env, applied, tmp_path):
    environ = {k: v for k, v in os.environ.items() if "ALLOC_CONF" not in k} | env
    environ["MIZUOTO_CONFIG_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE, choice], capture_output=True, text=True,
                          env=environ, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["applied"] == applied and got["env_unchanged"] and not got["cuda_initialized"]
    if applied:
        assert "expandable_segments:True" in got["settings"]
    if not env:
        assert "cudaMallocAsync" not in got["settings"]  # the backend is never switched at run time
    if choice == "async":
        assert "--cuda-malloc" in proc.stderr


# ---- the GPU bench starts where the pack is not installed -----------------------------------------------
NOT_INSTALLED = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")
                    and "__editable__" not in getattr(f, "__name__", "")]
sys.path[:] = [p for p in sys.path if "__editable__" not in p]
import importlib.util
assert importlib.util.find_spec("mizuoto") is None, "mizuoto is still importable"
sys.argv = ["gpu.py", "--help"]
runpy.run_path("bench/gpu.py", run_name="__main__")
"""


def test_gpu_bench_starts_without_the_pack_installed():
    proc = subprocess.run([sys.executable, "-c", NOT_INSTALLED], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout

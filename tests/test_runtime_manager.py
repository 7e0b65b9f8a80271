"""Budgets, yielding, exact OOM retry, fallback, calibration, gpu_jobs and the RuntimeService."""
import json
import threading
import time

import pytest
import torch

from mizuoto.runtime import Cancelled, DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.service import RuntimeService
from toy_models import TinyDiT, sample

MB = 1 << 20


def make(capacity, settings=None):
    devices = DeviceService(simulate={"cpu": capacity}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.host_copies": "on", **(settings or {})}))
    return devices, manager


def dit(seed=1, depth=4):
    torch.manual_seed(seed)
    return TinyDiT(depth=depth).eval()


def add(manager, name, model=None, kind="oneshot"):
    return manager.register(ModelHandle(model if model is not None else dit(), name, kind), engine="test")


# ---- budget decisions ---------------------------------------------------------------------------
def test_whole_when_it_fits_partial_with_reason_when_not():
    _, manager = make(64 * MB)
    h = add(manager, "a")
    with manager.request() as ctx, ctx.use([h], memory=4 * MB):
        pass
    assert not h.partial and ctx.meta["memory"]["partial"] == {}
    assert ctx.meta["memory"]["loaded_mb"] == pytest.approx(h.size_bytes / MB)

    devices, manager = make(h.size_bytes)  # weights alone fill the device: no room for working memory
    h = add(manager, "a")
    with manager.request() as ctx, ctx.use([h], memory=4 * MB):
        pass
    partial = ctx.meta["memory"]["partial"]["a"]
    assert partial["reason"] == "budget" and partial["mode"] == "normal"
    assert partial["working_mb"] == 4 and partial["reserve_mb"] == 0
    assert partial["free_mb"] == pytest.approx(h.size_bytes / MB)
    assert partial["loaded_mb"] < partial["size_mb"] == pytest.approx(h.size_bytes / MB)
    assert h.loaded_bytes + 4 * MB + h.streamer.slots(h) * h.layout.units[0].nbytes <= h.size_bytes


@pytest.mark.parametrize("mode", ["none", "low"])
def test_vram_modes_are_recorded_as_the_reason(mode):
    _, manager = make(256 * MB, {"compute.vram_mode": mode})
    h = add(manager, "a")
    with manager.request() as ctx, ctx.use([h], memory=4 * MB):
        pass
    assert ctx.meta["memory"]["partial"]["a"]["reason"] == f"vram_mode {mode}"
    if mode == "none":
        assert h.loaded_bytes == h.layout.fixed_bytes


def test_estimates_never_refuse_below_minimum_working_set(caplog):
    h0 = add(make(1 << 30)[1], "probe")
    _, manager = make(h0.min_working_set + 2 * MB)
    h = add(manager, "a")
    x = torch.randn(1, 4, 32)
    with manager.request() as ctx, ctx.use([h], memory=64 * MB), torch.no_grad():
        h.module(x, torch.zeros(1))  # runs although the estimate said it cannot fit
    assert "below its minimum working set" in caplog.text


def test_smaller_components_load_whole_and_the_largest_gets_the_rest():
    small, big = dit(depth=2), dit(depth=6)
    capacity = ModelHandle(dit(depth=2), "s").size_bytes + ModelHandle(dit(depth=6), "b").size_bytes * 2 // 3
    _, manager = make(capacity)
    hs, hb = add(manager, "small", small), add(manager, "big", big)
    with manager.request() as ctx, ctx.use([hs, hb]):
        pass
    assert not hs.partial and hb.partial and hb.loaded_bytes > hb.layout.fixed_bytes
    copies = hb.streamer.slots(hb) * hb.layout.units[0].nbytes
    assert hs.loaded_bytes + hb.loaded_bytes + copies <= capacity
    assert set(ctx.meta["memory"]["partial"]) == {"big"}


# ---- yielding ----------------------------------------------------------------------------------------
def test_yield_order_partial_then_unpinned_then_lru_never_in_use():
    devices, manager = make(96 * MB, {"engines.test.pinned_models": ["pinned"]})
    names = ["lru_old", "pinned", "lru_new", "partial", "busy"]
    hs = {n: add(manager, n) for n in names}
    for n in names:
        with manager.request() as ctx, ctx.use([hs[n]]):
            pass
        time.sleep(0.01)
    hs["partial"].partially_unload(1)
    size = hs["busy"].size_bytes
    newcomer = add(manager, "new", dit(depth=12))
    with manager.request() as busy, busy.use([hs["busy"]]):
        assert [h.name for h in manager.yield_order("cpu")] == ["partial", "lru_old", "lru_new", "pinned"]
        with manager.request() as ctx, ctx.use([newcomer]):
            pass
        assert newcomer.loaded_bytes == newcomer.size_bytes
        loaded = {n: hs[n].loaded_bytes for n in names}
        assert loaded["partial"] == 0 and loaded["lru_old"] == 0  # yielded first, completely
        assert 0 < loaded["lru_new"] < size  # then unit by unit, only as much as needed
        assert loaded["pinned"] == size and loaded["busy"] == size  # pinned last, in use never
        assert hs["lru_new"].gave_up_for == "new"


def test_high_mode_yields_whole_components():
    _, manager = make(40 * MB, {"compute.vram_mode": "high"})
    a, b = add(manager, "a"), add(manager, "b")
    with manager.request() as ctx, ctx.use([a]):
        pass
    with manager.request() as ctx, ctx.use([b], memory=12 * MB):
        pass
    assert a.loaded_bytes == 0 and b.loaded_bytes == b.size_bytes


# ---- exact OOM retry ----------------------------------------------------------------------------
NOISE_SHAPE = (16, 256, 32)


def flow(model, ctx):
    noise = torch.randn(NOISE_SHAPE, generator=ctx.generator)
    return sample(model, noise, steps=2)


def working_peak(model):
    devices, manager = make(1 << 30)
    h = add(manager, "probe", model)
    with manager.request(seed=3) as ctx:
        ctx.run("probe", [h], lambda: flow(model, ctx), memory=0)
        with devices.tracking("cpu") as t:
            pass
    with manager.request(seed=3) as ctx, ctx.use([h]):
        with devices.tracking("cpu") as t:
            flow(model, ctx)
    return t.peak_bytes, h


def test_oom_retry_is_exact_and_calibration_makes_the_next_request_fit():
    model = dit()
    work, probe = working_peak(model)
    _, ample = make(1 << 30)
    ha = add(ample, "dit", dit())
    with ample.request(seed=3) as ctx:
        ref = ctx.run("dit", [ha], lambda: flow(ha.module, ctx), memory=work)

    capacity = probe.size_bytes + work - 4 * MB  # whole model + real working memory do not fit
    assert probe.min_working_set + work < capacity
    _, manager = make(capacity)
    h = add(manager, "dit", dit())
    with manager.request(seed=3) as ctx:
        out = ctx.run("dit", [h], lambda: flow(h.module, ctx), memory=work // 2)  # estimate too low
    assert ctx.meta["applied"]["oom_retries"] == 1
    assert torch.equal(out, ref)
    assert ctx.meta["memory"]["partial"]["dit"]["reason"] == "capped after OOM"
    factor = manager.calibration.factor("test:dit")
    assert factor > 1.5
    saved = json.loads(manager.calibration.path.read_text())
    assert saved["version"] == 2 and saved["factors"]["test:dit"] == pytest.approx(factor)

    # A fresh process (new manager, calibration reloaded from the file) fits on the first try.
    _, manager2 = make(capacity)
    h2 = add(manager2, "dit", dit())
    with manager2.request(seed=3) as ctx:
        out2 = ctx.run("dit", [h2], lambda: flow(h2.module, ctx), memory=work // 2)
    assert ctx.meta["applied"]["oom_retries"] == 0
    assert torch.equal(out2, ref)


def test_phase_that_cannot_fit_raises_cleanly_and_the_manager_stays_usable():
    model = dit()
    work, probe = working_peak(model)
    _, manager = make(probe.min_working_set + work // 4)
    h = add(manager, "dit", dit())
    with pytest.raises(torch.OutOfMemoryError, match="after 2 retries"):
        with manager.request(seed=3) as ctx:
            ctx.run("dit", [h], lambda: flow(h.module, ctx), memory=0)
    assert ctx.meta["applied"]["oom_retries"] == 2
    assert h.in_use == 0
    x = torch.randn(1, 4, 32)
    with manager.request() as ctx, ctx.use([h]), torch.no_grad():  # next request works
        h.module(x, torch.zeros(1))


def test_fallback_runs_after_retries_when_enabled():
    model = dit()
    work, probe = working_peak(model)
    for enabled in (False, True):
        _, manager = make(probe.min_working_set + work // 4, {"compute.oom_fallback": enabled})
        h = add(manager, "dit", dit())
        small = lambda: sample(h.module, torch.randn(1, 8, 32, generator=ctx.generator), steps=2)  # noqa: E731
        with manager.request(seed=3) as ctx:
            if not enabled:
                with pytest.raises(torch.OutOfMemoryError):
                    ctx.run("dit", [h], lambda: flow(h.module, ctx), fallback=("smaller", small))
                continue
            out = ctx.run("dit", [h], lambda: flow(h.module, ctx), fallback=("smaller", small))
        assert out.shape == (1, 8, 32)
        assert ctx.meta["applied"]["fallbacks"] == ["smaller"]


def test_fallback_places_with_its_own_working_memory():
    """`fallback=(what, fn, memory)`: the frugal function's smaller estimate is what placement weighs."""
    _, manager = make(256 * MB, {"compute.oom_fallback": True})
    h = add(manager, "dit", dit())
    asked = []
    load = manager.load
    manager.load = lambda handles, memory, **kw: asked.append(memory) or load(handles, memory, **kw)

    def always():
        raise torch.OutOfMemoryError("simulated")
    with manager.request() as ctx:
        assert ctx.run("dit", [h], always, memory=40 * MB, fallback=("smaller", lambda: "small", 3 * MB)) == "small"
        assert ctx.run("dit", [h], always, memory=40 * MB, fallback=("same", lambda: "small")) == "small"
    assert asked == [40 * MB] * 3 + [3 * MB] + [40 * MB] * 4
    assert ctx.meta["applied"]["fallbacks"] == ["smaller", "same"]


def test_retry_restores_listed_generators_and_torch_global_rng():
    _, manager = make(256 * MB)
    h = add(manager, "a")
    extra = torch.Generator().manual_seed(11)
    calls = []

    def fn():
        calls.append((torch.randn(3, generator=extra), torch.rand(2)))
        if len(calls) == 1:
            raise torch.OutOfMemoryError("simulated failure")
        return calls[-1]

    torch.manual_seed(5)
    with manager.request() as ctx:
        ctx.run("a", [h], fn, generators=[extra])
    assert torch.equal(calls[0][0], calls[1][0]) and torch.equal(calls[0][1], calls[1][1])


# ---- gpu_jobs ------------------------------------------------------------------------------------
def _two_jobs(cancel_second):
    _, manager = make(24 * MB, {"compute.gpu_jobs": 2})
    a, b = add(manager, "a"), add(manager, "b")
    result = {}
    entered = threading.Event()
    release = threading.Event()

    def first():
        with manager.request() as ctx, ctx.use([a], memory=4 * MB):
            entered.set()
            release.wait(10)

    def second():
        try:
            with manager.request(cancel=stop) as ctx, ctx.use([b], memory=4 * MB):
                result["ran"] = True
        except Cancelled:
            result["cancelled"] = True

    stop = threading.Event()
    t1 = threading.Thread(target=first)
    t1.start()
    entered.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    time.sleep(0.5)
    assert "ran" not in result  # waiting: a is in use and b's minimum working set does not fit beside it
    if cancel_second:
        stop.set()
        t2.join(10)
        release.set()
    else:
        release.set()
        t2.join(10)
    t1.join(10)
    return result


def test_gpu_jobs_waits_for_the_other_request_then_runs():
    assert _two_jobs(cancel_second=False) == {"ran": True}


def test_gpu_jobs_wait_is_cancellable():
    assert _two_jobs(cancel_second=True) == {"cancelled": True}


# ---- RuntimeService ------------------------------------------------------------------------------
def test_relieve_ram_drops_host_copies_first_then_unloads_idle_models_lru():
    _, manager = make(256 * MB, {"compute.ram_reserve_mb": 1000})
    service = RuntimeService(manager)
    handles = {n: add(manager, n) for n in ["old", "pinned", "new", "busy"]}
    evicted = []
    for n, h in handles.items():
        with manager.request() as ctx, ctx.use([h]):
            pass
        service.add(n, [h], pinned=n == "pinned", on_evict=lambda n=n: evicted.append(n))
        time.sleep(0.01)
    handles["new"].partially_unload(1)  # partial: keeps its host copies
    with manager.request() as ctx, ctx.use([handles["busy"]]):
        size = handles["old"].size_bytes
        # a little short: one component's host copies suffice
        assert service.relieve_ram(available=1000 * MB - size // 2) == ["host:old"]
        # far short: remaining host copies of whole components, then idle unpinned models LRU
        actions = service.relieve_ram(available=0)
    assert actions[:2] == ["host:pinned", "host:busy"]
    assert actions[2:] == ["model:old", "model:new"]
    assert evicted == ["old", "new"] and set(service.models) == {"pinned", "busy"}


def test_max_resident_models_and_unload_after_minutes():
    now = [0.0]
    _, manager = make(256 * MB, {"compute.max_resident_models": 1, "compute.unload_after_minutes": 1})
    service = RuntimeService(manager, clock=lambda: now[0])
    a, b = add(manager, "a"), add(manager, "b")
    service.add("a", [a])
    service.add("b", [b])
    for h in (a, b):
        with manager.request() as ctx, ctx.use([h]):
            pass
        time.sleep(0.01)
    assert service.enforce_resident_limit() == ["a"]
    now[0] = time.monotonic() + 120
    assert service.unload_idle() == ["b"] and b.loaded_bytes == 0


def test_per_request_settings_override_the_manager_policy():
    _, manager = make(256 * MB)
    h = add(manager, "a")
    with manager.request(settings={"compute.vram_mode": "none"}) as ctx, ctx.use([h]):
        pass
    assert ctx.meta["memory"]["partial"]["a"]["reason"] == "vram_mode none"
    with manager.request() as ctx, ctx.use([h]):
        pass
    assert not h.partial and manager.policy.get("compute.vram_mode") == "normal"
    with pytest.raises(Exception, match="compute.vram_mod"):
        manager.request(settings={"compute.vram_mod": "none"})


def test_release_device_and_release_after_oom_unload_idle_components_only():
    devices, manager = make(256 * MB)
    service = RuntimeService(manager)
    a, b = add(manager, "a"), add(manager, "b")
    for h in (a, b):
        with manager.request() as ctx, ctx.use([h]):
            pass
    with manager.request() as ctx, ctx.use([b]):
        service.release_device("cpu")
        assert a.loaded_bytes == 0 and b.loaded_bytes == b.size_bytes
    a.cap_bytes = a.min_working_set
    with manager.request() as ctx, ctx.use([a]):
        pass
    service.release_after_oom()
    assert a.loaded_bytes == b.loaded_bytes == 0 and a.cap_bytes is None
    assert devices.memory("cpu").used == 0


def test_an_engine_without_phases_gets_every_handle_for_the_whole_call():
    class Dummy:  # no PHASED: one placement for the call, sized by memory_required(task)
        def __init__(self, manager):
            self.model = dit()
            self.handles = [add(manager, "dummy", self.model)]
            self.asked = []

        def memory_required(self, task):
            self.asked.append(task)
            return 2 * MB

        def speak(self, x):
            assert all(h.in_use for h in self.handles)
            with torch.no_grad():
                return self.model(x, torch.zeros(x.shape[0]))

    _, manager = make(256 * MB)
    engine = Dummy(manager)
    x = torch.randn(1, 4, 32)
    with manager.request() as ctx:
        out = ctx.call(engine, {"rows": 1}, lambda: engine.speak(x))
    assert engine.asked == [{"rows": 1}] and out.shape == x.shape
    assert engine.handles[0].in_use == 0 and engine.handles[0].loaded_bytes == engine.handles[0].size_bytes

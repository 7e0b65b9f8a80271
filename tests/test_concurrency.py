"""Upkeep on its own timer, and placement changes from other threads while requests run: upkeep,
release_device and the panel's route under the manager's lock; two requests on one model take turns."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.phases import Cancelled
from mizuoto.runtime.service import RuntimeService
from toy_models import TinyDiT

MB = 1 << 20
BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_an_idle_model_unloads_on_the_timer_with_no_request_running():
    now = [0.0]
    torch.manual_seed(0)
    handle = ModelHandle(TinyDiT(depth=2).eval(), "dit", "oneshot")
    manager = ModelManager(DeviceService(simulate={"cpu": 256 * MB}, strict=True),
                           VramPolicy({"compute.unload_after_minutes": 1}))
    manager.register(handle, engine="test")
    service = RuntimeService(manager, clock=lambda: now[0])
    service.add("dit", [handle])
    with manager.request() as ctx, ctx.use([handle]):
        pass
    service.start_upkeep(interval=0.01)
    try:
        time.sleep(0.1)
        assert handle.loaded_bytes > 0                      # not idle long enough yet
        now[0] = time.monotonic() + 120
        deadline = time.monotonic() + 5
        while handle.loaded_bytes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handle.loaded_bytes == 0
    finally:
        service.stop_upkeep()
    assert service._upkeep is None


@pytest.fixture
def runtime():
    policy = VramPolicy({"compute.simulate_vram_mb": 16, "compute.ram_reserve_mb": 0})
    with use_runtime(build_runtime(policy, strict=True)) as rt:
        yield rt


def test_requests_with_upkeep_releases_and_route_reads_on_other_threads(runtime, load_script):
    stress = load_script(BENCH / "stress.py", "mizuoto_bench_stress")
    (model,) = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")
    request = SpeakRequest("Threads must not change a sample.", seed=3)
    clean, _ = speak(model, request)
    counts = stress.hammered(runtime, model, request, clean, requests=4)
    assert not counts["failures"], counts["failures"][:3]
    assert counts["exact"] == 4 and all(counts["calls"].get(k, 0) > 0 for k in
                                        ("upkeep", "release_device", "route", "ram_relief")), counts["calls"]
    assert counts["device_bytes_after"] == 0, "accounting back to the clean level"
    assert torch.equal(speak(model, request)[0], clean)


def test_two_threads_on_one_model_take_turns(runtime, load_script):
    stress = load_script(BENCH / "stress.py", "mizuoto_bench_stress")
    (model,) = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")
    requests = [SpeakRequest("First voice, first thread.", seed=1), SpeakRequest("Second thread here.", seed=2)]
    counts = stress.two_threads(model, requests, [speak(model, r)[0] for r in requests], each=3)
    assert not counts["failures"], counts["failures"][:3]
    assert counts["exact"] == 6


# ---- two requests over one component, straight through the manager ---------------------------------
def shared_dit(capacity_share: float):
    torch.manual_seed(0)
    model = TinyDiT(depth=6).eval()
    handle = ModelHandle(model, "dit", "oneshot", min_unit_bytes=16 << 10, tiny_unit_bytes=16 << 10)
    capacity = int(handle.size_bytes * capacity_share) + 8 * MB
    manager = ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True), VramPolicy({"compute.gpu_jobs": 2}))
    manager.register(handle, engine="test")
    return model, handle, manager


@pytest.mark.parametrize("share", [0.5, 2.0])   # half streamed, fully resident
def test_two_threads_requesting_one_strict_component_get_the_serial_result(share):
    """A request needing a component another request uses waits for it: placing it meanwhile would move
    weights under the other's forward (a StrictDeviceError, or silently wrong samples off the strict device)."""
    model, handle, manager = shared_dit(share)
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(2))

    def one(i: int) -> torch.Tensor:
        with manager.request(seed=i) as ctx, torch.no_grad():
            return ctx.run("dit", [handle], lambda: model(x, torch.full((1,), float(i % 4))), memory=MB)

    serial = [one(i) for i in range(4)]
    assert handle.partial == (share < 1)
    results, errors = {}, []
    start = threading.Barrier(2)

    def worker(t: int):
        start.wait()
        for i in range(40):
            try:
                results[t, i] = one(i)
            except Exception as e:   # noqa: BLE001 - every failure is reported below
                errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    assert len(results) == 80 and all(torch.equal(out, serial[i % 4]) for (_, i), out in results.items())
    assert handle.in_use == 0 and not manager._waiting


def test_a_request_waiting_for_a_component_can_be_cancelled_and_crossed_waits_are_an_error():
    _, handle, manager = shared_dit(2.0)
    other = manager.register(ModelHandle(nn.Linear(8, 8), "other"), engine="test")
    holding, done = threading.Event(), threading.Event()

    def hold():
        with manager.request() as ctx, ctx.use([handle]):
            holding.set()
            done.wait(timeout=30)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(timeout=30)
    cancel = threading.Event()
    cancel.set()
    with manager.request(cancel=cancel) as ctx:
        with pytest.raises(Cancelled, match="waiting for a component in use"):
            manager.load([handle], owner=ctx)
    done.set()
    t.join(timeout=30)

    # A holds `handle` and waits for `other`; B holds `other` and waits for `handle`: B is told, not hung.
    a_holds, b_holds, a_waits = threading.Event(), threading.Event(), threading.Event()
    outcome = {}

    def a():
        with manager.request() as ctx, ctx.use([handle]):
            a_holds.set()
            b_holds.wait(timeout=30)
            a_waits.set()
            with ctx.use([other]):
                outcome["a"] = "ran"

    ta = threading.Thread(target=a)
    ta.start()
    with manager.request() as ctx, ctx.use([other]):
        b_holds.set()
        a_waits.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not manager._waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="requests wait for each other"):
            manager.load([handle], owner=ctx)
    ta.join(timeout=30)
    assert outcome == {"a": "ran"} and handle.in_use == other.in_use == 0

"""Upkeep on its own timer, and placement changes from other threads while requests run: upkeep,
release_device and the panel's route under the manager's lock; two requests on one model take turns."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.common.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.common.pipeline import SpeakRequest, speak
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
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

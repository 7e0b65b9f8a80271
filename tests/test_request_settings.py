"""Per-request settings (the Runtime Settings node) act in their request and not in the next one; keys
that only work for the whole process are refused, naming where to set them."""
from __future__ import annotations

import json

import pytest
import torch

from mizuoto.nodes.pack.speak import MizuotoRuntimeSettings
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, SettingsError, VramPolicy
from mizuoto.runtime.policy import PROCESS_WIDE
from toy_models import TinyDiT

MB = 1 << 20


@pytest.fixture
def setup():
    torch.manual_seed(0)
    handle = ModelHandle(TinyDiT(depth=4).eval(), "dit", "oneshot")
    devices = DeviceService(simulate={"cpu": handle.size_bytes + 64 * MB}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.host_copies": "on"}))
    manager.register(handle, engine="test")
    return manager, handle


def placed(manager, handle, settings=None) -> tuple[bool, int, bool]:
    """(partial, streamer slots, keep host copies) while a phase of a request with `settings` holds it."""
    with manager.request(settings=settings) as ctx, ctx.use([handle], memory=MB):
        seen = handle.partial, manager.streamer("cpu").slots(handle), handle.keep_host
    manager.unload_all()
    return seen


@pytest.mark.parametrize("settings, index, value", [
    ({"compute.vram_reserve_mb": 64}, 0, True),           # the reserve leaves too little room: partial
    ({"compute.vram_limit_mb": 8}, 0, True),
    ({"compute.vram_mode": "none"}, 0, True),
    ({"compute.async_offload": 3}, 1, 4),                 # copies held by the streamer for this request
    ({"compute.host_copies": "off"}, 2, False),
])
def test_a_setting_acts_in_its_request_and_not_in_the_next(setup, settings, index, value):
    manager, handle = setup
    before = placed(manager, handle)
    assert placed(manager, handle, settings)[index] == value != before[index]
    assert placed(manager, handle) == before
    assert manager.policy.get(next(iter(settings))) == VramPolicy({"compute.host_copies": "on"}).get(next(iter(settings)))


def oom_once():
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("simulated")
        return len(calls)
    return fn


def test_oom_retry_and_fallback_act_per_request(setup):
    manager, handle = setup
    with pytest.raises(torch.OutOfMemoryError):
        with manager.request(settings={"compute.oom_retry": False}) as ctx:
            ctx.run("phase", [handle], oom_once())
    with manager.request() as ctx:
        assert ctx.run("phase", [handle], oom_once()) == 2 and ctx.meta["applied"]["oom_retries"] == 1

    def always():
        raise torch.OutOfMemoryError("simulated")
    with manager.request(settings={"compute.oom_fallback": True}) as ctx:
        assert ctx.run("phase", [handle], always, fallback=("tiled", lambda: "small")) == "small"
    assert ctx.meta["applied"]["fallbacks"] == ["tiled"]
    with pytest.raises(torch.OutOfMemoryError), manager.request() as ctx:
        ctx.run("phase", [handle], always, fallback=("tiled", lambda: "small"))


@pytest.mark.parametrize("key", sorted(PROCESS_WIDE) + ["engines.demo.pinned_models"])
def test_process_wide_keys_are_refused_per_request(setup, key):
    manager, _ = setup
    value = ["talker"] if key.startswith("engines.") else VramPolicy().get(key)
    with pytest.raises(SettingsError, match=rf"{key!r} applies to the whole process.*settings.json"):
        manager.request(settings={key: value})
    defaults = dict(vram_mode="default", vram_reserve_mb=-1, vram_limit_mb=-1, async_offload=-1,
                    host_copies="default", oom_retry="default", oom_fallback="default", kv_cache="default")
    with pytest.raises(ValueError, match="applies to the whole process"):
        MizuotoRuntimeSettings().settings(**defaults, more=json.dumps({key: value}))

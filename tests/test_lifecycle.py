"""A loader node's output stays usable whatever the runtime evicted meanwhile (the bug where the second
prompt failed with "component 'acoustic' is not registered"), evicted weights are really freed, and the
nodes stream on a simulated device smaller than the model."""
from __future__ import annotations

import ctypes
import gc
import weakref

import psutil
import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.speak import MizuotoSpeak
from mizuoto.runtime import VramPolicy

MB = 1 << 20
TEXT = "Hello there. The second prompt must work too."


def rss() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # give freed heap pages back, so RSS shows what is really held
    except OSError:
        pass
    return psutil.Process().memory_info().rss


def speak(model, text: str = TEXT) -> torch.Tensor:
    (audio,) = MizuotoSpeak().speak(model, text, seed=2, speed=1.0, language="en")
    return audio["waveform"]


@pytest.fixture
def runtime(request):
    """A pack runtime on a strict simulated GPU of `request.param` MB (smaller than the voice: it streams)."""
    policy = VramPolicy({"compute.simulate_vram_mb": getattr(request, "param", 10)})
    with use_runtime(build_runtime(policy, strict=True)) as rt:
        yield rt


def test_the_same_loader_output_speaks_after_every_kind_of_eviction(runtime):
    now = [0.0]
    runtime.service.clock = lambda: now[0]
    (model,) = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")
    first = speak(model)
    meta = runtime.last_meta
    assert meta["memory"]["streamed_mb"] > 0 and meta["memory"]["partial"], "10 MB for 7.3 MB of weights and ~12 MB of working memory: it must stream"
    service = runtime.service

    def evicted_by_ram_relief():
        assert service.relieve_ram(available=0)[-1] == f"model:{model.key}"

    def idle_unload():
        runtime.manager.policy = runtime.manager.policy.with_overrides({"compute.unload_after_minutes": 1})
        now[0] = 1e9
        assert service.unload_idle() == [model.key]

    for evict in (evicted_by_ram_relief, idle_unload, service.release_after_oom, service.unload_all,
                  lambda: service.evict(model.key)):
        evict()
        assert torch.equal(speak(model), first), f"after {getattr(evict, '__name__', evict)}"


def test_eviction_frees_the_weights_and_a_dropped_loader_output_frees_its_model(runtime, capsys):
    (model,) = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")
    first = speak(model)
    engine = runtime.service.models[model.key].engine
    weights = weakref.ref(engine.voice.model)
    size = engine.handles[0].size_bytes
    del engine
    before = rss()
    assert runtime.service.evict(model.key)
    after = rss()
    assert weights() is None, "something still holds the evicted weights"
    with capsys.disabled():
        print(f"\nRSS before eviction {before / MB:.1f} MB, after {after / MB:.1f} MB "
              f"(model {size / MB:.1f} MB): freed {(before - after) / MB:.1f} MB, ratio after/before "
              f"{after / before:.3f}")
    assert before - after > size // 2
    assert torch.equal(speak(model), first)
    weights = weakref.ref(runtime.service.models[model.key].engine.voice.model)
    del model
    runtime.service.maintain()                      # ComfyUI dropped the loader's output: the model goes
    assert weights() is None and not runtime.service.models


@pytest.mark.parametrize("runtime", [64], indirect=True)
def test_a_loaded_model_is_shared_and_survives_an_oom_release(runtime):
    loader = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]()
    (a,), (b,) = loader.load("fp32", "auto"), loader.load("fp32", "auto")
    assert a.key == b.key
    first = speak(a)
    assert runtime.last_meta["memory"]["streamed_mb"] == 0          # 64 MB: whole on the device
    runtime.service.release_after_oom()
    assert runtime.manager.handles[0].loaded_bytes == 0
    assert torch.equal(speak(b), first) and len(runtime.service.models) == 1

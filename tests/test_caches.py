"""The pack's byte-bounded caches (voice prompts, segment audio) and their keys."""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from mizuoto.nodes.pack.caches import ByteCache, model_fingerprint
from mizuoto.nodes.pack.pipeline import SpeakRequest, request_keys


def test_entries_are_private_copies_and_the_least_recent_goes_first():
    cache = ByteCache(3 * 400)
    a = {"codes": torch.arange(100, dtype=torch.int32), "meta": ("x", 1, None)}
    assert cache.put("a", a)
    a["codes"][0] = 99                          # the caller's object is not the stored one
    got = cache.get("a")
    assert got["codes"][0] == 0 and got["meta"] == ("x", 1, None)
    got["codes"][1] = 77                        # nor is what get hands out
    assert cache.get("a")["codes"][1] == 1
    cache.put("b", torch.zeros(100))
    cache.put("c", torch.zeros(100))
    cache.get("a")                               # a is now the most recent: b goes when d arrives
    cache.put("d", torch.zeros(100))
    assert "b" not in cache and {"a", "c", "d"} <= {k for k in ("a", "b", "c", "d") if k in cache}
    assert cache.bytes == 1200 and cache.stats.evicted == 1


def test_too_large_or_foreign_values_are_refused_not_stored():
    cache = ByteCache(100)
    assert not cache.put("big", torch.zeros(26))            # 104 bytes
    assert not cache.put("odd", {"x": object()})
    assert not cache.put("named", torch.zeros(2).shape)     # a tuple subclass: not plain data
    assert len(cache) == 0 and cache.stats.refused == 3 and cache.get("big") is None
    with pytest.raises(ValueError, match="max_bytes"):
        ByteCache(-1)


class _Model:
    def __init__(self, folder, key="e:m:float32:cpu"):
        self.key = key
        self.request = type("R", (), {"folder": folder})()


def test_keys_follow_the_voice_the_settings_and_the_model_files(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"1234")
    model = _Model(tmp_path)
    ref = {"waveform": torch.ones(1, 1, 100) * 0.5, "sample_rate": 24000}
    req = SpeakRequest("Hello.", seed=1, reference=ref, reference_text="hi")
    voice = request_keys(model, req)[0]
    assert voice == request_keys(model, dataclasses.replace(req, text="Other.", seed=9))[0]
    assert voice != request_keys(model, dataclasses.replace(req, options={"steps": 4}))[0]
    louder = {"waveform": ref["waveform"] * 1.001, "sample_rate": 24000}
    assert voice != request_keys(model, dataclasses.replace(req, reference=louder))[0]
    segment = request_keys(model, req)[1]
    assert segment != request_keys(model, dataclasses.replace(req, seed=2))[1]
    before = model_fingerprint(tmp_path)
    os.utime(tmp_path / "model.safetensors", ns=(1, 1))      # the weights replaced in place
    assert model_fingerprint(tmp_path) != before
    assert request_keys(model, req)[1] != segment
    assert model_fingerprint(None) == ""


def test_ram_relief_clears_the_caches_before_it_drops_host_copies_or_models():
    from mizuoto.nodes.pack.pack_runtime import build_runtime
    from mizuoto.runtime import VramPolicy

    runtime = build_runtime(VramPolicy())
    runtime.prompts.put("voice", {"codes": torch.zeros(1000)})
    runtime.segments.put("line", (torch.zeros(2000), {"sample_rate": 24000}))
    assert runtime.service.relieve_ram(available=1 << 60) == []            # plenty of RAM: kept
    actions = runtime.service.relieve_ram(available=0)
    assert actions[:2] == ["cache:segments", "cache:prompts"], actions
    assert runtime.prompts.bytes == runtime.segments.bytes == 0 and len(runtime.prompts) == 0

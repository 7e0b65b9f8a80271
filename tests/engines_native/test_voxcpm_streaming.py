"""VoxCPM 2 (tiny random checkpoint in the upstream layout) streamed, half-resident and resident on the
strict simulated device gives latents and audio equal to a plain CPU run; each phase's working-memory
estimate covers what it really allocates, for three text lengths."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.voxcpm.generate import Sampling, build_prompt, decode_latents, encode_audio, generate
from mizuoto.nodes.voxcpm.loader import load_voxcpm
from mizuoto.nodes.voxcpm.phases import VoxCPMEngine
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from runtime_helpers import residency_capacity

spec = importlib.util.spec_from_file_location("voxcpm_tiny", Path(__file__).parents[1] / "voxcpm" / "tiny.py")
tiny = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny)

SEED = 11
UNIT = 1 << 10           # tiny layers: every layer of the tiny config is a unit
TEXT = "hello world, the tiny voice speaks."
TRANSCRIPT = "hello "
OPTIONS = {"inference_timesteps": 6}
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: one thread is faster


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("voxcpm") / "tiny", seed=3)


def reference() -> torch.Tensor:
    return tiny.reference_wave(0.06)


@pytest.fixture(scope="module")
def plain(folder):
    """The plain CPU run: the same functions, no runtime."""
    torch.set_num_threads(1)
    b = load_voxcpm(folder, torch.float32)
    ref = reference()
    reference_feats = encode_audio(b.vae, ref, 2, pad_left=False)
    continuation = encode_audio(b.vae, ref, 2, pad_left=True)
    prompt = build_prompt(b.tokenizer(TRANSCRIPT + TEXT), 2, 4, reference=reference_feats, continuation=continuation)
    latents, _ = generate(b.model, prompt, Sampling(**OPTIONS), torch.Generator().manual_seed(SEED),
                          len(b.tokenizer(TEXT)), kv=VoxCPMEngine.UPSTREAM_KV_CACHE)   # the engine's default
    return latents, decode_latents(b.vae, latents, prompt.context, 2)


def _engine(folder, capacity=None, mode="normal"):
    devices = DeviceService(simulate={"cpu": capacity or (1 << 30)}, strict=capacity is not None)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    return VoxCPMEngine(load_voxcpm(folder, torch.float32), manager, min_unit_bytes=UNIT, tiny_unit_bytes=UNIT)


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = _engine(folder)
    working = probe.generate_memory(120, 70)
    mode, capacity = residency_capacity(probe.lm, residency, working=working)
    if residency != "half":                  # room for the largest component, whichever phase runs
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    engine = _engine(folder, capacity, mode)
    seen = {}
    import mizuoto.nodes.voxcpm.phases as phases
    real = phases.generate

    def spy(*args, **kw):
        seen["latents"], frames = real(*args, **kw)
        return seen["latents"], frames

    phases.generate = spy
    try:
        chunk = Chunk(TEXT, seed=SEED, reference=Reference(reference(), 16000), reference_text=TRANSCRIPT,
                      options=OPTIONS)
        with engine.manager.request(seed=SEED) as ctx:
            audio = engine.speak_chunk(ctx, chunk)
    finally:
        phases.generate = real
    latents, ref_audio = plain
    assert torch.equal(seen["latents"], latents)
    assert torch.equal(audio, ref_audio)
    assert ctx.meta["applied"]["oom_retries"] == 0
    if residency == "full":
        assert ctx.meta["memory"]["streamed_mb"] == 0 and engine.lm.hook_count == 0
    else:
        assert ctx.meta["memory"]["streamed_mb"] > 0 and engine.lm.streamed_bytes > 0


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    """A model that never stops: every request runs to the frame limit its text allows."""
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("voxcpm") / "silent", seed=4, silent=True)


@pytest.mark.parametrize("words", [2, 5, 10])
def test_estimates_cover_measured_working_memory(silent, words):
    engine = _engine(silent, 1 << 30)
    devices = engine.manager.devices
    b = engine.bundle
    text = " ".join(["hello"] * words)
    ref = tiny.reference_wave(0.01 * words)
    s = Sampling(retry_badcase=False, inference_timesteps=4)
    results = {}
    with engine.manager.request(seed=1) as ctx:
        estimate = engine.encode_memory(ref.numel())
        with ctx.use([engine.encoder], estimate), devices.tracking("cpu") as tr:
            feats = encode_audio(b.vae, ref, 2, pad_left=False)
        results["prompt"] = (estimate, tr.peak_bytes)
        prompt = build_prompt(b.tokenizer(text), 2, 4, reference=feats)
        target = len(b.tokenizer(text))
        estimate = engine.generate_memory(len(prompt), s.frame_limit(target))
        with ctx.use([engine.lm], estimate), devices.tracking("cpu") as tr:
            latents, frames = generate(b.model, prompt, s, ctx.generator, target)
        results["generate"] = (estimate, tr.peak_bytes)
        assert frames == s.frame_limit(target)
        estimate = engine.decode_memory(latents.shape[-1])
        with ctx.use([engine.decoder], estimate), devices.tracking("cpu") as tr:
            decode_latents(b.vae, latents, 0, 2)
        results["decode"] = (estimate, tr.peak_bytes)
    print(f"{words} words ({target} tokens, prompt {len(prompt)}, {frames} frames): " + ", ".join(
        f"{k} estimate {e / 2**20:.2f} MiB measured {m / 2**20:.2f} MiB" for k, (e, m) in results.items()))
    for phase, (estimate, measured) in results.items():
        assert measured <= estimate, phase
        assert estimate - (1 << 20) <= 4 * measured, phase    # and not a worst case: within 4x plus the 1 MiB floor

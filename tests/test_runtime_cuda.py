"""The CUDA paths (side-stream prefetch, events, record_stream, in-place pinning, async reloads).
They need a GPU: they run where torch sees one and are skipped elsewhere; their logic is covered
on the simulated device by the other runtime tests."""
import pytest
import torch

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from toy_models import TinyDecoder, TinyDiT, generate, sample

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
MB = 1 << 20


def run(model, fn, kind, mode, limit_mb=None):
    settings = {"compute.vram_mode": mode, "compute.host_copies": "on"}
    if limit_mb is not None:
        settings["compute.vram_limit_mb"] = limit_mb
    manager = ModelManager(DeviceService(), VramPolicy(settings))
    h = manager.register(ModelHandle(model, "m", kind), engine="gpu-test", device="cuda")
    outs = []
    for _ in range(2):  # the second request reuses pinned host copies and learned prefetch order
        with manager.request(seed=0) as ctx:
            outs.append(ctx.run("m", [h], lambda: fn(model).cpu(), memory=64 * MB))
    return outs, ctx, h, manager


@pytest.mark.parametrize("mode", ["none", "normal"])
def test_streamed_equals_resident_on_cuda(mode):
    torch.manual_seed(0)
    dit = TinyDiT(depth=6).eval()
    noise = torch.randn(2, 24, 32)
    ref = sample(dit.cuda(), noise.cuda()).cpu()
    dit.cpu()
    outs, ctx, h, _ = run(dit, lambda m: sample(m, noise.cuda()), "oneshot", mode)
    assert all(torch.equal(o, ref) for o in outs)
    if mode == "none":
        assert ctx.meta["memory"]["streamed_mb"] > 0 and h.partial
        assert h.streamer._side is not None  # prefetch on a side stream
    assert h.streamer.pin_budget.used > 0  # host copies page-locked within the budget


def test_sequence_streams_without_prefetch_on_cuda():
    torch.manual_seed(1)
    lm = TinyDecoder(layers=6).eval()
    prompt = torch.tensor([[1, 2, 3]])
    ref = generate(lm.cuda(), prompt.cuda(), 8).cpu()
    lm.cpu()
    outs, ctx, h, _ = run(lm, lambda m: generate(m, prompt.cuda(), 8), "sequence", "none")
    assert all(torch.equal(o, ref) for o in outs) and ctx.meta["memory"]["streamed_mb"] > 0
    assert h.streamer.slots(h) == 1


def test_unload_with_host_copies_frees_the_device():
    torch.manual_seed(2)
    dit = TinyDiT(depth=4).eval()
    manager = ModelManager(DeviceService(), VramPolicy({"compute.host_copies": "on"}))
    h = manager.register(ModelHandle(dit, "m", "oneshot"), engine="gpu-test", device="cuda")
    before = torch.cuda.memory_allocated()
    h.load()
    assert torch.cuda.memory_allocated() - before >= h.size_bytes
    transfers = manager.devices.transfers.d2h
    h.unload()
    assert manager.devices.transfers.d2h - transfers == len(list(dit.buffers()))  # buffers only
    assert torch.cuda.memory_allocated() - before < MB

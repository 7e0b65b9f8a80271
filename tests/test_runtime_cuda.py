"""The CUDA paths (side-stream prefetch, events, in-place pinning, async reloads), each test twice:
on CUDA (marked `gpu`, skipped without a device) and on the strict simulated device with a simulated
side stream (`cuda_fakes.SimSideStream`), so the same test code, prefetch included, runs in every
CPU suite and a mistake in it cannot wait for the first GPU to show up."""
import gc
import weakref

import pytest
import torch

from cuda_fakes import SimSideStream
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.pinning import PinBudget, host_block_bytes, registered_bytes
from toy_models import TinyDecoder, TinyDiT, TinyVocoder, generate, sample

MB = 1 << 20
CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                       reason="needs a CUDA device")])
KINDS = [CUDA, "sim"]


def make_manager(kind, settings, capacity=512 * MB):
    """A manager on the real GPU, or on a strict simulated device whose streamer prefetches."""
    if kind == "cuda":
        return ModelManager(DeviceService(), VramPolicy(settings)), "cuda"
    devices = DeviceService(simulate={"cpu": capacity}, strict=True)
    manager = ModelManager(devices, VramPolicy(settings))
    manager.streamer("cpu").side = SimSideStream(devices, "cpu")
    return manager, "cpu"


def allocated(manager, device) -> int:
    if torch.device(device).type == "cuda":
        return torch.cuda.memory_allocated(device)
    return manager.devices.memory(device).used


def run(kind, model, fn, handle_kind, mode):
    manager, device = make_manager(kind, {"compute.vram_mode": mode, "compute.host_copies": "on"})
    h = manager.register(ModelHandle(model, "m", handle_kind), engine="gputest", device=device)
    outs = []
    for _ in range(2):  # the second request reuses pinned host copies and the learned prefetch order
        with manager.request(seed=0) as ctx:
            outs.append(ctx.run("m", [h], lambda: fn(model, device).cpu(), memory=64 * MB))
    return outs, ctx, h, manager


@pytest.mark.parametrize("mode", ["none", "normal"])
@pytest.mark.parametrize("kind", KINDS)
def test_streamed_equals_resident(kind, mode, one_thread):
    torch.manual_seed(0)
    dit = TinyDiT(depth=6).eval()
    noise = torch.randn(2, 24, 32)
    device = "cuda" if kind == "cuda" else "cpu"
    ref = sample(dit.to(device), noise.to(device)).cpu()
    dit.cpu()
    outs, ctx, h, _ = run(kind, dit, lambda m, d: sample(m, noise.to(d)), "oneshot", mode)
    assert all(torch.equal(o, ref) for o in outs)
    side = h.streamer.side
    assert side is not None  # prefetch on a side stream
    if mode == "none":
        assert ctx.meta["memory"]["streamed_mb"] > 0 and h.partial
    if kind == "cuda":
        assert h.streamer.pin_budget.used > 0  # host copies page-locked within the budget
    else:
        assert side.violations == []
        if mode == "none":
            assert side.copies > 0 and side.waits >= side.copies
            assert side.max_live <= h.streamer.slots(h)  # never more copies than the planner allows for


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_streams_without_prefetch(kind, one_thread):
    torch.manual_seed(1)
    lm = TinyDecoder(layers=6).eval()
    prompt = torch.tensor([[1, 2, 3]])
    device = "cuda" if kind == "cuda" else "cpu"
    ref = generate(lm.to(device), prompt.to(device), 8).cpu()
    lm.cpu()
    outs, ctx, h, _ = run(kind, lm, lambda m, d: generate(m, prompt.to(d), 8), "sequence", "none")
    assert all(torch.equal(o, ref) for o in outs) and ctx.meta["memory"]["streamed_mb"] > 0
    assert h.streamer.slots(h) == 1
    if kind == "sim":
        assert h.streamer.side.copies == 0


@pytest.mark.parametrize("kind", KINDS)
def test_vocoder_convolutions_streamed_equal_resident(kind, one_thread):
    """Convolutions: with ample memory, cuDNN picks the same algorithms streamed and resident."""
    torch.manual_seed(4)
    voc = TinyVocoder().eval()
    mel = torch.randn(1, 32, 20)
    device = "cuda" if kind == "cuda" else "cpu"
    with torch.no_grad():
        ref = voc.to(device)(mel.to(device)).cpu()
    voc.cpu()
    outs, ctx, h, _ = run(kind, voc, lambda m, d: m(mel.to(d)), "oneshot", "none")
    assert all(torch.equal(o, ref) for o in outs) and ctx.meta["memory"]["streamed_mb"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_unload_with_host_copies_frees_the_device(kind):
    torch.manual_seed(2)
    dit = TinyDiT(depth=4).eval()
    manager, device = make_manager(kind, {"compute.host_copies": "on"})
    h = manager.register(ModelHandle(dit, "m", "oneshot"), engine="gputest", device=device)
    before = allocated(manager, h.device)
    h.load()
    assert allocated(manager, h.device) - before >= h.size_bytes
    transfers = manager.devices.transfers.d2h
    h.unload()
    assert manager.devices.transfers.d2h - transfers == len(list(dit.buffers()))  # buffers only
    assert allocated(manager, h.device) - before < MB


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_name_is_normalised_on_cuda():
    """`cuda` is registered as `cuda:<index>`: one streamer, one calibration and one budget key.
    (CPU twin: tests/test_cuda_path_cpu.py::test_device_names_are_normalised.)"""
    manager = ModelManager(DeviceService(), VramPolicy({}))
    a = manager.register(ModelHandle(TinyDiT(depth=2), "a"), engine="t", device="cuda")
    b = manager.register(ModelHandle(TinyDiT(depth=2), "b"), engine="t", device=f"cuda:{torch.cuda.current_device()}")
    assert a.device == b.device and a.device.index is not None and a.streamer is b.streamer




@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_reserved_memory_does_not_grow_when_the_cpu_runs_ahead():
    """ComfyUI's stream pattern: however far the CPU runs ahead (each block sleeps on the GPU), the
    allocator holds no more than the live copies: reserved memory does not grow with the run's length.
    (With record_stream, each dropped copy waited in limbo and each prefetch took a fresh block.)"""
    torch.manual_seed(5)
    dit = TinyDiT(depth=8).eval()
    for block in dit.blocks:
        block.register_forward_hook(lambda *a: torch.cuda._sleep(2_000_000))
    manager = ModelManager(DeviceService(), VramPolicy({"compute.vram_mode": "none", "compute.host_copies": "on"}))
    h = manager.register(ModelHandle(dit, "m", "oneshot"), engine="gputest", device="cuda")
    noise = torch.randn(2, 24, 32, device="cuda")
    calls = []
    original = torch.Tensor.record_stream
    torch.Tensor.record_stream = lambda self, s: calls.append(s) or original(self, s)

    def peak_reserved(steps):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_reserved()
        with manager.request(seed=0) as ctx:
            ctx.run("m", [h], lambda: sample(dit, noise, steps), memory=16 * MB)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_reserved() - base

    try:
        peak_reserved(2)  # places the fixed part, pins host copies, learns the order
        short, long = peak_reserved(2), peak_reserved(24)
    finally:
        torch.Tensor.record_stream = original
    unit = max(u.nbytes for u in h.layout.units)
    assert calls == []
    assert long <= short + unit, (short, long)
    assert h.streamer.prefetch_skipped == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pinning_registers_whole_storages_and_charges_copies_by_block():
    budget = PinBudget(1 << 30)
    budget.serve("cuda")
    big = torch.ones(4 * MB // 4)
    small = torch.ones(3000)  # 12000 bytes: a pinned copy from a 16 KiB host block
    pinned_big = budget.pin(big)
    if budget.register_available:  # whole pages are charged
        assert pinned_big is big and big.is_pinned()
        charged = registered_bytes(big.data_ptr(), 4 * MB)
    else:  # cudaHostRegister does not work here: a pinned copy from a 4 MiB host block
        assert pinned_big is not big and pinned_big.is_pinned()
        charged = host_block_bytes(4 * MB)
    assert budget.used == charged
    pinned_small = budget.pin(small)
    assert pinned_small is not small and pinned_small.is_pinned()
    assert budget.used - charged == 16384
    torch.ones(1, device="cuda").add_(1)  # no pending CUDA error
    ref = weakref.ref(pinned_small)
    del pinned_small, pinned_big, big
    gc.collect()
    assert ref() is None
    budget.release_cache()
    assert budget.used == 0 and budget.cached == 0
    torch.cuda.synchronize()


def test_toy_helpers_keep_every_tensor_on_the_inputs_device():
    """On `meta`, any tensor a helper makes on the CPU instead of the input's device raises (the bug
    that once stopped the GPU tests at their first line)."""
    with torch.device("meta"):
        dit, lm, voc = TinyDiT(depth=2), TinyDecoder(layers=2), TinyVocoder()
    assert sample(dit, torch.empty(2, 8, 32, device="meta"), 2).device.type == "meta"
    assert generate(lm, torch.zeros(1, 3, dtype=torch.long, device="meta"), 2).device.type == "meta"
    with torch.no_grad():
        assert voc(torch.empty(1, 32, 8, device="meta")).device.type == "meta"

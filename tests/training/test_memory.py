"""Memory presets, the host-side optimizer and the estimates (CPU)."""
from __future__ import annotations

import copy

import pytest
import torch

from mizuoto.runtime import DeviceService
from mizuoto.training import PRESETS, HostAdamW, MethodInfo, resolve_tools
from mizuoto.training.step import make_optimizer, prepare, train_step

from .toy import ToyLM, batches, lm_loss

ADAMW = {"lr": 3e-3, "betas": (0.9, 0.98), "eps": 1e-8, "weight_decay": 0.05}


def run(model: ToyLM, optimizer, tools, data) -> list[float]:
    return [train_step(model, lm_loss, ids, optimizer, tools) for ids in data]


@pytest.mark.parametrize("foreach", [False, None])
def test_lowest_float32_equals_adamw(foreach):
    """The host optimizer with float32 device weights: nothing is rounded, so the weights after N steps
    are torch.optim.AdamW's bit for bit (the default CPU AdamW, None, is the single-tensor loop too)."""
    torch.manual_seed(0)
    ours, ref = ToyLM(), None
    ref = copy.deepcopy(ours)
    tools = resolve_tools("lowest", {"mixed_precision": None, "frozen_half": False})
    assert tools.host_optimizer and tools.gradient_checkpointing
    prepare(ours, tools, blocks=ours.blocks, frozen=[ours.embed])
    ref.embed.requires_grad_(False)
    opt = make_optimizer(ours, tools, **ADAMW)
    assert isinstance(opt, HostAdamW)
    ref_opt = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], foreach=foreach, **ADAMW)
    data = batches(6, 3, 12)
    losses = run(ours, opt, tools, data)
    ref_losses = run(ref, ref_opt, resolve_tools("fast"), data)
    assert losses == ref_losses
    for (name, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name
    assert ours.blocks[0].qkv.weight.data_ptr() != opt.master.data_ptr()  # the master lives apart


def test_host_adamw_param_groups_and_unused_parameters_equal_adamw():
    """Param groups with their own rates (GPT-SoVITS s2's four generator groups) and a parameter that gets no
    gradient (skipped, as torch's AdamW skips it: no weight decay either): bit for bit in float32."""
    torch.manual_seed(2)
    ours = ToyLM()
    ours.unused = torch.nn.Parameter(torch.ones(3))
    ref = copy.deepcopy(ours)

    def groups(m: ToyLM) -> list[dict]:
        return [{"params": list(m.blocks.parameters()), "lr": 3e-3}, {"params": [*m.head.parameters(), m.unused],
                                                                     "lr": 1e-3}]
    opt = HostAdamW(groups(ours), lr=5e-3, betas=(0.8, 0.99), eps=1e-9)
    ref_opt = torch.optim.AdamW(groups(ref), lr=5e-3, betas=(0.8, 0.99), eps=1e-9)
    tools = resolve_tools("fast")
    data = batches(3, 2, 8)
    assert run(ours, opt, tools, data) == run(ref, ref_opt, tools, data)
    for (name, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(ours.unused, torch.ones(3)) and [g["lr"] for g in opt.param_groups] == [3e-3, 1e-3]


def test_lowest_half_device_weights_are_the_rounded_master():
    torch.manual_seed(1)
    model = ToyLM()
    tools = resolve_tools("lowest")
    prepare(model, tools, blocks=model.blocks, frozen=[model.embed])
    assert model.embed.weight.dtype == torch.bfloat16 and model.head.weight.dtype == torch.bfloat16
    opt = make_optimizer(model, tools, **ADAMW)
    assert list(opt.staging) == [torch.bfloat16] and opt.master.dtype == torch.float32
    for ids in batches(3, 2, 10):
        train_step(model, lm_loss, ids, opt, tools)
        for p, off in zip(opt.params, opt.offsets):
            assert torch.equal(p, opt.master[off:off + p.numel()].view(p.shape).to(torch.bfloat16))
    assert "host-side AdamW (device weights rounded from a float32 master)" in tools.numerics_changes()


def test_method_hyperparameters_win_over_the_preset():
    assert resolve_tools("balanced").mixed_precision == torch.bfloat16
    assert resolve_tools("balanced", {"mixed_precision": None}).mixed_precision is None
    assert resolve_tools("low", {"gradient_checkpointing": False}).gradient_checkpointing is False
    assert resolve_tools("fast", {"mixed_precision": torch.float16}).mixed_precision == torch.float16
    method = MethodInfo("toy", ToyLM().sizes(16), hyper={"mixed_precision": None})
    assert method.tools("lowest").mixed_precision is None and method.tools("lowest").host_optimizer
    with pytest.raises(ValueError, match="'turbo'"):
        resolve_tools("turbo")
    with pytest.raises(ValueError, match="not memory tools"):
        resolve_tools("fast", {"learning_rate": 1.0})


def measured_peak(preset: str, batch: int, tokens: int) -> int:
    """Peak bytes of every tensor the model, its optimizer and two steps allocate (counted op by op on
    the simulated device: each new storage's bytes, given back when it dies; not RSS)."""
    devices = DeviceService(simulate={"cpu": 1 << 40})
    tools = resolve_tools(preset)
    with devices.tracking("cpu") as tracker:
        torch.manual_seed(0)
        model = ToyLM(vocab=512, dim=128, heads=4, layers=4)
        prepare(model, tools, blocks=model.blocks, frozen=[model.embed])
        # the host optimizer's buffers and AdamW live on the host: not counted as device memory
        opt = make_optimizer(model, tools, host_context=devices.host, **ADAMW)
        for ids in batches(2, batch, tokens, vocab=512):
            train_step(model, lm_loss, ids, opt, tools)
        del model, opt
    return tracker.peak_bytes


@pytest.mark.parametrize("preset", list(PRESETS))
def test_estimate_covers_the_measured_peak(preset):
    """The estimate from sizes and batch is at or above the step's measured peak, and within 1.6x of it."""
    batch, tokens = 4, 64
    sizes = ToyLM(vocab=512, dim=128, heads=4, layers=4).sizes(tokens)
    estimate = MethodInfo("toy", sizes).memory_bytes(preset, batch)
    peak = measured_peak(preset, batch, tokens)
    print(f"{preset}: estimate {estimate / 2**20:.2f} MB, measured peak {peak / 2**20:.2f} MB")
    assert peak <= estimate <= 1.6 * peak


def test_estimate_scales_with_batch_and_names_fitting_presets():
    method = MethodInfo("toy", ToyLM(vocab=512, dim=128, heads=4, layers=4).sizes(64))
    assert method.memory_mb("fast", 8) > method.memory_mb("fast", 4) > method.memory_mb("fast", 1)
    mbs = [method.memory_mb(p, 4) for p in PRESETS]
    assert mbs == sorted(mbs, reverse=True), mbs
    fits, largest = method.fitting(mbs[2] + 0.01, 4)
    assert fits == ["low", "lowest"] and largest >= 4
    fits, largest = method.fitting(method.memory_mb("lowest", 1) * 0.99, 4)
    assert fits == [] and largest == 0
    with pytest.raises(ValueError, match="batch_size"):
        method.memory_mb("fast", 0)


def test_a_job_that_does_not_fit_is_refused_naming_what_fits():
    from mizuoto.training.estimate import check_fits
    method = MethodInfo("toy", ToyLM(vocab=512, dim=128, heads=4, layers=4).sizes(64))
    check_fits(method, "fast", 4, method.memory_mb("fast", 4) + 1, "cuda:0")           # fits: nothing said
    with pytest.raises(ValueError, match="presets that fit: low, lowest"):
        check_fits(method, "fast", 4, method.memory_mb("low", 4) + 0.01, "cuda:0")
    with pytest.raises(ValueError, match="no preset fits batch_size 64; the largest batch that fits lowest is"):
        check_fits(method, "fast", 64, method.memory_mb("lowest", 4) + 0.01, "cuda:0")
    with pytest.raises(ValueError, match="even batch_size 1"):
        check_fits(method, "fast", 4, 0.1, "cuda:0")


def test_host_context_keeps_host_work_off_the_simulated_device():
    """`DeviceService.host()` inside a tracked block: what it allocates is not counted (and what it frees is
    still given back); outside it every new storage counts; the strict check of device weights stays on."""
    devices = DeviceService(simulate={"cpu": 1 << 30}, strict=True)
    with devices.tracking("cpu") as tracker:
        device_side = torch.ones(1000)                       # 4000 bytes on the device
        with devices.host():
            host_side = torch.ones(250_000)                  # 1 MB on the host
            with pytest.raises(Exception, match="not on the device"):
                torch.empty(3, device="meta") + 1
        counted = devices.memory("cpu").used - tracker.start
        del device_side
    assert counted == 4000 and tracker.peak_bytes == 4000 and host_side.numel() == 250_000
    with devices.tracking("cpu") as tracker:
        torch.ones(250_000)
    assert tracker.peak_bytes == 1_000_000


def test_host_adamw_host_work_is_not_device_memory():
    """The host AdamW's master weights, gradients, staging and moments (16 bytes a parameter and more) land on the
    simulated device's count without its host context and not with it: the device then holds only the model and
    the step's tensors."""
    def peak(host: bool) -> tuple[int, int]:
        devices = DeviceService(simulate={"cpu": 1 << 40})
        tools = resolve_tools("lowest", {"mixed_precision": None, "frozen_half": False})
        with devices.tracking("cpu") as tracker:
            torch.manual_seed(0)
            model = ToyLM()
            opt = make_optimizer(model, tools, **({"host_context": devices.host} if host else {}), **ADAMW)
            for ids in batches(2, 2, 8):
                train_step(model, lm_loss, ids, opt, tools)
            n = sum(p.numel() for p in model.parameters())
            del model, opt
        return tracker.peak_bytes, n
    (without, n), (with_host, _) = peak(False), peak(True)
    assert without - with_host >= 16 * n, (without, with_host, n)


def test_host_adamw_is_a_numerics_change_only_under_mixed_precision():
    """In float32 the host AdamW is torch's AdamW bit for bit (test_lowest_float32_equals_adamw), so the report
    does not name it; with half device weights (rounded from the master) it does."""
    fp32 = resolve_tools("lowest", {"mixed_precision": None, "frozen_half": False})
    assert fp32.host_optimizer and fp32.numerics_changes() == []
    assert resolve_tools("lowest").numerics_changes() == [
        "mixed precision (bfloat16)", "frozen parts in half precision",
        "host-side AdamW (device weights rounded from a float32 master)"]

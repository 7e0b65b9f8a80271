"""The SoVITS (s2) training estimate (s2_memory) against the measured peak of the tensors a step allocates on the
strict simulated device (counted op by op, not RSS): 2 batch sizes x 2 presets on a tiny config whose activations
are a large part of the peak (a 32-wide WaveNet / text encoder, a 64-channel HiFi-GAN, a discriminator narrowed 4x),
so a wrong activation term shows; the estimate covers the peak and stays within 1.6x of it."""
from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.gpt_sovits.s2_job import memory_mb, sovits_loop
from mizuoto.nodes.gpt_sovits.s2_memory import S2Shape, activation_elements, memory_bytes, parameter_bytes
from mizuoto.nodes.gpt_sovits.s2_train import MultiPeriodDiscriminator, S2Batch, S2Hparams, training_generator
from mizuoto.nodes.gpt_sovits.sovits import SoVITSConfig
from mizuoto.runtime import DeviceService
from mizuoto.training import resolve_tools

from gpt_sovits import tiny

pytestmark = pytest.mark.usefixtures("one_thread")
HOP, SEGMENT, DIVISOR = 640, 5120, 4


def config() -> dict:
    hps = copy.deepcopy(tiny.s2_config("v2"))
    hps["train"].update({"segment_size": SEGMENT, "learning_rate": 1e-4, "betas": [0.8, 0.99], "eps": 1e-9})
    hps["model"].update({"hidden_channels": 32, "filter_channels": 32, "upsample_initial_channel": 64,
                         "p_dropout": 0.1})
    return hps


def batches(size: int, frames: int, phones: int, n: int = 2) -> list[S2Batch]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.full((size,), frames)
    return [S2Batch(torch.randn(size, 768, frames, generator=g), lengths,
                    torch.rand(size, 1025, frames, generator=g) + 0.01, lengths,
                    0.5 * torch.tanh(torch.randn(size, 1, frames * HOP, generator=g)), lengths * HOP,
                    torch.randint(1, 732, (size, phones), generator=g), torch.full((size,), phones)) for _ in range(n)]


def networks() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    return (training_generator(SoVITSConfig.from_hparams(config(), "v2", 732, "s2 memory")),
            MultiPeriodDiscriminator("v2", DIVISOR))


def measured(preset: str, data: list[S2Batch], tmp: Path) -> tuple[int, float, int]:
    """(peak bytes of the networks, optimizers and two steps; the estimate; the estimate's activation bytes)."""
    devices = DeviceService(simulate={"cpu": 1 << 34}, strict=True)
    hp = S2Hparams.from_config(config())
    with devices.tracking("cpu") as tracker, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net_g, net_d = networks()
        loop = sovits_loop(net_g, net_d, data, hp, resolve_tools(preset), seed=0, checkpoint=tmp / f"{preset}.pt",
                           options="memory", host_context=devices.host)
        estimate = memory_mb(net_g, net_d, hp, loop.tools, data) * (1 << 20)
        params = parameter_bytes(net_g, net_d, loop.tools)
        loop.run(len(data))
        del loop, net_g, net_d
    return tracker.peak_bytes, estimate, int(estimate / 1.1 - params)


@pytest.mark.parametrize("preset", ["fast", "low", "lowest"])
@pytest.mark.parametrize("batch", [2, 4])
def test_estimate_covers_the_measured_peak(tmp_path, preset, batch):
    peak, estimate, acts = measured(preset, batches(batch, 12, 6), tmp_path)
    print(f"{preset} batch {batch}: estimate {estimate / 2**20:.1f} MB (activations {acts / 2**20:.1f}), "
          f"measured peak {peak / 2**20:.1f} MB")
    assert peak <= estimate <= 1.6 * peak


def test_estimate_follows_the_batch_the_segment_and_the_tools():
    """Activations scale with the clips in a batch and with the segment HiFi-GAN and the discriminator run on;
    checkpointing keeps fewer; bf16 halves the compute-dtype part; the host AdamW moves the moments off the device."""
    net_g, net_d = networks()
    hp = S2Hparams.from_config(config())
    one, two = (activation_elements(net_g, net_d, hp, S2Shape(b, 12, 6), False) for b in (1, 2))
    assert two == (2 * one[0], 2 * one[1])
    longer = S2Hparams.from_config({**config(), "train": {**config()["train"], "segment_size": 2 * SEGMENT}})
    assert sum(activation_elements(net_g, net_d, longer, S2Shape(1, 20, 6), False)) > 1.8 * sum(one)
    assert activation_elements(net_g, net_d, hp, S2Shape(1, 12, 6), True)[0] < 0.7 * one[0]
    shape = S2Shape(4, 12, 6)
    fast, low = (memory_bytes(net_g, net_d, hp, resolve_tools(p), shape) for p in ("fast", "low"))
    lowest = memory_bytes(net_g, net_d, hp, resolve_tools("lowest", {"mixed_precision": None}), shape)
    assert fast > low and fast > lowest
    trainable = sum(p.numel() for m in (net_g, net_d) for p in m.parameters() if p.requires_grad)
    assert parameter_bytes(net_g, net_d, resolve_tools("fast")) - parameter_bytes(
        net_g, net_d, resolve_tools("lowest", {"mixed_precision": None})) == 8 * trainable
    with pytest.raises(ValueError, match="batch_size"):
        memory_bytes(net_g, net_d, hp, resolve_tools("fast"), S2Shape(0, 12, 6))

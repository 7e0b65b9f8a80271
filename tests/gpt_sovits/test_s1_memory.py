"""The GPT (s1) training estimate against the measured peak of the tensors its steps allocate (counted op by
op on the simulated device, not RSS), per preset it offers: five batches, one ScaledAdam update."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.gpt_sovits import s1_train
from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic
from mizuoto.nodes.gpt_sovits.train import method_info
from mizuoto.runtime import DeviceService
from mizuoto.training import resolve_tools

from gpt_sovits import s1_tiny

pytestmark = pytest.mark.usefixtures("one_thread")
CONFIG = {**s1_tiny.CONFIG, "model": {**s1_tiny.CONFIG["model"], "embedding_dim": 128, "hidden_dim": 128, "head": 4,
                                      "n_layer": 4}}


def batches(size: int, phones: int, semantic: int, n: int = 5) -> list[s1_train.S1Batch]:
    g = torch.Generator().manual_seed(0)
    return [s1_train.collate([s1_train.S1Sample(torch.randint(1, 64, (phones,), generator=g),
                                                torch.randint(0, 128, (semantic,), generator=g),
                                                torch.randn(1024, phones, generator=g)) for _ in range(size)], 128)
            for _ in range(n)]


@pytest.mark.parametrize("preset", ["fast", "balanced", "low"])
def test_estimate_covers_the_measured_peak(preset):
    data = batches(4, 40, 120)
    with DeviceService(simulate={"cpu": 1 << 40}).tracking("cpu") as tracker:
        torch.manual_seed(0)
        model = Text2Semantic(T2SConfig.from_dict(CONFIG, "s1 memory")).train()
        recipe = s1_train.S1Recipe(model, s1_train.make_optimizer(model), tools=resolve_tools(preset))
        for i, b in enumerate(data):
            recipe.batch(b, i)
        assert recipe.updates == 1
        estimate = method_info(model, data).memory_bytes(preset, 4)
        del model, recipe
    peak = tracker.peak_bytes
    print(f"{preset}: estimate {estimate / 2**20:.2f} MB, measured peak {peak / 2**20:.2f} MB")
    assert peak <= estimate <= 1.6 * peak

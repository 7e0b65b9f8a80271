"""GPT (s1) training step against upstream GPT-SoVITS (golden fixture from make_s1_train_fixtures.py).

Recorded from upstream's Text2SemanticDecoder.forward_old + ScaledAdam + WarmupCosineLRSchedule under
training_step's rule, nine batches (two updates) with dropout on from a seed. On the recording machine
ours equals upstream bit for bit in float32 and float64 (the script asserts it). Here:

- float64: our losses and weights after the nine batches within tests/golden.py's F64_BOUND of upstream's
  float64 run (float64 rounding of this chain is ~1e-15; a wrong op, constant, dropout draw or learning
  rate moves the weights by >= 1e-4 of their scale: the two updates move them by ~2e-3);
- float32 losses within 1e-5 relative of upstream's float32 ones (summed cross-entropy over ~30 targets
  in float32 on another CPU's kernels moves by ~1e-7 relative; the weights are compared in float64, where
  the first ScaledAdam update, sign(grad) x lr x rms for most elements, cannot flip on rounding);
- ScaledAdam alone over stacked, lone and scalar parameters through the clip and the size update.
"""
from __future__ import annotations

import pytest
import torch

import golden
from gpt_sovits import s1_tiny
from gpt_sovits.tiny import FIXTURES
from mizuoto.nodes.gpt_sovits import s1_train
from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic
from mizuoto.training.scaled_adam import ScaledAdam

pytestmark = [pytest.mark.golden, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def recorded() -> dict[str, torch.Tensor]:
    return torch.load(FIXTURES / "s1_train.pt", weights_only=True)


def run(dtype: torch.dtype) -> tuple[list[float], dict[str, torch.Tensor], int]:
    model = Text2Semantic(T2SConfig.from_dict(s1_tiny.CONFIG, "s1 tiny"))
    model.load_state_dict(s1_tiny.weights())
    model = model.to(dtype).train()
    recipe = s1_train.S1Recipe(model, s1_train.make_optimizer(model))
    torch.manual_seed(s1_tiny.DROPOUT_SEED)
    losses = [recipe.batch(s1_train.S1Batch(**b).to("cpu", dtype), i) for i, b in enumerate(s1_tiny.batches())]
    return losses, model.state_dict(), recipe.updates


def test_float64_steps_equal_upstream(recorded):
    losses, state, updates = run(torch.float64)
    assert updates == 2
    golden.assert_f64(torch.tensor(losses, dtype=torch.float64), recorded["losses.float64"], "losses")
    names = {k.removeprefix("weight.") for k in recorded if k.startswith("weight.")}
    assert names == set(state), sorted(names ^ set(state))
    for name in sorted(names):
        golden.assert_f64(state[name], recorded[f"weight.{name}"], name)


def test_float32_losses_equal_upstream(recorded):
    losses, _, _ = run(torch.float32)
    golden.assert_close(torch.tensor(losses, dtype=torch.float64), recorded["losses.float32"], 1e-5, "float32 losses")


def test_scaled_adam_alone_equals_upstream(recorded):
    params, grads = s1_tiny.optimizer_case()
    opt = ScaledAdam(params.values(), lr=0.05, betas=(0.9, 0.95), clipping_scale=0.5, size_update_period=2,
                     clipping_update_period=4)
    for step_grads in grads:
        for p, g in zip(params.values(), step_grads):
            p.grad = g.clone()
        opt.step()
        opt.zero_grad()
    first = opt.state[params["s1"]]   # the first (dtype, shape) batch: the stacked scalars
    assert first["num_clipped"] > 0 and "model_norm_threshold" in first   # the clip acted
    for name, p in params.items():
        golden.assert_f64(p.detach(), recorded[f"optimizer.{name}"], name)


def test_step_rule_and_locked_rate():
    """Updates at batch_idx 4 and 8 of an epoch (not 0), first at 0.01, then 0.002."""
    model = Text2Semantic(T2SConfig.from_dict(s1_tiny.CONFIG, "s1 tiny"))
    model.load_state_dict(s1_tiny.weights())
    model.train()
    opt = s1_train.make_optimizer(model)
    recipe = s1_train.S1Recipe(model, opt)
    batch = s1_train.S1Batch(**s1_tiny.batches()[0])
    seen = []
    for i in range(9):
        before = model.bert_proj.weight.detach().clone()
        lr = opt.param_groups[0]["lr"]
        recipe.batch(batch, i)
        if not torch.equal(before, model.bert_proj.weight):
            seen.append((i, lr))
    assert seen == [(4, 0.01), (8, 0.002)]

"""The SoVITS (s2) stage's interrupt and resume on the tiny s2 case (s2_tiny, discriminator narrowed 16x):
the checkpoint an interrupt writes (G and D, both AdamW, both ExponentialLR, step, data order, RNG states)
resumes to the uninterrupted run's losses and weights, torch.equal; the `low` / `lowest` tools in float32 equal
`fast`. About a second a step: `slow`."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpt_sovits import s2_tiny
from mizuoto.nodes.gpt_sovits.s2_job import sovits_loop
from mizuoto.nodes.gpt_sovits.s2_train import S2Batch, S2Hparams
from mizuoto.training import resolve_tools
from mizuoto.training.job import Interrupted, TrainLoop

pytestmark = pytest.mark.usefixtures("one_thread")


def make_loop(path: Path, preset: str = "fast", method: dict | None = None, options: str = "tiny") -> TrainLoop:
    net_g, net_d = s2_tiny.networks()
    data = [S2Batch(**b) for b in s2_tiny.batches()]
    return sovits_loop(net_g, net_d, data, S2Hparams.from_config(s2_tiny.config()), resolve_tools(preset, method),
                       seed=11, checkpoint=path, options=options)


def weights(loop: TrainLoop) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in loop.model.state_dict().items()}


@pytest.mark.slow
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    steps, k = 4, 3      # 2 batches an epoch: the interrupt falls inside epoch 2, after the schedulers' first step
    whole = make_loop(tmp_path / "whole.pt")
    whole.run(steps)

    first = make_loop(tmp_path / "job.pt")
    with pytest.raises(Interrupted) as info:
        first.run(steps, interrupted=lambda: first.step == k)
    assert info.value.step == k and (tmp_path / "job.pt").is_file() and not list(tmp_path.glob("*.partial"))
    saved = torch.load(tmp_path / "job.pt", weights_only=True)
    assert {n.split(".")[0] for n in saved["model"]} == {"g", "d"}
    assert set(saved["optimizer"]) == {"g", "d", "schedulers"} and len(saved["optimizer"]["schedulers"]) == 2
    assert saved["step"] == k and len(saved["epoch"]) == 1 and saved["extra"]["job"] == "tiny"

    torch.manual_seed(12345)   # whatever ran meanwhile does not leak into the resumed job
    resumed = make_loop(tmp_path / "job.pt")
    resumed.resume()
    assert resumed.step == k
    resumed.run(steps)
    assert resumed.losses == whole.losses
    assert resumed.extra.history == whole.extra.history                    # all six losses of every step
    a, b = weights(resumed), weights(whole)
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    for opt in ("optim_g", "optim_d"):
        ours, ref = getattr(resumed.optimizer, opt), getattr(whole.optimizer, opt)
        assert [g["lr"] for g in ours.param_groups] == [g["lr"] for g in ref.param_groups]
        for p, q in zip((p for g in ours.param_groups for p in g["params"]),
                        (q for g in ref.param_groups for q in g["params"])):
            mine, theirs = ours.state.get(p, {}), ref.state.get(q, {})     # none for ssl_proj (frozen: no grad)
            assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)

    with pytest.raises(ValueError, match="other options"):
        make_loop(tmp_path / "job.pt", options="other").resume()


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["low", "lowest"])
def test_low_presets_in_float32_equal_fast(tmp_path, preset):
    """`low`'s gradient checkpointing (WaveNets, HiFi-GAN residual blocks, sub-discriminators: recomputed with
    the forward's RNG state) and `lowest`'s host-side AdamW (both AdamW in their groups, ExponentialLR on its
    inner optimizer) change no number by themselves: with float32 weights (mixed precision off, what a
    method's hyperparameters can ask) three steps, an epoch's end included, equal `fast`'s bit for bit."""
    fast = make_loop(tmp_path / "fast.pt")
    fast.run(3)
    ours = make_loop(tmp_path / f"{preset}.pt", preset, {"mixed_precision": None})
    assert ours.tools.gradient_checkpointing and ours.tools.host_optimizer == (preset == "lowest")
    g = ours.model["g"]
    assert all("forward" in vars(m) for m in (g.enc_q.enc, g.dec.resblocks[0], ours.model["d"].discriminators[0]))
    assert not g.ssl_proj.weight.requires_grad and g.ssl_proj.weight.dtype == torch.float32
    ours.run(3)
    assert ours.losses == fast.losses and ours.extra.history == fast.extra.history
    a, b = weights(ours), weights(fast)
    assert all(torch.equal(a[n], b[n]) for n in a)
    if preset == "lowest":
        assert make_loop(tmp_path / "default.pt", "lowest").tools.mixed_precision is None   # the stage keeps float32
        assert [g["lr"] for g in ours.optimizer.optim_g.param_groups] == \
            [g["lr"] for g in fast.optimizer.optim_g.param_groups]

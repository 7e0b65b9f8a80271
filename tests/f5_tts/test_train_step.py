"""F5-TTS fine-tuning's step against upstream's (fixtures/train_step.safetensors: make_train_fixtures.py).

From the same initial weights, clips, texts and seed: the prepared batch (mel, lengths, ids), the two
steps' losses, the weights after them and the EMA's. Golden (recorded on another run of the reference
venv, float32 CPU): the batch torch.equal (the same float32 ops on the same inputs), the losses within
1e-5 relative, the weights within 1e-6 absolute (the second update moves weights by ~1e-3 (lr);
kernel-order rounding in the forward / backward changes an update by far less than a thousandth of
that) and the EMA's move from the initial weights (~1% of the update) within 0.1% of upstream's. Live (with $F5_TTS_REF_PYTHON, and $F5_TTS_REF_SITE for ema_pytorch): the script runs now on
this machine and everything is torch.equal.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from f5_tts import train_case as recipe
from f5_tts.train_case import TRAIN_ARCH
from f5_tts.tiny import MEL, vocab_tokens, write_vocab
from mizuoto.nodes.blocks.vocoder import MelSpectrogramFeatures
from mizuoto.nodes.f5_tts.model import DiT, DiTConfig
from mizuoto.nodes.f5_tts.text import F5Tokenizer
from mizuoto.nodes.f5_tts.train import prepare_clip
from mizuoto.nodes.f5_tts.train_step import EMA, F5Recipe, collate, make_optimizer, make_scheduler
from mizuoto.training.memory import resolve_tools

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "fixtures" / "train_step.safetensors"
pytestmark = pytest.mark.usefixtures("one_thread")


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def ours(tmp_path: Path, golden: dict[str, torch.Tensor], meta: dict[str, str]) -> dict[str, object]:
    write_vocab(tmp_path)
    tokenizer = F5Tokenizer(tmp_path / "vocab.txt")
    mel = MelSpectrogramFeatures(MEL["target_sample_rate"], MEL["n_fft"], MEL["hop_length"], MEL["n_mel_channels"],
                                 "center", floor=1e-5, win_length=MEL["win_length"])
    texts = json.loads(meta["texts"])
    samples = [prepare_clip(wav, rate, text, mel, tokenizer, MEL["target_sample_rate"])
               for (wav, rate), text in zip(recipe.clips(), texts)]
    batch = collate(samples)
    cfg = DiTConfig.from_arch(TRAIN_ARCH, mel_dim=MEL["n_mel_channels"], vocab_size=len(vocab_tokens()), source="tiny")
    dit = DiT(cfg)
    dit.load_state_dict({k[5:]: v for k, v in golden.items() if k.startswith("init.")})
    tools = resolve_tools("fast")
    optimizer = make_optimizer(dit, tools, lr=float(meta["lr"]))
    scheduler = make_scheduler(optimizer, int(meta["warmup"]), int(meta["total"]))
    ema = EMA(dit, step=int(meta["ema_step"]), initted=True)
    dit.train()
    torch.manual_seed(int(meta["seed"]))
    step = F5Recipe(dit, optimizer, scheduler, ema, tools, seed=int(meta["seed"]))
    lrs, losses = [], []
    for _ in range(recipe.STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        losses.append(step.batch(batch))
    return {"batch": batch, "losses": losses, "lrs": lrs, "after": dit.state_dict(), "ema": ema.shadow}


def compare(got: dict[str, object], golden: dict[str, torch.Tensor], exact: bool) -> None:
    batch = got["batch"]
    assert torch.equal(batch.mel, golden["mel"]) and torch.equal(batch.lens, golden["lens"])
    assert torch.equal(batch.text, golden["text"])
    assert got["lrs"] == golden["lrs"].tolist()
    losses = torch.tensor(got["losses"], dtype=torch.float32)
    after = {k[6:]: v for k, v in golden.items() if k.startswith("after.")}
    ema = {k[4:]: v for k, v in golden.items() if k.startswith("ema.")}
    assert set(after) == set(got["after"]) and set(ema) <= set(got["ema"])
    init = {k[5:]: v for k, v in golden.items() if k.startswith("init.")}
    moved = sum(not torch.equal(init[k], after[k]) for k in after)
    assert moved > len(after) // 2          # the step changes the weights (the test can fail)
    if exact:
        assert torch.equal(losses, golden["losses"])
        for k in after:
            assert torch.equal(got["after"][k], after[k]), k
            assert torch.equal(got["ema"][k], ema[k]), k
    else:
        torch.testing.assert_close(losses, golden["losses"], rtol=1e-5, atol=0)
        for k in after:
            torch.testing.assert_close(got["after"][k], after[k], rtol=0, atol=1e-6, msg=k)
            # the EMA moves by ~1% of the update: its move from the initial weights, to 0.1%
            torch.testing.assert_close(got["ema"][k] - init[k], ema[k] - init[k], rtol=1e-3, atol=1e-9, msg=k)


def test_two_steps_equal_the_golden_upstream_steps(tmp_path):
    golden, meta = read(GOLDEN)
    compare(ours(tmp_path, golden, meta), golden, exact=False)


@pytest.mark.skipif(not os.environ.get("F5_TTS_REF_PYTHON"), reason="live parity needs the reference venv "
                    "($F5_TTS_REF_PYTHON with f5-tts 1.1.22; $F5_TTS_REF_SITE for ema_pytorch); the golden test "
                    "above stands in for it")
def test_two_steps_equal_upstream_live(tmp_path):
    out = tmp_path / "live.safetensors"
    subprocess.run([os.environ["F5_TTS_REF_PYTHON"], str(HERE / "make_train_fixtures.py"), str(out)], check=True,
                   env={**os.environ, "PYTHONPATH": ""})
    golden, meta = read(out)
    compare(ours(tmp_path, golden, meta), golden, exact=True)


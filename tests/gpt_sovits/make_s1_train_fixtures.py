"""Record the GPT (s1) training golden fixture from upstream GPT-SoVITS, and check ours against it live.

    GPT_SOVITS_REPO=<upstream checkout at 48b1a01> "$REF_VENV"/bin/python tests/gpt_sovits/make_s1_train_fixtures.py

The reference venv needs torch==2.13.0, torchmetrics, tqdm, matplotlib (what AR/ imports) and this worktree
installed with --no-deps (tests/gpt_sovits/README.md). No Lightning: upstream's
`Text2SemanticLightningModule.training_step` and `configure_optimizers` are a few lines, repeated below
with upstream's own classes (Text2SemanticDecoder.forward_old, ScaledAdam, WarmupCosineLRSchedule);
under `precision: 32` Lightning's manual_backward is loss.backward() and its optimizer step calls
ScaledAdam.step with a closure that does nothing.

From the same weights (s1_tiny.weights), batches (s1_tiny.batches) and dropout seed, upstream and ours run
nine training_steps (two updates). Asserted here: float32 losses and weights torch.equal (this machine),
float64 within 1e-11 of upstream's scale. Written: fixtures/s1_train.pt with upstream's float64 losses and
weights after the nine batches, and its float32 losses (tests/gpt_sovits/test_s1_train.py).
"""
from __future__ import annotations

import math
import os
import sys
import types
from pathlib import Path

import torch

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parent
REPO = Path(os.environ["GPT_SOVITS_REPO"]) if os.environ.get("GPT_SOVITS_REPO") else None
if REPO is None or not (REPO / "GPT_SoVITS" / "AR" / "models" / "t2s_model.py").is_file():
    sys.exit("set $GPT_SOVITS_REPO to RVC-Boss/GPT-SoVITS at 48b1a01 unpacked outside this repository")
sys.path[:0] = [str(HERE.parent), str(REPO / "GPT_SoVITS")]

from AR.models.t2s_model import Text2SemanticDecoder  # noqa: E402
from AR.modules.embedding import SinePositionalEmbedding  # noqa: E402
from AR.modules.lr_schedulers import WarmupCosineLRSchedule  # noqa: E402
from AR.modules.optim import ScaledAdam as UpScaledAdam  # noqa: E402

import golden  # noqa: E402
from gpt_sovits import s1_tiny  # noqa: E402
from mizuoto.nodes.gpt_sovits import s1_train  # noqa: E402
from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic  # noqa: E402
from mizuoto.training.scaled_adam import ScaledAdam  # noqa: E402

S1LONGER_V2 = {"lr": 0.01, "lr_init": 0.00001, "lr_end": 0.0001, "warmup_steps": 2000, "decay_steps": 40000}


def extend_pe_f64(self, x):
    """SinePositionalEmbedding.extend_pe with its float32 aranges in x's dtype (the float64 run)."""
    if self.pe is not None and self.pe.size(1) >= x.size(1):
        self.pe = self.pe.to(dtype=x.dtype, device=x.device)
        return
    pe = torch.zeros(x.size(1), self.embedding_dim, dtype=x.dtype)
    position = torch.arange(0, x.size(1), dtype=x.dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, self.embedding_dim, 2, dtype=x.dtype) * -(math.log(10000.0) / self.embedding_dim))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    self.pe = pe.unsqueeze(0).detach()


def upstream(dtype: torch.dtype) -> tuple[list[float], dict[str, torch.Tensor]]:
    config = {**s1_tiny.CONFIG, "optimizer": S1LONGER_V2}
    model = Text2SemanticDecoder(config=config, top_k=3)
    missing = model.load_state_dict(s1_tiny.weights(), strict=False)
    assert not missing.unexpected_keys and all(k.startswith("ar_accuracy") for k in missing.missing_keys), missing
    model = model.to(dtype)
    if dtype == torch.float64:
        for m in model.modules():
            if isinstance(m, SinePositionalEmbedding):
                length = m.pe.size(1)
                m.pe = None
                m.extend_pe = types.MethodType(extend_pe_f64, m)
                m.extend_pe(torch.zeros(1, length, dtype=dtype))
    model.train()
    # configure_optimizers
    opt = UpScaledAdam(model.parameters(), lr=0.01, betas=(0.9, 0.95), clipping_scale=2.0,
                       parameters_names=[[n for n, _ in model.named_parameters()]], show_dominant_parameters=False,
                       clipping_update_period=1000)
    o = config["optimizer"]
    scheduler = WarmupCosineLRSchedule(opt, init_lr=o["lr_init"], peak_lr=o["lr"], end_lr=o["lr_end"],
                                       warmup_steps=o["warmup_steps"], total_steps=o["decay_steps"])
    torch.manual_seed(s1_tiny.DROPOUT_SEED)
    losses = []
    for batch_idx, b in enumerate(s1_tiny.batches()):   # training_step
        loss, _acc = model.forward_old(b["phoneme_ids"], b["phoneme_ids_len"], b["semantic_ids"],
                                       b["semantic_ids_len"], b["bert_feature"].to(dtype))
        loss.backward()
        if batch_idx > 0 and batch_idx % 4 == 0:
            opt.step(closure=lambda: None)
            opt.zero_grad()
            scheduler.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("ar_accuracy")}


def ours(dtype: torch.dtype) -> tuple[list[float], dict[str, torch.Tensor]]:
    model = Text2Semantic(T2SConfig.from_dict(s1_tiny.CONFIG, "s1 tiny"))
    model.load_state_dict(s1_tiny.weights())
    model = model.to(dtype).train()
    recipe = s1_train.S1Recipe(model, s1_train.make_optimizer(model))
    torch.manual_seed(s1_tiny.DROPOUT_SEED)
    losses = [recipe.batch(s1_train.S1Batch(**b).to("cpu", dtype), i) for i, b in enumerate(s1_tiny.batches())]
    assert recipe.updates == 2
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def optimizer_case(cls, **extra) -> dict[str, torch.Tensor]:
    """ScaledAdam alone over s1_tiny.optimizer_case's parameters with short periods, so that 12 steps reach
    the size update, the clip (threshold from the median norm) and the scalar paths."""
    params, grads = s1_tiny.optimizer_case()
    opt = cls(params.values(), lr=0.05, betas=(0.9, 0.95), clipping_scale=0.5, size_update_period=2,
              clipping_update_period=4, **extra)
    for step_grads in grads:
        for p, g in zip(params.values(), step_grads):
            p.grad = g.clone()
        opt.step()
        opt.zero_grad()
    return {k: v.detach() for k, v in params.items()}


out: dict[str, torch.Tensor] = {}
up_opt = optimizer_case(UpScaledAdam, parameters_names=[list(s1_tiny.optimizer_case()[0])], show_dominant_parameters=False)
our_opt = optimizer_case(ScaledAdam)
err = max(golden.relative_error(our_opt[k], up_opt[k]) for k in up_opt)
print(f"ScaledAdam alone (float64, clip and size update reached): ours vs upstream {err:.3g}")
assert err < 1e-12
out.update({f"optimizer.{k}": v for k, v in up_opt.items()})
for dtype in (torch.float32, torch.float64):
    up_losses, up_w = upstream(dtype)
    our_losses, our_w = ours(dtype)
    assert sorted(up_w) == sorted(our_w), sorted(set(up_w) ^ set(our_w))
    start = s1_tiny.weights()
    moved = max(golden.relative_error(up_w[k].double(), start[k].double()) for k in up_w)
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.float32:
        assert up_losses == our_losses, (up_losses, our_losses)
        unequal = [k for k in up_w if not torch.equal(up_w[k], our_w[k])]
        assert not unequal, f"float32 weights differ: {unequal}"
        print(f"float32: losses and weights torch.equal; losses {['%.4f' % x for x in up_losses]}")
    else:
        err = max(golden.relative_error(our_w[k], up_w[k]) for k in up_w)
        lerr = max(abs(a - b) / abs(b) for a, b in zip(our_losses, up_losses))
        print(f"float64: ours vs upstream weights {err:.3g}, losses {lerr:.3g}")
        assert err < 1e-11 and lerr < 1e-11
        for k, v in up_w.items():
            out[f"weight.{k}"] = v
    print(f"  {name}: weights moved by up to {moved:.3g} of their scale")
    out[f"losses.{name}"] = torch.tensor(up_losses, dtype=torch.float64)
torch.save(out, HERE / "fixtures" / "s1_train.pt")
print("wrote", HERE / "fixtures" / "s1_train.pt", sum(v.numel() * v.element_size() for v in out.values()), "bytes")

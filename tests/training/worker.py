"""Module-level targets for the spawned training process (the child imports them by name)."""
from __future__ import annotations

import os
import sys


def report_env(names: list[str]) -> dict:
    import torch
    from mizuoto.training import resolve_tools
    from mizuoto.training.step import make_optimizer, train_step

    from .toy import ToyLM, batches, lm_loss
    torch.manual_seed(0)
    model = ToyLM()
    tools = resolve_tools("fast")
    opt = make_optimizer(model, tools, lr=1e-3)
    losses = [train_step(model, lm_loss, ids, opt, tools) for ids in batches(2, 2, 8)]
    return {"env": {n: os.environ.get(n) for n in names}, "pid": os.getpid(), "losses": losses,
            "cuda_initialized": "torch.cuda" in sys.modules and torch.cuda.is_initialized()}


def fail() -> None:
    raise ValueError("dataset clip 3 is silent")

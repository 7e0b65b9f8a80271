"""A GPT-SoVITS fine-tuning job: list file -> prepared samples -> GPT (s1) and SoVITS (s2) training -> a voice.

`train_voice(S1Job(...))` runs in the calling process (`training.job.run_in_process` puts it in its own);
the base voice is read with our loader, the clips prepared through its pieces (s1_data), the GPT trained
with upstream's recipe (s1_train) in a resumable `TrainLoop`, and the voice exported atomically beside
the base voice (export). Batches: the samples sorted by semantic length and cut into `batch_size` groups
(upstream's bucket sampler groups by length too), their order shuffled each epoch from `seed`.
With `sovits_epochs` the SoVITS stage (s2_job: upstream's s2_train recipe) follows, from the same list
file, and its weights are exported as the new voice's SoVITS file; without it the new voice pairs its GPT
with the base voice's SoVITS file. `epochs` 0 trains the SoVITS alone (the base GPT is exported as is).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...training.datasets import read_list
from ...training.estimate import MethodInfo, TransformerSizes, check_fits
from ...training.job import TrainLoop, TrainResult, check_counts
from ...training.memory import resolve_tools
from ..formats.checkpoint import load_pickle
from ...training.export import check_name
from .export import export_voice
from .loader import load_gpt_sovits, pair
from .s1_data import MAX_SEC, S1Preparer, repeat_small
from .s1_train import S1Batch, S1Recipe, collate, make_optimizer

MAX_EPOCHS = 10_000
MAX_BATCH = 512
S1LONGER_V2 = {"train": {"seed": 1234, "epochs": 20, "batch_size": 8, "precision": "32"},
               "optimizer": {"lr": 0.01, "lr_init": 0.00001, "lr_end": 0.0001, "warmup_steps": 2000,
                             "decay_steps": 40000},
               "data": {"max_eval_sample": 8, "max_sec": MAX_SEC, "num_workers": 4, "pad_val": 1024}}


@dataclass(frozen=True)
class S1Job:
    base: Path                       # the base voice folder (models/TTS/gpt_sovits/<voice>)
    list_file: Path                  # path|speaker|language|text
    save_name: str
    audio_dir: Path | None = None
    epochs: int = 15                 # the webui's GPT default
    batch_size: int = 8
    seed: int = 1234
    preset: str = "fast"
    device: str = "cpu"
    checkpoint: Path | None = None   # resumable job state (default: beside the base voice, hidden)
    sovits_epochs: int = 0           # the SoVITS (s2) stage after the GPT's (0: keep the base SoVITS)
    discriminator: Path | None = None   # a pretrained s2D*.pth for the SoVITS stage (else seeded init)


def check_job(job: S1Job) -> None:
    check_name(job.save_name)
    check_counts((("epochs", job.epochs, 0, MAX_EPOCHS), ("batch_size", job.batch_size, 1, MAX_BATCH),
                  ("sovits_epochs", job.sovits_epochs, 0, MAX_EPOCHS)))
    if job.epochs == 0 and job.sovits_epochs == 0:
        raise ValueError("epochs = 0 and sovits_epochs = 0: nothing to train; give one of them at least 1")
    if job.discriminator is not None and not Path(job.discriminator).is_file():
        raise ValueError(f"discriminator = {str(job.discriminator)!r}: no such file (an s2D*.pth)")
    resolve_tools(job.preset)


def make_job(**options: Any) -> S1Job:
    """An S1Job from the Trainer options (registry.Trainer), checked."""
    job = S1Job(**options)
    check_job(job)
    return job


def batches(samples: list, batch_size: int, pad: int) -> list[S1Batch]:
    order = sorted(range(len(samples)), key=lambda i: (samples[i].semantic_ids.numel(), i))
    return [collate([samples[i] for i in order[k:k + batch_size]], pad) for k in range(0, len(order), batch_size)]


def method_info(model: torch.nn.Module, data: list[S1Batch]) -> MethodInfo:
    """Sizes for the estimate: every parameter trained, the longest batch's phones + semantic tokens + EOS."""
    cfg = model.cfg
    tokens = max(int(b.phoneme_ids.shape[1] + b.semantic_ids.shape[1] + 1) for b in data)
    # forward_old's attention: a float mask with dropout keeps 3 score matrices per head (SDPA's math path);
    # its three dropouts keep masks of 1 + 4 + 1 hidden widths per token
    sizes = TransformerSizes(trainable=sum(p.numel() for p in model.parameters()), frozen=0, layers=cfg.layers,
                             hidden=cfg.hidden_dim, vocab=cfg.vocab_size, tokens_per_sample=tokens, heads=cfg.heads,
                             saved_scores=3, extra_saved_per_token=6)
    # ScaledAdam: delta + exp_avg_sq as state; a step stacks the parameters and their grads (8 bytes each)
    # and makes four float32 temporaries of one (dtype, shape) batch at a time (the published model's largest,
    # the 24 linear1 weights, is a third of it: ~6 bytes a parameter)
    return MethodInfo("gpt_sovits.s1", sizes, optimizer_state_bytes=8, optimizer_temp_bytes=14)


def train_voice(job: S1Job, progress: Callable[[str, int, int, float | None], None] | None = None,
                interrupted: Callable[[], bool] = lambda: False) -> TrainResult:
    """Run the job: the GPT stage (`epochs` > 0), then the SoVITS stage (`sovits_epochs` > 0), then export;
    `progress(stage, done, total, loss)` for "prepare", "train", "prepare sovits" and "train sovits"."""
    check_job(job)
    base = Path(job.base)
    ckpt_path, _ = pair(base)
    base_config = load_pickle(ckpt_path)["config"]
    bundle = load_gpt_sovits(base, torch.float32)
    entries = read_list(job.list_file, job.audio_dir)
    tools = resolve_tools(job.preset)
    device = torch.device(job.device)
    options = (f"base={base.resolve()} list={Path(job.list_file).resolve()} clips={len(entries)} epochs={job.epochs} "
               f"batch_size={job.batch_size} seed={job.seed} preset={job.preset}")
    model = bundle.t2s
    losses: list[float] = []
    steps = updates = 0
    per_step = estimate = 0.0
    numerics = [n for n in tools.numerics_changes() if not n.startswith("frozen")]   # both stages train everything
    checkpoint = Path(job.checkpoint) if job.checkpoint else base.parent / f".{job.save_name}.train-state.pt"
    if job.epochs:
        samples = S1Preparer(bundle).prepare(
            entries, progress=(lambda d, t: progress("prepare", d, t, None)) if progress else None)
        data = batches(repeat_small(samples), job.batch_size, model.cfg.eos)
        info = method_info(model, data)
        estimate = info.memory_mb(job.preset, job.batch_size)
        if device.type == "cuda":
            check_fits(info, job.preset, job.batch_size, torch.cuda.mem_get_info(device)[0] / (1 << 20), str(device))
        model = model.to(device).train()
        model.requires_grad_(True)
        optimizer = make_optimizer(model)
        recipe = S1Recipe(model, optimizer, float(base_config.get("model", {}).get("dropout", 0) or 0), tools, options)
        loop = TrainLoop(model, optimizer, data, None, tools, seed=job.seed,
                         checkpoint=checkpoint, step=recipe.batch, extra=recipe)
        if checkpoint.is_file():
            try:
                loop.resume()
            except ValueError as e:
                raise ValueError(f"save_name {job.save_name!r}: {e}; run it with those options to resume, or delete "
                                 f"{checkpoint} to start over") from None
        total = job.epochs * len(data)
        start, first = time.perf_counter(), loop.step
        if loop.step < total:
            loop.run(total, progress=(lambda s, n, loss: progress("train", s, n, loss)) if progress else None,
                     interrupted=interrupted)
        per_step = (time.perf_counter() - start) / max(1, loop.step - first)
        losses, steps, updates = list(loop.losses), loop.step, recipe.updates
    sovits = None
    if job.sovits_epochs:
        from .s2_job import train_sovits       # the SoVITS stage's modules only when it runs
        if job.epochs:          # the finished GPT stage's state stays until the job is done (a resume skips it)
            loop.save()
        s2 = train_sovits(base, bundle, entries, save_name=job.save_name, epochs=job.sovits_epochs,
                          batch_size=job.batch_size, seed=job.seed, tools=tools, device=job.device,
                          checkpoint=checkpoint.with_name(checkpoint.name.replace(".train-state", ".sovits-state")),
                          discriminator=job.discriminator, options=options + f" sovits_epochs={job.sovits_epochs}",
                          progress=progress, interrupted=interrupted)
        sovits = s2.checkpoint
        losses, steps = losses + s2.losses, steps + s2.steps
        per_step = per_step if job.epochs else s2.seconds_per_step
        estimate = max(estimate, s2.estimate_mb)
        numerics += s2.notes
    config: dict[str, Any] = {**S1LONGER_V2, "model": dict(base_config["model"])}
    config["train"] = {**config["train"], "epochs": job.epochs, "batch_size": job.batch_size, "seed": job.seed,
                       "exp_name": job.save_name}
    voice = export_voice(base, job.save_name, model.eval().to("cpu"), config, job.epochs, sovits=sovits)
    checkpoint.unlink(missing_ok=True)
    checkpoint.with_name(checkpoint.name.replace(".train-state", ".sovits-state")).unlink(missing_ok=True)
    return TrainResult(voice, losses, steps, updates, per_step, estimate, numerics)

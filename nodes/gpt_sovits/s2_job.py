"""The SoVITS (s2) stage of a GPT-SoVITS fine-tuning job: prepared clips -> s2_train's recipe -> a SoVITS file.

The generator starts from the base voice's SoVITS file as upstream loads `pretrained_s2G` (its `weight`
dict, weight-norm pairs unfolded, strict=False): a fine-tuned voice's file has no `enc_q` (savee drops
it), which then keeps the seeded initialisation, as upstream's would. The discriminator loads
`discriminator` (an s2D*.pth from the lj1995 downloads: its `weight` dict) or, without one, starts from
the seeded initialisation as upstream does when `pretrained_s2D` is empty. Batches: the samples (a
dataset under 100 clips repeated as data_utils does) sorted by spectrogram length and cut into
`batch_size` groups (upstream's bucket sampler groups by length too), their order shuffled each epoch
from the seed; the schedulers step at each epoch's end. Resumable through `TrainLoop`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...training.datasets import ListEntry
from ...training.job import TrainLoop
from ...training.step import prepare
from ...training.memory import Tools
from ..formats.checkpoint import load_pickle, load_pickle_with_records, state_dict
from .export import sovits_checkpoint
from .loader import GPTSoVITS, pair
from .s1_data import S1Preparer, clip_name
from .s2_memory import S2Shape, memory_bytes
from .s2_data import S2Preparer, S2Sample, collate
from .s2_train import (MultiPeriodDiscriminator, S2Batch, S2Hparams, make_optimizers, make_schedulers,
                       settle_scripted_gate, train_step,
                       training_generator)

MIN_DATASET = 100

@dataclass
class S2StageResult:
    checkpoint: tuple[str, bytes]     # (file name, sovits_checkpoint's bytes) for export_voice
    losses: list[float]
    steps: int
    seconds_per_step: float
    estimate_mb: float
    notes: list[str]


class _Optimizers:
    """The two AdamW and their schedulers as one `optimizer` for TrainLoop's checkpoint."""

    def __init__(self, optim_g: torch.optim.Optimizer, optim_d: torch.optim.Optimizer, schedulers: list) -> None:
        self.optim_g, self.optim_d, self.schedulers = optim_g, optim_d, schedulers

    def state_dict(self) -> dict[str, Any]:
        return {"g": self.optim_g.state_dict(), "d": self.optim_d.state_dict(),
                "schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optim_g.load_state_dict(state["g"])
        self.optim_d.load_state_dict(state["d"])
        for s, st in zip(self.schedulers, state["schedulers"]):
            s.load_state_dict(st)


class S2Recipe:
    """One batch per step (D then G); the schedulers step after an epoch's last batch."""

    def __init__(self, nets: nn.ModuleDict, optimizers: _Optimizers, hp: S2Hparams, batches: int,
                 autocast: torch.dtype | None, job: str) -> None:
        self.nets, self.opt, self.hp, self.batches, self.autocast, self.job = nets, optimizers, hp, batches, autocast, job
        self.history: list[list[float]] = []

    def batch(self, batch: Any, batch_idx: int) -> float:
        device = next(self.nets.parameters()).device
        losses = train_step(self.nets["g"], self.nets["d"], self.opt.optim_g, self.opt.optim_d,
                            batch.to(device), self.hp, self.autocast)
        if batch_idx == self.batches - 1:
            for s in self.opt.schedulers:
                s.step()
        self.history.append(losses.as_list())
        return losses.gen + losses.fm + losses.mel + losses.kl

    def state_dict(self) -> dict[str, Any]:
        return {"job": self.job, "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("job", "") != self.job:
            raise ValueError(f"the saved SoVITS training state was made with other options ({state.get('job')!r}, "
                             f"now {self.job!r})")
        self.history = [list(x) for x in state["history"]]


def base_generator_state(base: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The base voice's SoVITS `weight` dict (weight-norm pairs as stored) and its config."""
    _, path = pair(base)
    obj = load_pickle_with_records(path, ("utils.HParams",))
    if not isinstance(obj, dict) or "weight" not in obj or not isinstance(obj.get("config"), dict):
        raise ValueError(f"{path}: expected a GPT-SoVITS SoVITS checkpoint (a dict with 'weight' and 'config')")
    return state_dict(obj, path, key="weight"), obj["config"]


def memory_mb(net_g: nn.Module, net_d: nn.Module, hp: S2Hparams, tools: Tools, data: list[S2Batch]) -> float:
    """The step's estimated peak (s2_memory: parameters, optimizer state, weight-norm copies and the activations of
    the largest batch: its clips, its longest spectrogram and phone sequence), with the tools the stage runs."""
    shape = S2Shape(max(b.spec.shape[0] for b in data), max(b.spec.shape[-1] for b in data),
                    max(b.text.shape[-1] for b in data))
    return memory_bytes(net_g, net_d, hp, tools, shape) / (1 << 20)


def check_segments(entries: list[ListEntry], samples: list[S2Sample], frames: int) -> None:
    """Upstream's bucket sampler drops clips shorter than one segment (its first boundary): refused by name."""
    for entry, s in zip(entries, samples):
        if s.spec.shape[-1] < frames:
            raise ValueError(f"{clip_name(entry)}: {s.spec.shape[-1]} spectrogram frames; the SoVITS recipe slices "
                             f"{frames}-frame segments (clips of at least {frames / 50:.2f} s)")


def sovits_loop(net_g: nn.Module, net_d: nn.Module, data: list[S2Batch], hp: S2Hparams, tools: Tools, *, seed: int,
                checkpoint: Path, options: str,
                host_context: Callable[[], AbstractContextManager[Any]] = nullcontext) -> TrainLoop:
    """Both networks (on their device), their optimizers and schedulers in a resumable TrainLoop: one batch a
    step; its checkpoint holds G and D, both optimizers, both schedulers, the step, the data order and the RNG
    states (TrainLoop's), and `options`, which a resume must match. `host_context` wraps the host AdamW's
    host-side work (lowest; `DeviceService.host` keeps it off a simulated device's count)."""
    settle_scripted_gate()
    if tools.host_optimizer:
        # half device weights do not run through this forward (the channel LayerNorm meets float32 activations:
        # "mixed dtype (CPU)"), so lowest keeps float32 weights and compute: the host AdamW then rounds nothing
        # and lowest's numbers are fast's (test_s2_resume.py)
        tools = replace(tools, mixed_precision=None)
    nets = nn.ModuleDict({"g": net_g, "d": net_d}).train()
    # checkpointed: each WaveNet (enc_q's and the flow's), each HiFi-GAN residual block and each sub-discriminator
    # (recomputed with the forward's RNG state: the same dropout masks, the same numbers); frozen as upstream's
    # freeze_quantizer (ssl_proj and the quantizer), never in half: the nearest-code search would pick other codes
    blocks = [net_g.enc_q.enc, *(f.enc for f in net_g.flow.flows if hasattr(f, "enc")), *net_g.dec.resblocks,
              *net_d.discriminators]
    prepare(nets, replace(tools, frozen_half=False), blocks=blocks, frozen=[net_g.ssl_proj, net_g.quantizer])
    optim_g, optim_d = make_optimizers(net_g, net_d, hp, host=tools.host_optimizer, host_context=host_context)
    optimizers = _Optimizers(optim_g, optim_d, make_schedulers((optim_g, optim_d), hp))
    recipe = S2Recipe(nets, optimizers, hp, len(data), tools.mixed_precision, options)
    return TrainLoop(nets, optimizers, data, None, tools, seed=seed, checkpoint=checkpoint, step=recipe.batch,
                     extra=recipe)


def train_sovits(base: Path, bundle: GPTSoVITS, entries: list[ListEntry], *, save_name: str, epochs: int,
                 batch_size: int, seed: int, tools: Tools, device: str, checkpoint: Path,
                 discriminator: Path | None, options: str,
                 progress: Callable[[str, int, int, float | None], None] | None = None,
                 interrupted: Callable[[], bool] = lambda: False) -> S2StageResult:
    state, config = base_generator_state(base)
    hp = S2Hparams.from_config(config, f"{pair(base)[1]} (config)")
    cfg = bundle.sovits.cfg
    frames = hp.segment_size // cfg.hop_length
    preparer = S2Preparer(S1Preparer(bundle))
    samples = preparer.prepare(entries, (lambda d, t: progress("prepare sovits", d, t, None)) if progress else None)
    check_segments(entries, samples, frames)
    if len(samples) < MIN_DATASET:
        samples = samples * max(2, MIN_DATASET // len(samples))
    order = sorted(range(len(samples)), key=lambda i: (samples[i].spec.shape[-1], i))
    data = [collate([samples[i] for i in order[k:k + batch_size]]) for k in range(0, len(order), batch_size)]

    torch.manual_seed(seed)
    net_g = training_generator(cfg)
    missing, unexpected = net_g.load_state_dict(state, strict=False)
    notes = []
    if unexpected or any(not k.startswith("enc_q.") for k in missing):
        raise ValueError(f"{pair(base)[1]}: SoVITS weights do not fit the training model (missing "
                         f"{[k for k in missing if not k.startswith('enc_q.')][:4]}, unexpected {unexpected[:4]})")
    if missing:
        notes.append("enc_q (posterior encoder) not in the base SoVITS file: trained from a seeded initialisation")
    net_d = MultiPeriodDiscriminator(cfg.version)
    if discriminator is not None:
        obj = load_pickle(Path(discriminator))
        net_d.load_state_dict(state_dict(obj, Path(discriminator), key="weight"), strict=True)
    else:
        notes.append("no pretrained discriminator (s2D*.pth): trained from a seeded initialisation")
    loop = sovits_loop(net_g.to(device), net_d.to(device), data, hp, tools, seed=seed, checkpoint=checkpoint,
                       options=options)
    estimate = memory_mb(net_g, net_d, hp, loop.tools, data)      # before the run: frozen parts are set by now
    if tools.host_optimizer:
        notes.append("SoVITS stage at lowest: float32 weights and compute (host-side AdamW rounds nothing)")
    if checkpoint.is_file():
        try:
            loop.resume()
        except ValueError as e:
            raise ValueError(f"save_name {save_name!r}: {e}; run it with those options to resume, or delete "
                             f"{checkpoint} to start over") from None
    steps = epochs * len(data)
    start, first = time.perf_counter(), loop.step
    loop.run(steps, progress=(lambda s, n, loss: progress("train sovits", s, n, loss)) if progress else None,
             interrupted=interrupted)
    per_step = (time.perf_counter() - start) / max(1, loop.step - first)
    out_config = dict(config)
    out_config["train"] = {**dict(config.get("train", {})), "epochs": epochs, "batch_size": batch_size, "seed": seed}
    out_config["name"] = save_name
    net_g = net_g.to("cpu")
    info = f"{save_name}_e{epochs}_s{loop.step}"
    ckpt = sovits_checkpoint(net_g.state_dict(), out_config, info, cfg.version)
    return S2StageResult((f"{info}.pth", ckpt), list(loop.losses), loop.step, per_step, estimate, notes)

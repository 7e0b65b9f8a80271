"""An F5-TTS fine-tuning job: list file -> prepared clips -> upstream's finetune recipe -> a model folder.

`train_voice(F5Job(...))` runs in the calling process (`training.job.run_in_process` puts it in its own).
The base model folder is read with our loader (float32), each clip prepared as upstream's CustomDataset
reads it (mono mean, torchaudio's Resample to the model's rate, the model's log-mel) with its transcript
through the model's tokenizer (pinyin for a `pinyin` model, characters for `char`, as prepare_csv_wavs
does), clips outside upstream's 0.3-30 s left out as its dataset skips them. Batches: `batch_size` clips
(upstream's `batch_size_type: sample`), sorted by length and cut into groups (its frame sampler groups
by length too), their order shuffled each epoch from `seed` (training.job.TrainLoop). Each step is
train_step.F5Recipe (CFM loss, clip, fused AdamW, warmup/decay schedule, EMA); the export
(export.export_model) writes the EMA weights in the published layout, as upstream's checkpoints hold them.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...training.datasets import read_list
from ...training.estimate import MethodInfo, TransformerSizes, check_fits
from ...training.job import TrainLoop, TrainResult, check_counts
from ...training.memory import Tools, resolve_tools
from ..formats.audio_file import read_audio
from ..formats.checkpoint import load_yaml
from ..pack.audio import resample
from ...training.export import check_name
from .export import export_model
from .loader import load_f5_tts
from .model import DiT
from .text import F5Tokenizer
from .train_step import (EMA, LEARNING_RATE, WARMUP_UPDATES, F5Batch, F5Recipe, F5Sample, collate, make_optimizer,
                         make_scheduler)

MIN_SECONDS, MAX_SECONDS = 0.3, 30.0    # CustomDataset.__getitem__'s duration filter
MAX_EPOCHS = 10_000
MAX_BATCH = 512
PRESETS = ("fast", "balanced", "low", "lowest")


@dataclass(frozen=True)
class F5Job:
    base: Path                       # the base model folder (models/TTS/f5_tts/<model>)
    list_file: Path                  # path|speaker|language|text (the language is not used by F5-TTS)
    save_name: str
    audio_dir: Path | None = None
    epochs: int = 100                # finetune_cli --epochs
    batch_size: int = 8
    seed: int = 666                  # finetune_cli's resumable_with_seed
    preset: str = "fast"
    device: str = "cpu"
    checkpoint: Path | None = None   # resumable job state (default: beside the base model, hidden)
    learning_rate: float = LEARNING_RATE        # finetune_cli --learning_rate
    warmup_updates: int = WARMUP_UPDATES        # finetune_cli --num_warmup_updates


def check_job(job: F5Job) -> None:
    check_name(job.save_name)
    check_counts((("epochs", job.epochs, 1, MAX_EPOCHS), ("batch_size", job.batch_size, 1, MAX_BATCH),
                  ("warmup_updates", job.warmup_updates, 0, 10_000_000)))
    lr = job.learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr <= 1 or not math.isfinite(lr):
        raise ValueError(f"learning_rate = {lr!r}; expected a number in (0, 1]")
    resolve_tools(job.preset)


def make_job(**options: Any) -> F5Job:
    """An F5Job from the Trainer options (registry.Trainer), checked."""
    try:
        job = F5Job(**options)
    except TypeError as e:
        raise ValueError(f"F5-TTS training: {e} (its options: base, list_file, save_name, audio_dir, epochs, "
                         "batch_size, seed, preset, device, learning_rate, warmup_updates)") from None
    check_job(job)
    return job


def tokenizer_kind(folder: Path) -> str:
    """config.yaml's model.tokenizer (pinyin without a config: F5TTS_v1_Base)."""
    path = Path(folder) / "config.yaml"
    if not path.is_file():
        return "pinyin"
    data = load_yaml(path, "F5-TTS")
    return str(((data or {}).get("model") or {}).get("tokenizer", "pinyin"))


def prepare_clip(wav: Tensor, rate: int, text: str, mel: nn.Module, tokenizer: F5Tokenizer, target_rate: int,
                 kind: str = "pinyin") -> F5Sample:
    """CustomDataset.__getitem__ (mono mean, Resample, mel) and the transcript's ids (list_str_to_idx of
    prepare_csv_wavs' convert_char_to_pinyin for `pinyin`, of the characters for `char` / `custom`)."""
    if wav.dim() != 2:
        raise ValueError(f"prepare_clip: expected samples [channels, T], got shape {tuple(wav.shape)}")
    wav = wav.to(torch.float32)
    if wav.shape[0] > 1:
        wav = torch.mean(wav, dim=0, keepdim=True)
    if rate != target_rate:
        wav = resample(wav[0], rate, target_rate, "torchaudio_sinc")[None]
    with torch.no_grad():
        features = mel(wav).squeeze(0)                 # [n_mels, frames]
    ids = tokenizer.encode(text) if kind == "pinyin" else [tokenizer.vocab.get(c, 0) for c in text]
    return F5Sample(features.T.contiguous(), torch.tensor(ids, dtype=torch.int64))


def prepare(bundle: Any, entries: list, kind: str,
            progress: Callable[[int, int], None] | None = None) -> list[F5Sample]:
    rate = bundle.mel_config.sample_rate
    samples = []
    for i, entry in enumerate(entries):
        wav, source_rate = read_audio(entry.audio, what=f"training clip (line {entry.line})", max_seconds=MAX_SECONDS + 1)
        seconds = wav.shape[1] / source_rate
        if MIN_SECONDS <= seconds <= MAX_SECONDS:
            samples.append(prepare_clip(wav, source_rate, entry.text, bundle.mel, bundle.tokenizer, rate, kind))
        if progress is not None:
            progress(i + 1, len(entries))
    if not samples:
        raise ValueError(f"no training clip lasts {MIN_SECONDS} to {MAX_SECONDS:.0f} s (upstream's dataset skips the "
                         "others)")
    return samples


def batches(samples: list[F5Sample], batch_size: int) -> list[F5Batch]:
    order = sorted(range(len(samples)), key=lambda i: (samples[i].mel.shape[0], i))   # F5Sample.mel: [frames, n_mels]
    return [collate([samples[i] for i in order[k:k + batch_size]]) for k in range(0, len(order), batch_size)]


# per token and block, the hidden-sized tensors a DiT block keeps for backward beyond the estimate's
# post-norm 12 (adaLN modulation, rotary q/k, the gates' products, tanh-GELU's input and output at
# ff_mult x hidden, two dropout masks, the output masks): measured on the tiny model (test_train_job.py)
EXTRA_SAVED_PER_TOKEN = 13


@dataclass(frozen=True)
class F5MethodInfo(MethodInfo):
    """MethodInfo plus what an F5-TTS step holds outside the DiT blocks, in float32 (checkpointing never
    covers it): the buffers (the text embedding's 8192-position table, RoPE frequencies) and the
    input side per frame: the CFM's mel-sized tensors (x1, x0, φ, flow, cond, pred, the MSE), the
    concatenated input, its projection and convolutional position embedding, the text embedding's
    ConvNeXt blocks."""

    buffer_bytes: int = 0
    input_per_token: int = 0       # float32 elements per frame of a sample

    def memory_bytes(self, preset: str, batch: int) -> int:
        tokens = batch * self.sizes.tokens_per_sample
        return super().memory_bytes(preset, batch) + int(1.1 * (self.buffer_bytes + 4 * self.input_per_token * tokens))


def input_elements(cfg: Any) -> int:
    """F5MethodInfo.input_per_token for a DiT config: 5 mel-sized tensors (x0, φ, flow, cond, pred; the
    MSE's), the input concatenation (2 mel + text), the projection and the conv position embedding (3 x dim
    kept), per text ConvNeXt block ~5 x text kept, the embedding and table sum (2 x text). Measured on the
    tiny model (test_train_job.py: float32, and an upper bound under bf16 autocast)."""
    return (5 * cfg.mel_dim + 2 * cfg.mel_dim + cfg.text_dim + 3 * cfg.dim
            + 5 * cfg.text_dim * cfg.conv_layers + 2 * cfg.text_dim)


def method_info(dit: DiT, data: list[F5Batch]) -> F5MethodInfo:
    """Sizes for the estimate: every parameter trained; the longest batch's frames; no logits (the loss is
    an MSE on mel frames, counted with the input side)."""
    cfg = dit.config
    frames = max(int(b.mel.shape[2]) for b in data)
    sizes = TransformerSizes(trainable=sum(p.numel() for p in dit.parameters()), frozen=0, layers=cfg.depth,
                             hidden=cfg.dim, vocab=0, tokens_per_sample=frames,
                             extra_saved_per_token=EXTRA_SAVED_PER_TOKEN)
    buffers = sum(b.numel() * b.element_size() for b in dit.buffers())
    return F5MethodInfo("f5_tts", sizes, optimizer_state_bytes=8, buffer_bytes=buffers,
                        input_per_token=input_elements(cfg))


def base_ema_state(folder: Path) -> tuple[int, bool]:
    """The base checkpoint's ema_pytorch `step` / `initted` (0 / False when it holds none)."""
    from safetensors import safe_open

    from .loader import checkpoint_file
    with safe_open(str(checkpoint_file(Path(folder))), "pt") as f:
        keys = set(f.keys())
        step = int(f.get_tensor("step").item()) if "step" in keys else 0
        initted = bool(f.get_tensor("initted").item()) if "initted" in keys else False
    return step, initted


def training_loop(dit: DiT, data: list[F5Batch], tools: Tools, *, seed: int, lr: float, warmup_updates: int,
                  total_updates: int, checkpoint: Path, device: str | torch.device = "cpu", ema_step: int = 0,
                  ema_initted: bool = False, host_context: Callable[[], Any] | None = None, options: str = "",
                  save_every: int = 0) -> tuple[TrainLoop, F5Recipe]:
    """The resumable loop over `data` with upstream's step (train_step.F5Recipe) under `tools`, for `dit`
    held on the host in float32: the EMA and, with the host optimizer, the float32 master are taken from
    those weights; under mixed precision with the host optimizer the device weights are their rounding to
    the autocast dtype (nothing in float32 reaches the device). Then the weights are copied to `device`
    (host-side work under `host_context`, so a simulated device counts only what the device holds)."""
    host = host_context or nullcontext
    params = list(dit.parameters())
    with host(), torch.no_grad():
        ema = EMA(dit, step=ema_step, initted=ema_initted, host_context=host)
        half_device = tools.host_optimizer and tools.mixed_precision is not None
        master = [p.detach().to(torch.float32, copy=True) for p in params] if half_device else None
        if half_device:
            for p in params:
                p.data = p.data.to(tools.mixed_precision)
    dit._apply(lambda t: t.to(device, copy=True))      # a copy even on the CPU: the device's own tensors
    dit.train()
    dit.requires_grad_(True)
    optimizer = make_optimizer(dit, tools, lr, host_context)
    if master is not None:
        with host(), torch.no_grad():
            for view, full in zip(optimizer.views, master):
                view.copy_(full)                          # the master keeps the base's float32 weights
    scheduler = make_scheduler(optimizer, warmup_updates, total_updates)
    recipe = F5Recipe(dit, optimizer, scheduler, ema, tools, seed=seed, job=options)
    loop = TrainLoop(dit, optimizer, data, None, tools, seed=seed, checkpoint=checkpoint, save_every=save_every,
                     step=recipe.batch, extra=recipe)
    return loop, recipe


def train_voice(job: F5Job, progress: Callable[[str, int, int, float | None], None] | None = None,
                interrupted: Callable[[], bool] = lambda: False, host_context: Any = None) -> TrainResult:
    """Run the job: prepare, train (`progress(stage, done, total, loss)` for "prepare" and "train"), export."""
    check_job(job)
    base = Path(job.base)
    if (base.parent / job.save_name).exists():      # refused before training, not after it
        raise ValueError(f"save_name {job.save_name!r}: {base.parent / job.save_name} already exists; choose another "
                         "name")
    bundle = load_f5_tts(base, torch.float32)
    entries = read_list(job.list_file, job.audio_dir)
    tools = resolve_tools(job.preset)
    device = torch.device(job.device)
    kind = tokenizer_kind(base)
    samples = prepare(bundle, entries, kind, progress=(lambda d, t: progress("prepare", d, t, None)) if progress else None)
    data = batches(samples, job.batch_size)
    dit = bundle.dit
    info = method_info(dit, data)
    estimate = info.memory_mb(job.preset, job.batch_size)
    if device.type == "cuda":
        check_fits(info, job.preset, job.batch_size, torch.cuda.mem_get_info(device)[0] / (1 << 20), str(device))
    step, initted = base_ema_state(base)
    total = job.epochs * len(data)
    options = (f"base={base.resolve()} list={Path(job.list_file).resolve()} clips={len(entries)} epochs={job.epochs} "
               f"batch_size={job.batch_size} seed={job.seed} preset={job.preset} lr={job.learning_rate} "
               f"warmup={job.warmup_updates}")
    checkpoint = Path(job.checkpoint) if job.checkpoint else base.parent / f".{job.save_name}.train-state.pt"
    loop, recipe = training_loop(dit, data, tools, seed=job.seed, lr=job.learning_rate,
                                 warmup_updates=job.warmup_updates, total_updates=total, checkpoint=checkpoint,
                                 device=device, ema_step=step, ema_initted=initted, host_context=host_context,
                                 options=options)
    if checkpoint.is_file():
        try:
            loop.resume()
        except ValueError as e:
            raise ValueError(f"save_name {job.save_name!r}: {e}; run it with those options to resume, or delete "
                             f"{checkpoint} to start over") from None
    start, first = time.perf_counter(), loop.step
    if loop.step < total:
        loop.run(total, progress=(lambda s, n, loss: progress("train", s, n, loss)) if progress else None,
                 interrupted=interrupted)
    per_step = (time.perf_counter() - start) / max(1, loop.step - first)
    voice = export_model(base, job.save_name, recipe.ema, recipe.updates)
    checkpoint.unlink(missing_ok=True)
    numerics = [n for n in tools.numerics_changes() if not n.startswith("frozen")]   # nothing is frozen
    return TrainResult(voice, list(loop.losses), loop.step, recipe.updates, per_step, estimate, numerics)

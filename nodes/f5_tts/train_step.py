"""F5-TTS fine-tuning's training step on our DiT: upstream's CFM.forward loss, optimizer, schedule and EMA.

Upstream (f5-tts 1.1.22: train/finetune_cli.py -> model/trainer.py `Trainer.train`, model/cfm.py
`CFM.forward`, model/backbones/dit.py `DiT.forward` with its training mask) does, per batch:

- the batch: mel [B, frames, n_mels] right-padded with 0, `lens` [B], text ids right-padded with -1
  (list_str_to_idx over the model's vocab, 0 for an unknown token);
- `mask = lens_to_mask(lens)`; `frac_lengths ~ U(0.7, 1.0)` (torch `uniform_`), `mask_from_frac_lengths`
  (torch `rand_like`) -> the random span to infill, `& mask`; `x0 = randn_like(x1)`; `time = rand(B)`;
  `φ = (1 - t) x0 + t x1`, `flow = x1 - x0`, `cond` = x1 zeroed on the span; then Python's
  `random()` twice: audio dropped with p 0.3, audio and text dropped with p 0.2 (the second draw is
  always made). Torch draws come from torch's global generator, the two drops from a `random.Random`
  (the same Mersenne Twister as upstream's module-level `random()`, held by the recipe and saved);
- the DiT forward with the mask: the text embedding per sample's length (positions past a sample's
  frames are filler, their embedding zero, the sinusoidal table only inside the sample), the
  convolutional position embedding zeroing padded frames around each conv, attention without a mask
  (`attn_mask_enabled: False`) but its output zeroed on padded frames after its dropout, dropout 0.1
  (DiT's default: finetune_cli does not set it) after attention and inside the feed-forward;
- loss: MSE(pred, flow) over the span's frames, mean; backward; `clip_grad_norm_(max_grad_norm=1.0)`;
  AdamW(lr, fused=True: betas 0.9/0.999, eps 1e-8, weight decay 0.01); the schedule: SequentialLR of a
  warmup LinearLR (1e-8 -> 1 over `num_warmup_updates`) and a decay LinearLR (1 -> 1e-8 over the rest),
  stepped after every update; then the EMA (ema_pytorch's EMA defaults: beta 0.9999, update_every 10,
  update_after_step 100, power 2/3), continuing from the base checkpoint's `step` / `initted`.

Float32 (accelerate's default, no mixed precision) is the recipe; a memory preset's bf16 autocast is a
numerics change named in the job's report.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ...training.memory import HostAdamW, Tools
from .model import DiT, DiTBlock, apply_rotary

DROPOUT = 0.1                  # DiT(dropout=0.1): finetune_cli's model_cfg leaves the default
AUDIO_DROP_PROB = 0.3          # CFM defaults
COND_DROP_PROB = 0.2
FRAC_LENGTHS_MASK = (0.7, 1.0)
MAX_GRAD_NORM = 1.0            # finetune_cli --max_grad_norm
LEARNING_RATE = 1e-5           # finetune_cli --learning_rate
WARMUP_UPDATES = 20000         # finetune_cli --num_warmup_updates
EMA_BETA, EMA_EVERY, EMA_AFTER, EMA_POWER, EMA_INV_GAMMA = 0.9999, 10, 100, 2 / 3, 1.0


@dataclass(frozen=True)
class F5Sample:
    mel: Tensor        # [frames, n_mels] float32 (log mel of the clip at the model's rate)
    ids: Tensor        # [tokens] int64 vocab ids


@dataclass(frozen=True)
class F5Batch:
    """collate_fn + list_str_to_idx: mel [B, n_mels, frames] padded with 0 (the trainer permutes it to
    [B, frames, n_mels]: a view, whose strides `randn_like` follows, so the noise is drawn in this layout),
    lens [B], text [B, Nt] padded with -1."""

    mel: Tensor
    lens: Tensor
    text: Tensor

    def to(self, device: torch.device | str) -> F5Batch:
        return F5Batch(self.mel.to(device), self.lens.to(device), self.text.to(device))


def collate(samples: Sequence[F5Sample]) -> F5Batch:
    if not samples:
        raise ValueError("collate: no samples")
    frames = [int(s.mel.shape[0]) for s in samples]
    tokens = [int(s.ids.numel()) for s in samples]
    mel = torch.zeros(len(samples), samples[0].mel.shape[1], max(frames), dtype=torch.float32)
    text = torch.full((len(samples), max(tokens)), -1, dtype=torch.int64)
    for i, s in enumerate(samples):
        mel[i, :, :frames[i]] = s.mel.T
        text[i, :tokens[i]] = s.ids
    return F5Batch(mel, torch.tensor(frames, dtype=torch.int64), text)


# ---- the masked training forward of our DiT (upstream's DiT.forward with `mask`) -------------------------


def lens_to_mask(lens: Tensor, length: int) -> Tensor:
    return torch.arange(length, device=lens.device)[None, :] < lens[:, None]


def span_mask(lens: Tensor, frac_lengths: Tensor) -> Tensor:
    """mask_from_frac_lengths: a span of frac x len frames at a random start (torch.rand_like)."""
    lengths = (frac_lengths * lens).long()
    max_start = lens - lengths
    rand = torch.rand_like(frac_lengths)
    start = (max_start * rand).long().clamp(min=0)
    end = start + lengths
    seq = torch.arange(int(lens.max().item()), device=start.device).long()
    return (seq[None, :] >= start[:, None]) & (seq[None, :] < end[:, None])


def text_embedding(dit: DiT, text: Tensor, seq_len: Tensor, drop_text: bool) -> Tensor:
    """TextEmbedding.forward with per-sample lengths (the training path)."""
    te = dit.text_embed
    text = text + 1
    seq_len = seq_len.to(device=text.device, dtype=torch.long)
    max_seq_len = int(seq_len.max().item())
    text = text[:, :max_seq_len]
    text = F.pad(text, (0, max_seq_len - text.shape[1]), value=0)
    valid = torch.arange(max_seq_len, device=text.device).unsqueeze(0) < seq_len.unsqueeze(1)
    text = text.masked_fill(~valid, 0)
    text_mask = text == 0 if te.mask_padding else None
    if drop_text:
        text = torch.zeros_like(text)
    x = te.text_embed(text)
    x = x.masked_fill(~valid.unsqueeze(-1), 0.0)
    if te.text_blocks is not None:
        if max_seq_len > te.MAX_POSITIONS:
            raise ValueError(f"F5-TTS: {max_seq_len} frames exceed the text position table ({te.MAX_POSITIONS})")
        freqs = te.freqs_cis[:max_seq_len, :]
        freqs = freqs.unsqueeze(0) * valid.unsqueeze(-1).to(freqs.dtype)
        x = x + freqs
        if text_mask is not None:
            fill = text_mask.unsqueeze(-1).expand(-1, -1, x.size(-1))
            x = x.masked_fill(fill, 0.0)
            for block in te.text_blocks:
                x = block(x)
                x = x.masked_fill(text_mask.unsqueeze(-1).expand(-1, -1, x.size(-1)), 0.0)
        else:
            x = te.text_blocks(x)
    return x


def _conv_position(dit: DiT, x: Tensor, mask: Tensor) -> Tensor:
    conv = dit.input_embed.conv_pos_embed.conv1d
    keep = mask.unsqueeze(1)
    x = x.permute(0, 2, 1).masked_fill(~keep, 0.0)
    for layer in conv:
        x = layer(x)
        if isinstance(layer, nn.Conv1d):
            x = x.masked_fill(~keep, 0.0)
    return x.permute(0, 2, 1)


def _attention(block: DiTBlock, x: Tensor, freqs: Tensor, mask: Tensor, train: bool) -> Tensor:
    attn = block.attn
    b = x.shape[0]
    q, k, v = attn.to_q(x), attn.to_k(x), attn.to_v(x)
    head_dim = k.shape[-1] // attn.heads
    q = q.view(b, -1, attn.heads, head_dim).transpose(1, 2)
    k = k.view(b, -1, attn.heads, head_dim).transpose(1, 2)
    v = v.view(b, -1, attn.heads, head_dim).transpose(1, 2)
    if attn.q_norm is not None:
        q = attn.q_norm(q)
    if attn.k_norm is not None:
        k = attn.k_norm(k)
    if attn.pe_attn_head is not None:
        pn = attn.pe_attn_head
        q[:, :pn, :, :] = apply_rotary(q[:, :pn, :, :], freqs)
        k[:, :pn, :, :] = apply_rotary(k[:, :pn, :, :], freqs)
    else:
        q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
    y = y.transpose(1, 2).reshape(b, -1, attn.heads * head_dim).to(q.dtype)
    y = F.dropout(attn.to_out[0](y), DROPOUT, train)
    return y.masked_fill(~mask.unsqueeze(-1), 0.0)


def _block(block: DiTBlock, x: Tensor, t: Tensor, freqs: Tensor, mask: Tensor) -> Tensor:
    train = block.training
    norm, gate_msa, shift_mlp, scale_mlp, gate_mlp = block.attn_norm(x, t)
    x = x + gate_msa.unsqueeze(1) * _attention(block, norm, freqs, mask, train)
    norm = block.ff_norm(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
    ff = block.ff.ff
    h = ff[2](F.dropout(ff[0](norm), DROPOUT, train))
    return x + gate_mlp.unsqueeze(1) * h


def dit_forward(dit: DiT, x: Tensor, cond: Tensor, text: Tensor, time: Tensor, mask: Tensor,
                drop_audio_cond: bool, drop_text: bool, checkpointing: bool = False) -> Tensor:
    """Upstream DiT.forward(x, cond, text, time, mask, drop_audio_cond, drop_text) in training.
    `checkpointing` recomputes each block in backward (its dropout masks replayed from the saved RNG)."""
    batch, seq_len = x.shape[0], x.shape[1]
    if time.ndim == 0:
        time = time.repeat(batch)
    t = dit.time_embed(time)
    text_embed = text_embedding(dit, text, mask.sum(dim=1), drop_text)
    if drop_audio_cond:
        cond = torch.zeros_like(cond)
    h = dit.input_embed.proj(torch.cat((x, cond, text_embed), dim=-1))
    h = _conv_position(dit, h, mask) + h
    freqs = dit.rotary_embed(seq_len)
    residual = h
    for block in dit.transformer_blocks:
        if checkpointing and torch.is_grad_enabled():
            h = checkpoint(_block, block, h, t, freqs, mask, use_reentrant=False)
        else:
            h = _block(block, h, t, freqs, mask)
    if dit.long_skip_connection is not None:
        h = dit.long_skip_connection(torch.cat((h, residual), dim=-1))
    return dit.proj_out(dit.norm_out(h, t))


def cfm_loss(dit: DiT, batch: F5Batch, rng: random.Random, checkpointing: bool = False) -> Tensor:
    """CFM.forward's loss on `batch` (its mel permuted to [B, frames, n_mels] as the trainer does); torch draws from the global
    generator, the two condition drops from `rng`."""
    x1, lens = batch.mel.permute(0, 2, 1), batch.lens
    b, seq_len, dtype, device = x1.shape[0], x1.shape[1], x1.dtype, x1.device
    mask = lens_to_mask(lens, seq_len)
    frac_lengths = torch.zeros((b,), device=device).float().uniform_(*FRAC_LENGTHS_MASK)
    span = span_mask(lens, frac_lengths)
    span &= mask
    x0 = torch.randn_like(x1)
    time = torch.rand((b,), dtype=dtype, device=device)
    t = time.unsqueeze(-1).unsqueeze(-1)
    phi = (1 - t) * x0 + t * x1
    flow = x1 - x0
    cond = torch.where(span[..., None], torch.zeros_like(x1), x1)
    drop_audio_cond = rng.random() < AUDIO_DROP_PROB
    if rng.random() < COND_DROP_PROB:
        drop_audio_cond, drop_text = True, True
    else:
        drop_text = False
    pred = dit_forward(dit, phi, cond, batch.text, time, mask, drop_audio_cond, drop_text, checkpointing)
    loss = F.mse_loss(pred, flow, reduction="none")
    return loss[span].mean()


# ---- optimizer, schedule, EMA -----------------------------------------------------------------------------


def make_optimizer(dit: DiT, tools: Tools, lr: float = LEARNING_RATE,
                   host_context: Any = None) -> torch.optim.Optimizer | HostAdamW:
    """Trainer's AdamW(model.parameters(), lr, fused=True); the host-side one (preset lowest) runs the same
    fused AdamW over its float32 master."""
    params = [p for p in dit.parameters() if p.requires_grad]
    if tools.host_optimizer:
        kwargs = {"host_context": host_context} if host_context is not None else {}
        return HostAdamW(params, lr=lr, fused=True, **kwargs)
    return torch.optim.AdamW(params, lr=lr, fused=True)


def make_scheduler(optimizer: torch.optim.Optimizer | HostAdamW, warmup_updates: int,
                   total_updates: int) -> torch.optim.lr_scheduler.SequentialLR:
    """Trainer.train's warmup + linear decay, built in upstream's order (each constructor sets the rate)."""
    opt = optimizer.optimizer if isinstance(optimizer, HostAdamW) else optimizer
    decay_updates = total_updates - warmup_updates
    if decay_updates == 0:      # upstream's decay LinearLR then divides by zero at its first step
        raise ValueError(f"warmup_updates = {warmup_updates} equals the job's {total_updates} updates (epochs x batches), "
                         "which upstream's schedule cannot run; give fewer warmup updates (or more epochs)")
    warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1e-8, end_factor=1.0, total_iters=warmup_updates)
    decay = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=1e-8, total_iters=decay_updates)
    return torch.optim.lr_scheduler.SequentialLR(opt, schedulers=[warmup, decay], milestones=[warmup_updates])


class EMA:
    """ema_pytorch.EMA (0.8.x) with the Trainer's defaults over a DiT: the floating parameters and
    buffers of a copy, `step` and `initted` continued from the base checkpoint (upstream loads them with
    the pretrained EMA state)."""

    def __init__(self, dit: DiT, step: int = 0, initted: bool = False,
                 host_context: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
        """The shadow weights live on the host (float32), built and updated under `host_context`."""
        self.model, self.host_context = dit, host_context
        with host_context():
            self.shadow = {n: t.detach().to("cpu", torch.float32, copy=True) for n, t in self._tensors(dit)}
        self.step = torch.tensor(int(step))
        self.initted = torch.tensor(bool(initted))

    @staticmethod
    def _tensors(dit: nn.Module) -> list[tuple[str, Tensor]]:
        params = [(n, p) for n, p in dit.named_parameters() if torch.is_floating_point(p)]
        buffers = [(n, b) for n, b in dit.named_buffers() if torch.is_floating_point(b)]
        return params + buffers

    def decay(self) -> float:
        epoch = (self.step - EMA_AFTER - 1).clamp(min=0.)
        value = 1 - (1 + epoch / EMA_INV_GAMMA) ** - EMA_POWER
        if epoch.item() <= 0:
            return 0.
        return value.clamp(min=0.0, max=EMA_BETA).item()

    @torch.no_grad()
    def _copy(self) -> None:
        for n, t in self._tensors(self.model):
            self.shadow[n].copy_(t.detach())

    def update(self) -> None:
        with self.host_context():
            self._update()

    @torch.no_grad()
    def _update(self) -> None:
        step = int(self.step.item())
        self.step += 1
        if not self.initted.item():
            self._copy()
            self.initted.copy_(torch.tensor(True))
            return
        if step % EMA_EVERY == 0 and step <= EMA_AFTER:
            self._copy()
            return
        if step % EMA_EVERY == 0:
            weight = 1. - self.decay()
            for n, t in self._tensors(self.model):
                self.shadow[n].lerp_(t.detach().to("cpu", torch.float32), weight)

    def state_dict(self) -> dict[str, Any]:
        return {"shadow": {n: t.clone() for n, t in self.shadow.items()}, "step": self.step.clone(),
                "initted": self.initted.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for n, t in state["shadow"].items():
            self.shadow[n].copy_(t)
        self.step, self.initted = state["step"].clone(), state["initted"].clone()


class F5Recipe:
    """One Trainer.train iteration per batch: loss, backward, clip, AdamW, schedule, zero, EMA."""

    def __init__(self, dit: DiT, optimizer: torch.optim.Optimizer | HostAdamW,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, ema: EMA, tools: Tools, seed: int,
                 job: str = "", max_grad_norm: float = MAX_GRAD_NORM) -> None:
        """`job` names the run's options; a saved state from other options is refused on resume."""
        self.dit, self.optimizer, self.scheduler, self.ema, self.tools = dit, optimizer, scheduler, ema, tools
        self.rng = random.Random(seed)
        self.job, self.max_grad_norm = job, max_grad_norm
        self.updates = 0

    def batch(self, batch: F5Batch, batch_idx: int = 0) -> float:
        device = next(self.dit.parameters()).device
        half = self.tools.mixed_precision
        with torch.autocast(device.type, dtype=half or torch.float32, enabled=half is not None):
            loss = cfm_loss(self.dit, batch.to(device), self.rng, self.tools.gradient_checkpointing)
        loss.backward()
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.dit.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        self.ema.update()
        self.updates += 1
        return float(loss.detach())

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "job": self.job, "rng": self.rng.getstate(),
                "scheduler": self.scheduler.state_dict(), "ema": self.ema.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("job", "") != self.job:
            raise ValueError(f"the saved training state was made with other options ({state.get('job')!r}, now "
                             f"{self.job!r})")
        self.updates = int(state["updates"])
        self.rng.setstate(_as_tuple(state["rng"]))
        self.scheduler.load_state_dict(state["scheduler"])
        self.ema.load_state_dict(state["ema"])


def _as_tuple(state: Any) -> Any:
    """random.Random's state back from a checkpoint (torch.load may return its tuples as lists)."""
    return tuple(_as_tuple(s) for s in state) if isinstance(state, (list, tuple)) else state

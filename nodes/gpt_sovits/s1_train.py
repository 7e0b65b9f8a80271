"""GPT-SoVITS GPT (s1) training on our Text2Semantic: upstream's loss, optimizer, schedule and step rule.

Upstream (RVC-Boss/GPT-SoVITS 48b1a01, s1_train.py -> AR/models/t2s_lightning_module.py) trains with
`Text2SemanticDecoder.forward_old` (the DPO `forward` only with `train.if_dpo`), so this is forward_old,
operation for operation, on our modules (same parameter names):

- text: phoneme embedding (+ dropout `model.dropout`, 0 in s1longer-v2.yaml) + bert_proj(BERT), sine
  position (alpha) + dropout 0.1; audio: the semantic ids with EOS at the padding, embedding (+ dropout
  `model.dropout`), sine position + dropout 0.1 (both 0.1 hard-coded upstream whatever the config says);
- the masks as upstream builds them, including the phoneme padding mask from `make_pad_mask_left` while
  the collate pads phonemes on the right (so a short sample's first phonemes are masked, its padding
  is not): the recipe trains that way and so does this;
- each post-norm layer through `F.multi_head_attention_forward`'s path (sequence-first in-projection,
  SDPA with dropout 0.1 on the float -inf mask), dropout 0.1 after attention, ReLU MLP with dropout 0.1
  inside and after; dropouts drawn in upstream's order on tensors of upstream's layout, so a seeded
  step draws the same masks;
- loss: cross-entropy summed over the logits from the last text position on (the EOS target included).

The step rule (`S1Recipe`): every batch backward; the optimizer steps when `batch_idx > 0 and
batch_idx % 4 == 0` (batch_idx counting from 0 in each epoch; gradients of an epoch's tail carry into
the next), then the scheduler. ScaledAdam (lr 0.01, betas (0.9, 0.95), clipping_scale 2.0, clipping
period 1000); WarmupCosineLRSchedule never calls its base constructor and locks the rate at 0.002 in
`step()`, so the first update runs at ScaledAdam's 0.01 and every later one at 0.002. Upstream's GPU
recipe runs `16-mixed` (fp16 autocast with a GradScaler); this is its float32 recipe (`precision: 32`,
what the webui writes without half precision) and a memory preset's autocast is named in the report.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from torch.utils.checkpoint import checkpoint

from ...training.memory import Tools
from ...training.scaled_adam import ScaledAdam
from .t2s import Layer, Text2Semantic

DROPOUT = 0.1            # upstream's SinePositionalEmbedding / TransformerEncoderLayer dropout (hard-coded)
FIRST_LR = 0.01          # ScaledAdam(lr=0.01): the rate of the first update
LOCKED_LR = 0.002        # WarmupCosineLRSchedule.step() locks every later rate here
ACCUMULATE = 4           # optimizer step when batch_idx > 0 and batch_idx % 4 == 0


@dataclass(frozen=True)
class S1Batch:
    """Upstream's collate output: phonemes right-padded with 0, semantic ids right-padded with `pad`."""

    phoneme_ids: Tensor        # [B, Lx] int64
    phoneme_ids_len: Tensor    # [B] int64
    semantic_ids: Tensor       # [B, Ly] int64
    semantic_ids_len: Tensor   # [B] int64
    bert_feature: Tensor       # [B, 1024, Lx] float32

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> S1Batch:
        return S1Batch(self.phoneme_ids.to(device), self.phoneme_ids_len.to(device), self.semantic_ids.to(device),
                       self.semantic_ids_len.to(device), self.bert_feature.to(device=device, dtype=dtype))


@dataclass(frozen=True)
class S1Sample:
    """One prepared clip: phoneme ids [Lx], semantic ids [Ly], BERT features [1024, Lx] (zeros: no BERT)."""

    phoneme_ids: Tensor
    semantic_ids: Tensor
    bert_feature: Tensor | None


def collate(samples: Sequence[S1Sample], pad: int = 1024) -> S1Batch:
    """AR/data/dataset.py `collate`: pad and stack; BERT features zero where a sample has none."""
    if not samples:
        raise ValueError("collate: no samples")
    lx = [int(s.phoneme_ids.numel()) for s in samples]
    ly = [int(s.semantic_ids.numel()) for s in samples]
    phones = torch.zeros(len(samples), max(lx), dtype=torch.int64)
    semantic = torch.full((len(samples), max(ly)), pad, dtype=torch.int64)
    bert = torch.zeros(len(samples), 1024, max(lx), dtype=torch.float32)
    for i, s in enumerate(samples):
        phones[i, :lx[i]] = s.phoneme_ids
        semantic[i, :ly[i]] = s.semantic_ids
        if s.bert_feature is not None:
            bert[i, :, :s.bert_feature.shape[-1]] = s.bert_feature
    return S1Batch(phones, torch.tensor(lx), semantic, torch.tensor(ly), bert)


def pad_mask(lengths: Tensor) -> Tensor:
    """make_pad_mask: True at positions >= length."""
    n, length = lengths.size(0), int(lengths.max())
    return torch.arange(0, length, device=lengths.device).unsqueeze(0).expand(n, length) >= lengths.unsqueeze(-1)


def pad_mask_left(lengths: Tensor) -> Tensor:
    """make_pad_mask_left: True at the first (max - length) positions."""
    n, length = lengths.size(0), int(lengths.max())
    positions = torch.arange(0, length, device=lengths.device).unsqueeze(0).repeat(n, 1)
    positions -= (length - lengths).unsqueeze(-1)
    return positions < 0


def _attention(layer: Layer, x: Tensor, mask: Tensor, heads: int, dropout: float) -> Tensor:
    """upstream MultiheadAttention(batch_first) -> multi_head_attention_forward, need_weights=False."""
    attn = layer.self_attn
    xs = x.transpose(1, 0)                                   # [S, B, E], a view, as upstream
    tgt, bsz, embed = xs.shape
    proj = F.linear(xs, attn.in_proj_weight, attn.in_proj_bias)
    proj = proj.unflatten(-1, (3, embed)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    q, k, v = proj[0], proj[1], proj[2]
    head_dim = embed // heads
    q = q.view(tgt, bsz * heads, head_dim).transpose(0, 1).view(bsz, heads, tgt, head_dim)
    k = k.view(k.shape[0], bsz * heads, head_dim).transpose(0, 1).view(bsz, heads, tgt, head_dim)
    v = v.view(v.shape[0], bsz * heads, head_dim).transpose(0, 1).view(bsz, heads, tgt, head_dim)
    mask = mask.view(bsz, heads, -1, tgt)
    out = F.scaled_dot_product_attention(q, k, v, mask, dropout, False)
    out = out.permute(2, 0, 1, 3).contiguous().view(bsz * tgt, embed)
    out = F.linear(out, attn.out_proj.weight, attn.out_proj.bias).view(tgt, bsz, embed)
    return out.transpose(1, 0)


def _layer(layer: Layer, x: Tensor, mask: Tensor, heads: int, p: float) -> Tensor:
    train = layer.training
    x = layer.norm1(x + F.dropout(_attention(layer, x, mask, heads, p if train else 0.0), p, train))
    ff = layer.linear2(F.dropout(F.relu(layer.linear1(x)), p, train))
    return layer.norm2(x + F.dropout(ff, p, train))


def s1_logits(model: Text2Semantic, batch: S1Batch, embedding_dropout: float = 0.0,
              checkpointing: bool = False) -> tuple[Tensor, Tensor]:
    """forward_old's logits [B, vocab, Ly + 1] and targets [B, Ly + 1]; dropout when `model.training`.
    `embedding_dropout` is the config's `model.dropout` (the token embeddings' dropout); `checkpointing`
    recomputes each layer in backward (its dropout masks replayed from the saved RNG state)."""
    train, eos, heads = model.training, model.cfg.eos, model.cfg.heads
    x = F.dropout(model.ar_text_embedding(batch.phoneme_ids), embedding_dropout, train)
    x = x + model.bert_proj(batch.bert_feature.transpose(1, 2))
    x = F.dropout(model.ar_text_position(x), DROPOUT, train)
    x_mask = pad_mask_left(batch.phoneme_ids_len)
    y_mask = pad_mask(batch.semantic_ids_len)
    y_mask_int = y_mask.type(torch.int64)
    codes = batch.semantic_ids.type(torch.int64) * (1 - y_mask_int)
    targets = F.pad(codes, (0, 1), value=0) + eos * F.pad(y_mask_int, (0, 1), value=1)
    y = targets[:, :-1]
    x_len, y_len = int(batch.phoneme_ids_len.max()), int(batch.semantic_ids_len.max())
    y_pos = F.dropout(model.ar_audio_position(F.dropout(model.ar_audio_embedding(y), embedding_dropout, train)),
                      DROPOUT, train)
    padding = torch.concat([x_mask, y_mask], dim=1)
    x_attn = F.pad(torch.zeros((x_len, x_len), dtype=torch.bool, device=x.device), (0, y_len), value=True)
    y_attn = F.pad(torch.triu(torch.ones(y_len, y_len, dtype=torch.bool, device=x.device), diagonal=1),
                   (x_len, 0), value=False)
    bsz, src_len = x.shape[0], x_len + y_len
    mask = torch.concat([x_attn, y_attn], dim=0).logical_or(
        padding.view(bsz, 1, 1, src_len).expand(-1, heads, -1, -1).reshape(bsz * heads, 1, src_len))
    float_mask = torch.zeros_like(mask, dtype=x.dtype)
    float_mask.masked_fill_(mask, float("-inf"))
    xy = torch.concat([x, y_pos], dim=1)
    for layer in model.h.layers:
        if checkpointing and torch.is_grad_enabled():
            xy = checkpoint(_layer, layer, xy, float_mask, heads, DROPOUT, use_reentrant=False)
        else:
            xy = _layer(layer, xy, float_mask, heads, DROPOUT)
    return model.ar_predict_layer(xy[:, x_len - 1:]).permute(0, 2, 1), targets


def s1_loss(model: Text2Semantic, batch: S1Batch, embedding_dropout: float = 0.0,
            checkpointing: bool = False) -> Tensor:
    """forward_old's loss: cross-entropy summed over every target (EOS included; float32 under autocast)."""
    logits, targets = s1_logits(model, batch, embedding_dropout, checkpointing)
    return F.cross_entropy(logits, targets, reduction="sum")


def make_optimizer(model: Text2Semantic) -> ScaledAdam:
    """t2s_lightning_module.configure_optimizers: ScaledAdam over every parameter, in registration order."""
    return ScaledAdam(model.parameters(), lr=FIRST_LR, betas=(0.9, 0.95), clipping_scale=2.0,
                      clipping_update_period=1000)


class S1Recipe:
    """The training_step rule: backward every batch; step, zero the grads and lock the rate every
    `ACCUMULATE` batches of an epoch (not at its batch 0)."""

    def __init__(self, model: Text2Semantic, optimizer: torch.optim.Optimizer, embedding_dropout: float = 0.0,
                 tools: Tools | None = None, job: str = "") -> None:
        """`job` names the run's options; a saved state from other options is refused on resume."""
        self.model, self.optimizer, self.embedding_dropout = model, optimizer, embedding_dropout
        self.job = job
        self.tools = tools or Tools()
        if self.tools.host_optimizer:
            raise ValueError("GPT-SoVITS GPT training: the host-side optimizer (preset lowest) runs AdamW, not "
                             "the recipe's ScaledAdam; choose fast, balanced or low")
        self.updates = 0

    def batch(self, batch: S1Batch, batch_idx: int) -> float:
        """One training_step on `batch` (the `batch_idx`-th of its epoch); returns the loss."""
        device = next(self.model.parameters()).device
        half = self.tools.mixed_precision
        with torch.autocast(device.type, dtype=half or torch.float32, enabled=half is not None):
            loss = s1_loss(self.model, batch.to(device), self.embedding_dropout, self.tools.gradient_checkpointing)
        loss.backward()
        if batch_idx > 0 and batch_idx % ACCUMULATE == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
            for g in self.optimizer.param_groups:
                g["lr"] = LOCKED_LR
            self.updates += 1
        return float(loss.detach())

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "job": self.job}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("job", "") != self.job:
            raise ValueError(f"the saved training state was made with other options ({state.get('job')!r}, now "
                             f"{self.job!r})")
        self.updates = int(state["updates"])

"""WeNet's conformer pieces shared by CosyVoice's flow encoder and IndexTTS 2's conditioning encoders, with
the upstream parameter names (`linear_q/k/v/out/pos`, `pos_bias_u/v`, `w_1/w_2`)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RelPositionAttention(nn.Module):
    """Relative-position self-attention: (q + u) k^T + (q + v) p^T over sqrt(d_k). With a positional table
    of 2T - 1 rows (CosyVoice's espnet-style encoding) the second term is shifted into place (`rel_shift`);
    with T rows (WeNet's legacy absolute sinusoid, IndexTTS) it is used as is."""

    def __init__(self, heads: int, dim: int) -> None:
        super().__init__()
        self.h, self.d_k = heads, dim // heads
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(heads, self.d_k))

    @staticmethod
    def rel_shift(x: Tensor) -> Tensor:
        pad = torch.zeros((x.size(0), x.size(1), x.size(2), 1), device=x.device, dtype=x.dtype)
        padded = torch.cat([pad, x], dim=-1).view(x.size(0), x.size(1), x.size(3) + 1, x.size(2))
        return padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, x: Tensor, pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """x [B, T, dim], pos [1, T or 2T-1, dim], mask [B, 1 or T, T] (nonzero = attend) or None."""
        b = x.size(0)
        q = self.linear_q(x).view(b, -1, self.h, self.d_k)
        k = self.linear_k(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos).view(pos.size(0), -1, self.h, self.d_k).transpose(1, 2)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        bd = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
        if ac.shape != bd.shape:
            bd = self.rel_shift(bd)
        scores = (ac + bd) / math.sqrt(self.d_k)
        if mask is None:
            attn = torch.softmax(scores, dim=-1)
        else:   # as WeNet: masked keys get -inf before and exactly 0 after the softmax
            drop = mask.unsqueeze(1).eq(0)[:, :, :, :scores.size(-1)]
            attn = torch.softmax(scores.masked_fill(drop, -float("inf")), dim=-1).masked_fill(drop, 0.0)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, -1, self.h * self.d_k)
        return self.linear_out(out)


class FeedForward(nn.Module):
    """w_2(silu(w_1(x)))."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(F.silu(self.w_1(x)))

"""hibari "heart": the acoustic model of hibari-tts 0.2.1 (`hibari/assets/hibari.onnx`) in plain torch.

Two nets trained separately and exported as one graph:

    ids [1, L] -> ProsodyNet (192-d): text encoder -> durations (25 ms units, divided by speed)
                  -> expand to frames -> dilated ConvNeXt stack -> f0 and energy at 12.5 ms
               -> Decoder (256-d): its own 128-d text encoder, expanded by the same durations and
                  repeated 2x to 12.5 ms, + log f0 + energy -> ConvNeXt stack -> Linear head
               -> lh, theta, ln, lr, phi [1, 601, F] and f0 [1, F]   (F = 2 x sum of durations)

Each text encoder has ONE pre-norm transformer layer that is applied several times (6 in ProsodyNet,
4 in the decoder), as trained: it is one module called N times. Every weight is read inside the
forward of the Int8Linear / nn.Conv1d / nn.Embedding / nn.LayerNorm that owns it, so a weight-streaming
runtime can hook them; only the ConvNeXt layer scales (`gamma`) are read by their block directly.

The 45 Linear layers keep the file's int8 weights and run as onnxruntime runs them (activations
quantized per call, integer matmul: `nodes/blocks/int8.py`), so each equals hibari's own int8 path;
everything else is float in the model's dtype.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..blocks.int8 import Int8Linear

VOCAB = 178          # Kokoro's phoneme vocabulary size (ids 0..177; 0 is the pad at both ends)
SPEC_BINS = 601      # n_fft 1200 // 2 + 1
SPEC_PARTS = ("lh", "theta", "ln", "lr", "phi")


class ConvNeXtBlock(nn.Module):
    """Depthwise conv -> LayerNorm over channels -> Linear -> GELU -> Linear, scaled per channel, residual."""

    def __init__(self, dim: int, hidden: int, kernel: int, dilation: int = 1):
        super().__init__()
        self.dw = nn.Conv1d(dim, dim, kernel, padding=dilation * (kernel - 1) // 2, dilation=dilation, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1 = Int8Linear(dim, hidden)
        self.pw2 = Int8Linear(hidden, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:          # [B, C, T]
        h = self.norm(self.dw(x).transpose(1, 2))
        h = self.gamma * self.pw2(F.gelu(self.pw1(h)))
        return x + h.transpose(1, 2)


class SelfAttention(nn.Module):
    """Multi-head self-attention without mask (one unpadded sequence), packed q/k/v projection."""

    def __init__(self, dim: int, heads: int, linear: type[nn.Module] = Int8Linear):
        super().__init__()
        self.heads = heads
        self.in_proj = linear(dim, 3 * dim)
        self.out_proj = linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:          # [B, T, C]
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in self.in_proj(x).split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)          # scaled after the product, as exported
        y = att.softmax(dim=-1) @ v
        return self.out_proj(y.transpose(1, 2).reshape(B, T, C))


class TransformerLayer(nn.Module):
    """Pre-norm transformer encoder layer with a GELU feed-forward (torch's norm_first=True layout);
    `linear`: Int8Linear in the acoustic model, nn.Linear in the G2P's float unknown-word net."""

    def __init__(self, dim: int, heads: int, ff: int, linear: type[nn.Module] = Int8Linear):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, heads, linear)
        self.norm2 = nn.LayerNorm(dim)
        self.linear1 = linear(dim, ff)
        self.linear2 = linear(ff, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:          # [B, T, C]
        x = x + self.self_attn(self.norm1(x))
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class TextEncoder(nn.Module):
    """Phoneme embedding -> 2 ConvNeXt blocks (k=5) -> one transformer layer applied `repeats` times -> LayerNorm."""

    def __init__(self, dim: int, heads: int, repeats: int):
        super().__init__()
        self.repeats = repeats
        self.emb = nn.Embedding(VOCAB, dim)
        self.convs = nn.ModuleList([ConvNeXtBlock(dim, 2 * dim, 5) for _ in range(2)])
        self.attn = TransformerLayer(dim, heads, 2 * dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:        # [B, L] -> [B, C, L]
        x = self.emb(ids).transpose(1, 2)
        for block in self.convs:
            x = block(x)
        x = x.transpose(1, 2)
        for _ in range(self.repeats):                            # weights shared across the repeats, as trained
            x = self.attn(x)
        return self.norm(x).transpose(1, 2)


class ProsodyNet(nn.Module):
    """Durations per phoneme, then f0 and energy per 12.5 ms frame."""

    def __init__(self, dim: int = 192):
        super().__init__()
        self.text = TextEncoder(dim, heads=2, repeats=6)
        self.dur = nn.Sequential(nn.Conv1d(dim, dim, 3, padding=1), nn.GELU(), nn.Conv1d(dim, 1, 1))
        self.pro_in = nn.Conv1d(dim, dim, 1)
        self.pro = nn.ModuleList([ConvNeXtBlock(dim, 2 * dim, 7, dilation=d) for d in (1, 2, 4, 8, 1, 2)])
        self.pro_out = nn.Conv1d(dim, 4, 1)

    def durations(self, h: torch.Tensor, speed: torch.Tensor) -> torch.Tensor:
        """Text features [1, C, L] -> frames per phoneme [L] (int64, >= 1) in 25 ms units."""
        log_d = self.dur(h)[0, 0].float()                        # float32 even for half models: it is rounded
        return torch.round((torch.exp(log_d) - 1.0) / speed).clamp(min=1.0).long()

    def contour(self, h: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Text features [1, C, L], phoneme index per 25 ms frame [N] -> f0 (Hz) and energy, each [1, 2N]."""
        x = self.pro_in(h[:, :, index])
        for block in self.pro:
            x = block(x)
        p = self.pro_out(x)                                      # [B, 4, N]: (f0, energy) x 2 sub-frames
        B, _, N = p.shape
        p = p.view(B, 2, 2, N).transpose(2, 3).reshape(B, 2, 2 * N)
        return p[:, 0] * 100.0, p[:, 1] * 5.0


class Decoder(nn.Module):
    """Frame-rate text features + log f0 + energy -> spectral parts per 12.5 ms frame."""

    def __init__(self, text_dim: int = 128, dim: int = 256, blocks: int = 8):
        super().__init__()
        self.text = TextEncoder(text_dim, heads=2, repeats=4)
        self.dec_in = nn.Conv1d(text_dim + 2, dim, 7, padding=3)
        self.dec = nn.ModuleList([ConvNeXtBlock(dim, 3 * dim, 7) for _ in range(blocks)])
        self.dec_norm = nn.LayerNorm(dim)
        self.head = Int8Linear(dim, len(SPEC_PARTS) * SPEC_BINS)

    def forward(self, ids: torch.Tensor, index: torch.Tensor, f0: torch.Tensor, energy: torch.Tensor) -> torch.Tensor:
        text = self.text(ids)[:, :, index].repeat_interleave(2, dim=2)    # 25 ms -> 12.5 ms frames
        # the graph computes log(1 + relu(f0)) / 5 and (energy * 5) / 5 literally; kept for parity
        x = torch.cat([text, (torch.log(1.0 + F.relu(f0)) / 5.0).unsqueeze(1), (energy / 5.0).unsqueeze(1)], dim=1)
        x = self.dec_in(x)
        for block in self.dec:
            x = block(x)
        return self.head(self.dec_norm(x.transpose(1, 2))).transpose(1, 2)   # [B, 5 * 601, F]


class HibariModel(nn.Module):
    """(phoneme ids [1, L], speed) -> {"lh", "theta", "ln", "lr", "phi": [1, 601, F], "f0": [1, F]}."""

    def __init__(self):
        super().__init__()
        self.prosody = ProsodyNet()
        self.decoder = Decoder()

    def memory_units(self) -> list[nn.Module]:
        """Groups of weights the runtime moves together: every ConvNeXt block, each text encoder's
        shared transformer layer (run 6 and 4 times: the engine marks them hot) and the 3 MB head."""
        p, d = self.prosody, self.decoder
        return [*p.text.convs, p.text.attn, *p.pro, *d.text.convs, d.text.attn, *d.dec, d.head]

    def forward(self, ids: torch.Tensor, speed: float | torch.Tensor = 1.0) -> dict[str, torch.Tensor]:
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(f"ids: expected shape [1, L], got {list(ids.shape)}")
        # speed as float32 like the graph's input, so rounding the durations matches it bit for bit
        speed = torch.as_tensor(speed, dtype=torch.float32, device=ids.device)
        h = self.prosody.text(ids)
        dur = self.prosody.durations(h, speed)
        index = torch.repeat_interleave(torch.arange(dur.numel(), device=ids.device), dur)
        f0, energy = self.prosody.contour(h, index)
        spec = self.decoder(ids, index, f0, energy)
        out = dict(zip(SPEC_PARTS, spec.split(SPEC_BINS, dim=1)))
        out["f0"] = f0
        return out

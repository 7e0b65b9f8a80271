"""MaskGCT's semantic codec (RepCodec), the parts IndexTTS 2 runs: encoder + factorized VQ (quantize) and
the code -> embedding lookup (vq2emb).

    quantized = codec.quantize(w2v_bert_features)      (B, T, 1024): the reference's S_ref
    emb = codec.vq2emb(codes)                           (B, T, 1024): S_infer for generated codes

The decoder of the published model.safetensors is never run at inference; the loader leaves its
tensors out (every other tensor is checked strictly). Weight-normed projections are folded.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.vocoder import VocosBackbone


@dataclass(frozen=True)
class CodecConfig:
    codebook_size: int = 8192
    hidden_size: int = 1024
    codebook_dim: int = 8
    vocos_dim: int = 384
    vocos_intermediate_dim: int = 2048
    vocos_num_layers: int = 12


class FactorizedVQ(nn.Module):
    """1x1 conv down to the codebook width, nearest l2-normalised code, 1x1 conv back up."""

    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        self.in_project = nn.Conv1d(c.hidden_size, c.codebook_dim, 1)
        self.out_project = nn.Conv1d(c.codebook_dim, c.hidden_size, 1)
        self.codebook = nn.Embedding(c.codebook_size, c.codebook_dim)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """z (B, hidden, T) -> quantized (B, hidden, T), indices (B, T)."""
        z_e = self.in_project(z)
        enc = F.normalize(z_e.permute(0, 2, 1).reshape(-1, z_e.size(1)))
        book = F.normalize(self.codebook.weight)
        dist = enc.pow(2).sum(1, keepdim=True) - 2 * enc @ book.t() + book.pow(2).sum(1, keepdim=True).t()
        indices = (-dist).max(1)[1].view(z.size(0), -1)
        z_q = self.codebook(indices).transpose(1, 2)
        z_q = z_e + (z_q - z_e)      # upstream's straight-through form, same rounding
        return self.out_project(z_q), indices

    def vq2emb(self, codes: Tensor) -> Tensor:
        return self.out_project(self.codebook(codes).transpose(1, 2))


class ResidualVQ(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        self.quantizers = nn.ModuleList([FactorizedVQ(c)])


class SemanticCodec(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        self.config = c
        self.encoder = nn.Sequential(VocosBackbone(c.hidden_size, c.vocos_dim, c.vocos_intermediate_dim,
                                                   c.vocos_num_layers),
                                     nn.Linear(c.vocos_dim, c.hidden_size))
        self.quantizer = ResidualVQ(c)

    def quantize(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """w2v-bert features (B, T, hidden) -> codes (B, T) and their quantized embedding (B, T, hidden)."""
        h = self.encoder(x.transpose(1, 2)).transpose(1, 2)
        q, codes = self.quantizer.quantizers[0](h)
        return codes, q.transpose(1, 2)

    def vq2emb(self, codes: Tensor) -> Tensor:
        """codes (B, T) -> (B, T, hidden) as upstream's `quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)`."""
        return self.quantizer.quantizers[0].vq2emb(codes).transpose(1, 2)

"""chinese-hubert-base (Hugging Face `HubertModel`, base config) in plain torch: 16 kHz audio -> 768-d features.

Parameter names are the published `pytorch_model.bin` (`feature_extractor.conv_layers.N.conv`,
`feature_projection`, `encoder.pos_conv_embed.conv` (weight-normed over dim 2), `encoder.layers.N.attention.
{q,k,v,out}_proj`, `feed_forward.{intermediate,output}_dense`, `layer_norm`, `final_layer_norm`). Only the
post-norm ("group" feature-norm) variant exists for this model; the config file is checked for it.
GPT-SoVITS feeds the raw waveform (no feature-extractor normalisation) and reads `last_hidden_state`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.loading import CheckpointError


@dataclass(frozen=True)
class HubertConfig:
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    conv_dim: tuple[int, ...] = (512,) * 7
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    num_conv_pos_embeddings: int = 128
    num_conv_pos_embedding_groups: int = 16
    layer_norm_eps: float = 1e-5
    feat_proj_layer_norm: bool = True
    masked_spec_embed: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> HubertConfig:
        checks = {"feat_extract_norm": "group", "do_stable_layer_norm": False, "conv_bias": False,
                  "feat_extract_activation": "gelu", "hidden_act": "gelu"}
        for name, want in checks.items():
            if data.get(name, want) != want:
                raise CheckpointError(f"{source}: {name} = {data.get(name)!r}; chinese-hubert-base uses {want!r}")
        try:
            cfg = cls(hidden_size=int(data.get("hidden_size", 768)),
                      num_hidden_layers=int(data.get("num_hidden_layers", 12)),
                      num_attention_heads=int(data.get("num_attention_heads", 12)),
                      intermediate_size=int(data.get("intermediate_size", 3072)),
                      conv_dim=tuple(int(v) for v in data.get("conv_dim", cls.conv_dim)),
                      conv_kernel=tuple(int(v) for v in data.get("conv_kernel", cls.conv_kernel)),
                      conv_stride=tuple(int(v) for v in data.get("conv_stride", cls.conv_stride)),
                      num_conv_pos_embeddings=int(data.get("num_conv_pos_embeddings", 128)),
                      num_conv_pos_embedding_groups=int(data.get("num_conv_pos_embedding_groups", 16)),
                      layer_norm_eps=float(data.get("layer_norm_eps", 1e-5)),
                      feat_proj_layer_norm=bool(data.get("feat_proj_layer_norm", True)),
                      masked_spec_embed=float(data.get("mask_time_prob", 0.05)) > 0
                      or float(data.get("mask_feature_prob", 0.0)) > 0)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{source}: a size field is not a number ({e})") from None
        if not len(cfg.conv_dim) == len(cfg.conv_kernel) == len(cfg.conv_stride) or \
                cfg.hidden_size % cfg.num_attention_heads or cfg.hidden_size % cfg.num_conv_pos_embedding_groups:
            raise CheckpointError(f"{source}: conv_dim/conv_kernel/conv_stride lengths differ, or hidden_size is not "
                                  f"divisible by num_attention_heads / num_conv_pos_embedding_groups")
        return cfg


class ConvLayer(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, group_norm: bool) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, bias=False)
        if group_norm:
            self.layer_norm = nn.GroupNorm(cout, cout, affine=True)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if hasattr(self, "layer_norm"):
            x = self.layer_norm(x)
        return F.gelu(x)


class FeatureExtractor(nn.Module):
    def __init__(self, cfg: HubertConfig) -> None:
        super().__init__()
        dims = (1,) + cfg.conv_dim
        self.conv_layers = nn.ModuleList(ConvLayer(dims[i], dims[i + 1], k, s, group_norm=i == 0)
                                         for i, (k, s) in enumerate(zip(cfg.conv_kernel, cfg.conv_stride)))

    def forward(self, wav: Tensor) -> Tensor:
        x = wav[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class FeatureProjection(nn.Module):
    def __init__(self, cfg: HubertConfig) -> None:
        super().__init__()
        if cfg.feat_proj_layer_norm:
            self.layer_norm = nn.LayerNorm(cfg.conv_dim[-1], eps=cfg.layer_norm_eps)
        self.projection = nn.Linear(cfg.conv_dim[-1], cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        if hasattr(self, "layer_norm"):
            x = self.layer_norm(x)
        return self.projection(x)


class PositionalConv(nn.Module):
    """Grouped convolution over time (the checkpoint's weight_g/weight_v folded over dim 2 at load),
    the last frame dropped for an even kernel, GELU."""

    def __init__(self, cfg: HubertConfig) -> None:
        super().__init__()
        k = cfg.num_conv_pos_embeddings
        self.conv = nn.Conv1d(cfg.hidden_size, cfg.hidden_size, k, padding=k // 2,
                              groups=cfg.num_conv_pos_embedding_groups)
        self.remove = 1 if k % 2 == 0 else 0

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if self.remove:
            x = x[:, :, :-self.remove]
        return F.gelu(x)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scaling = (dim // heads) ** -0.5
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(dim, hidden)
        self.output_dense = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.output_dense(F.gelu(self.intermediate_dense(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: HubertConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg.hidden_size, cfg.num_attention_heads)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.feed_forward = FeedForward(cfg.hidden_size, cfg.intermediate_size)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        x = self.layer_norm(x + self.attention(x))
        return self.final_layer_norm(x + self.feed_forward(x))


class Encoder(nn.Module):
    def __init__(self, cfg: HubertConfig) -> None:
        super().__init__()
        self.pos_conv_embed = PositionalConv(cfg)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: Tensor) -> Tensor:
        x = self.layer_norm(x + self.pos_conv_embed(x.transpose(1, 2)).transpose(1, 2))
        for layer in self.layers:
            x = layer(x)
        return x


class Hubert(nn.Module):
    def __init__(self, cfg: HubertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.masked_spec_embed:        # a training-time parameter the checkpoint carries
            self.masked_spec_embed = nn.Parameter(torch.empty(cfg.hidden_size))
        self.feature_extractor = FeatureExtractor(cfg)
        self.feature_projection = FeatureProjection(cfg)
        self.encoder = Encoder(cfg)

    def frames(self, samples: int) -> int:
        for k, s in zip(self.cfg.conv_kernel, self.cfg.conv_stride):
            samples = (samples - k) // s + 1
        return samples

    def forward(self, wav: Tensor) -> Tensor:
        """wav [B, samples] at 16 kHz -> last_hidden_state [B, frames, hidden]."""
        x = self.feature_extractor(wav).transpose(1, 2)
        return self.encoder(self.feature_projection(x))

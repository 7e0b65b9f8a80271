"""HuBERT base (Hugging Face `HubertModel`: post-norm, group-norm feature extractor) in plain torch, inference
only, with the published parameter names (`feature_extractor.conv_layers.N.conv`, `feature_projection`,
`encoder.pos_conv_embed.conv.parametrizations.weight.original0/1` (weight norm over dim 2),
`encoder.layers.N.attention.{q,k,v,out}_proj`, `feed_forward.{intermediate,output}_dense`). Used by OmniVoice's
Higgs audio tokenizer (the mean of all hidden states) and GPT-SoVITS (chinese-hubert-base, the last one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class HubertConfig:
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    conv_dim: tuple[int, ...] = (512,) * 7
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    conv_bias: bool = False
    num_conv_pos_embeddings: int = 128
    num_conv_pos_embedding_groups: int = 16
    layer_norm_eps: float = 1e-5

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> HubertConfig:
        """A Hugging Face HubertConfig's fields; a ValueError names `where` and the field."""
        checks = {"model_type": "hubert", "feat_extract_norm": "group", "do_stable_layer_norm": False,
                  "feat_extract_activation": "gelu", "hidden_act": "gelu", "feat_proj_layer_norm": True,
                  "conv_pos_batch_norm": False, "use_weighted_layer_sum": False}
        for key, want in checks.items():
            if key in d and d[key] != want:
                raise ValueError(f"{where}.{key}: expected {want!r} (HuBERT base), got {d[key]!r}")
        known = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in cls.__dataclass_fields__}
        c = cls(**known)
        if not len(c.conv_dim) == len(c.conv_kernel) == len(c.conv_stride):
            raise ValueError(f"{where}: conv_dim, conv_kernel and conv_stride differ in length")
        return c


class ConvLayer(nn.Module):
    """conv -> (GroupNorm with one group per channel, first layer only) -> GELU."""

    def __init__(self, c: HubertConfig, i: int) -> None:
        super().__init__()
        cin = c.conv_dim[i - 1] if i > 0 else 1
        self.conv = nn.Conv1d(cin, c.conv_dim[i], c.conv_kernel[i], stride=c.conv_stride[i], bias=c.conv_bias)
        self.layer_norm = nn.GroupNorm(c.conv_dim[i], c.conv_dim[i], affine=True) if i == 0 else None

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return F.gelu(x)


class FeatureExtractor(nn.Module):
    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        self.conv_layers = nn.ModuleList(ConvLayer(c, i) for i in range(len(c.conv_dim)))

    def forward(self, wav: Tensor) -> Tensor:
        x = wav[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class FeatureProjection(nn.Module):
    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(c.conv_dim[-1], eps=c.layer_norm_eps)
        self.projection = nn.Linear(c.conv_dim[-1], c.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(self.layer_norm(x))


class PositionalConv(nn.Module):
    """Grouped conv over time with weight normalisation (the checkpoint stores g and v), trimmed to
    'same' length, GELU."""

    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        k = c.num_conv_pos_embeddings
        conv = nn.Conv1d(c.hidden_size, c.hidden_size, k, padding=k // 2, groups=c.num_conv_pos_embedding_groups)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.trim = 1 if k % 2 == 0 else 0

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(x.transpose(1, 2))
        if self.trim:
            h = h[:, :, :-self.trim]
        return F.gelu(h).transpose(1, 2)


class HubertAttention(nn.Module):
    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        d = c.hidden_size
        self.heads, self.head_dim = c.num_attention_heads, d // c.num_attention_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim ** -0.5)
        return self.out_proj(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.output_dense = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.output_dense(F.gelu(self.intermediate_dense(x)))


class HubertLayer(nn.Module):
    """Post-norm: x = norm(x + attn(x)); x = final_norm(x + ffn(x))."""

    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        self.attention = HubertAttention(c)
        self.layer_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.feed_forward = FeedForward(c)
        self.final_layer_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        x = self.layer_norm(x + self.attention(x))
        return self.final_layer_norm(x + self.feed_forward(x))


class HubertEncoder(nn.Module):
    def __init__(self, c: HubertConfig) -> None:
        super().__init__()
        self.pos_conv_embed = PositionalConv(c)
        self.layer_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.layers = nn.ModuleList(HubertLayer(c) for _ in range(c.num_hidden_layers))

    def forward(self, x: Tensor) -> list[Tensor]:
        """All hidden states: the normalised input of the first layer and every layer's output."""
        x = self.layer_norm(x + self.pos_conv_embed(x))
        states = [x]
        for layer in self.layers:
            x = layer(x)
            states.append(x)
        return states


class Hubert(nn.Module):
    """HuBERT base (post-norm, group-norm feature extractor), inference only.

    `masked_spec_embed` is a training-only vector some checkpoints carry (the published Higgs
    tokenizer does); it is loaded when present and never used.
    """

    def __init__(self, c: HubertConfig, masked_spec_embed: bool = False) -> None:
        super().__init__()
        self.config = c
        self.feature_extractor = FeatureExtractor(c)
        self.feature_projection = FeatureProjection(c)
        self.encoder = HubertEncoder(c)
        if masked_spec_embed:
            self.masked_spec_embed = nn.Parameter(torch.zeros(c.hidden_size))

    def frames(self, samples: int) -> int:
        """Feature frames for `samples` samples of 16 kHz audio."""
        for k, s in zip(self.config.conv_kernel, self.config.conv_stride):
            samples = (samples - k) // s + 1
        return samples

    def forward(self, wav: Tensor) -> list[Tensor]:
        """wav [B, samples] at 16 kHz -> every hidden state [B, frames, hidden] (the last is
        `last_hidden_state`)."""
        return self.encoder(self.feature_projection(self.feature_extractor(wav).transpose(1, 2)))

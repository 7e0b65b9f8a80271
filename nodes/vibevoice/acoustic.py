"""VibeVoice's σ-VAE acoustic decoder (upstream `modular_vibevoice_tokenizer.TokenizerDecoder`, parameter names
kept: `decoder.upsample_layers.*`, `decoder.stages.*`, `decoder.head.*`): latents (B, vae_dim, frames) ->
audio (B, channels, frames * prod(ratios)), 24 kHz.

A causal conv stem, then per stage an upsampling transposed conv (stage 0: none) and ConvNeXt-like blocks
(RMSNorm, depthwise causal conv, layer scale; RMSNorm, GELU MLP, layer scale), then a causal conv head.
Every conv is causal, so the decoder streams: `decode(latents, cache)` called frame by frame with one
StreamingConvCache gives, concatenated, what one call gives for all frames.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.streaming_conv import PAD_MODES, StreamingConv1d, StreamingConvCache, StreamingConvTranspose1d


@dataclass(frozen=True)
class AcousticConfig:
    """`acoustic_tokenizer_config` of a VibeVoice config.json (the decoder's fields)."""
    vae_dim: int
    channels: int
    n_filters: int
    ratios: tuple[int, ...]
    depths: tuple[int, ...]
    layernorm_eps: float
    pad_mode: str
    conv_bias: bool
    layer_scale_init_value: float
    depthwise: bool

    @property
    def hop_length(self) -> int:
        n = 1
        for r in self.ratios:
            n *= r
        return n

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AcousticConfig:
        def fail(name: str, why: str) -> ValueError:
            return ValueError(f"acoustic_tokenizer_config.{name}: {why} (got {d.get(name)!r})")

        enc = d.get("encoder_depths", "3-3-3-3-3-3-8")
        dec = d.get("decoder_depths")
        raw = dec if dec is not None else enc
        try:
            depths = tuple(int(x) for x in raw.split("-")) if isinstance(raw, str) else tuple(int(x) for x in raw)
        except (TypeError, ValueError):
            raise fail("decoder_depths" if dec is not None else "encoder_depths", "expected a list like '3-3-8'") from None
        if dec is None:
            depths = tuple(reversed(depths))    # upstream: the decoder mirrors the encoder
        ratios = d.get("decoder_ratios") or d.get("encoder_ratios") or [8, 5, 5, 4, 2, 2]
        if not isinstance(ratios, list) or not all(isinstance(r, int) and r >= 1 for r in ratios):
            raise fail("decoder_ratios", "expected a list of positive integers")
        if len(depths) != len(ratios) + 1 or min(depths) < 0:
            raise fail("decoder_depths", f"expected {len(ratios) + 1} non-negative depths (one more than the ratios)")
        if d.get("mixer_layer", "depthwise_conv") not in ("depthwise_conv", "conv"):
            raise fail("mixer_layer", "expected 'depthwise_conv' or 'conv'")
        if d.get("layernorm", "RMSNorm") != "RMSNorm" or d.get("conv_norm", "none") != "none" \
                or not d.get("causal", True) or not d.get("disable_last_norm", True):
            raise ValueError("acoustic_tokenizer_config: only the published decoder (causal, RMSNorm blocks, "
                             "conv_norm 'none', disable_last_norm) is supported")
        if d.get("pad_mode", "constant") not in PAD_MODES:
            raise fail("pad_mode", f"expected one of {', '.join(PAD_MODES)}")
        w = "acoustic_tokenizer_config"
        scale = d.get("layer_scale_init_value", 1e-6)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale < float("inf"):
            raise fail("layer_scale_init_value", "expected a non-negative number")
        return cls(int_field(d, "vae_dim", w, 64), int_field(d, "channels", w, 1), int_field(d, "decoder_n_filters", w, 32),
                   tuple(ratios), depths, float_field(d, "layernorm_eps", w, 1e-5), d.get("pad_mode", "constant"),
                   bool(d.get("conv_bias", True)), float(scale),
                   d.get("mixer_layer", "depthwise_conv") == "depthwise_conv")


def int_field(d: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    """A positive integer field (`default` when absent; required when no default)."""
    name = f"{where}.{key}" if where else key
    v = d.get(key, default)
    if v is None:
        raise ValueError(f"{name} missing")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} {v!r}: expected a positive integer")
    return v


def float_field(d: dict[str, Any], key: str, where: str, default: float) -> float:
    """A positive finite number field (`default` when absent)."""
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
        raise ValueError(f"{where}.{key} {v!r}: expected a positive number")
    return float(v)


class ConvRMSNorm(nn.Module):
    """RMS norm over channels of (B, C, T), in float32, weight applied after the cast back (upstream's order)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)
        f = h.float()
        out = (f * f.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()).type_as(h) * self.weight
        return out.transpose(1, 2)


class FFN(nn.Module):
    def __init__(self, dim: int, hidden: int, bias: bool) -> None:
        super().__init__()
        self.linear1 = nn.Linear(dim, hidden, bias=bias)
        self.linear2 = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return _linear(self.linear2, F.gelu(_linear(self.linear1, x)))


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    """`layer(x)` by the ops torch's linear itself takes for a strided input (the blocks' channels-last permute):
    matmul, then the bias added in place. Spelled out because under a dispatch mode (the runtime's strict
    simulated device) linear reaches the mode whole and its re-dispatch takes another CPU kernel for such an
    input, one ulp away; a contiguous input keeps linear, whose fused path is the same in both."""
    if x.is_contiguous():
        return layer(x)
    out = torch.matmul(x, layer.weight.t())
    return out.add_(layer.bias) if layer.bias is not None else out


class _Mixer(nn.Module):
    """Upstream's `Convlayer` level (`mixer.conv.conv.conv.*`)."""

    def __init__(self, dim: int, kernel: int, groups: int, bias: bool, pad_mode: str) -> None:
        super().__init__()
        self.conv = StreamingConv1d(dim, dim, kernel, groups=groups, bias=bias, pad_mode=pad_mode)


class Block1D(nn.Module):
    def __init__(self, dim: int, c: AcousticConfig, kernel: int = 7) -> None:
        super().__init__()
        self.norm = ConvRMSNorm(dim, c.layernorm_eps)
        self.ffn_norm = ConvRMSNorm(dim, c.layernorm_eps)
        self.mixer = _Mixer(dim, kernel, dim if c.depthwise else 1, c.conv_bias, c.pad_mode)
        self.ffn = FFN(dim, 4 * dim, c.conv_bias)
        if c.layer_scale_init_value > 0:
            self.gamma = nn.Parameter(torch.full((dim,), c.layer_scale_init_value))
            self.ffn_gamma = nn.Parameter(torch.full((dim,), c.layer_scale_init_value))
        else:
            self.gamma = self.ffn_gamma = None

    def forward(self, x: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        h = self.mixer.conv(self.norm(x), cache)
        if self.gamma is not None:
            h = h * self.gamma.unsqueeze(-1)
        x = x + h
        h = self.ffn(self.ffn_norm(x).permute(0, 2, 1)).permute(0, 2, 1)
        if self.ffn_gamma is not None:
            h = h * self.ffn_gamma.unsqueeze(-1)
        return x + h


class TokenizerDecoder(nn.Module):
    def __init__(self, c: AcousticConfig, kernel_size: int = 7, last_kernel_size: int = 7) -> None:
        super().__init__()
        n = len(c.depths)
        width = [c.n_filters * 2 ** (n - 1 - i) for i in range(n)]
        self.upsample_layers = nn.ModuleList([nn.Sequential(
            StreamingConv1d(c.vae_dim, width[0], kernel_size, bias=c.conv_bias, pad_mode=c.pad_mode))])
        for i, r in enumerate(c.ratios):
            self.upsample_layers.append(nn.Sequential(
                StreamingConvTranspose1d(width[i], width[i + 1], 2 * r, r, bias=c.conv_bias)))
        self.stages = nn.ModuleList(nn.Sequential(*[Block1D(width[i], c) for _ in range(c.depths[i])])
                                    for i in range(n))
        self.head = StreamingConv1d(width[-1], c.channels, last_kernel_size, bias=c.conv_bias, pad_mode=c.pad_mode)

    def forward(self, x: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        for up, stage in zip(self.upsample_layers, self.stages):
            x = up[0](x, cache)
            for block in stage:
                x = block(x, cache)
        return self.head(x, cache)


class AcousticTokenizer(nn.Module):
    """`acoustic_tokenizer` of a VibeVoice model, decoder only (the Realtime model never encodes audio)."""

    def __init__(self, c: AcousticConfig) -> None:
        super().__init__()
        self.config = c
        self.decoder = TokenizerDecoder(c)

    def decode(self, latents: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        """latents (B, vae_dim, frames) or (B, frames, vae_dim) -> audio (B, channels, frames * hop)."""
        if latents.dim() != 3:
            raise ValueError(f"latents {tuple(latents.shape)}: expected (batch, vae_dim, frames)")
        if latents.shape[1] != self.config.vae_dim:
            latents = latents.permute(0, 2, 1)
        return self.decoder(latents, cache)

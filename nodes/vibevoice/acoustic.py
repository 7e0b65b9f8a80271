"""VibeVoice's σ-VAE acoustic tokenizer (upstream `modular_vibevoice_tokenizer.TokenizerDecoder` /
`TokenizerEncoder`, parameter names kept: `decoder.upsample_layers.*`, `decoder.stages.*`, `decoder.head.*`,
`encoder.downsample_layers.*`, `encoder.stages.*`, `encoder.head.*`): decoder latents (B, vae_dim, frames) ->
audio (B, channels, frames * prod(ratios)), 24 kHz; encoder audio -> latents (B, frames, vae_dim). The long-form
models' semantic tokenizer is the same encoder (its own config, no σ-VAE noise).

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
    """`acoustic_tokenizer_config` / `semantic_tokenizer_config` of a VibeVoice config.json, one side of it: the
    decoder's fields, or the encoder's (`ratios` in the order that side applies them: the encoder walks upstream's
    `encoder_ratios` reversed)."""
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
    fix_std: float = 0.5             # σ-VAE noise: per-item std drawn as randn * fix_std / 0.8 (encoder only)
    std_dist_type: str = "gaussian"  # "gaussian" (acoustic) or "none" (semantic: the encoder's output as is)

    @property
    def hop_length(self) -> int:
        n = 1
        for r in self.ratios:
            n *= r
        return n

    @classmethod
    def from_dict(cls, d: dict[str, Any], side: str = "decoder",
                  where: str = "acoustic_tokenizer_config") -> AcousticConfig:
        """One side ("decoder" or "encoder") of the tokenizer config `d`; errors name `where` and the field."""
        if side not in ("decoder", "encoder"):
            raise ValueError(f"side {side!r}: expected 'decoder' or 'encoder'")

        def fail(name: str, why: str) -> ValueError:
            return ValueError(f"{where}.{name}: {why} (got {d.get(name)!r})")

        enc = d.get("encoder_depths", "3-3-3-3-3-3-8")
        dec = d.get("decoder_depths") if side == "decoder" else None
        raw = dec if dec is not None else enc
        try:
            depths = tuple(int(x) for x in raw.split("-")) if isinstance(raw, str) else tuple(int(x) for x in raw)
        except (TypeError, ValueError):
            raise fail("decoder_depths" if dec is not None else "encoder_depths", "expected a list like '3-3-8'") from None
        if side == "decoder" and dec is None:
            depths = tuple(reversed(depths))    # upstream: the decoder mirrors the encoder
        key = f"{side}_ratios"
        ratios = (d.get("decoder_ratios") if side == "decoder" else None) or d.get("encoder_ratios") \
            or [8, 5, 5, 4, 2, 2]
        if not isinstance(ratios, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1
                                                   for r in ratios):
            raise fail(key, "expected a list of positive integers")
        if side == "encoder":
            ratios = list(reversed(ratios))     # upstream's encoder downsamples by the ratios reversed
        depth_key = "decoder_depths" if dec is not None else "encoder_depths"
        if len(depths) != len(ratios) + 1 or min(depths) < 0:
            raise fail(depth_key, f"expected {len(ratios) + 1} non-negative depths (one more than the ratios)")
        if d.get("mixer_layer", "depthwise_conv") not in ("depthwise_conv", "conv"):
            raise fail("mixer_layer", "expected 'depthwise_conv' or 'conv'")
        if d.get("layernorm", "RMSNorm") != "RMSNorm" or d.get("conv_norm", "none") != "none" \
                or not d.get("causal", True) or not d.get("disable_last_norm", True):
            raise ValueError(f"{where}: only the published {side} (causal, RMSNorm blocks, "
                             "conv_norm 'none', disable_last_norm) is supported")
        if d.get("pad_mode", "constant") not in PAD_MODES:
            raise fail("pad_mode", f"expected one of {', '.join(PAD_MODES)}")
        w = where
        scale = d.get("layer_scale_init_value", 1e-6)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale < float("inf"):
            raise fail("layer_scale_init_value", "expected a non-negative number")
        dist = d.get("std_dist_type", "gaussian")
        if dist not in ("gaussian", "none"):
            raise fail("std_dist_type", "expected 'gaussian' or 'none'")
        std = d.get("fix_std", 0.5)
        if isinstance(std, bool) or not isinstance(std, (int, float)) or not 0 <= std < float("inf"):
            raise fail("fix_std", "expected a non-negative number")
        return cls(int_field(d, "vae_dim", w, 64), int_field(d, "channels", w, 1),
                   int_field(d, f"{side}_n_filters", w, 32),
                   tuple(ratios), depths, float_field(d, "layernorm_eps", w, 1e-5), d.get("pad_mode", "constant"),
                   bool(d.get("conv_bias", True)), float(scale),
                   d.get("mixer_layer", "depthwise_conv") == "depthwise_conv", float(std), dist)


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


class TokenizerEncoder(nn.Module):
    """Audio (B, channels, samples) -> (B, vae_dim, samples / prod(ratios)): a causal conv stem, then per stage a
    strided causal conv (stage 0: the stem) and the same blocks as the decoder, then a causal conv head."""

    def __init__(self, c: AcousticConfig, kernel_size: int = 7, last_kernel_size: int = 7) -> None:
        super().__init__()
        n = len(c.depths)
        width = [c.n_filters * 2 ** i for i in range(n)]
        self.downsample_layers = nn.ModuleList([nn.Sequential(
            StreamingConv1d(c.channels, width[0], kernel_size, bias=c.conv_bias, pad_mode=c.pad_mode))])
        for i, r in enumerate(c.ratios):
            self.downsample_layers.append(nn.Sequential(
                StreamingConv1d(width[i], width[i + 1], 2 * r, r, bias=c.conv_bias, pad_mode=c.pad_mode)))
        self.stages = nn.ModuleList(nn.Sequential(*[Block1D(width[i], c) for _ in range(c.depths[i])])
                                    for i in range(n))
        self.head = StreamingConv1d(width[-1], c.vae_dim, last_kernel_size, bias=c.conv_bias, pad_mode=c.pad_mode)

    def forward(self, x: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        for down, stage in zip(self.downsample_layers, self.stages):
            x = down[0](x, cache)
            for block in stage:
                x = block(x, cache)
        return self.head(x, cache)


def _audio_in(audio: Tensor, c: AcousticConfig) -> Tensor:
    if audio.dim() == 2:
        audio = audio.unsqueeze(1)
    if audio.dim() != 3 or audio.shape[1] != c.channels:
        raise ValueError(f"audio {tuple(audio.shape)}: expected (batch, {c.channels}, samples)")
    if audio.shape[-1] % c.hop_length:
        # upstream's feature extractor pads every clip to a multiple of the hop; the convs then need no right padding
        raise ValueError(f"audio of {audio.shape[-1]} samples: expected a multiple of the hop {c.hop_length} "
                         "(pad the clip as upstream's feature extractor does)")
    return audio


class AcousticTokenizer(nn.Module):
    """`acoustic_tokenizer` of a VibeVoice model: the decoder, and the encoder when `encoder` is given (the
    long-form models encode their voice prompts; the Realtime model never encodes audio)."""

    def __init__(self, c: AcousticConfig, encoder: AcousticConfig | None = None) -> None:
        super().__init__()
        self.config = c
        self.encoder_config = encoder
        if encoder is not None:
            self.encoder = TokenizerEncoder(encoder)
        self.decoder = TokenizerDecoder(c)

    def encode(self, audio: Tensor, generator: torch.Generator | None = None,
               cache: StreamingConvCache | None = None) -> Tensor:
        """audio (B, channels, samples) -> latents (B, frames, vae_dim), with the σ-VAE noise upstream adds
        (`std_dist_type` gaussian; drawn from `generator`, or the global generator as upstream does when None).
        The draws are upstream's, in its order: a std per item, then noise shaped as the latents."""
        if self.encoder_config is None:
            raise ValueError("this acoustic tokenizer was built without its encoder")
        mean = self.encoder(_audio_in(audio, self.encoder_config), cache).permute(0, 2, 1)
        c = self.encoder_config
        if c.std_dist_type == "none":
            return mean
        std = torch.randn(mean.shape[0], generator=generator, device=mean.device, dtype=mean.dtype) * (c.fix_std / 0.8)
        # randn_like keeps the permuted strides; drawing into the same layout keeps upstream's sample order
        noise = torch.empty_like(mean).normal_(generator=generator)
        return mean + std[:, None, None] * noise

    def decode(self, latents: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        """latents (B, vae_dim, frames) or (B, frames, vae_dim) -> audio (B, channels, frames * hop)."""
        if latents.dim() != 3:
            raise ValueError(f"latents {tuple(latents.shape)}: expected (batch, vae_dim, frames)")
        if latents.shape[1] != self.config.vae_dim:
            latents = latents.permute(0, 2, 1)
        return self.decoder(latents, cache)


class SemanticTokenizer(nn.Module):
    """`semantic_tokenizer` of a long-form VibeVoice model: the encoder only, its output used as is."""

    def __init__(self, c: AcousticConfig) -> None:
        super().__init__()
        self.config = c
        self.encoder = TokenizerEncoder(c)

    def encode(self, audio: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        """audio (B, channels, samples) -> features (B, frames, vae_dim)."""
        return self.encoder(_audio_in(audio, self.config), cache).permute(0, 2, 1)

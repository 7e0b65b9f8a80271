"""AudioVAE V2 of VoxCPM 2: a causal convolutional VAE that encodes 16 kHz audio into 64-dim latents at
25 Hz and decodes them at 48 kHz (sample-rate conditioned decoder, "implicit super-resolution").

Parameter names follow upstream's `audiovae.pth` exactly, weight norm included: each convolution holds
torch's legacy weight-norm parameters (`weight_g`, `weight_v`) and normalises in its forward, so the pickle
loads unchanged and the runtime streams each conv with its two tensors.

    AudioVAE
      encoder   CausalEncoder: conv(1 -> 128), 4 blocks (3 residual units + strided conv), fc_mu / fc_logvar
      decoder   CausalDecoder: (depthwise) input convs, 6 upsampling blocks (transposed conv + 3 residual
                units), snake + conv -> tanh; a scale/bias per block chosen by the output-rate bucket
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.dac import Snake1d
from .model import ConfigError, field_of


@dataclass(frozen=True)
class AudioVAEConfig:
    encoder_dim: int = 128
    encoder_rates: tuple[int, ...] = (2, 5, 8, 8)
    latent_dim: int = 64
    decoder_dim: int = 2048
    decoder_rates: tuple[int, ...] = (8, 6, 5, 2, 2, 2)
    depthwise: bool = True
    sample_rate: int = 16000
    out_sample_rate: int = 48000
    sr_bin_boundaries: tuple[int, ...] | None = (20000, 30000, 40000)
    cond_type: str = "scale_bias"
    cond_dim: int = 128
    cond_out_layer: bool = False

    @property
    def hop_length(self) -> int:
        """Input samples per latent frame (upstream's chunk_size)."""
        return math.prod(self.encoder_rates)

    @property
    def decode_hop_length(self) -> int:
        """Output samples per latent frame (upstream's decode_chunk_size)."""
        return math.prod(self.decoder_rates)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, where: str = "audio_vae_config") -> AudioVAEConfig:
        """Upstream's defaults for every field not given (a config without the section gets them all)."""
        d = d or {}
        if d.get("use_noise_block"):
            raise ConfigError(f"{where}.use_noise_block: the noise block draws unseeded noise; no published "
                              "VoxCPM 2 model uses it")
        if "latent_dim" in d and d["latent_dim"] is None:
            raise ConfigError(f"{where}.latent_dim: null (derived latent sizes) is not supported")
        c = cls()
        ints = lambda key, default: tuple(field_of({key: v}, key, int, where) for v in  # noqa: E731
                                          field_of(d, key, list, where, list(default)))
        bounds = d.get("sr_bin_boundaries", c.sr_bin_boundaries)
        c = cls(field_of(d, "encoder_dim", int, where, c.encoder_dim), ints("encoder_rates", c.encoder_rates),
                field_of(d, "latent_dim", int, where, c.latent_dim), field_of(d, "decoder_dim", int, where, c.decoder_dim),
                ints("decoder_rates", c.decoder_rates), field_of(d, "depthwise", bool, where, c.depthwise),
                field_of(d, "sample_rate", int, where, c.sample_rate),
                field_of(d, "out_sample_rate", int, where, c.out_sample_rate),
                None if bounds is None else ints("sr_bin_boundaries", bounds),
                field_of(d, "cond_type", str, where, c.cond_type), field_of(d, "cond_dim", int, where, c.cond_dim),
                field_of(d, "cond_out_layer", bool, where, c.cond_out_layer))
        if c.cond_type not in ("scale_bias", "scale_bias_init", "add", "concat"):
            raise ConfigError(f"{where}.cond_type: expected scale_bias, scale_bias_init, add or concat, "
                              f"got {c.cond_type!r}")
        if c.cond_type == "concat" and not c.cond_out_layer:
            raise ConfigError(f"{where}.cond_out_layer: must be true for cond_type 'concat'")
        return c


class _WeightNorm:
    """Weight norm kept as upstream stores it (`weight_g`, `weight_v` parameters of the conv) and applied
    inside the forward: `torch._weight_norm(v, g, 0)`, the very call torch's legacy `weight_norm` hook makes
    before each forward, so results are identical. Unlike that hook, no computed `weight` stays attached
    to the module after the forward (on a GPU it would hold a copy of every conv outside the runtime's
    accounting, and keep it after the component is offloaded)."""

    def _init_weight_norm(self) -> None:
        weight = self.weight
        del self.weight
        self.weight_g = nn.Parameter(torch.norm_except_dim(weight, 2, 0).detach())
        self.weight_v = nn.Parameter(weight.detach())

    def normed_weight(self) -> Tensor:
        return torch._weight_norm(self.weight_v, self.weight_g, 0)


class CausalConv1d(_WeightNorm, nn.Conv1d):
    """Weight-normed Conv1d padded on the left only: `2 * padding - output_padding` samples."""

    def __init__(self, *args: Any, padding: int = 0, output_padding: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.left = padding * 2 - output_padding
        self._init_weight_norm()

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(F.pad(x, (self.left, 0)), self.normed_weight(), self.bias)


class CausalConvTranspose1d(_WeightNorm, nn.ConvTranspose1d):
    """Weight-normed ConvTranspose1d with `2 * padding - output_padding` samples cut from the right."""

    def __init__(self, *args: Any, padding: int = 0, output_padding: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trim = padding * 2 - output_padding
        self._init_weight_norm()

    def forward(self, x: Tensor) -> Tensor:
        y = F.conv_transpose1d(x, self.normed_weight(), self.bias, self.stride, self.padding, self.output_padding,
                               self.groups, self.dilation)
        return y[..., :-self.trim]


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int, groups: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            Snake1d(dim), CausalConv1d(dim, dim, kernel_size=7, dilation=dilation, padding=3 * dilation, groups=groups),
            Snake1d(dim), CausalConv1d(dim, dim, kernel_size=1))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.block(x)


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, stride: int, groups: int) -> None:
        super().__init__()
        half = dim // 2
        self.block = nn.Sequential(
            ResidualUnit(half, 1, groups), ResidualUnit(half, 3, groups), ResidualUnit(half, 9, groups),
            Snake1d(half), CausalConv1d(half, dim, kernel_size=2 * stride, stride=stride,
                                   padding=math.ceil(stride / 2), output_padding=stride % 2))

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class CausalEncoder(nn.Module):
    def __init__(self, c: AudioVAEConfig) -> None:
        super().__init__()
        d = c.encoder_dim
        layers: list[nn.Module] = [CausalConv1d(1, d, kernel_size=7, padding=3)]
        for stride in c.encoder_rates:
            d *= 2
            layers.append(EncoderBlock(d, stride, d // 2 if c.depthwise else 1))
        self.block = nn.Sequential(*layers)
        self.fc_mu = CausalConv1d(d, c.latent_dim, kernel_size=3, padding=1)
        self.fc_logvar = CausalConv1d(d, c.latent_dim, kernel_size=3, padding=1)   # unused at inference; in the file

    def forward(self, x: Tensor) -> Tensor:
        """Audio [B, 1, T] (T a multiple of the hop) -> latent means [B, D, T / hop]."""
        return self.fc_mu(self.block(x))


class DecoderBlock(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, stride: int, groups: int) -> None:
        super().__init__()
        self.input_channels = dim_in
        self.block = nn.Sequential(
            Snake1d(dim_in), CausalConvTranspose1d(dim_in, dim_out, kernel_size=2 * stride, stride=stride,
                                               padding=math.ceil(stride / 2), output_padding=stride % 2),
            ResidualUnit(dim_out, 1, groups), ResidualUnit(dim_out, 3, groups), ResidualUnit(dim_out, 9, groups))

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class RateCondition(nn.Module):
    """Conditions a decoder block's input on the output-rate bucket (scale/bias, add, or concat)."""

    def __init__(self, dim: int, buckets: int, c: AudioVAEConfig) -> None:
        super().__init__()
        self.kind = c.cond_type
        out_in = dim
        if c.cond_type in ("scale_bias", "scale_bias_init"):
            self.scale_embed = nn.Embedding(buckets, dim)
            self.bias_embed = nn.Embedding(buckets, dim)
        elif c.cond_type == "add":
            self.cond_embed = nn.Embedding(buckets, dim)
        else:
            self.cond_embed = nn.Embedding(buckets, c.cond_dim)
            out_in = dim + c.cond_dim
        self.out_layer = (nn.Sequential(Snake1d(out_in), CausalConv1d(out_in, dim, kernel_size=1)) if c.cond_out_layer
                          else nn.Identity())

    def forward(self, x: Tensor, bucket: Tensor) -> Tensor:
        if self.kind == "add":
            x = x + self.cond_embed(bucket).unsqueeze(-1)
        elif self.kind == "concat":
            x = torch.cat([x, self.cond_embed(bucket).unsqueeze(-1).repeat(1, 1, x.shape[-1])], dim=1)
        else:
            x = x * self.scale_embed(bucket).unsqueeze(-1) + self.bias_embed(bucket).unsqueeze(-1)
        return self.out_layer(x)


class CausalDecoder(nn.Module):
    def __init__(self, c: AudioVAEConfig) -> None:
        super().__init__()
        ch = c.decoder_dim
        if c.depthwise:
            layers: list[nn.Module] = [CausalConv1d(c.latent_dim, c.latent_dim, kernel_size=7, padding=3, groups=c.latent_dim),
                                       CausalConv1d(c.latent_dim, ch, kernel_size=1)]
        else:
            layers = [CausalConv1d(c.latent_dim, ch, kernel_size=7, padding=3)]
        for i, stride in enumerate(c.decoder_rates):
            dim_out = ch // 2 ** (i + 1)
            layers.append(DecoderBlock(ch // 2 ** i, dim_out, stride, dim_out if c.depthwise else 1))
        layers += [Snake1d(dim_out), CausalConv1d(dim_out, 1, kernel_size=7, padding=3), nn.Tanh()]
        if c.sr_bin_boundaries is None:
            self.model = nn.Sequential(*layers)
            self.sr_cond_model = None
        else:
            self.model = nn.ModuleList(layers)
            self.register_buffer("sr_bin_boundaries", torch.tensor(c.sr_bin_boundaries, dtype=torch.int32))
            buckets = len(c.sr_bin_boundaries) + 1
            self.sr_cond_model = nn.ModuleList(
                RateCondition(layer.input_channels, buckets, c) if isinstance(layer, DecoderBlock) else None
                for layer in layers)

    def forward(self, z: Tensor, rate: Tensor | None) -> Tensor:
        if self.sr_cond_model is None:
            return self.model(z)
        bucket = torch.bucketize(rate, self.sr_bin_boundaries)
        for layer, cond in zip(self.model, self.sr_cond_model):
            if cond is not None:
                z = cond(z, bucket)
            z = layer(z)
        return z


class AudioVAE(nn.Module):
    def __init__(self, c: AudioVAEConfig) -> None:
        super().__init__()
        self.config = c
        self.encoder = CausalEncoder(c)
        self.decoder = CausalDecoder(c)

    def encode(self, audio: Tensor) -> Tensor:
        """Mono audio [B, T] or [B, 1, T] at `sample_rate` -> latents [B, D, ceil(T / hop)] (right-padded)."""
        if audio.dim() == 2:
            audio = audio.unsqueeze(1)
        hop = self.config.hop_length
        audio = F.pad(audio, (0, math.ceil(audio.shape[-1] / hop) * hop - audio.shape[-1]))
        return self.encoder(audio)

    def decode(self, z: Tensor) -> Tensor:
        """Latents [B, D, T] -> audio [B, 1, T * decode_hop] at `out_sample_rate`."""
        rate = torch.tensor([self.config.out_sample_rate], device=z.device, dtype=torch.int32)
        return self.decoder(z, rate)

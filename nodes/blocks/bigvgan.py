"""NVIDIA BigVGAN (v2) in plain torch: anti-aliased Snake / SnakeBeta activations, AMP residual blocks.

    model = load_bigvgan("bigvgan_v2_22khz_80band_256x/")  # config.json + bigvgan_generator.pt, weight norm folded
    wav = model(mel)                                       # (B, num_mels, T) log-mel -> (B, 1, T * hop)

The operations are those of NVIDIA's torch path (`alias_free_activation/torch`): 2x upsampling with a
Kaiser-windowed sinc (transposed conv), the activation, a low-pass 2x downsampling. Module and buffer
names are upstream's, so `bigvgan_generator.pt` loads unchanged once weight norm is folded (the filters
are persistent buffers in the file and are loaded from it). Used by IndexTTS 2 (bigvgan_v2_22khz_80band_256x).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.loading import CheckpointError, SizeSource, load_module_from_state
from ..formats.checkpoint import ModelFolderError, load_pickle, read_json
from .dac import fold_weight_norm


@dataclass(frozen=True)
class BigVGANConfig:
    num_mels: int
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    upsample_initial_channel: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    activation: str = "snakebeta"
    snake_logscale: bool = True
    use_tanh_at_final: bool = True
    use_bias_at_final: bool = True
    resblock: str = "1"

    @classmethod
    def from_dict(cls, h: dict[str, Any]) -> "BigVGANConfig":
        """From upstream's config.json (extra training fields ignored); a ValueError names the field."""
        try:
            c = cls(num_mels=int(h["num_mels"]), upsample_rates=tuple(int(x) for x in h["upsample_rates"]),
                    upsample_kernel_sizes=tuple(int(x) for x in h["upsample_kernel_sizes"]),
                    upsample_initial_channel=int(h["upsample_initial_channel"]),
                    resblock_kernel_sizes=tuple(int(x) for x in h["resblock_kernel_sizes"]),
                    resblock_dilation_sizes=tuple(tuple(int(d) for d in ds) for ds in h["resblock_dilation_sizes"]),
                    activation=str(h.get("activation", "snakebeta")),
                    snake_logscale=bool(h.get("snake_logscale", True)),
                    use_tanh_at_final=bool(h.get("use_tanh_at_final", True)),
                    use_bias_at_final=bool(h.get("use_bias_at_final", True)), resblock=str(h.get("resblock", "1")))
        except KeyError as e:
            raise ValueError(f"field {e.args[0]} is missing") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"a field has the wrong type ({e})") from None
        if c.resblock != "1":
            raise ValueError(f"field resblock = {c.resblock!r}: only AMPBlock1 ('1') is supported")
        if c.activation not in ("snake", "snakebeta"):
            raise ValueError(f"field activation = {c.activation!r}: expected 'snake' or 'snakebeta'")
        if len(c.upsample_rates) != len(c.upsample_kernel_sizes) or \
                len(c.resblock_kernel_sizes) != len(c.resblock_dilation_sizes):
            raise ValueError("upsample_rates / upsample_kernel_sizes (or resblock kernel / dilation lists) differ "
                             "in length")
        if c.upsample_initial_channel % (2 ** len(c.upsample_rates)):
            raise ValueError("field upsample_initial_channel is not divisible by 2 per upsampling stage")
        return c

    @property
    def hop(self) -> int:
        return math.prod(self.upsample_rates)


def kaiser_sinc_filter1d(cutoff: float, half_width: float, kernel_size: int) -> Tensor:
    """Upstream's Kaiser-windowed sinc low-pass filter [1, 1, kernel_size]."""
    even = kernel_size % 2 == 0
    half_size = kernel_size // 2
    delta_f = 4 * half_width
    a = 2.285 * (half_size - 1) * math.pi * delta_f + 7.95
    if a > 50.0:
        beta = 0.1102 * (a - 8.7)
    elif a >= 21.0:
        beta = 0.5842 * (a - 21) ** 0.4 + 0.07886 * (a - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(kernel_size, beta=beta, periodic=False)
    time = torch.arange(-half_size, half_size) + 0.5 if even else torch.arange(kernel_size) - half_size
    filt = 2 * cutoff * window * torch.sinc(2 * cutoff * time)
    filt /= filt.sum()
    return filt.view(1, 1, kernel_size)


class UpSample1d(nn.Module):
    def __init__(self, ratio: int = 2, kernel_size: int = 12) -> None:
        super().__init__()
        self.ratio, self.kernel_size = ratio, kernel_size
        self.pad = kernel_size // ratio - 1
        self.pad_left = self.pad * ratio + (kernel_size - ratio) // 2
        self.pad_right = self.pad * ratio + (kernel_size - ratio + 1) // 2
        self.register_buffer("filter", kaiser_sinc_filter1d(0.5 / ratio, 0.6 / ratio, kernel_size))

    def forward(self, x: Tensor) -> Tensor:
        c = x.shape[1]
        x = F.pad(x, (self.pad, self.pad), mode="replicate")
        x = self.ratio * F.conv_transpose1d(x, self.filter.expand(c, -1, -1), stride=self.ratio, groups=c)
        return x[..., self.pad_left:-self.pad_right]


class LowPassFilter1d(nn.Module):
    def __init__(self, cutoff: float, half_width: float, stride: int, kernel_size: int) -> None:
        super().__init__()
        even = kernel_size % 2 == 0
        self.pad_left, self.pad_right = kernel_size // 2 - int(even), kernel_size // 2
        self.stride = stride
        self.register_buffer("filter", kaiser_sinc_filter1d(cutoff, half_width, kernel_size))

    def forward(self, x: Tensor) -> Tensor:
        c = x.shape[1]
        x = F.pad(x, (self.pad_left, self.pad_right), mode="replicate")
        return F.conv1d(x, self.filter.expand(c, -1, -1), stride=self.stride, groups=c)


class DownSample1d(nn.Module):
    def __init__(self, ratio: int = 2, kernel_size: int = 12) -> None:
        super().__init__()
        self.lowpass = LowPassFilter1d(0.5 / ratio, 0.6 / ratio, ratio, kernel_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.lowpass(x)


class Snake(nn.Module):
    """x + 1/(alpha + 1e-9) sin^2(alpha x); alpha stored as a log when `logscale`."""

    def __init__(self, channels: int, logscale: bool = True) -> None:
        super().__init__()
        self.logscale = logscale
        self.alpha = nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        if self.logscale:
            alpha = torch.exp(alpha)
        return x + (1.0 / (alpha + 0.000000001)) * torch.pow(torch.sin(x * alpha), 2)


class SnakeBeta(nn.Module):
    """x + 1/(beta + 1e-9) sin^2(alpha x); alpha and beta stored as logs when `logscale`."""

    def __init__(self, channels: int, logscale: bool = True) -> None:
        super().__init__()
        self.logscale = logscale
        self.alpha = nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        beta = self.beta.unsqueeze(0).unsqueeze(-1)
        if self.logscale:
            alpha, beta = torch.exp(alpha), torch.exp(beta)
        return x + (1.0 / (beta + 0.000000001)) * torch.pow(torch.sin(x * alpha), 2)


class Activation1d(nn.Module):
    """Anti-aliased activation: upsample 2x, activate, low-pass and downsample 2x."""

    def __init__(self, activation: nn.Module) -> None:
        super().__init__()
        self.act = activation
        self.upsample = UpSample1d(2, 12)
        self.downsample = DownSample1d(2, 12)

    def forward(self, x: Tensor) -> Tensor:
        return self.downsample(self.act(self.upsample(x)))


def _activation(c: BigVGANConfig, channels: int) -> nn.Module:
    return (SnakeBeta if c.activation == "snakebeta" else Snake)(channels, c.snake_logscale)


class AMPBlock1(nn.Module):
    def __init__(self, c: BigVGANConfig, channels: int, kernel: int, dilation: tuple[int, ...]) -> None:
        super().__init__()
        pad = lambda d: (kernel * d - d) // 2  # noqa: E731
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, dilation=d, padding=pad(d))
                                    for d in dilation)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, dilation=1, padding=pad(1))
                                    for _ in dilation)
        self.activations = nn.ModuleList(Activation1d(_activation(c, channels)) for _ in range(2 * len(dilation)))

    def forward(self, x: Tensor) -> Tensor:
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, self.activations[::2], self.activations[1::2]):
            x = c2(a2(c1(a1(x)))) + x
        return x


class BigVGAN(nn.Module):
    def __init__(self, c: BigVGANConfig) -> None:
        super().__init__()
        self.config = c
        ch0 = c.upsample_initial_channel
        self.conv_pre = nn.Conv1d(c.num_mels, ch0, 7, 1, padding=3)
        self.ups = nn.ModuleList(
            nn.ModuleList([nn.ConvTranspose1d(ch0 // 2 ** i, ch0 // 2 ** (i + 1), k, u, padding=(k - u) // 2)])
            for i, (u, k) in enumerate(zip(c.upsample_rates, c.upsample_kernel_sizes)))
        self.resblocks = nn.ModuleList(
            AMPBlock1(c, ch0 // 2 ** (i + 1), k, d)
            for i in range(len(c.upsample_rates))
            for k, d in zip(c.resblock_kernel_sizes, c.resblock_dilation_sizes))
        ch = ch0 // 2 ** len(c.upsample_rates)
        self.activation_post = Activation1d(_activation(c, ch))
        self.conv_post = nn.Conv1d(ch, 1, 7, 1, padding=3, bias=c.use_bias_at_final)
        self.num_kernels = len(c.resblock_kernel_sizes)

    def forward(self, mel: Tensor) -> Tensor:
        x = self.conv_pre(mel)
        for i, up in enumerate(self.ups):
            for layer in up:
                x = layer(x)
            xs = self.resblocks[i * self.num_kernels](x)
            for j in range(1, self.num_kernels):
                xs += self.resblocks[i * self.num_kernels + j](x)
            x = xs / self.num_kernels
        x = self.conv_post(self.activation_post(x))
        return torch.tanh(x) if self.config.use_tanh_at_final else torch.clamp(x, min=-1.0, max=1.0)


def load_bigvgan(folder: str | os.PathLike, dtype: torch.dtype = torch.float32) -> BigVGAN:
    """A BigVGAN folder as NVIDIA publishes it: config.json and bigvgan_generator.pt ({"generator": state},
    read weights-only); strict, weight norm folded; errors name the file."""
    folder = Path(folder)
    config_path, weights = folder / "config.json", folder / "bigvgan_generator.pt"
    for path in (config_path, weights):
        if not path.is_file():
            raise ModelFolderError(f"BigVGAN: {path} not found")
    raw = read_json(config_path, "BigVGAN")
    try:
        config = BigVGANConfig.from_dict(raw)
    except ValueError as e:
        raise CheckpointError(f"BigVGAN: {config_path}: {e}") from None
    obj = load_pickle(weights)
    if not isinstance(obj, dict) or not isinstance(obj.get("generator"), dict):
        raise CheckpointError(f"BigVGAN: {weights}: expected a dict with a 'generator' state dict")
    state = obj["generator"]
    if dtype == torch.float64:      # a float64 run (parity checks) folds in float64, as upstream's module .double()
        state = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
    state = fold_weight_norm(state)
    return load_module_from_state(lambda: BigVGAN(config), state, dtype, source=weights,
                                  config=SizeSource(config_path, raw)).eval()

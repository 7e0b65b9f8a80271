"""GPT-SoVITS SoVITS decoder (upstream `module/models.py` SynthesizerTrn, v2 and v2Pro/v2ProPlus), plain torch.

    semantic tokens -> RVQ codebook (quantizer) -> x2 nearest upsample -> TextEncoder (ssl encoder, phone
    encoder, MRTE cross-attention with the reference style `ge`, encoder2) -> prior mean/log-std ->
    z_p = m + noise * exp(logs) * 0.5 -> reverse residual-coupling flow -> HiFi-GAN generator -> waveform

The reference style `ge` comes from MelStyleEncoder over the reference's linear spectrogram (first 704 bins);
v2Pro adds a projected ERes2NetV2 speaker embedding (`sv_emb`, PReLU) and feeds MRTE `ge_to512(ge)`.
Parameter names are the checkpoint's `weight` dict. Weight-normed convolutions (HiFi-GAN, WaveNet layers of
the flow) are plain convolutions: the loader folds `weight_g`/`weight_v` once, with the very operation
upstream runs per forward (`nodes/blocks/dac.fold_weight_norm`). `enc_q` (the training posterior encoder)
is not part of inference: upstream drops it when it saves fine-tuned weights; the loader ignores it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.loading import CheckpointError
from ..blocks.dac import EuclideanCodebook

LRELU_SLOPE = 0.1
SSL_DIM = 768                   # chinese-hubert-base features
STYLE_BINS = 704                # MelStyleEncoder reads the first 704 spectrogram bins (v2)
SV_DIM = 20480                  # ERes2NetV2 w24s4ep4 forward3 output (2048 channels x 10 frequency rows)
MRTE_HIDDEN = 512               # MRTE() is built with its defaults upstream, whatever the config says
V2PRO = ("v2Pro", "v2ProPlus")

# Convolutions stored as weight_g / weight_v pairs (torch.nn.utils.weight_norm) in upstream checkpoints.
WEIGHT_NORMED = re.compile(r"^(dec\.ups\.\d+|dec\.resblocks\.\d+\.convs[12]\.\d+|"
                           r"flow\.flows\.\d+\.enc\.(in_layers\.\d+|res_skip_layers\.\d+|cond_layer))\.weight$")


@dataclass(frozen=True)
class SoVITSConfig:
    version: str                # "v2", "v2Pro" or "v2ProPlus"
    symbols: int                # phone vocabulary (732 for v2 symbols)
    sampling_rate: int
    filter_length: int
    hop_length: int
    win_length: int
    inter_channels: int
    hidden_channels: int
    filter_channels: int
    n_heads: int
    n_layers: int
    kernel_size: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    upsample_rates: tuple[int, ...]
    upsample_initial_channel: int
    upsample_kernel_sizes: tuple[int, ...]
    gin_channels: int
    sv_dim: int = SV_DIM        # v2Pro: width of the speaker embedding (read from sv_emb.weight)

    @property
    def spec_channels(self) -> int:
        return self.filter_length // 2 + 1

    @property
    def is_v2pro(self) -> bool:
        return self.version in V2PRO

    @property
    def samples_per_token(self) -> int:
        """Waveform samples per semantic token (25 Hz tokens, upsampled x2 before the generator)."""
        return 2 * math.prod(self.upsample_rates)

    @classmethod
    def from_hparams(cls, hps: Any, version: str, symbols: int, source: str) -> SoVITSConfig:
        """From the `config` (HParams as plain dicts) of an s2G checkpoint; errors name the file and field."""
        if not isinstance(hps, dict) or not isinstance(hps.get("model"), dict) or not isinstance(hps.get("data"), dict):
            raise CheckpointError(f"{source}: config: expected HParams with 'model' and 'data' sections")
        model, data = hps["model"], hps["data"]

        def num(section: dict, name: str, where: str) -> int:
            value = section.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 20:
                raise CheckpointError(f"{source}: config.{where}.{name} = {value!r}; expected a positive integer")
            return value

        def ints(name: str, depth: int = 1) -> tuple:
            value = model.get(name)
            ok = isinstance(value, list) and value and all(
                isinstance(v, list) and v and all(isinstance(w, int) and 0 < w <= 1 << 12 for w in v)
                if depth == 2 else isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 12 for v in value)
            if not ok:
                raise CheckpointError(f"{source}: config.model.{name} = {value!r}; expected a list of positive integers")
            return tuple(tuple(v) for v in value) if depth == 2 else tuple(value)

        if model.get("resblock", "1") != "1":
            raise CheckpointError(f"{source}: config.model.resblock = {model.get('resblock')!r}; only '1' is used by v2")
        if model.get("semantic_frame_rate", "25hz") != "25hz":
            raise CheckpointError(f"{source}: config.model.semantic_frame_rate: only 25hz exists for v2")
        cfg = cls(version=version, symbols=symbols, sampling_rate=num(data, "sampling_rate", "data"),
                  filter_length=num(data, "filter_length", "data"), hop_length=num(data, "hop_length", "data"),
                  win_length=num(data, "win_length", "data"),
                  inter_channels=num(model, "inter_channels", "model"),
                  hidden_channels=num(model, "hidden_channels", "model"),
                  filter_channels=num(model, "filter_channels", "model"), n_heads=num(model, "n_heads", "model"),
                  n_layers=num(model, "n_layers", "model"), kernel_size=num(model, "kernel_size", "model"),
                  resblock_kernel_sizes=ints("resblock_kernel_sizes"),
                  resblock_dilation_sizes=ints("resblock_dilation_sizes", 2), upsample_rates=ints("upsample_rates"),
                  upsample_initial_channel=num(model, "upsample_initial_channel", "model"),
                  upsample_kernel_sizes=ints("upsample_kernel_sizes"), gin_channels=num(model, "gin_channels", "model"))
        if len(cfg.upsample_rates) != len(cfg.upsample_kernel_sizes) or \
                len(cfg.resblock_kernel_sizes) != len(cfg.resblock_dilation_sizes) or \
                any(len(d) != 3 for d in cfg.resblock_dilation_sizes):
            raise CheckpointError(f"{source}: config.model: upsample_rates/upsample_kernel_sizes and resblock_kernel_sizes/"
                                  f"resblock_dilation_sizes must pair up (three dilations each)")
        if cfg.hidden_channels % cfg.n_heads or cfg.n_layers < 2 or cfg.spec_channels < STYLE_BINS:
            raise CheckpointError(f"{source}: config: hidden_channels divisible by n_heads, n_layers >= 2 and "
                                  f"filter_length >= {2 * (STYLE_BINS - 1)} are required")
        if cfg.upsample_initial_channel >> len(cfg.upsample_rates) < 1:
            raise CheckpointError(f"{source}: config.model.upsample_initial_channel too small for the upsamples")
        return cfg


def sequence_mask(length: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    return torch.ones(1, 1, length, device=device, dtype=dtype)


# ---- VITS text encoder blocks (module/attentions.py) ----------------------------------------------------


class ChannelNorm(nn.Module):
    """LayerNorm over channels of [B, C, T] (upstream modules.LayerNorm: gamma / beta)."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        x = F.layer_norm(x.transpose(1, -1), (x.shape[1],), self.gamma, self.beta, self.eps)
        return x.transpose(1, -1)


class RelativeAttention(nn.Module):
    """VITS multi-head attention: 1x1 conv projections, optional relative-position keys/values (window 4)."""

    def __init__(self, channels: int, out_channels: int, heads: int, window: int | None = None) -> None:
        super().__init__()
        self.heads, self.k_channels, self.window = heads, channels // heads, window
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, out_channels, 1)
        if window is not None:
            self.emb_rel_k = nn.Parameter(torch.empty(1, window * 2 + 1, self.k_channels))
            self.emb_rel_v = nn.Parameter(torch.empty(1, window * 2 + 1, self.k_channels))

    def relative(self, table: Tensor, length: int) -> Tensor:
        pad = max(length - (self.window + 1), 0)
        start = max((self.window + 1) - length, 0)
        if pad > 0:
            table = F.pad(table, [0, 0, pad, pad, 0, 0])
        return table[:, start:start + 2 * length - 1]

    @staticmethod
    def rel_to_abs(x: Tensor) -> Tensor:
        b, h, n, _ = x.size()
        x = F.pad(x, [0, 1, 0, 0, 0, 0, 0, 0]).view([b, h, n * 2 * n])
        x = F.pad(x, [0, n - 1, 0, 0, 0, 0])
        return x.view([b, h, n + 1, 2 * n - 1])[:, :, :n, n - 1:]

    @staticmethod
    def abs_to_rel(x: Tensor) -> Tensor:
        b, h, n, _ = x.size()
        x = F.pad(x, [0, n - 1, 0, 0, 0, 0, 0, 0]).view([b, h, n ** 2 + n * (n - 1)])
        x = F.pad(x, [n, 0, 0, 0, 0, 0])
        return x.view([b, h, n, 2 * n])[:, :, :, 1:]

    def forward(self, x: Tensor, c: Tensor, mask: Tensor) -> Tensor:
        q, k, v = self.conv_q(x), self.conv_k(c), self.conv_v(c)
        b, d, t_s, t_t = (*k.size(), q.size(2))
        query = q.view(b, self.heads, self.k_channels, t_t).transpose(2, 3)
        key = k.view(b, self.heads, self.k_channels, t_s).transpose(2, 3)
        value = v.view(b, self.heads, self.k_channels, t_s).transpose(2, 3)
        scores = torch.matmul(query / math.sqrt(self.k_channels), key.transpose(-2, -1))
        if self.window is not None:
            rel = torch.matmul(query / math.sqrt(self.k_channels),
                               self.relative(self.emb_rel_k, t_s).unsqueeze(0).transpose(-2, -1))
            scores = scores + self.rel_to_abs(rel)
        scores = scores.masked_fill(mask == 0, -1e4)
        p_attn = F.softmax(scores, dim=-1)
        out = torch.matmul(p_attn, value)
        if self.window is not None:
            out = out + torch.matmul(self.abs_to_rel(p_attn), self.relative(self.emb_rel_v, t_s).unsqueeze(0))
        return self.conv_o(out.transpose(2, 3).contiguous().view(b, d, t_t))


class FFN(nn.Module):
    def __init__(self, channels: int, filter_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel_size)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel_size)

    def pad(self, x: Tensor) -> Tensor:
        if self.kernel_size == 1:
            return x
        return F.pad(x, [(self.kernel_size - 1) // 2, self.kernel_size // 2, 0, 0, 0, 0])

    def forward(self, x: Tensor, x_mask: Tensor) -> Tensor:
        x = torch.relu(self.conv_1(self.pad(x * x_mask)))
        return self.conv_2(self.pad(x * x_mask)) * x_mask


class Encoder(nn.Module):
    def __init__(self, hidden: int, filter_channels: int, heads: int, layers: int, kernel_size: int) -> None:
        super().__init__()
        self.attn_layers = nn.ModuleList(RelativeAttention(hidden, hidden, heads, window=4) for _ in range(layers))
        self.norm_layers_1 = nn.ModuleList(ChannelNorm(hidden) for _ in range(layers))
        self.ffn_layers = nn.ModuleList(FFN(hidden, filter_channels, kernel_size) for _ in range(layers))
        self.norm_layers_2 = nn.ModuleList(ChannelNorm(hidden) for _ in range(layers))

    def forward(self, x: Tensor, x_mask: Tensor) -> Tensor:
        attn_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
        x = x * x_mask
        for attn, norm1, ffn, norm2 in zip(self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2):
            x = norm1(x + attn(x, x, attn_mask))
            x = norm2(x + ffn(x, x_mask))
        return x * x_mask


class MRTE(nn.Module):
    """Multi-reference timbre encoder: content attends to the phones, plus the style vector."""

    def __init__(self, channels: int = 192, hidden: int = MRTE_HIDDEN, heads: int = 4) -> None:
        super().__init__()
        self.cross_attention = RelativeAttention(hidden, hidden, heads)
        self.c_pre = nn.Conv1d(channels, hidden, 1)
        self.text_pre = nn.Conv1d(channels, hidden, 1)
        self.c_post = nn.Conv1d(hidden, channels, 1)

    def forward(self, ssl: Tensor, ssl_mask: Tensor, text: Tensor, text_mask: Tensor, ge: Tensor) -> Tensor:
        attn_mask = text_mask.unsqueeze(2) * ssl_mask.unsqueeze(-1)
        ssl = self.c_pre(ssl * ssl_mask)
        text = self.text_pre(text * text_mask)
        x = self.cross_attention(ssl * ssl_mask, text * text_mask, attn_mask) + ssl + ge
        return self.c_post(x * ssl_mask)


class TextEncoder(nn.Module):
    def __init__(self, cfg: SoVITSConfig) -> None:
        super().__init__()
        h = cfg.hidden_channels
        self.out_channels = cfg.inter_channels
        self.ssl_proj = nn.Conv1d(SSL_DIM, h, 1)
        self.encoder_ssl = Encoder(h, cfg.filter_channels, cfg.n_heads, cfg.n_layers // 2, cfg.kernel_size)
        self.encoder_text = Encoder(h, cfg.filter_channels, cfg.n_heads, cfg.n_layers, cfg.kernel_size)
        self.text_embedding = nn.Embedding(cfg.symbols, h)
        self.mrte = MRTE(h)
        self.encoder2 = Encoder(h, cfg.filter_channels, cfg.n_heads, cfg.n_layers // 2, cfg.kernel_size)
        self.proj = nn.Conv1d(h, cfg.inter_channels * 2, 1)

    def forward(self, y: Tensor, text: Tensor, ge: Tensor, speed: float) -> tuple[Tensor, Tensor, Tensor]:
        y_mask = sequence_mask(y.shape[2], y.device, y.dtype)
        y = self.ssl_proj(y * y_mask) * y_mask
        y = self.encoder_ssl(y * y_mask, y_mask)
        text_mask = sequence_mask(text.shape[1], y.device, y.dtype)
        text = self.encoder_text(self.text_embedding(text).transpose(1, 2) * text_mask, text_mask)
        y = self.mrte(y, y_mask, text, text_mask, ge)
        y = self.encoder2(y * y_mask, y_mask)
        if speed != 1:
            y = F.interpolate(y, size=int(y.shape[-1] / speed) + 1, mode="linear")
            y_mask = F.interpolate(y_mask, size=y.shape[-1], mode="nearest")
        m, logs = torch.split(self.proj(y) * y_mask, self.out_channels, dim=1)
        return m, logs, y_mask


# ---- flow (module/modules.py WN, ResidualCouplingLayer) ----------------------------------------------------


def tanh_sigmoid_gate(a: Tensor, b: Tensor, h: int) -> Tensor:
    """WaveNet's gated activation (commons.fused_add_tanh_sigmoid_multiply)."""
    x_in = a + b
    return torch.tanh(x_in[:, :h, :]) * torch.sigmoid(x_in[:, h:, :])


class WN(nn.Module):
    def __init__(self, hidden: int, kernel_size: int, layers: int, gin_channels: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cond_layer = nn.Conv1d(gin_channels, 2 * hidden * layers, 1)
        self.in_layers = nn.ModuleList(
            nn.Conv1d(hidden, 2 * hidden, kernel_size, padding=(kernel_size - 1) // 2) for _ in range(layers))
        self.res_skip_layers = nn.ModuleList(
            nn.Conv1d(hidden, 2 * hidden if i < layers - 1 else hidden, 1) for i in range(layers))

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor, gate: Callable[[Tensor, Tensor, int], Tensor] | None = None
                ) -> Tensor:
        """`gate(a, b, h)`: tanh(a + b)[:h] * sigmoid(a + b)[h:] (training passes upstream's scripted one)."""
        gate = gate or tanh_sigmoid_gate
        output = torch.zeros_like(x)
        g = self.cond_layer(g)
        h, last = self.hidden, len(self.in_layers) - 1
        for i, (in_layer, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            acts = res_skip(gate(in_layer(x), g[:, i * 2 * h:(i + 1) * 2 * h, :], h))
            if i < last:
                x = (x + acts[:, :h, :]) * x_mask
                output = output + acts[:, h:, :]
            else:
                output = output + acts
        return output * x_mask


class CouplingLayer(nn.Module):
    """Mean-only residual coupling layer, run in reverse (inference)."""

    def __init__(self, channels: int, hidden: int, kernel_size: int, layers: int, gin_channels: int) -> None:
        super().__init__()
        self.half = channels // 2
        self.pre = nn.Conv1d(self.half, hidden, 1)
        self.enc = WN(hidden, kernel_size, layers, gin_channels)
        self.post = nn.Conv1d(hidden, self.half, 1)

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor) -> Tensor:
        x0, x1 = torch.split(x, [self.half] * 2, 1)
        h = self.enc(self.pre(x0) * x_mask, x_mask, g)
        m = self.post(h) * x_mask
        x1 = (x1 - m) * x_mask            # mean-only: upstream's exp(-logs) is exp(0) = 1
        return torch.cat([x0, x1], 1)


class Flip(nn.Module):
    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor) -> Tensor:
        return torch.flip(x, [1])


class Flow(nn.Module):
    def __init__(self, channels: int, hidden: int, gin_channels: int, flows: int = 4) -> None:
        super().__init__()
        self.flows = nn.ModuleList()
        for _ in range(flows):
            self.flows.append(CouplingLayer(channels, hidden, 5, 4, gin_channels))
            self.flows.append(Flip())

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor) -> Tensor:
        for flow in reversed(self.flows):
            x = flow(x, x_mask, g)
        return x


# ---- HiFi-GAN generator (module/models.py Generator, modules.ResBlock1) -------------------------------------


def padding(kernel_size: int, dilation: int = 1) -> int:
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilation: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                              padding=padding(kernel_size, d)) for d in dilation)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                              padding=padding(kernel_size, 1)) for _ in dilation)

    def forward(self, x: Tensor) -> Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
            x = xt + x
        return x


class Generator(nn.Module):
    def __init__(self, cfg: SoVITSConfig) -> None:
        super().__init__()
        ch0 = cfg.upsample_initial_channel
        self.num_kernels = len(cfg.resblock_kernel_sizes)
        self.conv_pre = nn.Conv1d(cfg.inter_channels, ch0, 7, 1, padding=3)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(ch0 // 2 ** i, ch0 // 2 ** (i + 1), k, u, padding=(k - u) // 2)
            for i, (u, k) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes)))
        self.resblocks = nn.ModuleList(
            ResBlock1(ch0 // 2 ** (i + 1), k, d) for i in range(len(self.ups))
            for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes))
        self.conv_post = nn.Conv1d(ch0 // 2 ** len(self.ups), 1, 7, 1, padding=3, bias=False)
        self.cond = nn.Conv1d(cfg.gin_channels, ch0, 1)

    def forward(self, x: Tensor, g: Tensor) -> Tensor:
        x = self.conv_pre(x) + self.cond(g)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))
            xs = None
            for j in range(self.num_kernels):
                y = self.resblocks[i * self.num_kernels + j](x)
                xs = y if xs is None else xs + y
            x = xs / self.num_kernels
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


# ---- reference style (modules.MelStyleEncoder) ---------------------------------------------------------------


class Mish(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * torch.tanh(F.softplus(x))


class LinearNorm(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.fc = nn.Linear(cin, cout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


class ConvNorm(nn.Module):
    def __init__(self, cin: int, cout: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size, padding=(kernel_size - 1) // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class Conv1dGLU(nn.Module):
    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.channels = channels
        self.conv1 = ConvNorm(channels, 2 * channels, kernel_size)

    def forward(self, x: Tensor) -> Tensor:
        x1, x2 = torch.split(self.conv1(x), self.channels, dim=1)
        return x + x1 * torch.sigmoid(x2)


class StyleAttention(nn.Module):
    """modules.MultiHeadAttention (w_qs/w_ks/w_vs/fc, temperature sqrt(d_model), residual)."""

    def __init__(self, heads: int, dim: int) -> None:
        super().__init__()
        self.heads, self.d = heads, dim // heads
        self.temperature = math.sqrt(dim)
        self.w_qs = nn.Linear(dim, dim)
        self.w_ks = nn.Linear(dim, dim)
        self.w_vs = nn.Linear(dim, dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.size()
        q, k, v = (w(x).view(b, n, self.heads, self.d).permute(2, 0, 1, 3).contiguous().view(-1, n, self.d)
                   for w in (self.w_qs, self.w_ks, self.w_vs))
        attn = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / self.temperature, dim=2)
        out = torch.bmm(attn, v).view(self.heads, b, n, self.d).permute(1, 2, 0, 3).contiguous().view(b, n, -1)
        return self.fc(out) + x


class MelStyleEncoder(nn.Module):
    def __init__(self, bins: int, out_dim: int, hidden: int = 128, kernel_size: int = 5, heads: int = 2) -> None:
        super().__init__()
        self.spectral = nn.Sequential(LinearNorm(bins, hidden), Mish(), nn.Identity(), LinearNorm(hidden, hidden),
                                      Mish(), nn.Identity())
        self.temporal = nn.Sequential(Conv1dGLU(hidden, kernel_size), Conv1dGLU(hidden, kernel_size))
        self.slf_attn = StyleAttention(heads, hidden)
        self.fc = LinearNorm(hidden, out_dim)

    def forward(self, spec: Tensor) -> Tensor:
        """spec [B, bins, T] (an all-valid mask) -> style [B, out_dim, 1]."""
        x = self.spectral(spec.transpose(1, 2))
        x = self.temporal(x.transpose(1, 2)).transpose(1, 2)
        x = self.fc(self.slf_attn(x))
        # upstream averages in float32 at least (x.float()); a float64 model stays in float64
        x = torch.div(x.to(torch.promote_types(x.dtype, torch.float32)),
                      torch.tensor([[[x.shape[1]]]], device=x.device)).sum(dim=1).to(x.dtype)
        return x.unsqueeze(-1)


# ---- RVQ (module/quantize.py, core_vq.py; one codebook, no projection) ------------------------------------


class VQLayer(nn.Module):
    def __init__(self, bins: int, dim: int) -> None:
        super().__init__()
        self._codebook = EuclideanCodebook(bins, dim)


class ResidualVQ(nn.Module):
    def __init__(self, bins: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([VQLayer(bins, dim)])


class Quantizer(nn.Module):
    def __init__(self, bins: int = 1024, dim: int = SSL_DIM) -> None:
        super().__init__()
        self.vq = ResidualVQ(bins, dim)

    def encode(self, x: Tensor) -> Tensor:
        """x [B, dim, T] -> codes [B, T] (nearest codebook row)."""
        return self.vq.layers[0]._codebook.encode(x.transpose(1, 2))

    def forward(self, codes: Tensor) -> Tensor:
        """codes [B, T] -> quantized [B, dim, T] (upstream sums from a 0-dim zero)."""
        return torch.tensor(0.0, device=codes.device) + F.embedding(codes, self.vq.layers[0]._codebook.embed).transpose(1, 2)


class SynthesizerTrn(nn.Module):
    def __init__(self, cfg: SoVITSConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.enc_p = TextEncoder(cfg)
        self.dec = Generator(cfg)
        self.flow = Flow(cfg.inter_channels, cfg.hidden_channels, cfg.gin_channels)
        self.ref_enc = MelStyleEncoder(STYLE_BINS, cfg.gin_channels)
        self.ssl_proj = nn.Conv1d(SSL_DIM, SSL_DIM, 2, stride=2)
        self.quantizer = Quantizer()
        if cfg.is_v2pro:
            self.sv_emb = nn.Linear(cfg.sv_dim, cfg.gin_channels)
            self.ge_to512 = nn.Linear(cfg.gin_channels, 512)
            self.prelu = nn.PReLU(num_parameters=cfg.gin_channels)

    def extract_latent(self, ssl: Tensor) -> Tensor:
        """HuBERT features [1, 768, T] -> the reference's semantic tokens [1, T // 2]."""
        return self.quantizer.encode(self.ssl_proj(ssl))

    def style(self, refer: Tensor, sv: Tensor | None) -> Tensor:
        """Reference spectrogram [1, spec_channels, T] (+ v2Pro speaker embedding [1, 20480]) -> ge [1, gin, 1]."""
        ge = self.ref_enc(refer[:, :STYLE_BINS])
        if self.cfg.is_v2pro:
            if sv is None:
                raise ValueError("a v2Pro SoVITS model needs the speaker-verification embedding of the reference")
            ge = self.prelu(ge + self.sv_emb(sv).unsqueeze(-1))
        return ge

    def forward(self, codes: Tensor, text: Tensor, ge: Tensor, noise: Tensor | None = None,
                speed: float = 1.0, generator: torch.Generator | None = None) -> Tensor:
        """codes [1, N] semantic tokens, text [1, L] phone ids, ge [1, gin, 1] -> waveform [1, 1, 2N * prod(up)].
        The prior noise (x 0.5) is drawn from `generator` unless given."""
        quantized = self.quantizer(codes)
        quantized = F.interpolate(quantized, size=int(quantized.shape[-1] * 2), mode="nearest")
        ge_text = self.ge_to512(ge.transpose(2, 1)).transpose(2, 1) if self.cfg.is_v2pro else ge
        m_p, logs_p, y_mask = self.enc_p(quantized, text, ge_text, speed)
        if noise is None:
            noise = torch.randn(m_p.shape, generator=generator, dtype=m_p.dtype).to(m_p.device)
        z_p = m_p + noise * torch.exp(logs_p) * 0.5
        z = self.flow(z_p, y_mask, ge)
        return self.dec(z * y_mask, ge)


def linear_spectrogram(wav: Tensor, n_fft: int, hop: int, win: int) -> Tensor:
    """Upstream's `spectrogram_torch` (center=False): reflect-padded STFT magnitude [B, n_fft // 2 + 1, frames]."""
    pad = int((n_fft - hop) / 2)
    y = F.pad(wav.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    # upstream's window is made in float32 and cast; for a float64 input it is made in float64
    window = torch.hann_window(win, dtype=torch.float64 if wav.dtype == torch.float64 else torch.float32)
    window = window.to(dtype=wav.dtype, device=wav.device)
    spec = torch.view_as_real(torch.stft(y, n_fft, hop_length=hop, win_length=win, window=window, center=False,
                                         pad_mode="reflect", normalized=False, onesided=True, return_complex=True))
    return torch.sqrt(spec.pow(2).sum(-1) + 1e-8)     # upstream's return_complex=False layout, same values

"""F5-TTS v1's DiT (PyPI `f5-tts` 1.1.22, `f5_tts.model.backbones.dit.DiT`) in plain torch.

    dit = DiT(DiTConfig(dim=1024, depth=22, heads=16, ff_mult=2, text_dim=512, conv_layers=4, vocab_size=2545))
    text_cond, text_uncond = dit.text_embed(ids, frames), dit.text_embed(ids, frames, drop_text=True)
    v = dit(x, cond, text_cond, text_uncond, t)          # [2B, frames, 100]: conditional, then unconditional

A flow-matching velocity estimator over mel frames: the noisy mel, the reference mel (zero where
speech is generated) and the character/pinyin embedding (padded to the frame count with filler 0,
refined by ConvNeXt V2 blocks) are projected together, get a convolutional position embedding,
then run through DiT blocks (adaLN-zero modulation by the time step, RoPE self-attention,
tanh-GELU feed-forward) and a final adaptive norm and projection back to mel channels.

The text embedding depends only on the text and the frame count, so it is computed once per
request, before the ODE (upstream caches it on the first step), through the module's own
`__call__`: the runtime's hooks see every weight it reads. Parameter names follow upstream's module
tree, so `ema_model.transformer.*` of a published checkpoint loads unchanged (see `F5Checkpoint`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class DiTConfig:
    """Upstream's `model.arch` (configs/F5TTS_v1_Base.yaml) plus the sizes taken from elsewhere:
    `vocab_size` = lines of vocab.txt, `mel_dim` = `model.mel_spec.n_mel_channels`."""

    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: float = 2
    text_dim: int = 512
    text_mask_padding: bool = True
    qk_norm: str | None = None
    conv_layers: int = 4
    pe_attn_head: int | None = None
    long_skip_connection: bool = False
    mel_dim: int = 100
    vocab_size: int = 2545

    ARCH_KEYS = ("dim", "depth", "heads", "dim_head", "ff_mult", "text_dim", "text_mask_padding", "qk_norm",
                 "conv_layers", "pe_attn_head", "long_skip_connection")
    # upstream options that change nothing at inference (batch of one, no masks) or nothing numerically
    IGNORED = ("dropout", "attn_backend", "attn_mask_enabled", "checkpoint_activations")

    @classmethod
    def from_arch(cls, arch: dict[str, Any], *, mel_dim: int, vocab_size: int, source: str) -> DiTConfig:
        """Validate `model.arch`; errors name `source` and the field."""
        unknown = sorted(set(arch) - set(cls.ARCH_KEYS) - set(cls.IGNORED) - {"text_embedding_average_upsampling"})
        if unknown:
            raise ValueError(f"{source}: model.arch has fields this DiT does not know: {', '.join(unknown)}")
        if arch.get("text_embedding_average_upsampling"):
            raise ValueError(f"{source}: model.arch.text_embedding_average_upsampling: not supported (F5-TTS v1 "
                             "does not use it)")
        values = {k: arch[k] for k in cls.ARCH_KEYS if k in arch}
        ints = ("dim", "depth", "heads", "dim_head", "text_dim")
        for k in ints:
            if k in values and (not isinstance(values[k], int) or isinstance(values[k], bool) or values[k] <= 0):
                raise ValueError(f"{source}: model.arch.{k} = {values[k]!r}; expected a positive integer")
        if "conv_layers" in values and (not isinstance(values["conv_layers"], int) or values["conv_layers"] < 0):
            raise ValueError(f"{source}: model.arch.conv_layers = {values['conv_layers']!r}; expected an integer >= 0")
        if "ff_mult" in values and not (isinstance(values["ff_mult"], (int, float)) and values["ff_mult"] > 0):
            raise ValueError(f"{source}: model.arch.ff_mult = {values['ff_mult']!r}; expected a positive number")
        if values.get("qk_norm") not in (None, "rms_norm"):
            raise ValueError(f"{source}: model.arch.qk_norm = {values['qk_norm']!r}; expected null or rms_norm")
        pe = values.get("pe_attn_head")
        if pe is not None and (not isinstance(pe, int) or pe <= 0):
            raise ValueError(f"{source}: model.arch.pe_attn_head = {pe!r}; expected null or a positive integer")
        return cls(mel_dim=mel_dim, vocab_size=vocab_size, **values)


# ---- embeddings --------------------------------------------------------------------------------------


def sinusoidal_table(dim: int, end: int, theta: float = 10000.0) -> Tensor:
    """[end, dim]: cos of position x frequency in the first half, sin in the second (upstream's
    `precompute_freqs_cis`, added to the text embedding)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    freqs = torch.outer(torch.arange(end, device=freqs.device), freqs).float()
    return torch.cat([torch.cos(freqs), torch.sin(freqs)], dim=-1)


class GRN(nn.Module):
    """Global response normalisation (ConvNeXt V2), normalising over the time axis as upstream does."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x: Tensor) -> Tensor:
        gx = torch.norm(x, p=2, dim=1, keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class ConvNeXtV2Block(nn.Module):
    """[B, T, D] -> [B, T, D]: depthwise conv (k 7), LayerNorm, Linear-GELU-GRN-Linear, residual."""

    def __init__(self, dim: int, intermediate_dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.grn = GRN(intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        h = self.dwconv(x.transpose(1, 2)).transpose(1, 2)
        return x + self.pwconv2(self.grn(self.act(self.pwconv1(self.norm(h)))))


class TextEmbedding(nn.Module):
    """Token ids [B, Nt] (-1 = batch padding) -> [B, frames, text_dim]: ids shifted by one (0 = filler),
    cut or padded with filler to the frame count, embedded, plus a sinusoidal position table and
    ConvNeXt V2 blocks with filler positions zeroed (`text_mask_padding`). `drop_text`: every id is
    filler (the unconditional half of guidance), the mask still from the real text."""

    MAX_POSITIONS = 8192   # upstream's table: ~87 s of 24 kHz audio

    def __init__(self, vocab_size: int, text_dim: int, conv_layers: int, mask_padding: bool = True,
                 conv_mult: int = 2) -> None:
        super().__init__()
        self.text_embed = nn.Embedding(vocab_size + 1, text_dim)
        self.mask_padding = mask_padding
        if conv_layers > 0:
            self.register_buffer("freqs_cis", sinusoidal_table(text_dim, self.MAX_POSITIONS), persistent=False)
            self.text_blocks = nn.Sequential(*[ConvNeXtV2Block(text_dim, text_dim * conv_mult)
                                               for _ in range(conv_layers)])
        else:
            self.text_blocks = None

    def forward(self, text: Tensor, frames: int, drop_text: bool = False) -> Tensor:
        text = text + 1
        text = text[:, :frames]
        text = F.pad(text, (0, frames - text.shape[1]), value=0)
        mask = text == 0 if self.mask_padding else None
        if drop_text:
            text = torch.zeros_like(text)
        x = self.text_embed(text)
        if self.text_blocks is not None:
            if frames > self.MAX_POSITIONS:
                raise ValueError(f"F5-TTS: {frames} frames exceed the text position table ({self.MAX_POSITIONS})")
            x = x + self.freqs_cis[:frames, :]
            if mask is not None:
                fill = mask.unsqueeze(-1).expand(-1, -1, x.size(-1))
                x = x.masked_fill(fill, 0.0)
                for block in self.text_blocks:
                    x = block(x).masked_fill(fill, 0.0)
            else:
                x = self.text_blocks(x)
        return x


class ConvPositionEmbedding(nn.Module):
    """Two grouped convolutions (k 31, 16 groups) with Mish, on [B, T, D]."""

    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16) -> None:
        super().__init__()
        self.conv1d = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish(),
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish())

    def forward(self, x: Tensor) -> Tensor:
        return self.conv1d(x.permute(0, 2, 1)).permute(0, 2, 1)


class InputEmbedding(nn.Module):
    """cat(noisy mel, reference mel, text embedding) -> dim, plus the convolutional position embedding."""

    def __init__(self, mel_dim: int, text_dim: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + text_dim, dim)
        self.conv_pos_embed = ConvPositionEmbedding(dim)

    def forward(self, x: Tensor, cond: Tensor, text_embed: Tensor) -> Tensor:
        x = self.proj(torch.cat((x, cond, text_embed), dim=-1))
        return self.conv_pos_embed(x) + x


class SinusPositionEmbedding(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor, scale: float = 1000) -> Tensor:
        half = self.dim // 2
        emb = math.log(10000) / (half - 1)
        emb = torch.exp(torch.arange(half, device=x.device).float() * -emb)
        emb = scale * x.unsqueeze(1) * emb.unsqueeze(0)
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class TimestepEmbedding(nn.Module):
    """Flow time [B] -> [B, dim]: sinusoidal features (x1000), Linear-SiLU-Linear."""

    def __init__(self, dim: int, freq_embed_dim: int = 256) -> None:
        super().__init__()
        self.time_embed = SinusPositionEmbedding(freq_embed_dim)
        self.time_mlp = nn.Sequential(nn.Linear(freq_embed_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, timestep: Tensor) -> Tensor:
        return self.time_mlp(self.time_embed(timestep).to(timestep.dtype))


class RotaryEmbedding(nn.Module):
    """x-transformers' RotaryEmbedding (interleaved pairs): angles [1, T, dim_head] for positions 0..T-1.
    `inv_freq` is a persistent buffer: the published checkpoint holds it."""

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, seq_len: int) -> Tensor:
        t = torch.arange(seq_len, device=self.inv_freq.device)[None]
        freqs = torch.einsum("b i , j -> b i j", t.type_as(self.inv_freq), self.inv_freq) / 1.0
        return torch.stack((freqs, freqs), dim=-1).flatten(-2)


def rotate_half_interleaved(x: Tensor) -> Tensor:
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(dim=-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary(t: Tensor, freqs: Tensor) -> Tensor:
    """x-transformers' apply_rotary_pos_emb with scale 1: t [B, H, T, D], freqs [1, T, d <= D]."""
    rot, seq_len, dtype = freqs.shape[-1], t.shape[-2], t.dtype
    freqs = freqs[:, -seq_len:, :][:, None]
    t, rest = t[..., :rot], t[..., rot:]
    t = (t * freqs.cos() * 1.0) + (rotate_half_interleaved(t) * freqs.sin() * 1.0)
    return torch.cat((t, rest), dim=-1).type(dtype)


# ---- DiT blocks --------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """Upstream's optional q/k norm (`qk_norm: rms_norm`): F.rms_norm, in the weight's dtype for half weights."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return F.rms_norm(x, normalized_shape=(x.shape[-1],), weight=self.weight, eps=self.eps)


class AdaLayerNorm(nn.Module):
    """adaLN-zero: SiLU-Linear of the time embedding -> shift/scale/gate for attention and feed-forward."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(dim, dim * 6)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: Tensor, emb: Tensor) -> tuple[Tensor, ...]:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = torch.chunk(
            self.linear(self.silu(emb)), 6, dim=1)
        return self.norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None], gate_msa, shift_mlp, scale_mlp, gate_mlp


class AdaLayerNormFinal(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(dim, dim * 2)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        scale, shift = torch.chunk(self.linear(self.silu(emb)), 2, dim=1)
        return self.norm(x) * (1 + scale)[:, None, :] + shift[:, None, :]


class Attention(nn.Module):
    """Self-attention with biases, optional q/k RMSNorm, RoPE on all heads or the first `pe_attn_head`."""

    def __init__(self, dim: int, heads: int, dim_head: int, qk_norm: str | None, pe_attn_head: int | None) -> None:
        super().__init__()
        self.heads, self.pe_attn_head = heads, pe_attn_head
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.q_norm = RMSNorm(dim_head) if qk_norm == "rms_norm" else None
        self.k_norm = RMSNorm(dim_head) if qk_norm == "rms_norm" else None
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])   # upstream's names: to_out.0

    def forward(self, x: Tensor, freqs: Tensor) -> Tensor:
        b = x.shape[0]
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        head_dim = k.shape[-1] // self.heads
        q = q.view(b, -1, self.heads, head_dim).transpose(1, 2)
        k = k.view(b, -1, self.heads, head_dim).transpose(1, 2)
        v = v.view(b, -1, self.heads, head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.pe_attn_head is not None:
            pn = self.pe_attn_head
            q[:, :pn] = apply_rotary(q[:, :pn], freqs)
            k[:, :pn] = apply_rotary(k[:, :pn], freqs)
        else:
            q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
        y = y.transpose(1, 2).reshape(b, -1, self.heads * head_dim).to(q.dtype)
        return self.to_out[1](self.to_out[0](y))


class FeedForward(nn.Module):
    """Linear - tanh GELU - Linear, under upstream's names (`ff.0.0`, `ff.2`)."""

    def __init__(self, dim: int, mult: float) -> None:
        super().__init__()
        inner = int(dim * mult)
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")),
                                nn.Dropout(0.0), nn.Linear(inner, dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.attn_norm = AdaLayerNorm(cfg.dim)
        self.attn = Attention(cfg.dim, cfg.heads, cfg.dim_head, cfg.qk_norm, cfg.pe_attn_head)
        self.ff_norm = nn.LayerNorm(cfg.dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(cfg.dim, cfg.ff_mult)

    def forward(self, x: Tensor, t: Tensor, freqs: Tensor) -> Tensor:
        norm, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(x, t)
        x = x + gate_msa.unsqueeze(1) * self.attn(norm, freqs)
        norm = self.ff_norm(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        return x + gate_mlp.unsqueeze(1) * self.ff(norm)


class DiT(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.time_embed = TimestepEmbedding(cfg.dim)
        self.text_embed = TextEmbedding(cfg.vocab_size, cfg.text_dim, cfg.conv_layers, cfg.text_mask_padding)
        self.input_embed = InputEmbedding(cfg.mel_dim, cfg.text_dim, cfg.dim)
        self.rotary_embed = RotaryEmbedding(cfg.dim_head)
        self.transformer_blocks = nn.ModuleList([DiTBlock(cfg) for _ in range(cfg.depth)])
        self.long_skip_connection = nn.Linear(cfg.dim * 2, cfg.dim, bias=False) if cfg.long_skip_connection else None
        self.norm_out = AdaLayerNormFinal(cfg.dim)
        self.proj_out = nn.Linear(cfg.dim, cfg.mel_dim)

    def step_modules(self) -> list[nn.Module]:
        """The modules every ODE step runs (the runtime keeps them resident first: `hot`)."""
        mods = [self.time_embed, self.input_embed, self.transformer_blocks, self.norm_out, self.proj_out]
        return mods + ([self.long_skip_connection] if self.long_skip_connection is not None else [])

    def forward(self, x: Tensor, cond: Tensor, text_cond: Tensor, text_uncond: Tensor | None, time: Tensor) -> Tensor:
        """Velocity of noisy mel `x` [B, T, mel] at flow time `time` (scalar or [B]) given the reference
        mel `cond` [B, T, mel] and the text embedding(s) from `text_embed`. With `text_uncond` the
        batch is doubled: [conditional; unconditional (no reference, no text)], upstream's `cfg_infer`."""
        batch, seq_len = x.shape[0], x.shape[1]
        if time.ndim == 0:
            time = time.repeat(batch)
        t = self.time_embed(time)
        h = self.input_embed(x, cond, text_cond)
        if text_uncond is not None:
            h = torch.cat((h, self.input_embed(x, torch.zeros_like(cond), text_uncond)), dim=0)
            t = torch.cat((t, t), dim=0)
        freqs = self.rotary_embed(seq_len)
        residual = h
        for block in self.transformer_blocks:
            h = block(h, t, freqs)
        if self.long_skip_connection is not None:
            h = self.long_skip_connection(torch.cat((h, residual), dim=-1))
        return self.proj_out(self.norm_out(h, t))


class _EMA(nn.Module):
    """The published checkpoints hold the EMA weights of the whole CFM: `ema_model.transformer.*`."""

    def __init__(self, dit: DiT) -> None:
        super().__init__()
        self.transformer = dit


class F5Checkpoint(nn.Module):
    """The layout of `model_*.safetensors`: `ema_model.transformer.*` plus ema_pytorch's bookkeeping
    `step` and `initted` (loaded, unused; declared only when the file holds them)."""

    def __init__(self, cfg: DiTConfig, bookkeeping: dict[str, tuple[torch.dtype, tuple[int, ...]]]) -> None:
        super().__init__()
        self.ema_model = _EMA(DiT(cfg))
        for name, (dtype, shape) in bookkeeping.items():
            self.register_buffer(name, torch.zeros(shape, dtype=dtype))

    @property
    def dit(self) -> DiT:
        return self.ema_model.transformer

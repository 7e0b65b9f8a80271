"""The models the benchmarks run: a Qwen3-TTS talker and an F5-TTS DiT, in plain torch.

Shared by `bench/runtime.py` (CPU, scaled-down shapes) and `bench/gpu.py` (a GPU, real shapes). Both
import it by this unique name (each puts bench/ on sys.path), so it never clashes with another `models`.
Everything works on any device: positions, timesteps and Euler times are made on the device of the
model's buffers or inputs, and the talker's KV cache is a small object (not a dict), so hooks that
copy their arguments (accelerate's `send_to_device`, used by accelerate and diffusers offloading)
pass it through unchanged instead of handing each layer an empty copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


# ---- a Qwen3-TTS talker, scaled down ---------------------------------------------------------------
@dataclass(frozen=True)
class TalkerDims:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float = 1e6

    def text(self) -> str:
        return (f"hidden {self.hidden}, {self.layers} layers, GQA {self.heads} q / {self.kv_heads} kv heads "
                f"x {self.head_dim} with q/k RMSNorm, SwiGLU {self.intermediate}, RoPE, codec vocab {self.vocab}")


# Qwen3-TTS-12Hz-0.6B talker (MRoPE with equal sections for text is plain RoPE; the text embedding
# 151936x2048 and its projection, run once per prompt, and the code predictor are left out).
QWEN3_TTS_TALKER = TalkerDims(1024, 28, 16, 8, 128, 3072, 3072)
TALKER = TalkerDims(512, 8, 8, 4, 64, 1536, 3072)
TALKER_QUICK = TalkerDims(128, 8, 4, 2, 32, 384, 256)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _cos_sin(inv_freq: torch.Tensor, start: int, length: int, dtype: torch.dtype):
    pos = torch.arange(start, start + length, dtype=torch.float32, device=inv_freq.device)
    freqs = torch.outer(pos, inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


class KVCache:
    """One layer's keys and values. Not a dict on purpose: offloading hooks that copy their arguments
    (accelerate's `send_to_device` rebuilds every dict and list it is given) leave a plain object alone."""

    __slots__ = ("k", "v")

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None


class TalkerAttention(nn.Module):
    def __init__(self, d: TalkerDims) -> None:
        super().__init__()
        self.d = d
        self.q_proj = nn.Linear(d.hidden, d.heads * d.head_dim, bias=False)
        self.k_proj = nn.Linear(d.hidden, d.kv_heads * d.head_dim, bias=False)
        self.v_proj = nn.Linear(d.hidden, d.kv_heads * d.head_dim, bias=False)
        self.o_proj = nn.Linear(d.heads * d.head_dim, d.hidden, bias=False)
        self.q_norm = nn.RMSNorm(d.head_dim, eps=1e-6)
        self.k_norm = nn.RMSNorm(d.head_dim, eps=1e-6)

    def forward(self, x, cos, sin, cache):
        b, t, _ = x.shape
        d = self.d
        q = self.q_norm(self.q_proj(x).view(b, t, d.heads, d.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, d.kv_heads, d.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, d.kv_heads, d.head_dim).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if cache.k is not None:
            k = torch.cat([cache.k, k], dim=2)
            v = torch.cat([cache.v, v], dim=2)
        cache.k, cache.v = k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d.heads * d.head_dim))


class TalkerMLP(nn.Module):
    def __init__(self, d: TalkerDims) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d.hidden, d.intermediate, bias=False)
        self.up_proj = nn.Linear(d.hidden, d.intermediate, bias=False)
        self.down_proj = nn.Linear(d.intermediate, d.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TalkerLayer(nn.Module):
    def __init__(self, d: TalkerDims) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(d.hidden, eps=1e-6)
        self.self_attn = TalkerAttention(d)
        self.post_attention_layernorm = nn.RMSNorm(d.hidden, eps=1e-6)
        self.mlp = TalkerMLP(d)

    def forward(self, x, cos, sin, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Talker(nn.Module):
    """Decoder-only LM shaped like the Qwen3-TTS talker (first codebook), with a KV cache."""

    def __init__(self, d: TalkerDims) -> None:
        super().__init__()
        self.codec_embedding = nn.Embedding(d.vocab, d.hidden)
        self.layers = nn.ModuleList(TalkerLayer(d) for _ in range(d.layers))
        self.norm = nn.RMSNorm(d.hidden, eps=1e-6)
        self.codec_head = nn.Linear(d.hidden, d.vocab, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(d.head_dim, d.rope_theta), persistent=False)

    def forward(self, ids, caches, offset: int):
        x = self.codec_embedding(ids)
        cos, sin = _cos_sin(self.inv_freq, offset, ids.shape[1], x.dtype)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cos, sin, cache)
        return self.codec_head(self.norm(x[:, -1:]))


@torch.no_grad()
def talk(model: Talker, prompt: torch.Tensor, tokens: int):
    """Greedy decoding: one forward per generated token (the first one is the prompt's prefill)."""
    caches = [KVCache() for _ in model.layers]
    ids, offset, out, logits = prompt, 0, [], []
    for _ in range(tokens):
        step = model(ids, caches, offset)[:, -1]
        offset += ids.shape[1]
        ids = step.argmax(-1, keepdim=True)
        out.append(ids)
        logits.append(step)
    return torch.cat(out, dim=1), torch.stack(logits, dim=1)


# ---- an F5-TTS DiT, scaled down ---------------------------------------------------------------------
@dataclass(frozen=True)
class DiTDims:
    dim: int
    depth: int
    heads: int
    ff_mult: int
    mel: int
    text_dim: int
    text_vocab: int
    conv_layers: int
    frames: int = 64

    def text(self, shape_only: bool = False) -> str:
        shape = (f"dim {self.dim}, {self.depth} blocks, {self.heads} heads, ff x{self.ff_mult}, mel {self.mel}, "
                 f"text {self.text_dim} ({self.conv_layers} ConvNeXt)")
        return shape if shape_only else f"{shape}, {self.frames} frames, CFG batch 2"


F5_TTS_BASE = DiTDims(1024, 22, 16, 2, 100, 512, 2546, 4)
DIT = DiTDims(192, 12, 4, 2, 100, 96, 256, 2, frames=128)
DIT_QUICK = DiTDims(64, 12, 2, 2, 16, 32, 64, 1, frames=16)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, inter: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, inter)
        self.grn_gamma = nn.Parameter(torch.randn(1, 1, inter) * 0.1)
        self.grn_beta = nn.Parameter(torch.randn(1, 1, inter) * 0.1)
        self.pwconv2 = nn.Linear(inter, dim)

    def forward(self, x):
        r = x
        x = F.gelu(self.pwconv1(self.norm(self.dwconv(x.transpose(1, 2)).transpose(1, 2))))
        gx = torch.norm(x, p=2, dim=1, keepdim=True)
        x = self.grn_gamma * (x * (gx / (gx.mean(dim=-1, keepdim=True) + 1e-6))) + self.grn_beta + x
        return r + self.pwconv2(x)


class TextEmbedding(nn.Module):
    def __init__(self, d: DiTDims) -> None:
        super().__init__()
        self.text_embed = nn.Embedding(d.text_vocab + 1, d.text_dim)
        self.text_blocks = nn.Sequential(*(ConvNeXtBlock(d.text_dim, 2 * d.text_dim) for _ in range(d.conv_layers)))

    def forward(self, text):
        return self.text_blocks(self.text_embed(text))


class InputEmbedding(nn.Module):
    def __init__(self, d: DiTDims) -> None:
        super().__init__()
        self.proj = nn.Linear(2 * d.mel + d.text_dim, d.dim)
        self.conv_pos_embed = nn.Sequential(nn.Conv1d(d.dim, d.dim, 31, padding=15, groups=16), nn.Mish(),
                                            nn.Conv1d(d.dim, d.dim, 31, padding=15, groups=16), nn.Mish())

    def forward(self, x, cond, text_embed):
        x = self.proj(torch.cat((x, cond, text_embed), dim=-1))
        return x + self.conv_pos_embed(x.transpose(1, 2)).transpose(1, 2)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t, dtype: torch.dtype | None = None):
        half = self.freq_dim // 2
        freqs = torch.exp(torch.arange(half, dtype=torch.float32, device=t.device) * (-9.210340371976184 / (half - 1)))
        args = 1000.0 * t[:, None].float() * freqs[None]
        return self.time_mlp(torch.cat((args.sin(), args.cos()), dim=-1).to(dtype or t.dtype))


class DiTAttention(nn.Module):
    def __init__(self, d: DiTDims) -> None:
        super().__init__()
        self.heads = d.heads
        self.to_q = nn.Linear(d.dim, d.dim)
        self.to_k = nn.Linear(d.dim, d.dim)
        self.to_v = nn.Linear(d.dim, d.dim)
        self.to_out = nn.Linear(d.dim, d.dim)

    def forward(self, x, cos, sin):
        b, t, dim = x.shape
        q, k, v = (proj(x).view(b, t, self.heads, dim // self.heads).transpose(1, 2)
                   for proj in (self.to_q, self.to_k, self.to_v))
        y = F.scaled_dot_product_attention(_rope(q, cos, sin), _rope(k, cos, sin), v)
        return self.to_out(y.transpose(1, 2).reshape(b, t, dim))


class DiTBlock(nn.Module):
    def __init__(self, d: DiTDims) -> None:
        super().__init__()
        self.attn_norm_linear = nn.Linear(d.dim, 6 * d.dim)  # AdaLayerNormZero
        self.attn_norm = nn.LayerNorm(d.dim, elementwise_affine=False, eps=1e-6)
        self.attn = DiTAttention(d)
        self.ff_norm = nn.LayerNorm(d.dim, elementwise_affine=False, eps=1e-6)
        self.ff = nn.Sequential(nn.Linear(d.dim, d.ff_mult * d.dim), nn.GELU(approximate="tanh"),
                                nn.Linear(d.ff_mult * d.dim, d.dim))

    def forward(self, x, emb, cos, sin):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.attn_norm_linear(F.silu(emb)).unsqueeze(1).chunk(6, dim=-1)
        x = x + gate_msa * self.attn(self.attn_norm(x) * (1 + scale_msa) + shift_msa, cos, sin)
        return x + gate_mlp * self.ff(self.ff_norm(x) * (1 + scale_mlp) + shift_mlp)


class F5DiT(nn.Module):
    """A flow-matching DiT shaped like F5-TTS: text ConvNeXt, conv position embedding, adaLN-zero blocks."""

    def __init__(self, d: DiTDims) -> None:
        super().__init__()
        self.time_embed = TimestepEmbedding(d.dim)
        self.text_embed = TextEmbedding(d)
        self.input_embed = InputEmbedding(d)
        self.transformer_blocks = nn.ModuleList(DiTBlock(d) for _ in range(d.depth))
        self.norm_out_linear = nn.Linear(d.dim, 2 * d.dim)  # AdaLayerNormZero_Final
        self.norm_out = nn.LayerNorm(d.dim, elementwise_affine=False, eps=1e-6)
        self.proj_out = nn.Linear(d.dim, d.mel)
        self.register_buffer("inv_freq", rope_inv_freq(d.dim // d.heads, 10000.0), persistent=False)

    def forward(self, x, cond, text, t):
        emb = self.time_embed(t, x.dtype)  # t stays float32 for the sinusoids; the MLP runs in the model's dtype
        h = self.input_embed(x, cond, self.text_embed(text))
        cos, sin = _cos_sin(self.inv_freq, 0, h.shape[1], h.dtype)
        for block in self.transformer_blocks:
            h = block(h, emb, cos, sin)
        scale, shift = self.norm_out_linear(F.silu(emb)).unsqueeze(1).chunk(2, dim=-1)
        return self.proj_out(self.norm_out(h) * (1 + scale) + shift)


@torch.no_grad()
def flow(model: F5DiT, noise, cond, text, steps: int, cfg: float = 2.0):
    """Euler steps; conditional and unconditional halves in one batch of 2 (one forward per step)."""
    x, ts = noise, torch.linspace(0, 1, steps + 1, device=noise.device)
    for i in range(steps):
        t = ts[i].expand(2 * x.shape[0])
        pred = model(torch.cat((x, x)), torch.cat((cond, torch.zeros_like(cond))),
                     torch.cat((text, torch.zeros_like(text))), t)
        c, u = pred.chunk(2)
        x = x + (ts[i + 1] - ts[i]) * (c + (c - u) * cfg)
    return x

"""Decoder-only transformer building blocks shared by the engines (Qwen3-style LMs and codec transformers).

    norm = RMSNorm(dim)                         # float32 statistics, weight applied in the input dtype
    rope = RotaryEmbedding(head_dim, theta)     # cos/sin for integer positions, computed in float32
    attn = Attention(dim, heads, kv_heads, head_dim, qk_norm=True)
    y = attn(x, rope(positions, x.dtype), cache=cache, layer=i)        # cache: runtime.lm.cache
    mlp = SwiGLU(dim, hidden)

Every weight is read inside the forward of the nn.Linear / nn.Conv that owns it, so the runtime's
per-unit hooks see all of it; norms and layer scales are plain parameters (the fixed part).
Attention goes through F.scaled_dot_product_attention: causal for a prefill, unmasked for one new
position, a boolean mask for sliding windows, or the caller's boolean `mask` (bidirectional models
such as OmniVoice's backbone: every position sees every unpadded one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache


def upcast(x: Tensor) -> Tensor:
    """`x.float()` for statistics kept in float32 whatever the model's precision, except that float64 stays
    float64 (parity runs compare a whole model in float64 with upstream's)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class RMSNorm(nn.Module):
    """x / rms(x) in float32 (float64 stays float64), cast back, times the weight (the Qwen/Llama order of
    operations)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        h = upcast(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class LayerScale(nn.Module):
    """A learnt per-channel scale of a residual branch (`scale * x`)."""

    def __init__(self, dim: int, init: float = 1.0) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (`rotate_half` layout): cos/sin [B, T, head_dim] for positions [B, T].

    Text-only multimodal RoPE (3 sections fed the same positions, as Qwen3-TTS does) is exactly this
    1-D RoPE: every section reads the same angle.
    """

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        # A plain attribute, not a buffer: it stays float32 when the model is cast to half precision
        # (upstream keeps its inv_freq in float32 too), and it is not a weight the runtime moves.
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        if positions.dim() == 1:
            positions = positions[None]
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def llama3_inv_freq(inv_freq: Tensor, factor: float, low_freq_factor: float, high_freq_factor: float,
                    original_max_positions: int) -> Tensor:
    """Llama 3's RoPE scaling (Hugging Face `_compute_llama3_parameters`): long wavelengths divided by
    `factor`, short ones kept, the band between interpolated."""
    low_wavelen = original_max_positions / low_freq_factor
    high_wavelen = original_max_positions / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_positions / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """q, k [B, H, T, D]; cos, sin [B, T, D]."""
    cos, sin = cos[:, None], sin[:, None]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def sliding_mask(queries: int, keys: int, window: int, device: torch.device) -> Tensor:
    """Causal mask of a sliding window: query i (the last `queries` of `keys` positions) sees key j
    when 0 <= i - j < window. Boolean [queries, keys], True = attend."""
    q = torch.arange(keys - queries, keys, device=device)[:, None]
    k = torch.arange(keys, device=device)[None, :]
    d = q - k
    return (d >= 0) & (d < window)


class Attention(nn.Module):
    """Grouped-query self-attention with optional per-head q/k RMSNorm (Qwen3) and RoPE."""

    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, *, bias: bool = False,
                 qk_norm: bool = False, eps: float = 1e-6) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(dim, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(dim, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(dim, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, dim, bias=bias)
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, eps)
            self.k_norm = RMSNorm(head_dim, eps)
        else:
            self.q_norm = self.k_norm = None
        # eager: Hugging Face's eager attention (q k^T * scale + additive mask, float32 softmax, @ v) instead of
        # SDPA, for models whose reference runs it; record_heads: keep those heads' probabilities of batch row
        # 0 [H, T, keys] in `recorded` after each call (Chatterbox Multilingual's alignment guard reads them)
        self.eager = False
        self.record_heads: tuple[int, ...] | None = None
        self.recorded: Tensor | None = None

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], cache: KVCache | None = None, layer: int = 0,
                window: int | None = None, mask: Tensor | None = None) -> Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q.transpose(1, 2), k.transpose(1, 2), *rope)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, rep, *k.shape[2:]).reshape(b, self.heads, *k.shape[2:])
            v = v[:, :, None].expand(b, self.kv_heads, rep, *v.shape[2:]).reshape(b, self.heads, *v.shape[2:])
        keys = k.shape[2]
        if self.eager:
            y = self.eager_attention(q, k, v, t, keys, window, mask)
        elif mask is not None:    # an explicit mask (bidirectional models): boolean [B or 1, 1, T, keys], True = attend
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif window is not None and keys > 1 and (t > 1 or keys > window):
            mask = sliding_mask(t, keys, window, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif t > 1:
            if keys != t:   # a prefill after cached positions: each query sees the past and itself
                mask = torch.ones(t, keys, dtype=torch.bool, device=x.device).tril(keys - t)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))

    def eager_attention(self, q: Tensor, k: Tensor, v: Tensor, t: int, keys: int, window: int | None,
                        mask: Tensor | None) -> Tensor:
        """transformers' `eager_attention_forward`: the same masks as the SDPA paths, added as 0 / dtype-min."""
        if mask is None:
            if window is not None and keys > 1 and (t > 1 or keys > window):
                mask = sliding_mask(t, keys, window, q.device)
            elif t > 1:
                mask = torch.ones(t, keys, dtype=torch.bool, device=q.device).tril(keys - t)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        if mask is not None:
            scores = scores + torch.zeros(mask.shape, dtype=scores.dtype, device=q.device).masked_fill(
                ~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        if self.record_heads is not None:
            self.recorded = weights[0, list(self.record_heads)].detach()
        return torch.matmul(weights, v)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)); optional layer scales on both branches.

    Parameter names follow the Hugging Face Qwen/Llama layout (input_layernorm, self_attn, ...), so
    upstream checkpoints load unchanged.
    """

    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, hidden: int, *, eps: float = 1e-6,
                 qk_norm: bool = True, bias: bool = False, layer_scale: float | None = None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(dim, eps)
        self.self_attn = Attention(dim, heads, kv_heads, head_dim, bias=bias, qk_norm=qk_norm, eps=eps)
        self.post_attention_layernorm = RMSNorm(dim, eps)
        self.mlp = SwiGLU(dim, hidden)
        if layer_scale is not None:
            self.self_attn_layer_scale = LayerScale(dim, layer_scale)
            self.mlp_layer_scale = LayerScale(dim, layer_scale)
        else:
            self.self_attn_layer_scale = self.mlp_layer_scale = None

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], cache: KVCache | None = None, layer: int = 0,
                window: int | None = None, mask: Tensor | None = None) -> Tensor:
        h = self.self_attn(self.input_layernorm(x), rope, cache, layer, window, mask)
        x = x + (h if self.self_attn_layer_scale is None else self.self_attn_layer_scale(h))
        h = self.mlp(self.post_attention_layernorm(x))
        return x + (h if self.mlp_layer_scale is None else self.mlp_layer_scale(h))


def run_layers(layers: nn.ModuleList, norm: nn.Module, rotary: nn.Module, x: Tensor, cache: KVCache | None,
               start: int, window: int | None = None) -> Tensor:
    """A decoder stack's forward: embeddings [B, T, D] at positions start.. through `layers` with RoPE, then
    the final `norm`; appends to `cache`. Each module is called normally (the runtime's hooks see it)."""
    positions = torch.arange(start, start + x.shape[1], device=x.device)
    rope = rotary(positions, x.dtype)
    for i, layer in enumerate(layers):
        x = layer(x, rope, cache, i, window)
    return norm(x)


def kv_position_bytes(kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """K plus V bytes of one position of one layer (for runtime.lm.cache.peak_bytes)."""
    return 2 * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Qwen2Config:
    """The fields of a Hugging Face Qwen2 `config.json` that a plain-torch Qwen2 stack needs (CosyVoice's LM,
    VibeVoice's decoder)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "config") -> Qwen2Config:
        """Read with transformers' defaults; a missing or malformed field is a ValueError naming `where.field`."""
        def number(key: str, kind: type, default: Any = None) -> Any:
            v = d.get(key, default)
            if v is None:
                raise ValueError(f"{where}.{key} missing")
            if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int) or not v > 0 \
                    or v == float("inf"):
                raise ValueError(f"{where}.{key} {v!r}: expected a positive {'number' if kind is float else 'integer'}")
            return kind(v)

        heads = number("num_attention_heads", int)
        c = cls(number("hidden_size", int), number("intermediate_size", int), number("num_hidden_layers", int), heads,
                number("num_key_value_heads", int, heads), number("vocab_size", int),
                number("max_position_embeddings", int, 32768), number("rms_norm_eps", float, 1e-6),
                number("rope_theta", float, 10000.0))
        if c.hidden_size % heads or heads % c.num_key_value_heads:
            raise ValueError(f"{where}: hidden_size {c.hidden_size}, num_attention_heads {heads} and "
                             f"num_key_value_heads {c.num_key_value_heads} do not divide")
        return c


def qwen2_layer(dim: int, heads: int, kv_heads: int, head_dim: int, hidden: int, *, eps: float = 1e-6) -> DecoderLayer:
    """A Qwen2 block: q/k/v projections with biases, o_proj without, no q/k norm (HF Qwen2 layout)."""
    layer = DecoderLayer(dim, heads, kv_heads, head_dim, hidden, eps=eps, qk_norm=False, bias=True)
    layer.self_attn.o_proj = nn.Linear(heads * head_dim, dim, bias=False)
    return layer


# ---- interleaved (complex-pair) RoPE, as in gpt-fast / Llama-reference code (Fish Speech) ---------------


def interleaved_rope_table(positions: int | Tensor, head_dim: int, base: float,
                           dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """cos/sin of pairs (x[2i], x[2i+1]) at `positions` (a count: 0..n-1, or a 1-D integer tensor):
    [len(positions), head_dim // 2, 2], computed on the CPU (every row is independent of the others).

    Computed as gpt-fast does (`torch.polar`, then stored in `dtype`: bfloat16 upstream, whatever the
    model's precision), and returned in float32 holding those rounded values, which is what the
    float32 rotation upstream multiplies by. dtype=torch.float64 computes and returns it in float64."""
    real = torch.float64 if dtype == torch.float64 else torch.float32
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].to(real) / head_dim))
    if isinstance(positions, int):
        positions = torch.arange(positions)
    angles = torch.outer(positions.cpu(), freqs)
    cis = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([cis.real, cis.imag], dim=-1).to(dtype).to(real)


def apply_interleaved_rotary(x: Tensor, table: Tensor) -> Tensor:
    """x [B, T, H, D] rotated by `table` [T, D/2, 2] (rows of interleaved_rope_table) in float32 (float64
    stays float64)."""
    xs = upcast(x).reshape(*x.shape[:-1], -1, 2)
    t = table.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack([xs[..., 0] * t[..., 0] - xs[..., 1] * t[..., 1],
                       xs[..., 1] * t[..., 0] + xs[..., 0] * t[..., 1]], -1)
    return out.flatten(3).type_as(x)


class LongRoPE(nn.Module):
    """"longrope" scaling (MiniCPM-4, Phi-3): per-frequency divisors and one attention factor.

    The divisors are `long_factor` when the model's context (`max_positions`) exceeds the
    pre-training one (`original_max_positions`), else `short_factor`: one set for every position, as
    MiniCPM-4 builds its table once for the whole context. cos/sin are scaled by
    sqrt(1 + ln(max / original) / ln(original)) and computed in float32 in MiniCPM's order of
    operations ((position * (1 / factor)) * inv_freq), so they equal a table read at those positions.
    """

    def __init__(self, head_dim: int, theta: float, short_factor: list[float], long_factor: list[float],
                 original_max_positions: int, max_positions: int) -> None:
        super().__init__()
        for name, factors in (("short_factor", short_factor), ("long_factor", long_factor)):
            if len(factors) != head_dim // 2:
                raise ValueError(f"rope_scaling.{name}: expected {head_dim // 2} values (head_dim / 2), "
                                 f"got {len(factors)}")
        if original_max_positions <= 1 or max_positions <= 0:
            raise ValueError("rope_scaling.original_max_position_embeddings and max_position_embeddings must be "
                             f"positive (got {original_max_positions}, {max_positions})")
        factors = long_factor if max_positions > original_max_positions else short_factor
        # Plain attributes, not buffers (as RotaryEmbedding): float32 whatever the model's dtype.
        self.divisor = 1.0 / torch.tensor(factors, dtype=torch.float32)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.attention_factor = math.sqrt(1 + math.log(max_positions / original_max_positions)
                                          / math.log(original_max_positions))

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        if positions.dim() == 1:
            positions = positions[None]
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
            self.divisor = self.divisor.to(positions.device)
        freqs = (positions.float()[..., None] * self.divisor) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_factor).to(dtype), (emb.sin() * self.attention_factor).to(dtype)


def rotary_embedding(rope_scaling: dict | None, head_dim: int, theta: float,
                     max_positions: int | None = None) -> RotaryEmbedding | LongRoPE:
    """The RoPE a config's `rope_scaling` asks for: none / "default" -> RotaryEmbedding, "longrope" ->
    LongRoPE. Any other type is refused: silently ignoring a scaling would change every position."""
    if rope_scaling is None:
        return RotaryEmbedding(head_dim, theta)
    if not isinstance(rope_scaling, dict):
        raise ValueError(f"rope_scaling: expected an object or null, got {type(rope_scaling).__name__}")
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if kind == "default":
        return RotaryEmbedding(head_dim, theta)
    if kind == "llama3":
        missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
                   if k not in rope_scaling]
        if missing:
            raise ValueError(f"rope_scaling (llama3): missing {', '.join(missing)}")
        if not float(rope_scaling["high_freq_factor"]) > float(rope_scaling["low_freq_factor"]) > 0 \
                or not float(rope_scaling["factor"]) > 0 or int(rope_scaling["original_max_position_embeddings"]) < 1:
            raise ValueError(f"rope_scaling (llama3): expected factor > 0, high_freq_factor > low_freq_factor > 0 "
                             f"and original_max_position_embeddings >= 1, got {rope_scaling}")
        rope = RotaryEmbedding(head_dim, theta)
        rope.inv_freq = llama3_inv_freq(rope.inv_freq, float(rope_scaling["factor"]),
                                        float(rope_scaling["low_freq_factor"]), float(rope_scaling["high_freq_factor"]),
                                        int(rope_scaling["original_max_position_embeddings"]))
        return rope
    if kind == "longrope":
        missing = [k for k in ("short_factor", "long_factor", "original_max_position_embeddings")
                   if k not in rope_scaling]
        if missing or max_positions is None:
            raise ValueError(f"rope_scaling (longrope): missing {', '.join(missing or ['max_position_embeddings'])}")
        return LongRoPE(head_dim, theta, list(rope_scaling["short_factor"]), list(rope_scaling["long_factor"]),
                        int(rope_scaling["original_max_position_embeddings"]), int(max_positions))
    raise ValueError(f"rope_scaling: unsupported RoPE type {kind!r}; supported: default, llama3, longrope")

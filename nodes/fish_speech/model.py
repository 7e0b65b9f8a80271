"""Fish Speech / OpenAudio S1 dual-autoregressive LM (`model.pth`) in plain torch.

    DualARTransformer
      embeddings            [vocab, dim]  text, control and semantic tokens; also the tied output head
      codebook_embeddings   [codebook_size x num_codebooks, dim]  summed into semantic positions
      layers                slow Llama (fused wqkv, optional q/k RMSNorm, SwiGLU, interleaved RoPE)
      norm                  final RMSNorm; logits = norm(x) @ embeddings.weight^T (tied) or `output`
      fast_project_in       dim -> fast_dim (Identity when equal)
      fast_embeddings       [codebook_size, fast_dim]
      fast_layers           fast Llama over the codebooks of one frame (one position per codebook)
      fast_norm, fast_output

Parameter names are upstream's (`layers.0.attention.wqkv.weight`, `fast_layers.1.feed_forward.w2.weight`),
so `model.pth` loads unchanged (the loader fuses separate wq/wk/wv as upstream's load hook does).
The tied head reads `embeddings.weight` outside the embedding's forward: embeddings are the
runtime's fixed part, so it is on the device whenever the LM is. KV caches come from
`runtime.lm.cache` and grow with the request, instead of upstream's max_seq_len buffers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ...runtime.lm.cache import KVCache
from ..blocks.transformer import RMSNorm, apply_interleaved_rotary, interleaved_rope_table


def _find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


@dataclass
class FishConfig:
    """upstream's DualARModelArgs (config.json, model_type "dual_ar"), with its derived defaults."""

    vocab_size: int = 32000
    n_layer: int = 32
    n_head: int = 32
    dim: int = 4096
    intermediate_size: int | None = None
    n_local_heads: int = -1
    head_dim: int | None = 64
    rope_base: float = 10000
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    tie_word_embeddings: bool = True
    attention_qkv_bias: bool = False
    attention_o_bias: bool = False
    attention_qk_norm: bool = False
    codebook_size: int = 160
    num_codebooks: int = 4
    scale_codebook_embeddings: bool = False
    norm_fastlayer_input: bool = False      # S2: the fast LM starts from the normed slow state
    n_fast_layer: int = 4
    fast_dim: int | None = None
    fast_n_head: int | None = None
    fast_n_local_heads: int | None = None
    fast_head_dim: int | None = None
    fast_intermediate_size: int | None = None
    fast_attention_qkv_bias: bool | None = None
    fast_attention_qk_norm: bool | None = None
    fast_attention_o_bias: bool | None = None

    # Fields of upstream's config that change nothing at inference (training switches, init scale).
    IGNORED = ("model_type", "dropout", "use_gradient_checkpointing", "initializer_range", "is_reward_model")

    def __post_init__(self) -> None:
        if self.n_local_heads == -1:
            self.n_local_heads = self.n_head
        if self.intermediate_size is None:
            self.intermediate_size = _find_multiple(int(2 * 4 * self.dim / 3), 256)
        if self.head_dim is None:
            self.head_dim = self.dim // self.n_head
        self.fast_dim = self.fast_dim or self.dim
        self.fast_n_head = self.fast_n_head or self.n_head
        self.fast_n_local_heads = self.fast_n_local_heads or self.n_local_heads
        self.fast_head_dim = self.fast_head_dim or self.head_dim
        self.fast_intermediate_size = self.fast_intermediate_size or self.intermediate_size
        for name in ("attention_qkv_bias", "attention_qk_norm", "attention_o_bias"):
            if getattr(self, "fast_" + name) is None:
                setattr(self, "fast_" + name, getattr(self, name))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FishConfig:
        kind = d.get("model_type")
        if kind != "dual_ar":
            raise ValueError(f"model_type {kind!r}: expected 'dual_ar' (OpenAudio S1 / Fish Speech dual-AR)")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known - set(cls.IGNORED))
        if unknown:
            raise ValueError(f"unknown fields {unknown} (not a Fish Speech 0.1 / OpenAudio S1 config)")
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_omni(cls, d: dict[str, Any]) -> FishConfig:
        """Fish Audio S2's nested config (model_type "fish_qwen3_omni": `text_config` for the slow LM,
        `audio_decoder_config` for the fast one), flattened as upstream's `_from_fish_qwen3_omni` does:
        the slow LM's rope base and norm eps serve both, codebook embeddings are scaled and the fast LM
        reads the normed slow state. Fields upstream does not read are ignored as it ignores them."""
        if d.get("model_type") != "fish_qwen3_omni":
            raise ValueError(f"model_type {d.get('model_type')!r}: expected 'fish_qwen3_omni' (Fish Audio S2)")
        tc, adc = d.get("text_config"), d.get("audio_decoder_config")
        if not isinstance(tc, dict) or not isinstance(adc, dict):
            raise ValueError("expected objects text_config and audio_decoder_config")
        try:
            flat: dict[str, Any] = dict(
                vocab_size=tc["vocab_size"], n_layer=tc["n_layer"], n_head=tc["n_head"], dim=tc["dim"],
                n_local_heads=tc.get("n_local_heads", -1), head_dim=tc.get("head_dim"),
                intermediate_size=tc.get("intermediate_size"), rope_base=tc.get("rope_base", 10000),
                norm_eps=tc.get("norm_eps", 1e-5), max_seq_len=tc.get("max_seq_len", 2048),
                tie_word_embeddings=tc.get("tie_word_embeddings", True),
                attention_qkv_bias=tc.get("attention_qkv_bias", False),
                attention_o_bias=tc.get("attention_o_bias", False),
                attention_qk_norm=tc.get("attention_qk_norm", False),
                scale_codebook_embeddings=True, norm_fastlayer_input=True,
                codebook_size=adc["vocab_size"], num_codebooks=adc["num_codebooks"], n_fast_layer=adc["n_layer"],
                fast_dim=adc.get("dim"), fast_n_head=adc.get("n_head"), fast_n_local_heads=adc.get("n_local_heads"),
                fast_head_dim=adc.get("head_dim"), fast_intermediate_size=adc.get("intermediate_size"),
                fast_attention_qkv_bias=adc.get("attention_qkv_bias"),
                fast_attention_qk_norm=adc.get("attention_qk_norm"),
                fast_attention_o_bias=adc.get("attention_o_bias"))
        except KeyError as e:
            raise ValueError(f"missing field {e.args[0]!r}") from None
        return cls(**{k: v for k, v in flat.items() if v is not None})

    def fast(self) -> FishConfig:
        """The fast transformer's layer sizes (upstream's `dataclasses.replace` of the config)."""
        c = FishConfig(**{f.name: getattr(self, f.name) for f in fields(self)})
        c.dim, c.n_head, c.n_local_heads = self.fast_dim, self.fast_n_head, self.fast_n_local_heads
        c.head_dim, c.intermediate_size = self.fast_head_dim, self.fast_intermediate_size
        c.attention_qkv_bias, c.attention_qk_norm = self.fast_attention_qkv_bias, self.fast_attention_qk_norm
        c.attention_o_bias = self.fast_attention_o_bias
        return c


class Attention(nn.Module):
    """Fused-qkv grouped-query attention; `exact_math` spells softmax(q k^T / sqrt(d)) v out as
    upstream's fast layers do, otherwise F.scaled_dot_product_attention (upstream's slow layers)."""

    def __init__(self, c: FishConfig, exact_math: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.n_head, c.n_local_heads, c.head_dim
        self.wqkv = nn.Linear(c.dim, (c.n_head + 2 * c.n_local_heads) * c.head_dim, bias=c.attention_qkv_bias)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.dim, bias=c.attention_o_bias)
        if c.attention_qk_norm:
            self.q_norm = nn.RMSNorm(c.head_dim, c.norm_eps)
            self.k_norm = nn.RMSNorm(c.head_dim, c.norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.exact_math = exact_math

    def forward(self, x: Tensor, rope: Tensor, cache: KVCache, layer: int) -> Tensor:
        b, t, _ = x.shape
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(b, t, self.heads, self.head_dim)
        k = k.view(b, t, self.kv_heads, self.head_dim)
        v = v.view(b, t, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_interleaved_rotary(q, rope), apply_interleaved_rotary(k, rope)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        k, v = cache.update(layer, k, v)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        keys = k.shape[2]
        mask = torch.ones(t, keys, dtype=torch.bool, device=x.device).tril(keys - t) if t > 1 else None
        if self.exact_math:
            w = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)))
            if mask is not None:
                w = w.masked_fill(~mask, float("-inf"))
            y = torch.softmax(w, dim=-1) @ v
        elif t == 1:                      # upstream decodes one position with the math backend
            with sdpa_kernel(SDPBackend.MATH):
                y = F.scaled_dot_product_attention(q, k, v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).contiguous().view(b, t, q_size))


class FeedForward(nn.Module):
    def __init__(self, c: FishConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.intermediate_size, bias=False)
        self.w3 = nn.Linear(c.dim, c.intermediate_size, bias=False)
        self.w2 = nn.Linear(c.intermediate_size, c.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, c: FishConfig, exact_math: bool = False) -> None:
        super().__init__()
        self.attention = Attention(c, exact_math)
        self.feed_forward = FeedForward(c)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        self.attention_norm = RMSNorm(c.dim, c.norm_eps)

    def forward(self, x: Tensor, rope: Tensor, cache: KVCache, layer: int) -> Tensor:
        h = x + self.attention(self.attention_norm(x), rope, cache, layer)
        return h + self.feed_forward(self.ffn_norm(h))


class DualARTransformer(nn.Module):
    def __init__(self, c: FishConfig, semantic_begin_id: int, semantic_end_id: int) -> None:
        super().__init__()
        self.config = c
        self.semantic_begin_id, self.semantic_end_id = semantic_begin_id, semantic_end_id
        self.embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.codebook_embeddings = nn.Embedding(c.codebook_size * c.num_codebooks, c.dim)
        self.layers = nn.ModuleList(TransformerBlock(c) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = None if c.tie_word_embeddings else nn.Linear(c.dim, c.vocab_size, bias=False)
        fc = c.fast()
        self.fast_project_in = nn.Linear(c.dim, c.fast_dim) if c.fast_dim != c.dim else nn.Identity()
        self.fast_embeddings = nn.Embedding(c.codebook_size, c.fast_dim)
        self.fast_layers = nn.ModuleList(TransformerBlock(fc, exact_math=True) for _ in range(c.n_fast_layer))
        self.fast_norm = RMSNorm(c.fast_dim, c.norm_eps)
        self.fast_output = nn.Linear(c.fast_dim, c.codebook_size, bias=False)

    def memory_units(self) -> list[nn.Module]:
        """Units in run order: the slow layers, the untied head (if any), the projection into the fast
        transformer, the fast layers and the fast head. Embeddings (the tied head among them) and norms
        are the fixed part."""
        units: list[nn.Module] = [*self.layers]
        if self.output is not None:
            units.append(self.output)
        if isinstance(self.fast_project_in, nn.Linear):
            units.append(self.fast_project_in)
        return units + [*self.fast_layers, self.fast_output]

    def embed(self, inp: Tensor) -> Tensor:
        """A prompt or frame [1 + num_codebooks, T] (token row, then codes) -> embeddings [1, T, dim]."""
        c = self.config
        books = [self.codebook_embeddings(inp[i + 1] + i * c.codebook_size) for i in range(c.num_codebooks)]
        vq = torch.stack(books, dim=0).sum(dim=0)
        is_vq = (inp[0] >= self.semantic_begin_id) & (inp[0] <= self.semantic_end_id)
        vq[~is_vq] = 0
        x = self.embeddings(inp[0]) + vq
        if c.scale_codebook_embeddings:
            x = torch.where(is_vq[:, None], x / math.sqrt(c.num_codebooks + 1), x)
        return x[None]

    def forward_slow(self, inp: Tensor, cache: KVCache, start: int) -> tuple[Tensor, Tensor]:
        """Positions start.. of the slow LM -> (token logits [vocab] of the last position, its hidden
        state projected for the fast LM [1, 1, fast_dim])."""
        x = self.embed(inp)
        rope = interleaved_rope_table(torch.arange(start, start + x.shape[1]), self.config.head_dim,
                                      self.config.rope_base).to(x.device)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, cache, i)
        x = x[:, -1:]
        h = self.norm(x)
        logits = F.linear(h, self.embeddings.weight) if self.output is None else self.output(h)
        return logits[0, -1], self.fast_project_in(h if self.config.norm_fastlayer_input else x)

    def forward_fast(self, x: Tensor, cache: KVCache, position: int) -> Tensor:
        """One codebook position of the fast LM: x [1, 1, fast_dim] -> logits [codebook_size]."""
        rope = interleaved_rope_table(torch.tensor([position]), self.config.fast_head_dim,
                                      self.config.rope_base).to(x.device)
        for i, layer in enumerate(self.fast_layers):
            x = layer(x, rope, cache, i)
        return self.fast_output(self.fast_norm(x))[0, -1]

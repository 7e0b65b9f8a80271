"""The Qwen3 decoder (RoPE, grouped-query attention with q/k RMSNorm, SwiGLU) shared by the engines
built on it: Qwen3-TTS's talker and code predictor, IndexTTS 2's Qwen3-0.6B emotion model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from .transformer import DecoderLayer, RMSNorm, RotaryEmbedding, run_layers


@dataclass
class LMConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    vocab_size: int = 2048
    sliding_window: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LMConfig:
        heads = int(d.get("num_attention_heads", 16))
        head_dim = d.get("head_dim") or int(d["hidden_size"]) // heads
        window = d.get("sliding_window") if d.get("use_sliding_window") else None
        return cls(int(d["hidden_size"]), int(d["intermediate_size"]), int(d["num_hidden_layers"]), heads,
                   int(d.get("num_key_value_heads") or heads), int(head_dim), float(d.get("rms_norm_eps", 1e-6)),
                   float(d.get("rope_theta", 10000.0)), bool(d.get("attention_bias", False)),
                   int(d.get("vocab_size", 2048)), window)


def _layers(c: LMConfig) -> nn.ModuleList:
    return nn.ModuleList(DecoderLayer(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                      c.intermediate_size, eps=c.rms_norm_eps, qk_norm=True, bias=c.attention_bias)
                         for _ in range(c.num_hidden_layers))


class DecoderStack(nn.Module):
    """Decoder layers with RoPE and a final norm; the talker and the code predictor differ in embeddings."""

    def __init__(self, c: LMConfig) -> None:
        super().__init__()
        self.layers = _layers(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)
        self.window = c.sliding_window

    def forward(self, x: Tensor, cache, start: int) -> Tensor:
        """Embeddings [1, T, D] at positions start.. -> normed hidden states [1, T, D]; appends to `cache`."""
        return run_layers(self.layers, self.norm, self.rotary, x, cache, start, self.window)

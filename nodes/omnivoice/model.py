"""OmniVoice's diffusion language model in plain torch: a Qwen3 backbone with bidirectional attention
that predicts all 8 codebooks of every masked audio frame at once.

Parameter names follow the upstream `model.safetensors` exactly, so the file loads unchanged:

    OmniVoiceLM
      llm                     Qwen3 decoder stack without a causal mask: embed_tokens [V, D],
                              layers (GQA, q/k RMSNorm, SwiGLU, RoPE), norm
      audio_embeddings        [8 * 1025, D]: codebook c's token t is row c * 1025 + t; a frame's
                              embedding is the sum over its 8 codebooks
      audio_heads             D -> 8 * 1025 logits (per codebook, 1024 codes + the mask token)
      codebook_layer_offsets  [8] (c * 1025), a persistent buffer in the checkpoint

A sequence is [style tokens | text tokens | reference frames | target frames]; text positions read
`embed_tokens`, audio positions (audio_mask) the summed audio embeddings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..blocks.transformer import DecoderLayer, RMSNorm, RotaryEmbedding


@dataclass
class BackboneConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    attention_bias: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackboneConfig:
        if d.get("model_type", "qwen3") != "qwen3":
            raise ValueError(f"llm_config.model_type: expected qwen3, got {d.get('model_type')!r}")
        if d.get("use_sliding_window"):
            raise ValueError("llm_config.use_sliding_window: OmniVoice's backbone attends to the whole sequence")
        heads = int(d["num_attention_heads"])
        rope = d.get("rope_parameters") or {}
        theta = rope.get("rope_theta", d.get("rope_theta", 1_000_000.0))
        if rope.get("rope_type", "default") != "default" or d.get("rope_scaling"):
            raise ValueError(f"llm_config.rope_parameters: only default RoPE is supported, got {rope or d.get('rope_scaling')}")
        return cls(int(d["vocab_size"]), int(d["hidden_size"]), int(d["intermediate_size"]),
                   int(d["num_hidden_layers"]), heads, int(d.get("num_key_value_heads") or heads),
                   int(d.get("head_dim") or int(d["hidden_size"]) // heads), float(d.get("rms_norm_eps", 1e-6)),
                   float(theta), bool(d.get("attention_bias", False)))


@dataclass
class OmniVoiceConfig:
    llm: BackboneConfig
    audio_vocab_size: int = 1025
    audio_mask_id: int = 1024
    num_audio_codebook: int = 8

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OmniVoiceConfig:
        if d.get("model_type", "omnivoice") != "omnivoice":
            raise ValueError(f"model_type: expected omnivoice, got {d.get('model_type')!r}")
        if not isinstance(d.get("llm_config"), dict):
            raise ValueError("llm_config: missing (expected the Qwen3 backbone's config)")
        cfg = cls(BackboneConfig.from_dict(d["llm_config"]), int(d.get("audio_vocab_size", 1025)),
                  int(d.get("audio_mask_id", 1024)), int(d.get("num_audio_codebook", 8)))
        if not 0 <= cfg.audio_mask_id < cfg.audio_vocab_size:
            raise ValueError(f"audio_mask_id: {cfg.audio_mask_id} is outside the audio vocabulary "
                             f"(audio_vocab_size {cfg.audio_vocab_size})")
        return cfg


class Backbone(nn.Module):
    """Qwen3Model's layout (embed_tokens, layers, norm) run without a causal mask."""

    def __init__(self, c: BackboneConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                         c.intermediate_size, eps=c.rms_norm_eps, bias=c.attention_bias) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x [B, T, D] embeddings, mask [B, 1, T, T] (True = attend) -> hidden states [B, T, D]."""
        positions = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        rope = self.rotary(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, rope, mask=mask)
        return self.norm(x)


class OmniVoiceLM(nn.Module):
    def __init__(self, config: OmniVoiceConfig) -> None:
        super().__init__()
        self.config = config
        c = config.llm
        self.llm = Backbone(c)
        self.audio_embeddings = nn.Embedding(config.num_audio_codebook * config.audio_vocab_size, c.hidden_size)
        self.register_buffer("codebook_layer_offsets",
                             torch.arange(config.num_audio_codebook) * config.audio_vocab_size)
        self.audio_heads = nn.Linear(c.hidden_size, config.num_audio_codebook * config.audio_vocab_size, bias=False)

    def audio_embeds(self, ids: Tensor, audio_mask: Tensor) -> Tensor:
        """ids [B, C, T], audio_mask [B, T] -> the summed codebook embeddings [B, T, D] (zeros' rows where
        the mask is False, as upstream: those positions read the text embedding instead)."""
        shifted = ids * audio_mask.unsqueeze(1) + self.codebook_layer_offsets.view(1, -1, 1)
        return self.audio_embeddings(shifted).sum(dim=1)

    def forward(self, ids: Tensor, audio_mask: Tensor, text_embeds: Tensor, attention_mask: Tensor) -> Tensor:
        """ids [B, C, T], audio_mask [B, T], text_embeds [B, T, D] (embed_tokens of ids[:, 0], computed
        once per request), attention_mask [B, 1, T, T] -> logits [B, C, T, audio_vocab] (a view, model dtype)."""
        x = torch.where(audio_mask.unsqueeze(-1), self.audio_embeds(ids, audio_mask), text_embeds)
        h = self.llm(x, attention_mask)
        b, t, _ = h.shape
        logits = self.audio_heads(h).view(b, t, self.config.num_audio_codebook, self.config.audio_vocab_size)
        return logits.permute(0, 2, 1, 3)

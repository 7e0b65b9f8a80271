"""chinese-roberta-wwm-ext-large (a Hugging Face BERT-large, `BertForMaskedLM`) in plain torch, as far as
GPT-SoVITS reads it: the hidden state after layer N-2 (`hidden_states[-3]`), one 1024-d vector per character.

Parameter names are the published checkpoint's `bert.embeddings.*` / `bert.encoder.layer.N.*`; the masked-LM
head (`cls.*`), the pooler and the last two layers are never used by GPT-SoVITS and are not built (the loader
drops exactly those names and nothing else).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.loading import CheckpointError

SKIPPED_LAYERS = 2      # hidden_states[-3]: the output of layer num_hidden_layers - 2


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 21128
    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @property
    def used_layers(self) -> int:
        return self.num_hidden_layers - SKIPPED_LAYERS

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> BertConfig:
        if data.get("hidden_act", "gelu") != "gelu" or data.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(f"{source}: hidden_act / position_embedding_type: only BERT's gelu / absolute are used")
        try:
            cfg = cls(**{f: type(getattr(cls, f))(data[f]) for f in cls.__dataclass_fields__ if f in data})
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{source}: a size field is not a number ({e})") from None
        if cfg.num_hidden_layers <= SKIPPED_LAYERS or cfg.hidden_size % cfg.num_attention_heads:
            raise CheckpointError(f"{source}: num_hidden_layers must exceed {SKIPPED_LAYERS} and hidden_size be "
                                  f"divisible by num_attention_heads")
        return cfg


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, ids: Tensor) -> Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        x = self.word_embeddings(ids) + self.token_type_embeddings(torch.zeros_like(ids))
        return self.LayerNorm(x + self.position_embeddings(positions))


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.heads, -1).transpose(1, 2) for p in (self.query, self.key, self.value))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1)


class DenseNorm(nn.Module):
    """BertSelfOutput / BertOutput: dense, residual, LayerNorm."""

    def __init__(self, cin: int, cout: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(cin, cout)
        self.LayerNorm = nn.LayerNorm(cout, eps=eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class AttentionBlock(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.self = SelfAttention(cfg)
        self.output = DenseNorm(cfg.hidden_size, cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.self(x), x)


class Intermediate(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = AttentionBlock(cfg)
        self.intermediate = Intermediate(cfg)
        self.output = DenseNorm(cfg.intermediate_size, cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.used_layers))


class BertBody(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)


class BertFeatures(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.bert = BertBody(cfg)

    def forward(self, ids: Tensor) -> Tensor:
        """Token ids [1, T] ([CLS] ... [SEP]) -> hidden_states[-3] [1, T, hidden]."""
        x = self.bert.embeddings(ids)
        for layer in self.bert.encoder.layer:
            x = layer(x)
        return x

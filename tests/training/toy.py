"""A small post-norm transformer LM (GPT-SoVITS s1's block shape) for the training layer's tests."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mizuoto.training.estimate import TransformerSizes


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.linear1 = nn.Linear(dim, 4 * dim)
        self.linear2 = nn.Linear(4 * dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = self.norm1(x + self.out(a))
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class ToyLM(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)     # the frozen part in the tests
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def sizes(self, tokens: int) -> TransformerSizes:
        trainable = sum(p.numel() for n, p in self.named_parameters() if not n.startswith("embed."))
        return TransformerSizes(trainable=trainable, frozen=self.embed.weight.numel(), layers=len(self.blocks),
                                hidden=self.embed.embedding_dim, vocab=self.head.out_features,
                                tokens_per_sample=tokens)


def lm_loss(model: nn.Module, ids: Tensor) -> Tensor:
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def batches(n: int, batch: int, tokens: int, vocab: int = 64, seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, tokens + 1), generator=g) for _ in range(n)]

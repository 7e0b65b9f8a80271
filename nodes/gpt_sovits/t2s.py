"""GPT-SoVITS text-to-semantic model (upstream `AR/models/t2s_model.py`, Text2SemanticDecoder), plain modules.

Upstream runs inference through `torch.jit.script` classes holding the layers' weights (raw `F.linear`,
`F.layer_norm` on captured tensors), which no module hook sees. Here every layer is an ordinary module
called normally; the parameter names are the `weight` dict of an `s1*.ckpt` (prefix `model.` removed):

    h.layers.N.self_attn.in_proj_weight / in_proj_bias / out_proj.*, linear1, linear2, norm1, norm2
    bert_proj, ar_text_embedding.word_embeddings, ar_text_position.alpha, ar_audio_embedding.word_embeddings,
    ar_audio_position.alpha, ar_predict_layer

Layers are post-norm (x = norm1(x + attn(x)); x = norm2(x + mlp(x))), attention is torch's SDPA with a
boolean mask, as upstream's `process_prompt` / `decode_next_token`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache
from ...runtime.loading import CheckpointError
from ..blocks.decode import autoregress
from ..blocks.sampling import exponential_draw, repetition_penalty, top_k_filter, top_p_descending

MAX_TOKENS = 1500          # upstream's decode loop: `for idx in range(1500)`
MIN_TOKENS = 11            # EOS is masked out of the first 11 steps (at least 0.4 s of speech)
HZ = 50                    # upstream's `early_stop_num = hz * max_sec`


@dataclass(frozen=True)
class T2SConfig:
    vocab_size: int = 1025
    phoneme_vocab_size: int = 732
    embedding_dim: int = 512
    hidden_dim: int = 512
    heads: int = 16
    layers: int = 24
    eos: int = 1024
    max_sec: int = 54

    @classmethod
    def from_dict(cls, config: Any, source: str) -> T2SConfig:
        """From an s1 checkpoint's `config` (the training YAML as a dict); errors name the file and field."""
        if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
            raise CheckpointError(f"{source}: config: expected a dict with a 'model' section")
        model, data = config["model"], config.get("data") or {}

        def field(section: dict, name: str, where: str, default: Any = None) -> int:
            value = section.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 20:
                raise CheckpointError(f"{source}: config.{where}.{name} = {value!r}; expected a positive integer")
            return value

        cfg = cls(vocab_size=field(model, "vocab_size", "model"),
                  phoneme_vocab_size=field(model, "phoneme_vocab_size", "model"),
                  embedding_dim=field(model, "embedding_dim", "model"), hidden_dim=field(model, "hidden_dim", "model"),
                  heads=field(model, "head", "model"), layers=field(model, "n_layer", "model"),
                  eos=field(model, "EOS", "model"), max_sec=field(data, "max_sec", "data", 54))
        if cfg.layers > 4096 or cfg.heads > 4096:
            raise CheckpointError(f"{source}: config.model: {cfg.layers} layers / {cfg.heads} heads is not a model")
        if cfg.eos != cfg.vocab_size - 1:
            raise CheckpointError(f"{source}: config.model.EOS = {cfg.eos}; expected vocab_size - 1 = {cfg.vocab_size - 1}")
        if cfg.embedding_dim != cfg.hidden_dim or cfg.hidden_dim % cfg.heads:
            raise CheckpointError(f"{source}: config.model: embedding_dim {cfg.embedding_dim} must equal hidden_dim "
                                  f"{cfg.hidden_dim}, divisible by head {cfg.heads}")
        return cfg


def sinusoids(start: int, length: int, dim: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Rows start..start+length of upstream's SinePositionalEmbedding table (float32, same operations; a
    float64 model computes it in float64, as the float64 parity check does upstream)."""
    position = torch.arange(start, start + length, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=dtype) * -(math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, dtype=dtype)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


class TokenEmbedding(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)

    def forward(self, ids: Tensor) -> Tensor:
        return self.word_embeddings(ids)


class SinePosition(nn.Module):
    """x + alpha * sinusoid(position); upstream's x_scale is 1 (scale=False)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        table = torch.float64 if x.dtype == torch.float64 else torch.float32
        pe = sinusoids(start, x.shape[1], self.dim, table).to(device=x.device, dtype=x.dtype)
        return x + self.alpha * pe


class SelfAttention(nn.Module):
    """nn.MultiheadAttention's parameters (packed in_proj), applied as upstream's T2SBlock does."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, mask: Tensor | None, cache: KVCache, layer: int) -> Tensor:
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        b, t, _ = q.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        k, v = cache.update(layer, k, v)
        attn = F.scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(attn.transpose(1, 2).reshape(b, t, -1))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.self_attn = SelfAttention(dim, heads)
        self.linear1 = nn.Linear(dim, dim * 4)
        self.linear2 = nn.Linear(dim * 4, dim)
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: Tensor, mask: Tensor | None, cache: KVCache, layer: int) -> Tensor:
        x = self.norm1(x + self.self_attn(x, mask, cache, layer))
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class Layers(nn.Module):
    def __init__(self, cfg: T2SConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(cfg.hidden_dim, cfg.heads) for _ in range(cfg.layers))


class Text2Semantic(nn.Module):
    def __init__(self, cfg: T2SConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.bert_proj = nn.Linear(1024, cfg.embedding_dim)
        self.ar_text_embedding = TokenEmbedding(cfg.embedding_dim, cfg.phoneme_vocab_size)
        self.ar_text_position = SinePosition(cfg.embedding_dim)
        self.ar_audio_embedding = TokenEmbedding(cfg.embedding_dim, cfg.vocab_size)
        self.ar_audio_position = SinePosition(cfg.embedding_dim)
        self.h = Layers(cfg)
        self.ar_predict_layer = nn.Linear(cfg.hidden_dim, cfg.vocab_size, bias=False)

    def run_layers(self, x: Tensor, mask: Tensor | None, cache: KVCache) -> Tensor:
        for i, layer in enumerate(self.h.layers):
            x = layer(x, mask, cache, i)
        return self.ar_predict_layer(x[:, -1])

    def prefill(self, phones: Tensor, bert: Tensor, prompt: Tensor, cache: KVCache) -> Tensor:
        """phones [1, L] ids, bert [1, 1024, L], prompt [1, P] semantic ids -> logits [1, vocab].
        Text attends to text only; the prompt attends to the text and causally to itself."""
        x = self.ar_text_position(self.ar_text_embedding(phones) + self.bert_proj(bert.transpose(1, 2)))
        y = self.ar_audio_position(self.ar_audio_embedding(prompt))
        xy = torch.cat([x, y], dim=1)
        x_len, y_len = x.shape[1], y.shape[1]
        allowed = torch.ones(x_len + y_len, x_len + y_len, dtype=torch.bool, device=xy.device)
        allowed[:x_len, x_len:] = False
        allowed[x_len:, x_len:] = torch.ones(y_len, y_len, dtype=torch.bool, device=xy.device).tril()
        return self.run_layers(xy, allowed[None, None].expand(1, self.cfg.heads, -1, -1), cache)

    def step(self, token: Tensor, position: int, cache: KVCache) -> Tensor:
        """One semantic token [1, 1] at audio position `position` -> logits [1, vocab]."""
        y = self.ar_audio_position(self.ar_audio_embedding(token), start=position)
        return self.run_layers(y, None, cache)


@dataclass(frozen=True)
class T2SSampling:
    top_k: int = 15
    top_p: float = 1.0
    temperature: float = 1.0
    repetition_penalty: float = 1.35


def choose(logits: Tensor, s: T2SSampling, generator: torch.Generator | None) -> int:
    """Upstream's `sample` after the repetition penalty: top-p (descending sort), temperature, top-k,
    softmax, an exponential-race draw. logits [V] on the CPU."""
    if s.top_p < 1.0:                     # upstream's guard: no nucleus filter at 1
        logits = top_p_descending(logits, s.top_p)
    logits = logits / max(s.temperature, 1e-5)
    probs = torch.softmax(top_k_filter(logits, s.top_k), dim=-1)
    return int(exponential_draw(probs, generator))


def generate(model: Text2Semantic, phones: Tensor, bert: Tensor, prompt: Tensor, s: T2SSampling,
             generator: torch.Generator | None, cache: KVCache, *, check: Callable[[], None] | None = None,
             progress: Callable[[int, int], None] | None = None) -> Tensor:
    """Semantic tokens [N] for the text after the prompt, as TTS.py's default `infer_panel_batch_infer` with
    one row: stop at EOS (sampled or argmax; not in the first 11 steps), or after `hz * max_sec` tokens /
    1500 steps, where upstream drops the last token."""
    eos = model.cfg.eos
    limit = min(MAX_TOKENS, HZ * model.cfg.max_sec + 1)
    previous = prompt[0].cpu().tolist()

    def pick(logits: Tensor, history: list[int]) -> int:
        logits = logits[0].float().cpu()
        if len(history) < MIN_TOKENS:
            logits = logits[:-1]
        # upstream penalises in place, so its EOS check sees the penalised scores
        logits = repetition_penalty(logits, previous + history, s.repetition_penalty)
        if len(history) >= MIN_TOKENS and int(torch.argmax(logits)) == eos:
            return eos
        return choose(logits, s, generator)

    def step(token: int, i: int) -> Tensor:
        return model.step(torch.tensor([[token]], device=phones.device), prompt.shape[1] + i, cache)

    tokens = autoregress(model.prefill(phones, bert, prompt, cache), pick, step, lambda t: t == eos, limit,
                         check=check, progress=progress)
    if len(tokens) == limit:
        tokens = tokens[:-1]
    return torch.tensor(tokens, dtype=torch.long)

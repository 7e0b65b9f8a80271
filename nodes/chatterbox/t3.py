"""Chatterbox's T3 (Resemble AI, MIT): a Llama decoder over text then speech tokens, conditioned by a
speaker embedding, a perceiver over prompt speech tokens and the emotion ("exaggeration") scalar.

Parameter names are those of upstream's `t3_cfg.safetensors` (`tfmr.layers.N...`, `cond_enc...`,
`text_emb`, `speech_emb`, `text_pos_emb.emb`, `speech_pos_emb.emb`, `text_head`, `speech_head`), so the
published file loads unchanged. `generate` is upstream's `T3.inference` step for step: the conditioned
and the unconditioned (text zeroed) rows run as one batch of two, logits mix as
`cond + cfg * (cond - uncond)`, then repetition penalty over the tokens so far (BOS included),
temperature, min-p, top-p and one multinomial draw.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.lm.cache import make_cache
from ..blocks.sampling import min_p_filter, repetition_penalty, top_p_filter
from ..blocks.transformer import DecoderLayer, RMSNorm, rotary_embedding, run_layers


@dataclass
class T3Config:
    """Upstream's `T3Config` and its `Llama_520M` backbone; the defaults are the published model's."""
    hidden_size: int = 1024
    intermediate_size: int = 4096
    num_hidden_layers: int = 30
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: dict[str, Any] | None = field(default_factory=lambda: dict(
        factor=8.0, high_freq_factor=4.0, low_freq_factor=1.0, original_max_position_embeddings=8192,
        rope_type="llama3"))
    backbone_vocab_size: int = 8          # the Llama's own embedding: stored, never used
    text_tokens_dict_size: int = 704      # 2454 for the multilingual model
    speech_tokens_dict_size: int = 8194
    max_text_tokens: int = 2048
    max_speech_tokens: int = 4096
    start_text_token: int = 255
    stop_text_token: int = 0
    start_speech_token: int = 6561
    stop_speech_token: int = 6562
    speaker_embed_size: int = 256
    perceiver_queries: int = 32
    perceiver_heads: int = 4

    @property
    def is_multilingual(self) -> bool:
        return self.text_tokens_dict_size == 2454


class LlamaBackbone(nn.Module):
    """`tfmr`: Hugging Face LlamaModel's layers and final norm (`embed_tokens` is kept for the keys)."""

    def __init__(self, c: T3Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.backbone_vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                         c.intermediate_size, eps=c.rms_norm_eps, qk_norm=False)
            for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = rotary_embedding(c.rope_scaling, c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, cache, start: int) -> Tensor:
        return run_layers(self.layers, self.norm, self.rotary, x, cache, start)


class LearnedPositions(nn.Module):
    def __init__(self, positions: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(positions, dim)

    def forward(self, ids: Tensor) -> Tensor:
        return self.emb(ids)


class CrossAttentionBlock(nn.Module):
    """Upstream's `AttentionBlock2`: one LayerNorm for both inputs, q from x1, k/v from x2, residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.proj_out = nn.Linear(dim, dim)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        a, b = self.norm(x1), self.norm(x2)
        q, k, v = self.to_q(a), self.to_k(b), self.to_v(b)
        split = lambda t: t.view(t.shape[0], t.shape[1], self.heads, -1).permute(0, 2, 1, 3)  # noqa: E731
        h = F.scaled_dot_product_attention(split(q), split(k), split(v))
        h = h.permute(0, 2, 1, 3).reshape(x1.shape)
        return x1 + self.proj_out(h)


class Perceiver(nn.Module):
    def __init__(self, c: T3Config) -> None:
        super().__init__()
        self.pre_attention_query = nn.Parameter(torch.empty(1, c.perceiver_queries, c.hidden_size))
        self.attn = CrossAttentionBlock(c.hidden_size, c.perceiver_heads)

    def forward(self, h: Tensor) -> Tensor:
        query = self.pre_attention_query.expand(h.shape[0], -1, -1)
        pre = self.attn(query, h)
        return self.attn(pre, pre)


class CondEncoder(nn.Module):
    """`cond_enc`: [speaker (1), perceiver over prompt speech (32, when given), emotion (1)] embeddings."""

    def __init__(self, c: T3Config) -> None:
        super().__init__()
        self.speaker_embed_size = c.speaker_embed_size
        self.spkr_enc = nn.Linear(c.speaker_embed_size, c.hidden_size)
        self.emotion_adv_fc = nn.Linear(1, c.hidden_size, bias=False)
        self.perceiver = Perceiver(c)

    def forward(self, speaker_emb: Tensor, prompt_emb: Tensor | None, emotion: Tensor) -> Tensor:
        parts = [self.spkr_enc(speaker_emb.view(-1, self.speaker_embed_size))[:, None]]
        if prompt_emb is not None:
            parts.append(self.perceiver(prompt_emb))
        parts.append(self.emotion_adv_fc(emotion.view(-1, 1, 1)))
        return torch.cat(parts, dim=1)


class T3(nn.Module):
    def __init__(self, c: T3Config) -> None:
        super().__init__()
        self.config = c
        self.tfmr = LlamaBackbone(c)
        self.cond_enc = CondEncoder(c)
        self.text_emb = nn.Embedding(c.text_tokens_dict_size, c.hidden_size)
        self.speech_emb = nn.Embedding(c.speech_tokens_dict_size, c.hidden_size)
        self.text_pos_emb = LearnedPositions(c.max_text_tokens + 2, c.hidden_size)
        self.speech_pos_emb = LearnedPositions(c.max_speech_tokens + 2 + 2, c.hidden_size)
        self.text_head = nn.Linear(c.hidden_size, c.text_tokens_dict_size, bias=False)
        self.speech_head = nn.Linear(c.hidden_size, c.speech_tokens_dict_size, bias=False)
        if c.is_multilingual:
            use_alignment_heads(self)

    def conditioning(self, speaker_emb: Tensor, prompt_tokens: Tensor | None, emotion: float) -> Tensor:
        """Conditioning embeddings [1, L, D] (upstream `prepare_conditioning`)."""
        dev = self.speech_emb.weight.device
        prompt = None
        if prompt_tokens is not None and prompt_tokens.numel():
            ids = prompt_tokens.view(1, -1).to(dev)
            prompt = self.speech_emb(ids) + self.speech_pos_emb(torch.arange(ids.shape[1], device=dev)[None])
        dtype = self.speech_emb.weight.dtype
        return self.cond_enc(speaker_emb.to(dev, dtype), prompt, torch.full((1, 1, 1), float(emotion), device=dev,
                                                                           dtype=dtype))

    def prefill_embeds(self, cond: Tensor, text_tokens: Tensor) -> Tensor:
        """[2, L + T + 2, D]: conditioning, text (zeroed in the second row), then BOS twice at speech position
        0, as upstream builds it (its `initial_speech_tokens` and its `bos_embed`)."""
        dev = self.text_emb.weight.device
        text = text_tokens.view(1, -1).to(dev)
        text_emb = self.text_emb(text).expand(2, -1, -1).clone()
        text_emb[1].zero_()
        text_emb = text_emb + self.text_pos_emb(torch.arange(text.shape[1], device=dev)[None])
        bos = self.speech_token_embeds(torch.tensor([self.config.start_speech_token], device=dev), 0)
        return torch.cat([cond.expand(2, -1, -1), text_emb, bos, bos], dim=1)

    def speech_token_embeds(self, token: Tensor, position: int) -> Tensor:
        """One speech token at `position`, for both rows: [2, 1, D]."""
        dev = self.speech_emb.weight.device
        e = self.speech_emb(token.view(1, 1).to(dev)) + self.speech_pos_emb(torch.tensor([[position]], device=dev))
        return e.expand(2, -1, -1)

    def logits(self, embeds: Tensor, cache, start: int) -> Tensor:
        """Speech logits of the last position, both rows: [2, V]."""
        h = self.tfmr(embeds, cache, start)
        return self.speech_head(h[:, -1:])[:, -1]


@dataclass
class Sampling:
    temperature: float = 0.8
    top_p: float = 1.0
    min_p: float = 0.05
    repetition_penalty: float = 1.2
    cfg_weight: float = 0.5
    max_new_tokens: int = 1000


# The multilingual model's alignment heads (upstream LLAMA_ALIGNED_HEADS: (layer, head)), in upstream's order.
ALIGNED_HEADS = ((12, 15), (13, 11), (9, 2))


class AlignmentGuard:
    """Upstream's `AlignmentStreamAnalyzer` (multilingual T3 only): the mean attention of ALIGNED_HEADS over
    the text positions tracks where the speech is in the text; it holds back the stop token until the last
    three text tokens, and forces it on a long tail, an alignment repetition or one speech token twice in a
    row. The attention is HF's eager one on every layer (upstream switches the whole Llama to eager to read
    attention weights); one guard per generation, state in the instance.

    Upstream fails (a max over no columns) once complete on a text of 5 tokens or fewer; here the alignment
    repetition test is then false."""

    def __init__(self, model: "T3", text_start: int, text_end: int) -> None:
        layers = model.tfmr.layers
        c = model.config
        self.attentions = [layers[layer].self_attn for layer, _ in ALIGNED_HEADS]
        self.heads = [h for _, h in ALIGNED_HEADS]
        self.i, self.j = text_start, text_end
        self.eos = c.stop_speech_token
        self.alignment = torch.zeros(0, text_end - text_start)
        self.frame = 0
        self.text_position = 0
        self.started = False
        self.complete = False
        self.completed_at: int | None = None
        self.generated: list[int] = []

    def release(self) -> None:
        """Drop the last recorded attention from the layers (it is only read during a generation)."""
        for module in self.attentions:
            module.recorded = None

    def step(self, logits: Tensor, last_token: int) -> Tensor:
        """The [1, V] CFG logits after upstream's checks (the stop token held back or forced)."""
        attn = []
        for module, head in zip(self.attentions, self.heads):
            rec = module.recorded
            if rec is None:
                raise RuntimeError("Chatterbox Multilingual: T3's alignment layers recorded no attention")
            attn.append(rec[list(module.record_heads).index(head)].cpu())
        aligned = torch.stack(attn).mean(dim=0)
        i, j = self.i, self.j
        chunk = (aligned[j:, i:j] if self.frame == 0 else aligned[:, i:j]).clone().cpu()
        chunk[:, self.frame + 1:] = 0
        self.alignment = torch.cat((self.alignment, chunk), dim=0)
        a = self.alignment
        t, s = a.shape
        position = int(chunk[-1].argmax())
        if -4 < position - self.text_position < 7:
            self.text_position = position
        false_start = (not self.started) and bool(a[-2:, -2:].max() > 0.1 or a[:, :4].max() < 0.5)
        self.started = not false_start
        self.complete = self.complete or self.text_position >= s - 3
        if self.complete and self.completed_at is None:
            self.completed_at = t
        long_tail = self.complete and bool(a[self.completed_at:, -3:].sum(dim=0).max() >= 5)
        repetition = self.complete and s > 5 and bool(a[self.completed_at:, :-5].max(dim=1).values.sum() > 5)
        self.generated = (self.generated + [last_token])[-8:]
        token_repetition = len(self.generated) >= 3 and len(set(self.generated[-2:])) == 1
        if position < s - 3 and s > 5:
            logits[..., self.eos] = -2 ** 15
        if long_tail or repetition or token_repetition:
            logits = -(2 ** 15) * torch.ones_like(logits)
            logits[..., self.eos] = 2 ** 15
        self.frame += 1
        return logits


def use_alignment_heads(model: "T3") -> None:
    """Switch every attention of `model` to HF's eager form and record ALIGNED_HEADS (the multilingual T3)."""
    c = model.config
    if c.num_hidden_layers <= max(layer for layer, _ in ALIGNED_HEADS) or c.num_attention_heads <= max(
            h for _, h in ALIGNED_HEADS):
        raise ValueError(f"Chatterbox Multilingual: T3 has {c.num_hidden_layers} layers of "
                         f"{c.num_attention_heads} heads; its alignment heads {ALIGNED_HEADS} need at least 14 "
                         "layers of 16 heads")
    for block in model.tfmr.layers:
        block.self_attn.eager = True
    for index, h in ALIGNED_HEADS:
        attn = model.tfmr.layers[index].self_attn
        attn.record_heads = tuple(sorted(set(attn.record_heads or ()) | {h}))


def choose(logits: Tensor, history: list[int], s: Sampling, generator: torch.Generator | None,
           guard: AlignmentGuard | None = None) -> int:
    """Upstream's per-step selection from the [2, V] cond/uncond logits (float32, on the CPU)."""
    logits = logits.float().cpu()
    if bool(torch.isnan(logits).any()):
        raise FloatingPointError("T3 produced NaN scores: its weights are corrupt or the precision is too low "
                                 "for it (try fp32)")
    cond, uncond = logits[0:1], logits[1:2]
    cfg = torch.as_tensor(s.cfg_weight, dtype=cond.dtype)
    mixed = cond + cfg * (cond - uncond)
    if guard is not None:
        mixed = guard.step(mixed, history[-1])
    scores = repetition_penalty(mixed, torch.tensor([history]), s.repetition_penalty)
    if s.temperature != 1.0:
        scores = scores / s.temperature
    scores = top_p_filter(min_p_filter(scores, s.min_p), s.top_p)
    return int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator))


def generate(model: T3, cond: Tensor, text_tokens: Tensor, s: Sampling, generator: torch.Generator | None,
             cache_kind: str = "dynamic", on_token: Callable[[int, int], None] | None = None) -> list[int]:
    """Speech tokens for `text_tokens` (start/stop text tokens included), the stop token last when drawn.
    `on_token(done, limit)` runs after each token (progress; raise to cancel). The multilingual T3 runs
    upstream's alignment guard (see AlignmentGuard)."""
    cache = make_cache(cache_kind)
    embeds = model.prefill_embeds(cond, text_tokens)
    guard = None
    if model.config.is_multilingual:
        guard = AlignmentGuard(model, cond.shape[1], cond.shape[1] + text_tokens.numel())
    logits = model.logits(embeds, cache, 0)
    pos = embeds.shape[1]
    history = [model.config.start_speech_token]
    out: list[int] = []
    for i in range(s.max_new_tokens):
        token = choose(logits, history, s, generator, guard)
        out.append(token)
        history.append(token)
        if on_token is not None:
            on_token(i + 1, s.max_new_tokens)
        if token == model.config.stop_speech_token:
            break
        logits = model.logits(model.speech_token_embeds(torch.tensor([token]), i + 1), cache, pos)
        pos += 1
    if guard is not None:
        guard.release()
    return out

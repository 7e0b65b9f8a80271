"""CosyVoice 2/3 speech-token language model: Qwen2 over [sos, text, task, prompt speech tokens].

Parameter names follow upstream `llm.pt` (`llm.model.model.layers.0.self_attn.q_proj.weight`,
`speech_embedding.weight`, `llm_decoder.weight`, v2's `llm_embedding.weight`), so the file loads unchanged.

    CosyVoiceLM
      llm.model.model   Qwen2 decoder: embed_tokens (text), layers, norm   (upstream's Qwen2ForCausalLM.model)
      llm_embedding     v2 only: the sos and task-id rows; v3 keeps them in speech_embedding
      speech_embedding  speech tokens (+ v2's 3 / v3's 200 control rows)
      llm_decoder       hidden -> speech token logits (v2 with bias)

Upstream reads `speech_embedding.weight[id]` and `llm_embedding.weight[sos]` directly; here every lookup
goes through the embedding's forward. Upstream also computes the text lm_head over every position at
every step and throws it away; we never compute it (the tied `llm.model.lm_head.weight`, if the file
holds it, is dropped by the loader).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache, make_cache
from ..blocks.transformer import Qwen2Config, RMSNorm, RotaryEmbedding, qwen2_layer, run_layers

ENDOFPROMPT_V3 = 151646   # upstream's hard-coded id of <|endofprompt|> for CosyVoice 3


@dataclass(frozen=True)
class LMConfig:
    version: int                 # 2 or 3
    speech_token_size: int       # 6561
    qwen: Qwen2Config
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1

    @property
    def extra_tokens(self) -> int:
        """Control rows after the speech tokens: v2 eos/fill/unused, v3 sos/eos/task/fill and reserved."""
        return 3 if self.version == 2 else 200

    @property
    def sos(self) -> int:
        return 0 if self.version == 2 else self.speech_token_size

    @property
    def task_id(self) -> int:
        return 1 if self.version == 2 else self.speech_token_size + 2


class Qwen2Model(nn.Module):
    def __init__(self, c: Qwen2Config) -> None:
        super().__init__()
        # 151936 rows: built on meta (a random init would cost seconds); llm.pt always provides them.
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, device="meta")
        self.layers = nn.ModuleList(qwen2_layer(c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                                                c.head_dim, c.intermediate_size, eps=c.rms_norm_eps)
                                    for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, start: int, cache: KVCache) -> Tensor:
        return run_layers(self.layers, self.norm, self.rotary, x, cache, start)


class _Causal(nn.Module):
    """Upstream's `Qwen2ForCausalLM` wrapper level (`llm.model.model.*`)."""

    def __init__(self, c: Qwen2Config) -> None:
        super().__init__()
        self.model = Qwen2Model(c)


class _Encoder(nn.Module):
    """Upstream's `Qwen2Encoder` level (`llm.model.*`)."""

    def __init__(self, c: Qwen2Config) -> None:
        super().__init__()
        self.model = _Causal(c)


class CosyVoiceLM(nn.Module):
    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        d = config.qwen.hidden_size
        vocab = config.speech_token_size + config.extra_tokens
        if config.version == 2:
            self.llm_embedding = nn.Embedding(2, d)
        self.llm = _Encoder(config.qwen)
        self.llm_decoder = nn.Linear(d, vocab, bias=config.version == 2)
        self.speech_embedding = nn.Embedding(vocab, d)

    @property
    def decoder(self) -> Qwen2Model:
        return self.llm.model.model

    def stop_tokens(self) -> range:
        return range(self.config.speech_token_size, self.config.speech_token_size + self.config.extra_tokens)

    def prompt_embeddings(self, text: Tensor, prompt_speech: Tensor) -> Tensor:
        """[sos, text (prompt text + text), task, prompt speech tokens] embedded: [1, L, D]."""
        c = self.config
        dev = text.device
        table = self.llm_embedding if c.version == 2 else self.speech_embedding
        sos = table(torch.tensor([[c.sos]], device=dev))
        task = table(torch.tensor([[c.task_id]], device=dev))
        table = self.decoder.embed_tokens   # read where it lives (pinned to the CPU by the engine): rows move
        text_emb = table(text.to(table.weight.device)).to(device=dev, dtype=sos.dtype)
        parts = [sos, text_emb, task]
        if prompt_speech.shape[1]:
            parts.append(self.speech_embedding(prompt_speech))
        return torch.cat(parts, dim=1)

    def step_logp(self, x: Tensor, start: int, cache: KVCache) -> Tensor:
        """Log-probabilities [V] of the next speech token after the positions `x` adds to `cache`."""
        h = self.decoder(x, start, cache)
        return self.llm_decoder(h[:, -1]).log_softmax(dim=-1)[0]

    @torch.inference_mode()
    def generate(self, text: Tensor, prompt_text: Tensor, prompt_speech: Tensor,
                 select: Callable[[Tensor, list[int]], int], *, min_ratio: float = 2.0, max_ratio: float = 20.0,
                 endofprompt: int | None = ENDOFPROMPT_V3, cache: KVCache | None = None,
                 on_token: Callable[[int, int], None] | None = None) -> list[int]:
        """Speech tokens for `text` (upstream `Qwen2LM.inference`, non-streaming, without vLLM).

        text, prompt_text, prompt_speech: int [1, n]. `select(logp, decoded)` draws the next token
        (RAS sampling); eos is masked until `min_ratio * len(text)` tokens. CosyVoice 3 requires the
        `endofprompt` token id in the text or prompt (upstream hard-codes 151646, its id in the real vocabulary).
        """
        c = self.config
        all_text = torch.cat([prompt_text, text], dim=1)
        if c.version == 3 and endofprompt is not None and not bool((all_text == endofprompt).any()):
            raise ValueError("CosyVoice 3 needs <|endofprompt|> in its text or prompt text")
        x = self.prompt_embeddings(all_text, prompt_speech)
        n = text.shape[1]
        min_len, max_len = int(n * min_ratio), int(n * max_ratio)
        cache = cache if cache is not None else make_cache()
        stops = self.stop_tokens()
        out: list[int] = []
        pos = 0
        for i in range(max_len):
            logp = self.step_logp(x, pos, cache)
            pos += x.shape[1]
            if i < min_len:
                logp[c.speech_token_size] = -float("inf")
            token = select(logp, out)
            if token in stops:
                break
            out.append(token)
            if on_token is not None:
                on_token(len(out), max_len)
            x = self.speech_embedding(torch.tensor([[token]], device=text.device))
        return out

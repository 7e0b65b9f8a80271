"""IndexTTS 2's emotion-from-text model (qwen0.6bemo4-merge, a fine-tuned Qwen3-0.6B) and upstream's parsing.

    prompt = chat_prompt(text)               # Qwen3's chat template, system "文本情感分类", thinking off
    ids = generate(lm, tokenizer.encode(prompt), settings, generator)     # HF `generate` sampling, reproduced
    weights = emotion_vector(tokenizer.decode(ids), text)                 # upstream's QwenEmotion parsing

The decoder is the Qwen3 stack the Qwen3-TTS engine already has (nodes/qwen3_tts/model.py), under Hugging
Face's Qwen3ForCausalLM names; the head is tied to the embedding as the published model declares.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...runtime.lm.cache import make_cache
from ..formats.checkpoint import load_tokenizer
from ..blocks.decode import autoregress
from ..blocks.sampling import repetition_penalty, select
from ..blocks.qwen3 import DecoderStack, LMConfig

SYSTEM = "文本情感分类"
THINK_END = 151668                                   # </think> in Qwen3's vocabulary
CN_TO_EN = {"高兴": "happy", "愤怒": "angry", "悲伤": "sad", "恐惧": "afraid", "反感": "disgusted",
            "低落": "melancholic", "惊讶": "surprised", "自然": "calm"}
ORDER = ["高兴", "愤怒", "悲伤", "恐惧", "反感", "低落", "惊讶", "自然"]
MELANCHOLIC_WORDS = ("低落", "melancholy", "melancholic", "depression", "depressed", "gloomy")


class Qwen3Model(DecoderStack):
    def __init__(self, c: LMConfig) -> None:
        super().__init__(c)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)


class Qwen3ForCausalLM(nn.Module):
    def __init__(self, c: LMConfig, tied: bool = True) -> None:
        super().__init__()
        self.config = c
        self.model = Qwen3Model(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids: Tensor, cache, start: int) -> Tensor:
        """Token ids [1, T] at positions start.. -> logits of the last position [vocab] (float32)."""
        h = self.model(self.model.embed_tokens(ids), cache, start)
        return self.lm_head(h[:, -1]).float()[0]


@dataclass(frozen=True)
class GenerationSettings:
    """generation_config.json's sampling fields (Hugging Face defaults when absent: greedy)."""
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    eos: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any], config: dict[str, Any]) -> "GenerationSettings":
        eos = d.get("eos_token_id", config.get("eos_token_id"))
        eos = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        return cls(bool(d.get("do_sample", False)), float(d.get("temperature", 1.0)), int(d.get("top_k", 50)),
                   float(d.get("top_p", 1.0)), float(d.get("repetition_penalty", 1.0)), eos)


def chat_prompt(text: str) -> str:
    """Qwen3's chat template for [system, user] with add_generation_prompt and enable_thinking=False."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
            f"<|im_start|>assistant\n<think>\n\n</think>\n\n")


def generate(lm: Qwen3ForCausalLM, ids: list[int], s: GenerationSettings, generator: torch.Generator | None,
             max_new_tokens: int = 256, check: Callable[[], None] | None = None) -> list[int]:
    """HF `generate` (greedy or multinomial sampling after repetition penalty, temperature, top-k, top-p)."""
    dev = lm.lm_head.weight.device
    cache = make_cache()
    logits = lm(torch.tensor([ids], device=dev), cache, 0)
    history = list(ids)

    def choose(logits: Tensor, out: list[int]) -> int:
        scores = repetition_penalty(logits, history + out, s.repetition_penalty)
        return select(scores, s.do_sample, s.temperature, s.top_k, s.top_p, generator)

    def step(token: int, i: int) -> Tensor:
        return lm(torch.tensor([[token]], device=dev), cache, len(ids) + i)

    return autoregress(logits, choose, step, lambda t: t in s.eos, max_new_tokens, check=check)


def after_thinking(ids: list[int]) -> list[int]:
    """The tokens after the last </think>, as upstream slices them."""
    return ids[len(ids) - ids[::-1].index(THINK_END):] if THINK_END in ids else ids


def _label(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    if value in CN_TO_EN:
        return value
    return next((cn for cn, en in CN_TO_EN.items() if value.lower() == en), None)


def _normalize(content: Any) -> dict[str, Any]:
    """Upstream's QwenEmotion.normalize_content: labels given as values become one-hot weights."""
    out = dict(content) if isinstance(content, dict) else {}
    detected = _label(content) if isinstance(content, str) else None
    if detected is None:
        for alias in ("emotion", "emotion_label", "label", "情感", "情绪"):
            detected = _label(out.get(alias))
            if detected is not None:
                break
    if detected is not None and all(k not in out for k in ORDER):
        out[detected] = 1.0
    for cn in ORDER:
        label = _label(out.get(cn))
        if label is not None:
            out[cn] = 1.0 if label == cn else 0.0
            if label != cn:
                out[label] = 1.0
    return out


def emotion_vector(reply: str, text: str) -> list[float]:
    """Upstream's QwenEmotion.inference after decoding: JSON (or "key: number" pairs), the melancholic
    swap, then eight weights clamped to [0, 1.2] in the order happy ... calm (calm = 1 when all are 0)."""
    try:
        content: Any = json.loads(reply)
    except json.JSONDecodeError:
        content = {m.group(1): float(m.group(2)) for m in re.finditer(r'([^\s":.,]+?)"?\s*:\s*([\d.]+)', reply)}
    if any(w in text.lower() for w in MELANCHOLIC_WORDS):
        if not isinstance(content, dict):
            content = {}
        content["悲伤"], content["低落"] = content.get("低落", 0.0), content.get("悲伤", 0.0)
    content = _normalize(content)
    out = []
    for cn in ORDER:
        try:
            value = float(content.get(cn, 0.0))
        except (TypeError, ValueError):
            raise ValueError(f"the emotion model returned a non-numeric score {content.get(cn)!r}") from None
        out.append(max(0.0, min(1.2, value)))
    if all(v <= 0.0 for v in out):
        out[-1] = 1.0
    return out


class EmotionTokenizer:
    """tokenizer.json of the emotion model (byte-level BPE with Qwen's special tokens) via `tokenizers`."""

    def __init__(self, path: Path) -> None:
        self.tok = load_tokenizer(path, "IndexTTS 2 emotion model")

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)


@dataclass
class EmotionModel:
    lm: Qwen3ForCausalLM
    tokenizer: EmotionTokenizer
    settings: GenerationSettings


def load_emotion_model(folder: str | Path, dtype: torch.dtype = torch.float32) -> EmotionModel:
    """qwen0.6bemo4-merge/: config.json, model.safetensors, tokenizer.json (generation_config.json optional);
    strict loading, errors name the file."""
    from ...runtime.loading import CheckpointError, SizeSource, load_module
    from ..formats.checkpoint import ModelFolderError, read_json
    folder = Path(folder)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (folder / name).is_file():
            raise ModelFolderError(f"IndexTTS 2 emotion model: {folder / name} not found")
    config = read_json(folder / "config.json", "IndexTTS 2 emotion model")
    if config.get("model_type", "qwen3") != "qwen3":
        raise CheckpointError(f"IndexTTS 2 emotion model: {folder / 'config.json'}: model_type "
                              f"{config.get('model_type')!r}; expected 'qwen3'")
    try:
        c = LMConfig.from_dict(config)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"IndexTTS 2 emotion model: {folder / 'config.json'}: bad or missing field {e}") from None
    tied = bool(config.get("tie_word_embeddings", True))
    lm = load_module(lambda: Qwen3ForCausalLM(c, tied), folder / "model.safetensors", dtype,
                     SizeSource(folder / "config.json", config)).eval()
    gen_path = folder / "generation_config.json"
    gen = read_json(gen_path, "IndexTTS 2 emotion model") if gen_path.is_file() else {}
    return EmotionModel(lm, EmotionTokenizer(folder / "tokenizer.json"), GenerationSettings.from_dict(gen, config))

"""The tiny VibeVoice-Realtime folder for the conformance suite: the recorded tiny model (realtime_tiny.py) in the
published layout, its voice preset as voices/<name>.pt in upstream's pickle layout, a character tokenizer.json."""
from __future__ import annotations

import sys
import types
from collections import OrderedDict
from pathlib import Path

import torch


class DynamicCache:       # pickled as transformers.cache_utils.DynamicCache
    def __init__(self, keys: list, values: list) -> None:
        self._seen_tokens = keys[0].shape[2]
        self.key_cache, self.value_cache = keys, values


class BaseModelOutputWithPast(OrderedDict):
    def __reduce__(self):  # type: ignore[override]
        return (type(self), (self["last_hidden_state"], self["past_key_values"], None, None), dict(self), None,
                iter(self.items()))


def save_preset(preset, path: Path) -> None:
    saved = {k: sys.modules.get(k) for k in ("transformers", "transformers.cache_utils", "transformers.modeling_outputs")}
    try:
        sys.modules["transformers"] = types.ModuleType("transformers")
        for mod, cls in (("transformers.cache_utils", DynamicCache), ("transformers.modeling_outputs", BaseModelOutputWithPast)):
            m = types.ModuleType(mod)
            setattr(m, cls.__name__, cls)
            cls.__module__ = mod
            sys.modules[mod] = m
        obj = {}
        for name in ("lm", "tts_lm", "neg_lm", "neg_tts_lm"):
            part = getattr(preset, name)
            obj[name] = BaseModelOutputWithPast(last_hidden_state=part.last_hidden_state.bfloat16(), past_key_values=DynamicCache(
                [k.bfloat16() for k in part.keys], [v.bfloat16() for v in part.values]))
        torch.save(obj, path)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


# Qwen2.5's special tokens the processor and `generate` look up, at the ids the tiny recording used (90: the
# negative prompt's <|image_pad|>; 91 pad / unknown; 93-95 speech start, end, diffusion), then one id a character
QWEN_SPECIALS = {"<|image_pad|>": 90, "<|endoftext|>": 91, "<|vision_start|>": 93, "<|vision_end|>": 94,
                 "<|vision_pad|>": 95}
QWEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!?'\"-:;$%\n"


def qwen_char_tokenizer(path: Path) -> Path:
    """A tokenizer.json upstream's VibeVoiceTextTokenizerFast (a Qwen2 fast tokenizer) loads: one id a character
    (BPE without merges, unknown characters read as <|endoftext|> as Qwen's unk), its special tokens."""
    from tokenizers import AddedToken, Tokenizer, models
    vocab = {c: i for i, c in enumerate(QWEN_CHARS)} | QWEN_SPECIALS
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|endoftext|>"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in QWEN_SPECIALS])
    tok.save(str(path))
    return path


def write_tiny(folder: Path, tokenizer=None, eos_bias: float | None = None, max_positions: int | None = None) -> Path:
    """`tokenizer`: writes tokenizer.json (default: test_phases' character tokenizer); `eos_bias`: the EOS
    classifier's output bias (the recording's -0.15 keeps its logits near the decision); `max_positions`: the
    context length in config.json (64 recorded; the position encoding does not depend on it)."""
    import json
    from vibevoice.realtime_tiny import GOLDEN, preset_from, read, write_folder
    from vibevoice.test_phases import char_tokenizer
    tensors, meta = read(GOLDEN)
    preset = preset_from(tensors)
    if eos_bias is not None:
        tensors["weight.tts_eos_classifier.fc2.bias"] = torch.tensor([eos_bias])
    if max_positions is not None:
        config = json.loads(meta["config"])
        config["decoder_config"]["max_position_embeddings"] = max_positions
        meta = {**meta, "config": json.dumps(config)}
    write_folder(tensors, meta, folder)
    (tokenizer or char_tokenizer)(folder / "tokenizer.json")
    (folder / "voices").mkdir(exist_ok=True)
    for name in ("en-Wayne_man", "en-Alice_woman"):
        save_preset(preset, folder / "voices" / f"{name}.pt")
    return folder


def conformance_case(root) -> "Case":
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    return Case(write_tiny(Path(root) / "vibevoice"), SpeakRequest("Hi there.", seed=2, voice="en-Alice_woman"))

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


def write_tiny(folder: Path) -> Path:
    from vibevoice.realtime_tiny import GOLDEN, preset_from, read, write_folder
    from vibevoice.test_phases import char_tokenizer
    tensors, meta = read(GOLDEN)
    write_folder(tensors, meta, folder)
    char_tokenizer(folder / "tokenizer.json")
    (folder / "voices").mkdir(exist_ok=True)
    for name in ("en-Wayne_man", "en-Alice_woman"):
        save_preset(preset_from(tensors), folder / "voices" / f"{name}.pt")
    return folder


def conformance_case(root) -> "Case":
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    return Case(write_tiny(Path(root) / "vibevoice"), SpeakRequest("Hi there.", seed=2, voice="en-Alice_woman"))

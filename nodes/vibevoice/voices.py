"""VibeVoice-Realtime voice presets: upstream's `demo/voices/streaming_model/<voice>.pt`.

A preset is the prefilled state of the two LMs for a voice prompt, for the text and for the negative
(classifier-free guidance) branch: a dict of four transformers `BaseModelOutputWithPast` ("lm", "tts_lm",
"neg_lm", "neg_tts_lm"), each holding the last hidden states and a `DynamicCache` (per-layer key and value
tensors). Upstream reads them with `torch.load(weights_only=False)`; here the weights-only unpickler rebuilds
only the tensors, the containers and stand-ins for those two classes (nodes/formats/checkpoint.py), so a
preset that asks to call anything else is refused before anything runs.

Where a user gets them: the VibeVoice repository's demo/voices/streaming_model/ folder (25 voices, MIT),
copied next to the model as voices/<name>.pt.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..formats.checkpoint import CheckpointError, load_pickle_with_records

PARTS = ("lm", "tts_lm", "neg_lm", "neg_tts_lm")
RECORDS = ("transformers.cache_utils.DynamicCache",)
CALLED = ("transformers.modeling_outputs.BaseModelOutputWithPast",)


@dataclass(frozen=True)
class Prefilled:
    """One LM's prefilled state: last hidden states (1, T, hidden) and per-layer keys / values
    (1, kv_heads, T, head_dim)."""
    last_hidden_state: Tensor
    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]

    @property
    def length(self) -> int:
        return self.last_hidden_state.shape[1]


@dataclass(frozen=True)
class VoicePreset:
    lm: Prefilled
    tts_lm: Prefilled
    neg_lm: Prefilled
    neg_tts_lm: Prefilled


def _bad(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: not a VibeVoice voice preset: {what}")


def _part(path: Path, name: str, obj: Any) -> Prefilled:
    if not isinstance(obj, dict) or not isinstance(obj.get("last_hidden_state"), Tensor):
        raise _bad(path, f"'{name}' holds no last_hidden_state tensor")
    hidden = obj["last_hidden_state"]
    cache = obj.get("past_key_values")
    if not isinstance(cache, dict) or not isinstance(cache.get("key_cache"), list) \
            or not isinstance(cache.get("value_cache"), list):
        raise _bad(path, f"'{name}' holds no past_key_values with key_cache / value_cache lists")
    keys, values = cache["key_cache"], cache["value_cache"]
    if hidden.dim() != 3 or hidden.shape[0] != 1 or hidden.shape[1] < 1:
        raise _bad(path, f"'{name}' last_hidden_state has shape {tuple(hidden.shape)}, expected (1, T, hidden)")
    if not keys or len(keys) != len(values):
        raise _bad(path, f"'{name}' has {len(keys)} key and {len(values)} value layers")
    shape = None
    for i, t in enumerate(keys + values):
        if not isinstance(t, Tensor) or t.dim() != 4 or t.shape[0] != 1 or t.shape[2] != hidden.shape[1]:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise _bad(path, f"'{name}' cache entry {i} is {got}, expected (1, kv_heads, {hidden.shape[1]}, head_dim)")
        if shape is not None and t.shape != shape:
            raise _bad(path, f"'{name}' cache entries differ in shape ({tuple(t.shape)} vs {tuple(shape)})")
        shape = t.shape
        if not t.dtype.is_floating_point:
            raise _bad(path, f"'{name}' cache entry {i} is {t.dtype}, expected floating point")
    return Prefilled(hidden, tuple(keys), tuple(values))


def load_voice_preset(path: str | os.PathLike) -> VoicePreset:
    """A voice preset read without executing anything from the file; errors name the file."""
    path = Path(path)
    obj = load_pickle_with_records(path, RECORDS, called=CALLED)
    if not isinstance(obj, dict) or sorted(obj) != sorted(PARTS):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise _bad(path, f"holds {keys}, expected the parts {', '.join(PARTS)}")
    parts = {name: _part(path, name, obj[name]) for name in PARTS}
    for a, b in (("lm", "neg_lm"), ("tts_lm", "neg_tts_lm")):
        if len(parts[a].keys) != len(parts[b].keys) or parts[a].keys[0].shape[1::2] != parts[b].keys[0].shape[1::2]:
            raise _bad(path, f"'{a}' and '{b}' caches have different layer counts or head shapes")
    return VoicePreset(**parts)


def voice_names(folder: str | os.PathLike) -> list[str]:
    """The presets in a voices folder, by file stem, sorted."""
    return sorted(p.stem for p in Path(folder).glob("*.pt") if p.is_file())


def as_dtype(part: Prefilled, dtype: torch.dtype) -> Prefilled:
    """`part` with every tensor cast to `dtype` (presets are stored in bfloat16)."""
    return Prefilled(part.last_hidden_state.to(dtype), tuple(k.to(dtype) for k in part.keys),
                     tuple(v.to(dtype) for v in part.values))

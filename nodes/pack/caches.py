"""What the pack keeps between requests: what engines derived from a voice, and finished segments' audio.

    key, _ = request_keys(model, request)                  # pipeline.py: the voice and settings, not the text
    prompts = runtime.prompts.get(key)                     # a private copy, or None
    ...
    runtime.prompts.put(key, prompts)

Both caches are bounded by bytes (tensors counted by their storage) and evict the least recently
used entry first. Entries are held on the CPU and handed out as private copies on the device each
tensor came from, so no cached tensor holds accelerator memory between requests and an engine that
edits what it was given cannot change the cache. Keys are content hashes: the reference audio's
samples, the model folder's files (name, size, modification time) and every request input, so a voice
or model whose files changed never meets an entry made from the old ones (it ages out unused).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

MAX_MODEL_FILES = 10_000        # a model folder's files read for its fingerprint (stat only)
_LEAVES = (str, int, float, bool, bytes, type(None))


class Uncacheable(TypeError):
    """A value holding something the cache cannot copy (only tensors, plain data and containers)."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stored: int = 0
    evicted: int = 0
    refused: int = 0              # too large for the cache, or not plain data


def _copy(value: Any, device_of: bool) -> tuple[Any, int]:
    """(a deep copy, its tensor bytes). device_of=False: tensors to the CPU, each remembering its device;
    True: the stored (tensor, device) pairs back to their device, cloned."""
    if isinstance(value, _Stored):
        if not device_of:
            raise Uncacheable("already stored")
        t = value.tensor.to(value.device) if value.device != value.tensor.device else value.tensor.clone()
        return t, t.numel() * t.element_size()
    if isinstance(value, Tensor):
        if device_of:
            raise Uncacheable("a tensor not stored by the cache")
        host = value.detach().to("cpu", copy=True)
        return _Stored(host, value.device), host.numel() * host.element_size()
    if isinstance(value, _LEAVES):
        return value, 0
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        pairs = [_copy(v, device_of) for v in value]
        return type(value)(p[0] for p in pairs), sum(p[1] for p in pairs)
    if type(value) is dict:
        out, total = {}, 0
        for k, v in value.items():
            if not isinstance(k, (*_LEAVES, tuple)):
                raise Uncacheable(f"a key of type {type(k).__name__}")
            out[k], n = _copy(v, device_of)
            total += n
        return out, total
    raise Uncacheable(f"a value of type {type(value).__name__}")


@dataclass(frozen=True)
class _Stored:
    tensor: Tensor
    device: torch.device


class ByteCache:
    """A least-recently-used map from string keys to copies of plain data with tensors, at most `max_bytes`
    of tensor storage in all (thread-safe: ComfyUI may run prompts beside the panel's reads)."""

    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes: expected a whole number of bytes >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> Any:
        """A private copy of the entry (tensors back on their devices), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
        return _copy(entry[0], device_of=True)[0]

    def put(self, key: str, value: Any) -> bool:
        """Store a copy of `value`; False when it is larger than the whole cache or not plain data."""
        try:
            stored, size = _copy(value, device_of=False)
        except Uncacheable:
            self.stats.refused += 1
            return False
        if size > self.max_bytes:
            self.stats.refused += 1
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (stored, size)
            self._bytes += size
            self.stats.stored += 1
            while self._bytes > self.max_bytes:
                _, (_, n) = self._entries.popitem(last=False)
                self._bytes -= n
                self.stats.evicted += 1
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


# ---- keys ----------------------------------------------------------------------------------------------
def tensor_digest(t: Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes."""
    t = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel():
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def plain(value: Any) -> Any:
    """`value` as JSON-able data for a key: tensors by digest, AUDIO dicts by their samples and rate."""
    if isinstance(value, Tensor):
        return {"tensor": tensor_digest(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, _LEAVES):
        return value.hex() if isinstance(value, bytes) else value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return repr(value)


def model_fingerprint(folder: Path | None) -> str:
    """The model folder's files by relative name, size and modification time (no file is read)."""
    if folder is None:
        return ""
    rows = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            rows.append((os.path.relpath(path, folder), st.st_size, st.st_mtime_ns))
            if len(rows) >= MAX_MODEL_FILES:
                break
        if len(rows) >= MAX_MODEL_FILES:
            break
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()

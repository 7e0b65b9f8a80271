"""Key/value caches for autoregressive decoders, and the peak memory of a growing one.

Tensors are [rows, heads, positions, head_dim]; `update` appends along the positions dim and returns
everything cached so far for that layer, ready for attention.

- `DynamicCache` (default): `torch.cat` per step. Each layer's old tensor is freed as soon as its
  concatenation is stored, so at any moment at most one layer holds an extra copy.
- `BufferCache` (`compute.kv_cache = static`, the default of engines whose upstream preallocates): preallocated per-layer buffers that double when
  full; no per-step copy, less fragmentation. Attention reads views with the buffer's strides, which
  some GPU kernels sum in another order, so it is a numerics change on GPU (identical on CPU).
"""
from __future__ import annotations

import torch
from torch import Tensor

_SEQ = 2


def peak_bytes(position_bytes: int, layers: int, positions: int, kind: str = "dynamic",
               rows: int = 1, initial: int = 256) -> int:
    """Peak bytes of a cache grown one position at a time to `positions`.

    position_bytes: K plus V bytes of one position of one layer of one row.
    dynamic: every layer's cache plus one layer's concatenated copy.
    static: every layer's buffer at its final capacity (initial doubled until it holds `positions`)
    plus one old buffer, the moment the last layer grows; no old buffer when it never grew.
    Both caches replace K before they copy V, so the real peak is lower by the last layer's old K
    (tests/test_kv_cache.py measures it); a prefill of several positions never peaks higher.
    """
    if min(position_bytes, layers, positions, rows) < 0 or initial <= 0:
        raise ValueError("peak_bytes needs non-negative sizes and initial > 0")
    row = rows * position_bytes
    if kind == "dynamic":
        return (layers + 1) * positions * row
    if kind == "static":
        if positions == 0:
            return 0
        capacity = _capacity(initial, positions)
        old = capacity // 2 if capacity > initial else 0
        return (layers * capacity + old) * row
    raise ValueError(f"unknown KV cache kind {kind!r}: expected 'dynamic' or 'static'")


def _capacity(initial: int, positions: int) -> int:
    capacity = initial
    while capacity < positions:
        capacity *= 2
    return capacity


class DynamicCache:
    """Per-layer K/V tensors grown by concatenation."""

    def __init__(self) -> None:
        self._k: list[Tensor] = []
        self._v: list[Tensor] = []

    @property
    def seq_len(self) -> int:
        return self._k[0].shape[_SEQ] if self._k else 0

    def update(self, layer_idx: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's k/v for `layer_idx`; returns the layer's whole cache."""
        if layer_idx == len(self._k):
            self._k.append(k)
            self._v.append(v)
        else:
            self._k[layer_idx] = torch.cat([self._k[layer_idx], k], dim=_SEQ)
            self._v[layer_idx] = torch.cat([self._v[layer_idx], v], dim=_SEQ)
        return self._k[layer_idx], self._v[layer_idx]

    def reorder_rows(self, order: Tensor) -> None:
        """Beam search: every layer's rows become rows `order` (index_select, as Hugging Face reorders)."""
        self._k = [k.index_select(0, order) for k in self._k]
        self._v = [v.index_select(0, order) for v in self._v]


class BufferCache:
    """Per-layer preallocated K/V buffers of `initial` positions, doubled when full.

    whole=True reads the buffers as a preallocated cache is read upstream (VoxCPM's): zero-filled, returned
    entire, with `mask(layer)` marking the filled part; attention over the padded length is what such a
    model's numbers were made with."""

    def __init__(self, initial: int = 256, whole: bool = False) -> None:
        if initial <= 0:
            raise ValueError("BufferCache needs initial > 0")
        self.initial = initial
        self.whole = whole
        self._k: list[Tensor] = []
        self._v: list[Tensor] = []
        self._len: list[int] = []

    @property
    def seq_len(self) -> int:
        return self._len[0] if self._len else 0

    def update(self, layer_idx: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write this step's k/v in place; returns views of the layer's filled part."""
        start = self._len[layer_idx] if layer_idx < len(self._len) else 0
        end = start + k.shape[_SEQ]
        if layer_idx == len(self._len):
            capacity = _capacity(self.initial, end)
            self._k.append(_buffer(k, capacity, self.whole))
            self._v.append(_buffer(v, capacity, self.whole))
            self._len.append(0)
        elif end > self._k[layer_idx].shape[_SEQ]:
            capacity = _capacity(self.initial, end)
            # One at a time: the old K is freed before V grows.
            self._k[layer_idx] = _grown(self._k[layer_idx], start, capacity, self.whole)
            self._v[layer_idx] = _grown(self._v[layer_idx], start, capacity, self.whole)
        k_buf, v_buf = self._k[layer_idx], self._v[layer_idx]
        k_buf[:, :, start:end].copy_(k)
        v_buf[:, :, start:end].copy_(v)
        self._len[layer_idx] = end
        if self.whole:
            return k_buf, v_buf
        return k_buf[:, :, :end], v_buf[:, :, :end]

    def mask(self, layer_idx: int) -> Tensor:
        """[1, 1, 1, capacity] bool, True where a key is filled (for whole=True)."""
        buf = self._k[layer_idx]
        return (torch.arange(buf.shape[_SEQ], device=buf.device) < self._len[layer_idx]).view(1, 1, 1, -1)

    def reorder_rows(self, order: Tensor) -> None:
        """Beam search: every layer's rows become rows `order` (the filled part is copied)."""
        for i, n in enumerate(self._len):
            self._k[i][:, :, :n] = self._k[i][:, :, :n].index_select(0, order)
            self._v[i][:, :, :n] = self._v[i][:, :, :n].index_select(0, order)


def _buffer(like: Tensor, capacity: int, zeros: bool = False) -> Tensor:
    shape = list(like.shape)
    shape[_SEQ] = capacity
    return like.new_zeros(shape) if zeros else like.new_empty(shape)


def _grown(buf: Tensor, filled: int, capacity: int, zeros: bool = False) -> Tensor:
    grown = _buffer(buf, capacity, zeros)
    grown[:, :, :filled].copy_(buf[:, :, :filled])
    return grown


KVCache = DynamicCache | BufferCache


def make_cache(kind: str = "dynamic", initial: int = 256) -> KVCache:
    """The cache for `compute.kv_cache`: "dynamic" or "static"."""
    if kind == "dynamic":
        return DynamicCache()
    if kind == "static":
        return BufferCache(initial)
    raise ValueError(f"unknown KV cache kind {kind!r}: expected 'dynamic' or 'static'")

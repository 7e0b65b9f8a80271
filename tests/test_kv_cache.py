"""KV caches: both kinds give attention the same values; peak_bytes matches a measured peak."""
from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from mizuoto.runtime.lm.cache import BufferCache, DynamicCache, make_cache, peak_bytes

ROWS, HEADS, HEAD_DIM, LAYERS = 2, 3, 4, 3
POSITION_BYTES = 2 * HEADS * HEAD_DIM * 4          # K and V of one position, float32


class LiveBytes(TorchDispatchMode):
    """Live bytes of storages created by ops under this mode, and their peak.

    A storage is new when an op outputs it and none of the op's inputs shares it (views, in-place
    ops and `out=` reuse an existing one); a finalizer on the storage subtracts it when it dies.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._tracked: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {t.untyped_storage()._cdata for t in pytree.tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs or key in self._tracked:
                continue
            self._tracked.add(key)
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key, storage.nbytes()).atexit = False
        return out

    def _free(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes


def decode(cache, positions: int, layers: int = LAYERS, prefill: int = 1, seed: int = 0):
    """Grow `cache` as a decoder does: per step, per layer, append that step's k/v."""
    gen = torch.Generator().manual_seed(seed)
    seen = []
    done = 0
    while done < positions:
        step = prefill if done == 0 else 1
        done += step
        for layer in range(layers):
            k = torch.randn(ROWS, HEADS, step, HEAD_DIM, generator=gen)
            v = torch.randn(ROWS, HEADS, step, HEAD_DIM, generator=gen)
            k_all, v_all = cache.update(layer, k, v)
            seen.append((k_all.clone(), v_all.clone()))
            del k, v, k_all, v_all          # a decoder drops them after the layer's attention
    return seen


def measured_peak(cache, positions: int) -> int:
    with LiveBytes() as mode:
        # Only the cache's own tensors and this step's inputs: no copies kept for comparison.
        gen = torch.Generator().manual_seed(0)
        for _ in range(positions):
            for layer in range(LAYERS):
                k = torch.randn(ROWS, HEADS, 1, HEAD_DIM, generator=gen)
                v = torch.randn(ROWS, HEADS, 1, HEAD_DIM, generator=gen)
                k_all, v_all = cache.update(layer, k, v)
                del k, v, k_all, v_all
    return mode.peak


# Units below are bytes of one position of one layer (all rows), K and V together; K alone is half.
POSITION = ROWS * POSITION_BYTES


@pytest.mark.parametrize("positions", [2, 7, 40])
def test_dynamic_peak_is_measured_peak(positions):
    # peak_bytes: L layers at N positions plus one layer's copy (N). Measured, at the last layer's
    # V concatenation of the last step: L layers at N, that layer's old V (N-1 positions of V) and
    # this step's k/v inputs (1). The difference is the last layer's old K, which DynamicCache
    # frees before it concatenates V: the estimate is high by exactly that.
    old_k = (positions - 1) * POSITION // 2
    expected = peak_bytes(POSITION_BYTES, LAYERS, positions, "dynamic", rows=ROWS)
    assert measured_peak(DynamicCache(), positions) == expected - old_k


@pytest.mark.parametrize(("positions", "capacity"), [(3, 4), (4, 4), (5, 8), (16, 16), (17, 32),
                                                     (40, 64)])
def test_static_peak_is_measured_peak(positions, capacity):
    # peak_bytes: L buffers at the final capacity C plus one old buffer (C/2) if it grew. Measured:
    # the same less the old K buffer, freed before V grows (C/2 positions of K), plus this step's
    # k/v inputs (1 position), which are alive while they are written into the buffer.
    old_k = (capacity // 2) * POSITION // 2 if capacity > 4 else 0
    expected = peak_bytes(POSITION_BYTES, LAYERS, positions, "static", rows=ROWS, initial=4)
    assert measured_peak(BufferCache(initial=4), positions) == expected - old_k + POSITION


def test_peak_bytes_formula():
    assert peak_bytes(10, 4, 100) == 5 * 100 * 10
    assert peak_bytes(10, 4, 100, rows=3) == 3 * 5 * 100 * 10
    assert peak_bytes(10, 4, 256, "static") == 4 * 256 * 10                    # no growth
    assert peak_bytes(10, 4, 257, "static") == (4 * 512 + 256) * 10
    assert peak_bytes(10, 4, 1000, "static", initial=100) == (4 * 1600 + 800) * 10
    assert peak_bytes(10, 4, 0, "static") == 0
    with pytest.raises(ValueError, match="unknown KV cache kind"):
        peak_bytes(10, 4, 100, "paged")
    with pytest.raises(ValueError):
        peak_bytes(-1, 4, 100)


@pytest.mark.parametrize("prefill", [1, 5, 11])
def test_both_kinds_give_identical_attention_inputs(prefill):
    dynamic, static = DynamicCache(), BufferCache(initial=4)
    for (k_d, v_d), (k_s, v_s) in zip(decode(dynamic, 30, prefill=prefill),
                                      decode(static, 30, prefill=prefill), strict=True):
        assert torch.equal(k_d, k_s) and torch.equal(v_d, v_s)
    assert dynamic.seq_len == static.seq_len == 30


def test_buffer_cache_writes_in_place_and_returns_views():
    cache = BufferCache(initial=8)
    k = torch.ones(1, 1, 3, 2)
    k_all, _ = cache.update(0, k, k)
    assert k_all.shape == (1, 1, 3, 2) and k_all.untyped_storage().nbytes() == 8 * 2 * 4
    k_next, _ = cache.update(0, 2 * k[:, :, :1], k[:, :, :1])
    assert k_next.untyped_storage()._cdata == k_all.untyped_storage()._cdata   # no growth, no copy
    assert k_next[0, 0, :, 0].tolist() == [1, 1, 1, 2]


def test_make_cache():
    assert isinstance(make_cache("dynamic"), DynamicCache)
    static = make_cache("static", initial=16)
    assert isinstance(static, BufferCache) and static.initial == 16
    with pytest.raises(ValueError, match="unknown KV cache kind"):
        make_cache("paged")

"""tiled_1d: same result as one decode for per-frame decoders, correct lengths, linear crossfade."""
from __future__ import annotations

import pytest
import torch

from mizuoto.runtime.fallbacks import tiled_1d

UP = 4


def pointwise(z: torch.Tensor) -> torch.Tensor:
    """Per-frame, per-channel map upsampled by repetition: no frame sees its neighbours."""
    return torch.tanh(1.7 * z + 0.3).repeat_interleave(UP, dim=-1)


def per_frame_linear(z: torch.Tensor) -> torch.Tensor:
    """A per-frame linear map to 2 output channels (a matmul: summation order may vary by size)."""
    weight = torch.linspace(-1, 1, 2 * z.shape[1]).reshape(2, z.shape[1])
    return torch.einsum("oc,bct->bot", weight, z).repeat_interleave(UP, dim=-1)


@pytest.mark.parametrize("frames", [1, 256, 257, 300, 481, 1000, 1024])
def test_pointwise_decode_is_exact(frames):
    latents = torch.randn(2, 3, frames, generator=torch.Generator().manual_seed(frames))
    out = tiled_1d(pointwise, latents)
    assert out.shape == (2, 3, frames * UP)
    # Overlaps agree exactly, and lerp between equal values returns them unchanged.
    assert torch.equal(out, pointwise(latents))


@pytest.mark.parametrize(("tile", "overlap"), [(16, 4), (10, 0), (7, 6)])
def test_per_frame_linear_decode_matches(tile, overlap):
    latents = torch.randn(1, 5, 103, generator=torch.Generator().manual_seed(0))
    out = tiled_1d(per_frame_linear, latents, tile=tile, overlap=overlap)
    assert out.shape == (1, 2, 103 * UP)
    assert torch.allclose(out, per_frame_linear(latents), atol=1e-6)


def test_short_input_is_one_decode():
    calls = []
    latents = torch.randn(1, 2, 50)
    tiled_1d(lambda z: calls.append(z.shape[-1]) or z, latents, tile=64, overlap=8)
    assert calls == [50]


def test_overlap_crossfades_linearly():
    # Each tile decodes to a constant: its index. The output steps from one to the next along a
    # linear ramp in the overlap, and the weights of neighbouring tiles sum to 1.
    count = iter(range(100))

    def tile_index(z: torch.Tensor) -> torch.Tensor:
        return torch.full((1, 1, z.shape[-1] * 2), float(next(count)))

    out = tiled_1d(tile_index, torch.zeros(1, 1, 30), tile=10, overlap=4)[0, 0]
    assert out.shape == (60,)
    stride, head = 6 * 2, 4 * 2
    ramp = torch.arange(1, head + 1) / (head + 1)
    for i in range(1, 4):                      # tiles start at frames 6, 12, 18, 24
        start = i * stride
        assert torch.allclose(out[start:start + head], (i - 1) + ramp)
        assert torch.all(out[start + head:min(start + stride, 60)] == i)


def test_bad_arguments():
    latents = torch.zeros(1, 1, 600)
    for tile, overlap in [(32, 32), (32, 40), (0, 0), (32, -1)]:
        with pytest.raises(ValueError, match="0 <= overlap < tile"):
            tiled_1d(pointwise, latents, tile=tile, overlap=overlap)
    with pytest.raises(ValueError, match="whole multiple"):
        tiled_1d(lambda z: z[..., :-1], latents)
    with pytest.raises(ValueError, match="whole multiple"):
        tiled_1d(lambda z: z.repeat_interleave(2 if z.shape[-1] == 256 else 3, dim=-1), latents)


def test_half_precision_long_overlap():
    latents = torch.randn(1, 2, 700).half()
    out = tiled_1d(lambda z: z.repeat_interleave(600, dim=-1), latents)
    assert out.dtype == torch.float16 and torch.equal(out, latents.repeat_interleave(600, dim=-1))

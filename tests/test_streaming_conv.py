"""blocks.streaming_conv: causal convolutions streamed chunk by chunk give the whole-signal result."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.blocks.streaming_conv import StreamingConv1d, StreamingConvCache, StreamingConvTranspose1d


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float32 rounding (a CPU kernel sums in an order that depends on the length)."""
    return a.shape == b.shape and (a - b).abs().max().item() <= 1e-6 * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("kernel,stride,dilation,groups", [(7, 1, 1, 1), (7, 1, 1, 4), (3, 1, 3, 1), (4, 2, 1, 1),
                                                           (5, 1, 2, 2)])
def test_conv_streams_like_the_whole_signal(kernel: int, stride: int, dilation: int, groups: int) -> None:
    torch.manual_seed(0)
    conv = StreamingConv1d(4, 8, kernel, stride, dilation, groups)
    x = torch.randn(2, 4, 24)
    with torch.no_grad():
        whole = conv(x)
        cache = StreamingConvCache()
        parts = torch.cat([conv(x[..., a:b], cache) for a, b in ((0, 2), (2, 10), (10, 12), (12, 24))], -1)
        assert torch.equal(conv(x, StreamingConvCache()), whole)    # one chunk: the zero history is the padding
    assert whole.shape == (2, 8, 24 // stride) and close(parts, whole)


@pytest.mark.parametrize("kernel,stride", [(4, 2), (6, 3), (10, 5)])
def test_transposed_conv_streams_like_the_whole_signal(kernel: int, stride: int) -> None:
    torch.manual_seed(1)
    up = StreamingConvTranspose1d(4, 3, kernel, stride)
    x = torch.randn(1, 4, 9)
    with torch.no_grad():
        whole = up(x)
        cache = StreamingConvCache()
        parts = torch.cat([up(x[..., a:b], cache) for a, b in ((0, 1), (1, 5), (5, 6), (6, 9))], -1)
    assert whole.shape == (1, 3, 9 * stride) and close(parts, whole)


def test_reflect_padding_and_bad_settings() -> None:
    torch.manual_seed(2)
    conv = StreamingConv1d(2, 2, 3, pad_mode="reflect")
    x = torch.randn(1, 2, 8)
    expected = conv.conv.conv(torch.nn.functional.pad(x, (2, 0), "reflect"))
    assert torch.equal(conv(x), expected)
    with pytest.raises(ValueError, match="pad_mode 'circular'"):
        StreamingConv1d(2, 2, 3, pad_mode="circular")
    with pytest.raises(ValueError, match="trim_right_ratio"):
        StreamingConvTranspose1d(2, 2, 4, 2, trim_right_ratio=1.5)
    half = StreamingConvTranspose1d(2, 2, 10, 5, trim_right_ratio=0.5)
    assert half(torch.randn(1, 2, 3)).shape == (1, 2, 15)              # whole signal: both trims
    with pytest.raises(ValueError, match="needs trim_right_ratio 1"):
        half(torch.randn(1, 2, 3), StreamingConvCache())


def test_a_cache_holds_one_state_per_module() -> None:
    a, b = StreamingConv1d(2, 2, 3), StreamingConv1d(2, 2, 3)
    cache = StreamingConvCache()
    with torch.no_grad():
        a(torch.randn(1, 2, 4), cache)
        b(torch.randn(1, 2, 4), cache)
        a(torch.randn(1, 2, 4), cache)
    assert len(cache) == 2 and cache.get(a).shape == (1, 2, 2) and cache.get(StreamingConv1d(2, 2, 3)) is None

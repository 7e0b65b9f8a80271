"""Causal 1-D convolutions that run on a stream of chunks, with their caches (the EnCodec / audiocraft
`SConv1d` / `SConvTranspose1d` layout: parameters under `conv.conv.*` and `convtr.convtr.*`).

    cache = StreamingConvCache()            # one per stream (one utterance); holds no module
    y1 = conv(x[..., :4], cache)            # each call sees the last `context` input samples of the previous
    y2 = conv(x[..., 4:], cache)            # torch.cat([y1, y2], -1) is conv(x) computed whole
    y = conv(x)                             # no cache: the whole signal, causal left padding

A causal conv keeps its last `(kernel - 1) * dilation - (stride - 1)` input samples (zeros before the first
chunk); a transposed conv keeps its last `kernel - 1` inputs, recomputes the overlap and returns only the
`chunk * stride` new samples. The cache is keyed by the module itself, so one cache serves a whole network
and two streams never share state.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class StreamingConvCache:
    """The per-module input history of one stream. `zero_history`: a transposed conv's first chunk is computed
    after `kernel - 1` zero inputs (transformers' VibeVoice padding cache) rather than alone (the original
    repositories'); the two are equal but for float rounding (another kernel shape sums in another order)."""

    def __init__(self, zero_history: bool = False) -> None:
        self._states: dict[int, tuple[nn.Module, Tensor]] = {}
        self.zero_history = zero_history

    def get(self, module: nn.Module) -> Tensor | None:
        entry = self._states.get(id(module))
        return entry[1] if entry is not None and entry[0] is module else None

    def set(self, module: nn.Module, state: Tensor) -> None:
        # the module is held next to its state, so a freed module's id cannot alias a live entry
        self._states[id(module)] = (module, state.detach())

    def __len__(self) -> int:
        return len(self._states)


def extra_padding(length: int, kernel_size: int, stride: int, padding_total: int) -> int:
    """Right padding that makes the last window of a strided conv complete (audiocraft's rule)."""
    frames = (length - kernel_size + padding_total) / stride + 1
    ideal = (math.ceil(frames) - 1) * stride + (kernel_size - padding_total)
    return ideal - length


class _Conv(nn.Module):
    """The `conv` level of upstream's NormConv1d (norm 'none')."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class _ConvTr(nn.Module):
    """The `convtr` level of upstream's NormConvTranspose1d (norm 'none')."""

    def __init__(self, convtr: nn.ConvTranspose1d) -> None:
        super().__init__()
        self.convtr = convtr

    def forward(self, x: Tensor) -> Tensor:
        return self.convtr(x)


PAD_MODES = ("constant", "reflect", "replicate")


class StreamingConv1d(nn.Module):
    """A causal Conv1d (`SConv1d(causal=True)`): whole-signal or chunk-by-chunk with a StreamingConvCache."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 groups: int = 1, bias: bool = True, pad_mode: str = "constant") -> None:
        super().__init__()
        if pad_mode not in PAD_MODES:
            raise ValueError(f"pad_mode {pad_mode!r}: expected one of {', '.join(PAD_MODES)}")
        self.conv = _Conv(nn.Conv1d(in_channels, out_channels, kernel_size, stride, dilation=dilation,
                                    groups=groups, bias=bias))
        self.kernel_size, self.stride, self.dilation, self.pad_mode = kernel_size, stride, dilation, pad_mode
        self.padding_total = (kernel_size - 1) * dilation - (stride - 1)
        self.context = self.padding_total

    def forward(self, x: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        if cache is None:
            extra = extra_padding(x.shape[-1], self.kernel_size, self.stride, self.padding_total)
            if self.pad_mode == "constant":
                x = F.pad(x, (self.padding_total, extra))
            else:
                x = F.pad(x, (self.padding_total, extra), self.pad_mode)
            return self.conv(x)
        state = cache.get(self)
        if state is None:
            state = x.new_zeros(x.shape[0], x.shape[1], self.context)
        full = torch.cat([state, x], dim=2) if state.shape[2] else x
        y = self.conv(full)
        if self.context > 0:
            cache.set(self, full[:, :, -self.context:] if full.shape[2] >= self.context else full)
        return y


class StreamingConvTranspose1d(nn.Module):
    """A causal ConvTranspose1d (`SConvTranspose1d(causal=True)`), trimming `padding_total = kernel - stride`
    output samples (`trim_right_ratio` of them on the right)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, bias: bool = True,
                 trim_right_ratio: float = 1.0) -> None:
        super().__init__()
        if not 0.0 <= trim_right_ratio <= 1.0:
            raise ValueError(f"trim_right_ratio {trim_right_ratio}: expected a value in [0, 1]")
        self.convtr = _ConvTr(nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride, bias=bias))
        self.stride = stride
        self.padding_total = kernel_size - stride
        self.context = kernel_size - 1
        self.pad_right = math.ceil(self.padding_total * trim_right_ratio)
        self.pad_left = self.padding_total - self.pad_right

    def _trim(self, y: Tensor) -> Tensor:
        return y[..., self.pad_left: y.shape[-1] - self.pad_right] if self.padding_total > 0 else y

    def forward(self, x: Tensor, cache: StreamingConvCache | None = None) -> Tensor:
        if cache is None:
            return self._trim(self.convtr(x))
        if self.pad_left:
            # upstream's streaming keeps the first chunk's left-trimmed output whole and the later chunks'
            # last samples, which only line up when nothing is trimmed on the left
            raise ValueError(f"streaming a transposed conv needs trim_right_ratio 1 (this one trims {self.pad_left} "
                             "samples on the left)")
        state = cache.get(self)
        if state is None and cache.zero_history:
            state = x.new_zeros(x.shape[0], x.shape[1], self.context)
        full = x if state is None else torch.cat([state, x], dim=2)
        y = self._trim(self.convtr(full))
        if state is not None and state.shape[2] > 0:
            new = x.shape[2] * self.stride
            if y.shape[2] >= new:
                y = y[:, :, -new:]
        cache.set(self, full[:, :, -self.context:] if full.shape[2] > self.context else full)
        return y

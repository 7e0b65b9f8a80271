"""WSOLA time-stretch (issue 32): exact lengths, pitch kept, one alignment for every channel,
deterministic, identity at factor 1, bad factors refused."""
from __future__ import annotations

import math

import pytest
import torch

from mizuoto.nodes.script.stretch import stretch_to_length, time_stretch

SR = 16_000


def sine(f0: float, seconds: float = 1.0, sr: int = SR) -> torch.Tensor:
    return torch.sin(2 * math.pi * f0 * torch.arange(round(seconds * sr), dtype=torch.float64) / sr).float()


def band_share(y: torch.Tensor, f0: float, sr: int = SR) -> tuple[float, float]:
    """(frequency of the spectrum's peak, share of energy within 5 % + 5 Hz of f0), edges left out."""
    y = y[400:-400]
    power = torch.fft.rfft(y * torch.hann_window(len(y))).abs().square()
    freqs = torch.arange(len(power)) * sr / len(y)
    band = (freqs - f0).abs() < 0.05 * f0 + 5
    return float(freqs[power.argmax()]), float(power[band].sum() / power.sum())


@pytest.mark.parametrize("factor", [0.5, 0.7, 1.3, 1.5, 2.0])
@pytest.mark.parametrize("f0", [110.0, 440.0, 2000.0])
def test_a_sine_keeps_its_frequency_and_the_length_is_exact(f0, factor):
    x = sine(f0)
    y = time_stretch(x, factor, SR)
    assert y.shape == (round(len(x) / factor),) and y.dtype == x.dtype
    peak, share = band_share(y, f0)
    # FFT bins are sr / len (~0.5 to 2 Hz here): the peak within two bins, the energy near f0 (a bad
    # splice spreads it: naive resampling moves the peak by the factor itself)
    assert abs(peak - f0) <= 2 * SR / (len(y) - 800)
    assert share > 0.999
    assert float(y[len(y) // 4: 3 * len(y) // 4].abs().max()) == pytest.approx(1.0, abs=0.02)


def test_channels_share_one_alignment_and_the_result_is_deterministic():
    x = torch.stack([sine(220.0), 0.5 * sine(220.0), sine(330.0)])
    y = time_stretch(x, 1.37, SR)
    assert y.shape == (3, round(x.shape[1] / 1.37))
    torch.testing.assert_close(y[1], 0.5 * y[0], rtol=0, atol=1e-6)   # same cuts: the scaled channel stays scaled
    assert torch.equal(y, time_stretch(x, 1.37, SR))
    assert torch.equal(time_stretch(x[2], 1.37, SR), time_stretch(x[2:], 1.37, SR)[0])   # [T] is [1, T]


def test_identity_at_factor_one_is_an_unchanged_copy():
    x = torch.randn(2, 12_345)
    y = time_stretch(x, 1.0, SR)
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
    assert torch.equal(stretch_to_length(x[0], 12_345, SR), x[0])


def test_lengths_dtypes_and_edge_sizes():
    for n, length in [(0, 0), (1, 1), (3, 2), (100, 50), (100, 200), (16_000, 10_667), (10_667, 16_000)]:
        x = torch.randn(n)
        assert stretch_to_length(x, length, SR).shape == (length,)
    x = torch.randn(2, 8000, dtype=torch.float64)
    assert time_stretch(x, 1.5, SR).dtype == torch.float64
    assert time_stretch(x.half(), 1.5, SR).dtype == torch.float16
    assert torch.isfinite(time_stretch(torch.zeros(8000), 1.5, SR)).all()
    assert time_stretch(torch.zeros(8000), 1.5, SR).abs().max() == 0


@pytest.mark.parametrize("factor", [0.49, 2.01, 0.0, -1.0, float("nan"), float("inf"), True, "1.5", None])
def test_bad_factors_are_errors(factor):
    with pytest.raises(ValueError, match="factor: expected a number from 0.5 to 2.0"):
        time_stretch(torch.zeros(100), factor, SR)


def test_bad_audio_lengths_and_rates_are_errors():
    for audio in (torch.zeros(2, 2, 10), torch.zeros(10, dtype=torch.int16), [0.0] * 10):
        with pytest.raises(ValueError, match="audio: expected a float tensor"):
            time_stretch(audio, 1.2, SR)
    for length in (-1, 0, 49, 201, 1.5):
        with pytest.raises(ValueError, match="length: expected samples giving a factor"):
            stretch_to_length(torch.zeros(100), length, SR)
    for sr in (0, 999, 16_000.0, True):
        with pytest.raises(ValueError, match="sample_rate"):
            time_stretch(torch.zeros(100), 1.2, sr)

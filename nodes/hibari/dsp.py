"""hibari's signal processing (hibari/dsp.py) in torch: network outputs -> 24 kHz waveform.

    S = exp(lh) e^{i pi tanh(theta)} STFT(pulses(f0)) + exp(ln) Z + exp(lr) e^{i phi}

then one inverse STFT (n_fft 1200, hop 300, periodic Hann, center=True, length F * 300). exp() is
capped at e^7 as upstream. Z is complex Gaussian noise (unit variance per component) drawn from a
torch.Generator, so the same seed gives the same samples on any device.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

N_FFT, HOP, SR = 1200, 300, 24000
BINS = N_FFT // 2 + 1


def _window(device: torch.device) -> torch.Tensor:
    n = torch.arange(N_FFT, dtype=torch.float64, device=device)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * n / N_FFT)).float()      # periodic Hann, rounded like upstream


def _ex(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(torch.clamp(x, max=7.0))


def _rotor(mag: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """mag * e^{i angle} (faster than torch.polar on CPU)."""
    return torch.complex(mag * torch.cos(angle), mag * torch.sin(angle))


def pulses(f0: torch.Tensor, vthresh: float = 40.0, fmax: float = 11000.0) -> torch.Tensor:
    """Band-limited pulse train from per-frame F0 [F] (Hz): every harmonic below fmax at unit amplitude,
    sum_{h<=H} cos(h t) = sin((H+1/2) t) / (2 sin(t/2)) - 1/2; zero where f0 < vthresh. -> [F * HOP]."""
    f0 = f0.float()
    # linear interpolation between frame centres (align_corners=False): first half of a frame leans on
    # the previous frame, second half on the next; edges repeat
    u = (((torch.arange(HOP, dtype=torch.float64, device=f0.device) + 0.5) / HOP - 0.5) % 1.0).float()
    v = 1.0 - u
    fp = F.pad(f0[None, None], (1, 1), mode="replicate")[0, 0]
    h2 = HOP // 2
    first = fp[:-2, None] * v[:h2] + fp[1:-1, None] * u[:h2]
    second = fp[1:-1, None] * v[h2:] + fp[2:, None] * u[h2:]
    f = torch.cat([first, second], dim=1).reshape(-1)
    voiced = f > vthresh
    f = torch.clamp(f, min=vthresh)
    t = torch.cumsum(f.double(), 0) * (1.0 / SR)                          # phase in cycles, float64 like upstream
    t = ((t - torch.trunc(t)) * (2 * math.pi)).float()                     # wrapped to [0, 2 pi)
    H = torch.floor(fmax / f) + 0.5
    s = torch.sin(t * 0.5) * 2
    bad = s.abs() <= 2e-3                                                  # t ~ 0: the limit of the ratio is H + 1/2
    e = torch.sin(H * t) / torch.where(bad, torch.ones_like(s), s)
    e = torch.where(bad, H, e) - 0.5
    return torch.where(voiced, e, torch.zeros_like(e))


def stft(x: torch.Tensor, frames: int) -> torch.Tensor:
    """Centered (reflect-padded) STFT of the pulse train, Hann / (n_fft / 4) so that exp(lh) is the
    harmonic's magnitude; first `frames` frames -> [BINS, frames] complex64."""
    xp = F.pad(x[None, None], (N_FFT // 2, N_FFT // 2), mode="reflect")[0, 0]
    fr = xp.unfold(0, N_FFT, HOP)[:frames] * (_window(x.device) / (N_FFT / 4))
    return torch.fft.rfft(fr, dim=1).T


def istft(spec: torch.Tensor) -> torch.Tensor:
    """Inverse STFT matching torch.istft(center=True, length=F * HOP): irfft per frame, window,
    overlap-add, divide by the summed squared window. [BINS, F] complex -> [F * HOP]."""
    frames, k = spec.shape[1], N_FFT // HOP
    win = _window(spec.device)
    blocks = (torch.fft.irfft(spec.T, n=N_FFT, dim=1) * win).view(frames, k, HOP)
    # n_fft is k hops: overlap-add is k shifted block adds (much faster than F.fold on CPU)
    y = spec.real.new_zeros(frames + k - 1, HOP)
    norm = torch.zeros_like(y)
    w2 = (win * win).view(k, HOP)
    for i in range(k):
        y[i:i + frames] += blocks[:, i]
        norm[i:i + frames] += w2[i]
    y = (y / torch.clamp(norm, min=1e-11)).reshape(-1)
    return y[N_FFT // 2: N_FFT // 2 + frames * HOP]


def noise(frames: int, generator: torch.Generator) -> torch.Tensor:
    """Complex Gaussian noise [BINS, frames] (unit variance per component), drawn on the generator's device."""
    z = torch.randn((BINS, frames, 2), generator=generator, device=generator.device, dtype=torch.float32)
    return torch.view_as_complex(z)


def synth(parts: dict[str, torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    """Network outputs (lh, theta, ln, lr, phi [601, F] or [1, 601, F]; f0 [F] or [1, F]) + noise z
    [601, F] complex -> float32 waveform [F * HOP]."""
    lh, th, ln, lr, phi = (parts[k].float().reshape(BINS, -1) for k in ("lh", "theta", "ln", "lr", "phi"))
    f0 = parts["f0"].float().reshape(-1)
    spec = stft(pulses(f0), lh.shape[1])
    spec = spec * _rotor(_ex(lh), torch.tanh(th) * math.pi)
    spec = spec + z.to(spec.device) * _ex(ln)
    spec = spec + _rotor(_ex(lr), phi)
    return istft(spec)

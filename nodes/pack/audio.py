"""Reference audio as every engine wants it: checked once, mono float32, at the rate the engine's
upstream resamples to, with upstream's own resampler.

    ref = reference_from_audio({"waveform": wav, "sample_rate": 44100})          # Reference(mono [T], 44100)
    wav16k = resample(ref.wav, 44100, 16000, method="soxr_hq")                   # librosa's default

Resamplers (exact reimplementations, so a reference gives the same codes as upstream):
- "soxr_hq": libsoxr's HQ preset through the small `soxr` package, then librosa's length fix
  (ceil(n * target / orig), zero-padded or cut) — what `librosa.resample` does by default.
- "torchaudio_sinc": torchaudio's windowed-sinc (`transforms.Resample` defaults: Hann window, 6 zero
  crossings, roll-off 0.99, the kernel computed in float64 and applied in float32).
- "torchaudio_functional": the same filter as `torchaudio.functional.resample` builds it: the kernel
  computed in the waveform's dtype (float32), which rounds differently (~1e-5 on noise). Rates that share
  no large common factor need a kernel of (target x orig) taps (44 101 -> 24 000 Hz: 8.5 GB, which
  torchaudio itself would allocate); past MAX_SINC_KERNEL_BYTES such rates are resampled with soxr HQ
  instead (bounded memory, not torchaudio's exact numbers; common rates are never affected).
Rates outside [MIN_RATE, MAX_RATE] are refused before anything is allocated.

Level (`check_level`): a reference whose peak is below SILENT_PEAK (-80 dBFS) holds no voice and is
refused (upstreams divide by its RMS or peak and produce NaN). One louder than full scale is scaled to
a peak of 1.0: every upstream reads references with soundfile / librosa / torchaudio, which give
[-1, 1] for integer files; a float signal far past that is mis-scaled (e.g. PCM values as floats) and
overflows float32 features (1e30: NaN mel, IndexErrors in token lookups). GPT-SoVITS itself divides a
reference peaking above 1 by min(2, peak) and CosyVoice's web UI rescales loud prompts; references
within full scale are never touched, so upstream parity holds for every ordinary input.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

MIN_RATE, MAX_RATE = 4000, 384000
SILENT_PEAK = 1e-4                 # -80 dBFS: digital silence or a dither floor, no voice to clone
MAX_SINC_KERNEL_BYTES = 64 << 20   # larger exact sinc kernels (odd, coprime rates) fall back to soxr HQ
RESAMPLERS = ("soxr_hq", "torchaudio_sinc", "torchaudio_functional")


def check_rate(rate: object, what: str = "sample_rate") -> int:
    """An integer sample rate within [MIN_RATE, MAX_RATE] Hz, or a ValueError naming `what`."""
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(float(rate)) \
            or float(rate) != int(rate):
        raise ValueError(f"{what}: expected a whole number of Hz, got {rate!r}")
    rate = int(rate)
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"{what}: {rate} Hz is outside the supported range {MIN_RATE}-{MAX_RATE} Hz")
    return rate


def to_float(wav: Tensor, what: str = "reference_audio") -> Tensor:
    """Samples as float32 in [-1, 1] scale: integer PCM is scaled as soundfile/librosa read it."""
    if wav.dtype == torch.uint8:
        return (wav.float() - 128.0) / 128.0
    if wav.dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        bits = {torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64}[wav.dtype]
        return (wav.double() / float(2 ** (bits - 1))).float()
    if wav.dtype == torch.bool or wav.is_complex() or not wav.is_floating_point():
        raise ValueError(f"{what}: expected real audio samples (float or integer PCM), got {wav.dtype}")
    return wav.float()


def to_channels(wav: Tensor, what: str = "reference_audio") -> Tensor:
    """[T], [C, T] or [B, C, T] (ComfyUI AUDIO) -> float32 [C, T]: the first batch item's channels."""
    wav = torch.as_tensor(wav)
    if wav.dim() == 3:
        if wav.shape[0] == 0:
            raise ValueError(f"{what}: the batch is empty (shape {tuple(wav.shape)}); expected [B>=1, C, T]")
        wav = wav[0]
    if wav.dim() == 1:
        wav = wav[None]
    if wav.dim() != 2:
        raise ValueError(f"{what}: expected a waveform [T], [C, T] or [B, C, T], got shape {tuple(wav.shape)}")
    if wav.shape[0] == 0:
        raise ValueError(f"{what}: no channels (shape {tuple(wav.shape)}); expected [C>=1, T]")
    return to_float(wav, what)


def to_mono(wav: Tensor, what: str = "reference_audio") -> Tensor:
    """[T], [C, T] or [B, C, T] (ComfyUI AUDIO) -> float32 [T]: the first batch item, channels averaged."""
    channels = to_channels(wav, what)
    return channels[0] if channels.shape[0] == 1 else channels.mean(dim=0)


def check_samples(wav: Tensor, rate: int, seconds: tuple[float, float] = (0.0, math.inf),
                  what: str = "reference_audio") -> Tensor:
    """Finite samples, and a length within `seconds`; returns `wav`."""
    if wav.numel() == 0:
        raise ValueError(f"{what}: no samples; expected audio")
    if not bool(torch.isfinite(wav).all()):
        raise ValueError(f"{what}: contains NaN or infinite samples; expected finite audio")
    lo, hi = seconds
    length = wav.numel() / rate
    if not lo <= length <= hi:
        raise ValueError(f"{what}: {length:.2f} s long; expected {lo:g} to {hi:g} s for this model")
    return wav


def check_level(wav: Tensor, what: str = "reference_audio") -> Tensor:
    """Finite `wav` with a voice's level: refused when silent, scaled to peak 1.0 past full scale."""
    peak = float(wav.abs().max()) if wav.numel() else 0.0
    if peak < SILENT_PEAK:
        level = f"{20 * math.log10(peak):.1f} dBFS" if peak > 0 else "all zeros"
        raise ValueError(f"{what}: silent (peak {level}); expected speech to clone, peaking above "
                         f"{20 * math.log10(SILENT_PEAK):.0f} dBFS")
    if peak > 1.0:
        wav = (wav.double() / peak).float()    # in float64: a peak near float32's limit scales exactly
    return wav


def check_audio(audio: object, seconds: tuple[float, float], what: str) -> object:
    """A ComfyUI AUDIO dict holding finite, audible samples within `seconds`; returns `audio` as given."""
    if not isinstance(audio, dict) or "waveform" not in audio or "sample_rate" not in audio:
        raise ValueError(f"{what}: expected ComfyUI AUDIO {{'waveform': [B, C, T], 'sample_rate': int}}, got "
                         f"{type(audio).__name__}")
    if not isinstance(audio["waveform"], torch.Tensor):
        raise ValueError(f"{what}: expected a waveform tensor, got {type(audio['waveform']).__name__}")
    rate = check_rate(audio["sample_rate"], f"{what} sample_rate")
    check_level(check_samples(to_mono(audio["waveform"].detach().cpu(), what), rate, seconds, what), what)
    return audio


def resample(wav: Tensor, orig: int, target: int, method: str = "soxr_hq") -> Tensor:
    """Mono float32 [T] from `orig` Hz to `target` Hz with `method` (see the module docstring)."""
    orig, target = check_rate(orig, "sample rate"), check_rate(target, "target sample rate")
    if method not in RESAMPLERS:
        raise ValueError(f"resampler {method!r}: expected one of {RESAMPLERS}")
    if orig == target:
        return wav
    if method == "soxr_hq":
        return _soxr_hq(wav, orig, target)
    return _torchaudio_sinc(wav, orig, target, torch.float32 if method == "torchaudio_functional" else None)


def _soxr_hq(wav: Tensor, orig: int, target: int) -> Tensor:
    import soxr  # a small compiled wheel; imported when a reference needs resampling

    x = wav.detach().cpu().numpy()
    y = soxr.resample(x, orig, target, quality="soxr_hq")
    n = int(np.ceil(x.shape[-1] * (float(target) / orig)))     # librosa.resample(fix=True), its rounding too
    y = y[:n] if y.shape[-1] >= n else np.pad(y, (0, n - y.shape[-1]))
    return torch.from_numpy(np.asarray(y, dtype=x.dtype).copy())


def sinc_kernel(orig: int, target: int, zeros: int = 6, rolloff: float = 0.99,
                dtype: torch.dtype | None = None) -> tuple[Tensor, int]:
    """torchaudio's Hann-windowed sinc kernel [target, 1, taps] (float32) for reduced rates orig -> target,
    and the padding width. `dtype` None: computed in float64 (transforms.Resample); float32: computed in
    float32 (functional.resample passes the waveform's dtype)."""
    base = min(orig, target) * rolloff
    width = math.ceil(zeros * orig / base)
    idx = torch.arange(-width, width + orig, dtype=dtype or torch.float64)[None, None] / orig
    t = torch.arange(0, -target, -1, dtype=dtype)[:, None, None] / target + idx
    t *= base
    t = t.clamp_(-zeros, zeros)
    window = torch.cos(t * math.pi / zeros / 2) ** 2
    t *= math.pi
    kernel = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernel *= window * (base / orig)
    return kernel.to(torch.float32), width


def _torchaudio_sinc(wav: Tensor, orig: int, target: int, dtype: torch.dtype | None = None) -> Tensor:
    g = math.gcd(orig, target)
    orig, target = orig // g, target // g
    width = math.ceil(6 * orig / (min(orig, target) * 0.99))
    if target * (2 * width + orig) * 8 > MAX_SINC_KERNEL_BYTES:
        return _soxr_hq(wav, orig * g, target * g)
    kernel, width = sinc_kernel(orig, target, dtype=dtype)
    x = F.pad(wav.float()[None, None], (width, width + orig))
    y = F.conv1d(x, kernel, stride=orig)[0].T.reshape(-1)                # [frames, phases] -> samples
    # torchaudio's length: ceil of the ratio as a float32 tensor (not float64: differs for long inputs)
    return y[:int(torch.ceil(torch.as_tensor(target * wav.shape[-1] / orig, dtype=torch.float32)))]

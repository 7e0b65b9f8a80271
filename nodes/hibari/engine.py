"""HibariVoice: the embedded default voice ("heart", American English, 24 kHz) end to end.

    voice = HibariVoice.load()
    wav, sr = voice.synthesize("Hello there.", seed=0, speed=1.0)      # float32 [T], 24000

Text is split into sentence chunks (g2p.HibariG2P.chunks); each chunk runs `acoustic` (the torch
model) then `vocode` (the DSP with its own generator, seeded seed + chunk index), and the chunks are
concatenated as hibari does. `acoustic` and `vocode` stay separate so each can run in its own
runtime phase.
"""
from __future__ import annotations

import numbers

import torch

from . import dsp
from .g2p import HibariG2P
from .loader import load_model
from .model import HibariModel

SAMPLE_RATE = dsp.SR
SPEED_RANGE = (0.25, 4.0)
_MAX_SEED = 2**63 - 1


class HibariVoice:
    sample_rate = SAMPLE_RATE

    def __init__(self, model: HibariModel, g2p: HibariG2P):
        self.model = model
        self.g2p = g2p

    @classmethod
    def load(cls, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> "HibariVoice":
        return cls(load_model(dtype=dtype, device=device), HibariG2P())

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- text ------------------------------------------------------------------------------------
    def chunks(self, text: str) -> list[str]:
        """Speakable phoneme chunks of `text` (validated); punctuation-only chunks are left out."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text: empty or only whitespace; expected something to read")
        chunks = [c for c in self.g2p.chunks(text) if self.g2p.speakable(c)]
        if not chunks:
            raise ValueError(f"text: nothing speakable in {_preview(text)}; expected English words or numbers")
        return chunks

    def ids(self, phonemes: str) -> torch.Tensor:
        return torch.tensor([self.g2p.ids(phonemes)], dtype=torch.long, device=self.device)

    # -- audio -----------------------------------------------------------------------------------
    @torch.inference_mode()
    def acoustic(self, ids: torch.Tensor, speed: float = 1.0) -> dict[str, torch.Tensor]:
        """Phoneme ids [1, L] -> spectral parts [1, 601, F] and f0 [1, F], float32."""
        return {k: v.float() for k, v in self.model(ids, speed).items()}

    @torch.inference_mode()
    def vocode(self, parts: dict[str, torch.Tensor], generator: torch.Generator) -> torch.Tensor:
        """Spectral parts + f0 -> waveform [F * 300] on the parts' device; noise from `generator`."""
        return dsp.synth(parts, dsp.noise(parts["lh"].shape[-1], generator))

    def synthesize(self, text: str, *, seed: int = 0, speed: float = 1.0) -> tuple[torch.Tensor, int]:
        """Text -> (mono float32 waveform [T] on the CPU, 24000). Chunk i draws its noise from seed + i."""
        speed = _check_speed(speed)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
            raise ValueError(f"seed: expected an int in [0, 2**63 - 1], got {seed!r}")
        parts = []
        for i, phonemes in enumerate(self.chunks(text)):
            gen = torch.Generator().manual_seed((seed + i) % (_MAX_SEED + 1))
            parts.append(self.vocode(self.acoustic(self.ids(phonemes), speed), gen).cpu())
        return torch.cat(parts), SAMPLE_RATE


def _check_speed(speed: float) -> float:
    lo, hi = SPEED_RANGE
    if isinstance(speed, bool) or not isinstance(speed, numbers.Real) or not lo <= speed <= hi:
        raise ValueError(f"speed: expected a number in [{lo}, {hi}] (1.0 = normal pace), got {speed!r}")
    return float(speed)


def _preview(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")

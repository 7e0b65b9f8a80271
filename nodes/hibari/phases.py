"""The embedded voice on the runtime: one component (the acoustic model) and two phases per chunk.

    engine = HibariEngine(HibariVoice.load(), manager, device="cuda")
    with manager.request(seed=0) as ctx:
        wav = engine.speak(ctx, "Hello there.", seed=0, speed=1.0)

Per sentence chunk: "acoustic" places the model (whole or partially, streaming the rest) with room
for working memory estimated from the chunk's phoneme count, then "vocode" runs the DSP, whose
noise comes from a generator seeded seed + chunk index (restored on an OOM retry).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ...runtime import ModelHandle, ModelManager, RequestContext
from .engine import SAMPLE_RATE, HibariVoice, _check_speed, _MAX_SEED
from .model import SPEC_BINS, SPEC_PARTS

FRAMES_PER_PHONEME = 8  # 12.5 ms frames; measured 4.8-5.4 in sentences (11 in a single word), room for slow speech
FLOAT = 4


class HibariEngine:
    PHASED = True
    engine_id = "hibari"
    name = "hibari heart"
    sample_rate = SAMPLE_RATE
    voices = ("heart",)
    languages = ("auto", "en")

    def __init__(self, voice: HibariVoice, manager: ModelManager, device: torch.device | str = "cpu") -> None:
        self.voice = voice
        self.manager = manager
        model = voice.model
        self.handle = ModelHandle(model, name="acoustic", kind="oneshot")
        self.handle.mark(model.prosody.text.attn, "hot").mark(model.decoder.text.attn, "hot")
        manager.register(self.handle, engine=self.engine_id, device=device)

    @property
    def device(self) -> torch.device:
        return self.handle.device

    @staticmethod
    def acoustic_memory(phonemes: int, speed: float) -> int:
        """Working memory of one chunk, from the request: per frame the head's spectra and one ConvNeXt
        hidden activation (measured peak: 14.7-14.9 KB per frame), plus attention over the phonemes."""
        frames = int(phonemes * FRAMES_PER_PHONEME / speed) + 32
        per_frame = (len(SPEC_PARTS) * SPEC_BINS + 3 * 256) * FLOAT
        attention = 2 * 2 * phonemes * phonemes * FLOAT
        return frames * per_frame + attention + (1 << 20)

    @staticmethod
    def vocode_memory(frames: int) -> int:
        """The DSP holds a few complex spectra [601, F] and the waveform at 300 samples per frame."""
        return frames * (SPEC_BINS * 8 * 8 + 300 * 4 * 8) + (1 << 20)

    def speak(self, ctx: RequestContext, text: str, *, seed: int = 0, speed: float = 1.0,
              language: str = "auto", voice: str | None = None, reference=None, reference_text: str | None = None,
              instruction: str | None = None, progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
        """Text -> mono float32 waveform [T] on the CPU; long text goes sentence chunk by chunk."""
        if language not in self.languages:
            raise ValueError(f"language: the embedded voice speaks English; expected one of {self.languages}, "
                             f"got {language!r}")
        if voice not in (None, *self.voices):
            raise ValueError(f"voice: the embedded voice has the voice {self.voices}, got {voice!r}")
        if instruction:
            raise ValueError("instruction: the embedded voice takes no instruction; leave it empty")
        if reference is not None or reference_text:
            raise ValueError("reference_audio: the embedded voice cannot clone a voice; use an engine that "
                             "supports reference audio (e.g. Qwen3-TTS Base)")
        speed = _check_speed(speed)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
            raise ValueError(f"seed: expected an int in [0, 2**63 - 1], got {seed!r}")
        chunks = self.voice.chunks(text)
        out = []
        for i, phonemes in enumerate(chunks):
            ctx.check_cancelled()
            ids = torch.tensor([self.voice.g2p.ids(phonemes)], dtype=torch.long, device=self.device)
            parts = ctx.run("acoustic", [self.handle], lambda: self.voice.acoustic(ids, speed),
                            memory=self.acoustic_memory(ids.shape[1], speed))
            generator = torch.Generator().manual_seed((seed + i) % (_MAX_SEED + 1))
            wav = ctx.run("vocode", [], lambda: self.voice.vocode(parts, generator),
                          memory=self.vocode_memory(parts["f0"].shape[-1]), generators=[generator])
            out.append(wav.cpu())
            if progress is not None:
                progress(i + 1, len(chunks))
        return torch.cat(out)

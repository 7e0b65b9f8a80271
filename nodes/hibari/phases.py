"""The embedded voice on the runtime: one component (the acoustic model) and two phases per chunk.

    engine = HibariEngine(HibariVoice.load(), manager, device="cuda")
    wav, meta = synthesize(engine, SpeakRequest("Hello there.", seed=0))        # nodes/pack/pipeline.py

hibari reads phoneme chunks: `split_text` is its own G2P chunker (sentences, at most MAX_PHONEMES
phonemes each), so chunk i of the pipeline is hibari's chunk i and draws its noise from seed + i, as
hibari does. Per chunk: "acoustic" places the model (whole or partially, streaming the rest) with room
for working memory estimated from the chunk's phoneme count, then "vocode" runs the DSP with a
generator seeded with the chunk's seed (restored on an OOM retry).
"""
from __future__ import annotations

import torch

from ...runtime import ModelHandle, ModelManager, RequestContext
from ..pack.engine import Capabilities, Chunk, Engine, Reference
from .engine import SAMPLE_RATE, SPEED_RANGE, HibariVoice
from .g2p import MAX_PHONEMES
from .model import SPEC_BINS, SPEC_PARTS

FRAMES_PER_PHONEME = 8  # 12.5 ms frames; measured 4.8-5.4 in sentences (11 in a single word), room for slow speech
FLOAT = 4


class HibariEngine(Engine):
    engine_id = "hibari"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=("auto", "en"), voices=("heart",),
                                speed=SPEED_RANGE, max_chunk_chars=MAX_PHONEMES)

    def __init__(self, voice: HibariVoice, manager: ModelManager, device: torch.device | str = "cpu") -> None:
        self.voice = voice
        model = voice.model
        self.handle = ModelHandle(model, name="acoustic", kind="oneshot")
        self.handle.mark(model.prosody.text.attn, "hot").mark(model.decoder.text.attn, "hot")
        super().__init__(manager, [self.handle], device, name="hibari heart")

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

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str]:
        return self.voice.chunks(text)

    def text_warnings(self, text: str) -> list[str]:
        words = list(dict.fromkeys(self.voice.g2p.foreign_words(text)))
        if not words:
            return []
        shown = ", ".join(repr(w) for w in words[:10]) + (f" and {len(words) - 10} more" if len(words) > 10 else "")
        return [f"text: could not read {shown}: the embedded voice reads English; letters of other scripts "
                "are spelled out by name or left out"]

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.handle]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> torch.Tensor:
        """One phoneme chunk -> mono float32 waveform [T] on the CPU."""
        ids = torch.tensor([self.voice.g2p.ids(chunk.text)], dtype=torch.long, device=self.device)
        parts = ctx.run("acoustic", [self.handle], lambda: self.voice.acoustic(ids, chunk.speed),
                        memory=self.acoustic_memory(ids.shape[1], chunk.speed))
        generator = torch.Generator().manual_seed(chunk.seed)
        wav = ctx.run("vocode", [], lambda: self.voice.vocode(parts, generator),
                      memory=self.vocode_memory(parts["f0"].shape[-1]), generators=[generator])
        return wav.cpu()

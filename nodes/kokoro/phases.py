"""Kokoro-82M on the runtime: one component (the model) and three phases per chunk.

    engine = KokoroEngine(load_model(folder), voices, manager, device="cuda")
    wav, meta = synthesize(engine, SpeakRequest("Hello there.", voice="af_bella:0.7,af_sky:0.3"))

Per chunk (a sentence): the text becomes phonemes with the voice's accent (text.py), cut into pieces of
at most 510 phonemes as KPipeline does; per piece the style is row len(phonemes) - 1 of the voice pack
(the blend of packs), then "prosody" (ALBERT, duration encoder: durations), "features" (F0, energy, text
encoder, decoder blocks: memory from the exact frame count) and "vocode" (the iSTFTNet generator, its
source drawing from a generator seeded with the chunk's seed, as upstream draws from torch's global
generator after torch.manual_seed(seed)).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ...runtime import ModelHandle, ModelManager, RequestContext
from ..pack.engine import Capabilities, Chunk, Engine, parse_voice_blend
from . import text as kt
from .loader import voice_language
from .model import KModel

SAMPLE_RATE = 24000
SPEED_RANGE = (0.5, 2.0)
LANGUAGES = ("auto", "en", "es", "fr", "hi", "it", "ja", "pt", "zh")
FLOAT = 4


def blend(packs: dict[str, torch.Tensor], spec: list[tuple[str, float | None]]) -> torch.Tensor:
    """The style pack of `name:weight,...`: upstream's torch.mean of the packs when no weights differ
    (KPipeline.load_voice("a,b")), otherwise the weighted mean sum(w_i * pack_i) / sum(w_i)."""
    tensors = [packs[name] for name, _ in spec]
    if len(tensors) == 1:
        return tensors[0]
    weights = [1.0 if w is None else w for _, w in spec]
    if len(set(weights)) == 1:
        return torch.mean(torch.stack(tensors), dim=0)
    total = math.fsum(weights)
    return sum(t * (w / total) for t, w in zip(tensors, weights))


class KokoroEngine(Engine):
    engine_id = "kokoro"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=LANGUAGES, voices=("af_heart",), voice_blends=True,
                                speed=SPEED_RANGE, max_chunk_chars=400)

    def __init__(self, model: KModel, voices: dict[str, torch.Tensor], manager: ModelManager,
                 device: torch.device | str = "cpu") -> None:
        if not voices:
            raise ValueError("voices: a Kokoro folder needs at least one voices/<name>.pt")
        self.model = model
        self.packs = dict(voices)
        names = tuple(sorted(voices, key=lambda n: (n != "af_heart", n)))
        self.capabilities = dataclasses.replace(type(self).capabilities, voices=names)
        self.handle = ModelHandle(model, name="kokoro", kind="oneshot")
        self.handle.mark(model.bert.encoder.albert_layer_groups, "hot")   # ALBERT runs its shared layer N times
        super().__init__(manager, [self.handle], device, name="Kokoro-82M")

    def voice_language(self, voice: str) -> str:
        return voice_language(voice)

    def split_text(self, text: str, reference=None, reference_text=None, language: str = "auto",
                   speed: float = 1.0) -> list[str]:
        return [s for s in kt.sentences(text) if s.strip()]

    def phonemizer(self, chunk: Chunk, first: str):
        language = chunk.language if chunk.language != "auto" else voice_language(first)
        if language in ("en", "auto"):
            g2p = chunk.cache.get("g2p")
            if g2p is None:
                g2p = chunk.cache["g2p"] = kt.english(british=first.startswith("b"))
            return g2p
        return kt.other(language)

    def phonemes(self, chunk: Chunk) -> list[str]:
        spec = parse_voice_blend(chunk.voice or self.capabilities.voices[0], self.capabilities.voices)
        ps = self.phonemizer(chunk, spec[0][0])(chunk.text)
        return [p for p in kt.pieces(ps.strip()) if any(c in self.model.vocab for c in p)]

    @staticmethod
    def prosody_memory(phonemes: int, config_width: int = 1024) -> int:
        return phonemes * config_width * 64 * FLOAT + 2 * phonemes * phonemes * 16 * FLOAT + (4 << 20)

    @staticmethod
    def features_memory(phonemes: int, frames: int) -> int:
        """The decoder's blocks at 1090 channels over 2 x frames (upsampled), a few live at once, and the
        alignment [phonemes, frames]."""
        return frames * 2 * 1090 * 10 * FLOAT + phonemes * frames * FLOAT * 2 + (4 << 20)

    def vocode_memory(self, frames: int) -> int:
        g = self.model.decoder.generator
        samples = 2 * frames * g.upsample_scale
        channels = sum(c.out_channels * 2 * frames * math.prod(r.stride[0] for r in g.ups[:i + 1])
                       for i, c in enumerate(g.ups))
        spectra = (g.post_n_fft + 2) * (samples // g.hop + 2)
        return (samples * 9 * 12 + channels * 8 + spectra * 6) * FLOAT + (4 << 20)

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.handle]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> torch.Tensor:
        spec = parse_voice_blend(chunk.voice or self.capabilities.voices[0], self.capabilities.voices)
        pack = blend(self.packs, spec)
        generator = torch.Generator().manual_seed(chunk.seed)
        out = []
        for ps in self.phonemes(chunk):
            ids = torch.tensor([self.model.ids(ps)], dtype=torch.long, device=self.device)
            ref_s = pack[len(ps) - 1].to(self.device)
            m = self.model
            L = ids.shape[1]

            def prosody():
                with torch.inference_mode():
                    return m.prosody(ids, ref_s, chunk.speed)
            d, dur = ctx.run("prosody", [self.handle], prosody, memory=self.prosody_memory(L))
            frames = int(dur.sum())

            def features():
                with torch.inference_mode():
                    return m.features(ids, d, dur, ref_s)
            parts = ctx.run("features", [self.handle], features, memory=self.features_memory(L, frames))

            def vocode():
                with torch.inference_mode():
                    return m.vocode(parts, ref_s, generator).float().cpu()
            out.append(ctx.run("vocode", [self.handle], vocode, memory=self.vocode_memory(frames),
                               generators=[generator]))
        if not out:
            raise ValueError(f"text: nothing Kokoro can read in {chunk.text[:40]!r}")
        return torch.cat(out)

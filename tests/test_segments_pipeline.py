"""The pipeline hands each segment to speak_chunk unchanged and joins the audio as the engine declares."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch

from mizuoto.nodes.pack.engine import Capabilities, Chunk, Engine, Reference
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.segments import Join, Segment, join_waves
from mizuoto.runtime import DeviceService, ModelManager


class Recorder(Engine):
    """Speaks chunk i as i + 1 repeated len(text) times, and records what reached it."""

    engine_id = "recorder"
    capabilities = Capabilities(sample_rate=8000, cloning="optional", transcript="optional")
    heard: ClassVar[list] = []

    def speak_chunk(self, ctx, chunk: Chunk) -> torch.Tensor:
        self.heard.append((chunk.text, chunk.tokens))
        return torch.full((len(chunk.text),), float(chunk.index + 1))


def make(cls: type[Engine]) -> Engine:
    cls.heard = []
    return cls(ModelManager(DeviceService()), [])


def test_multi_sentence_chinese_reaches_speak_chunk_unchanged():
    engine = make(Recorder)
    text = "今天天气很好。我们去公园散步吧！"
    wav, meta = synthesize(engine, SpeakRequest(text))
    assert engine.heard == [(text, None)] and meta["chunks"] == 1 and wav.numel() == len(text)


def test_newlines_between_sentences_reach_speak_chunk():
    engine = make(Recorder)
    synthesize(engine, SpeakRequest("第一句。\n第二句！\nThird one."))
    assert engine.heard == [("第一句。\n第二句！\nThird one.", None)]


class Declaring(Recorder):
    """An engine that segments by the reference and joins with 200 ms of silence."""

    join = Join(silence_ms=200)

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        assert reference is not None and reference.sample_rate == 8000
        return [Segment("ab", ("a", "b")), f"{reference_text}:{reference.wav.numel()}"]


def test_split_text_receives_the_reference_and_the_join_is_applied():
    engine = make(Declaring)
    ref = (torch.full((1, 1, 12000), 0.1), 8000)     # audible: silence is refused as a reference
    wav, meta = synthesize(engine, SpeakRequest("anything", reference=ref, reference_text="hi"))
    assert engine.heard == [("ab", ("a", "b")), ("hi:12000", None)]
    assert meta["chunks"] == 2
    expected = torch.cat([torch.full((2,), 1.0), torch.zeros(1600), torch.full((8,), 2.0)])
    assert torch.equal(wav, expected)


def test_silence_join_is_int_rate_times_ms():
    a, b = torch.ones(3), torch.ones(4)
    assert join_waves([a, b], Join(silence_ms=200), 22050).numel() == 3 + 4410 + 4
    assert join_waves([a, b], Join(silence_ms=300), 32000).numel() == 3 + 9600 + 4
    assert torch.equal(join_waves([a, b], Join(), 24000), torch.ones(7))


def test_crossfade_join_is_f5s_linear_fade():
    rate = 100
    a, b = torch.ones(40), torch.full((30,), 3.0)
    out = join_waves([a, b], Join(crossfade_s=0.15), rate)       # 15 samples overlap
    assert out.numel() == 40 + 30 - 15
    fade_in = torch.from_numpy(np.linspace(0, 1, 15))
    assert torch.equal(out[25:40], (torch.from_numpy(np.linspace(1, 0, 15)) * 1 + fade_in * 3).float())
    assert torch.equal(out[:25], a[:25]) and torch.equal(out[40:], b[15:])
    short = join_waves([torch.ones(5), b], Join(crossfade_s=0.15), rate)   # overlap limited by the shorter
    assert short.numel() == 30


def test_a_join_is_silence_or_crossfade():
    with pytest.raises(ValueError):
        Join(silence_ms=10, crossfade_s=0.1)


class Emitting(Recorder):
    """Hands over each chunk in pieces of 3 samples while it makes them, the first two pieces twice (as
    a phase retried after an OOM emits again), and records the pieces the caller held before it returned."""

    capabilities = Capabilities(sample_rate=8000, piece_samples=3)
    join = Join(silence_ms=1)
    split_text = Engine.split_text

    def speak_chunk(self, ctx, chunk: Chunk) -> torch.Tensor:
        wav = torch.arange(len(chunk.text) * 4, dtype=torch.float32) + 100 * chunk.index
        if chunk.emit is not None:
            chunk.emit(wav[:6], 0)
            chunk.emit(wav[:6], 0)
            for at in range(6, wav.numel(), 3):
                chunk.emit(wav[at:at + 3], at)
        self.heard.append((chunk.index, chunk.emit is not None, len(received)))
        return wav


received: list[torch.Tensor] = []


def test_an_engine_hands_over_its_chunks_while_it_makes_them():
    engine = make(Emitting)
    received.clear()
    text = "First sentence here. " * 20 + "Second one."
    plain, _ = synthesize(engine, SpeakRequest(text))
    engine.heard.clear()
    wav, meta = synthesize(engine, SpeakRequest(text), on_audio=lambda piece, rate: received.append(piece))
    assert meta["chunks"] == 2 and torch.equal(wav, plain) and torch.equal(torch.cat(received), plain)
    # each chunk's pieces reached the caller before the chunk returned
    assert [h[:2] for h in engine.heard] == [(0, True), (1, True)] and 0 < engine.heard[0][2] < engine.heard[1][2]

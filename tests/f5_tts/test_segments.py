"""F5-TTS batches and cross-fade as upstream's infer_process makes them (fixtures/segments.json, recorded by
make_segment_fixtures.py from upstream's utils_infer.py; README.md)."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.engine import Reference
from mizuoto.nodes.pack.segments import join_waves
from mizuoto.nodes.f5_tts.phases import F5TTSEngine
from mizuoto.nodes.f5_tts.text import batch_bytes, chunk_text

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "segments.json").read_text())
HOP = 256


def wave(frames: int, marker: int) -> torch.Tensor:
    """make_segment_fixtures.wave: the stand-in vocoder's exact float32 samples."""
    k = torch.arange(frames * HOP, dtype=torch.int64)
    return ((k * 37 + marker * 11) % 101).to(torch.float32) / 101


def test_the_fixture_covers_enough_cases():
    assert len(FIXTURE) >= 20 and sum(len(c["batches"]) > 1 for c in FIXTURE) >= 3


@pytest.mark.parametrize("case", FIXTURE, ids=lambda c: c["text"][:20])
def test_batches_equal_upstream(case, monkeypatch):
    """infer_process's batches from the reference torchaudio.load returned it (ref_samples at ref_rate):
    split_text sizes them by the reference after the pydub pass (reference.prompt_audio), here the
    case's reference itself."""
    import mizuoto.nodes.f5_tts.phases as phases
    prepared = torch.zeros(1, case["ref_samples"])
    monkeypatch.setattr(phases, "prompt_audio", lambda ref: (prepared, case["ref_rate"]))
    ref = Reference(torch.ones(math.ceil(case["ref_samples"] * 24000 / case["ref_rate"])), 24000)
    got = F5TTSEngine.split_text(None, case["text"], ref, case["ref_text"], speed=case["speed"])
    assert got == case["batches"]


@pytest.mark.parametrize("case", FIXTURE, ids=lambda c: c["text"][:20])
def test_batches_are_cross_faded_as_upstream(case):
    waves = [wave(n // HOP, n // HOP) for n in case["wave_lengths"]]
    joined = join_waves(waves, F5TTSEngine.join, 24000)
    assert joined.dtype == torch.float32 and joined.numel() == case["joined_samples"]
    assert hashlib.sha256(joined.numpy().tobytes()).hexdigest() == case["joined_sha256"]


def test_chunk_text_sizes_by_utf8_bytes_and_respaces_ascii_ends():
    assert chunk_text("你好。世界。", 9) == ["你好。", "世界。"]          # 9 bytes each
    assert chunk_text("Hi.\nYo.") == ["Hi. Yo."]
    assert batch_bytes("Hi", 2.0, 1.0) == int(4 / 2.0 * 20)             # "Hi. ": 4 bytes

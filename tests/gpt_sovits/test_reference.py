"""A 44.1 kHz stereo reference reaches chinese-hubert as upstream's librosa.load(sr=16000) reads it
(fixtures/reference_44k.json, recorded by make_reference_fixtures.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

RATE, STEP, SECONDS = 44100, 97, 4

FIXTURE = Path(__file__).parent / "fixtures" / "reference_44k.json"


def stereo_pcm() -> np.ndarray:
    """int16 [2, T]: a seeded random walk (speech-like low-pass content) per channel, integers only."""
    rng = np.random.default_rng(26)
    steps = rng.integers(-300, 301, size=(2, RATE * SECONDS), dtype=np.int64)
    walk = np.cumsum(steps, axis=1)
    walk -= np.cumsum(walk, axis=1) // np.arange(1, walk.shape[1] + 1)      # pull towards the running mean
    return np.clip(walk // 4, -20000, 20000).astype(np.int16)


def test_hubert_input_is_librosas_reading_of_the_original_rate():
    from mizuoto.nodes.pack.pipeline import reference_audio
    from mizuoto.nodes.gpt_sovits.phases import GPTSoVITSEngine, hubert_input
    want = json.loads(FIXTURE.read_text())
    wav = torch.from_numpy(stereo_pcm().astype(np.float32) / 32768)[None]        # ComfyUI AUDIO [B, C, T]
    ref = reference_audio({"waveform": wav, "sample_rate": RATE}, GPTSoVITSEngine.capabilities)
    assert ref.sample_rate == 32000 and ref.source is not None and ref.source[1] == RATE
    got = hubert_input(ref)
    assert got.numel() == want["length"]
    expected = torch.tensor(want["every_97th"])
    assert (got[::STEP] - expected).abs().max() < 1e-6
    # the 32 kHz copy resampled again is what the engine read before: far outside that bound
    twice = hubert_input(type(ref)(ref.wav, ref.sample_rate))
    assert (twice[::STEP][:expected.numel()] - expected).abs().max() > 1e-4

"""The voice encoder against upstream chatterbox-tts 0.1.7 (golden_ve.json, recorded by make_fixtures.py).

Bounds: the LSTM is the same torch op on both sides, but a recording is replayed on other CPUs, whose
float32 GEMM kernels may round differently: 1e-6 on unit-norm embeddings. The front end computes its
STFT in float64 where upstream's librosa uses float32 pocketfft, so the whole path holds to 2e-5."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.chatterbox.voice_encoder import VoiceEncoder, partial_count, speaker_embedding, trim_silence

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

GOLDEN = json.loads((Path(__file__).parent / "golden_ve.json").read_text())


def encoder() -> VoiceEncoder:
    ve = VoiceEncoder().eval()
    ve.load_state_dict(tiny.fill(ve.state_dict(), seed=3, scale=tiny.VE_SCALE))
    return ve


def test_lstm_matches_upstream() -> None:
    partials = torch.rand(3, 160, 40, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        ours = encoder()(partials)
    assert (ours - torch.tensor(GOLDEN["lstm_embeddings"])).abs().max() < 1e-6


def test_trim_matches_librosa() -> None:
    assert trim_silence(tiny.voice_wav()).shape[0] == GOLDEN["trimmed_samples"]


def test_speaker_embedding_matches_upstream() -> None:
    with torch.inference_mode():
        ours = speaker_embedding(encoder(), tiny.voice_wav())
    assert ours.shape == (1, 256)
    assert (ours[0] - torch.tensor(GOLDEN["embedding"])).abs().max() < 2e-5


def test_silent_reference_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="reference audio"):
        speaker_embedding(encoder(), torch.zeros(100))
    with pytest.raises(ValueError, match="reference audio"):
        partial_count(0, 77)

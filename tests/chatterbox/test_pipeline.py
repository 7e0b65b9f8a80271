"""The Speak pipeline on tiny.write_folder against upstream `ChatterboxTTS.from_local(folder).generate(...)`
(chatterbox-tts 0.1.7, watermark off, T3's max_new_tokens capped at tiny.FOLDER_T3_TOKENS on both sides):
the built-in voice (conds.pt) at exaggeration 0.5 and 0.9, and a 44.1 kHz stereo reference file. Golden:
golden_pipeline.pt (make_fixtures.py pipeline, one thread); live with $CHATTERBOX_REF_PYTHON."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import golden
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

pytestmark = pytest.mark.usefixtures("one_thread")   # recorded with one intra-op thread
HERE = Path(__file__).parent
# The whole chain relative to upstream's max-abs: T3's tokens are compared exactly (drawn from float32
# logits, so a machine could flip a draw only at a tie), then S3Gen's flow and HiFT (test_s3gen.HIFT_BOUND:
# the per-sample phase integration of the sine source) and, for the reference, the voice encoder and
# resamplers in front. Measured: torch.equal on the recording machine; tokens equal and audio within the bound
# under both perturbations of tests/test_golden_travel.py.
AUDIO_BOUND = 1e-2


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny.write_folder(tmp_path_factory.mktemp("models") / "chatterbox" / "tiny")


@pytest.fixture(scope="module")
def model(folder):
    with tiny.loaded(folder) as loaded:
        yield loaded


def ours(model, monkeypatch) -> dict[str, dict]:
    drawn = tiny.record_speech_tokens(monkeypatch)
    reference = {"waveform": tiny.stereo_reference()[None], "sample_rate": 44100}
    out = {}
    for name, exaggeration, use_reference, seed in tiny.PIPELINE_CASES:
        wav, _ = speak(model, SpeakRequest(tiny.PIPELINE_TEXT, seed=seed, reference=reference if use_reference else None,
                                           options={"exaggeration": exaggeration,
                                                    "max_new_tokens": tiny.FOLDER_T3_TOKENS}))
        out[name] = {"tokens": drawn[-1], "wav": wav}
    return out


def upstream_tokens(tokens: list[int]) -> list[int]:
    """What upstream's generate passes to S3Gen from T3's raw output."""
    from mizuoto.nodes.chatterbox.phases import drop_invalid_tokens
    return drop_invalid_tokens(tokens, 6561, 6562)


@pytest.mark.golden
def test_speak_matches_upstream_generate(model, monkeypatch) -> None:
    expected = torch.load(HERE / "golden_pipeline.pt", weights_only=True)
    got = ours(model, monkeypatch)
    for name, *_ in tiny.PIPELINE_CASES:
        assert got[name]["tokens"] == upstream_tokens(expected[name]["tokens"]), name
        golden.assert_close(got[name]["wav"], expected[name]["wav"], AUDIO_BOUND, f"{name} audio")


@pytest.mark.skipif(not os.environ.get("CHATTERBOX_REF_PYTHON"), reason="live parity needs the reference venv "
                    "($CHATTERBOX_REF_PYTHON); the golden test above stands in for it")
def test_live_speak_is_bit_equal_to_upstream_generate(folder, model, monkeypatch, tmp_path) -> None:
    out = tmp_path / "pipeline.pt"
    subprocess.run([os.environ["CHATTERBOX_REF_PYTHON"], str(HERE / "make_fixtures.py"), "pipeline", str(folder),
                    str(out)], check=True, capture_output=True, timeout=600)
    expected = torch.load(out, weights_only=True)
    got = ours(model, monkeypatch)
    for name, *_ in tiny.PIPELINE_CASES:
        assert got[name]["tokens"] == upstream_tokens(expected[name]["tokens"]), name
        assert torch.equal(got[name]["wav"], expected[name]["wav"]), name

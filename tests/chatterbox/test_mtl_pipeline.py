"""Chatterbox Multilingual through the Speak pipeline on tiny.write_mtl_folder against upstream
`ChatterboxMultilingualTTS.from_local(folder).generate(text, language_id=...)` (chatterbox-tts 0.1.7, watermark
off, T3's max_new_tokens capped at tiny.FOLDER_T3_TOKENS on both sides): French, Korean, Japanese (pykakasi)
and Chinese (spacy-pkuseg with a tiny model, then Cangjie) with the built-in voice, and French with a 44.1 kHz
stereo reference: the language tag and preprocessing, the multilingual T3 (2454 text tokens, eager attention, the
alignment guard) and the pickled S3Gen / voice encoder. Golden: golden_mtl_pipeline.pt (make_fixtures.py
mtl_pipeline, one thread); live with $CHATTERBOX_REF_PYTHON."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

import golden
from mizuoto.nodes.chatterbox.phases import drop_invalid_tokens
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

pytestmark = pytest.mark.usefixtures("one_thread")   # recorded with one intra-op thread
HERE = Path(__file__).parent
AUDIO_BOUND = 1e-2     # test_pipeline.AUDIO_BOUND: the same S3Gen chain after exactly equal tokens


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny.write_mtl_folder(tmp_path_factory.mktemp("models") / "chatterbox" / "tiny_mtl")


@pytest.fixture(scope="module")
def model(folder):
    with tiny.loaded(folder) as loaded:
        yield loaded


def ours(model, monkeypatch) -> dict[str, dict]:
    drawn = tiny.record_speech_tokens(monkeypatch)
    reference = {"waveform": tiny.stereo_reference()[None], "sample_rate": 44100}
    out = {}
    for name, language, text, exaggeration, seed, options, use_reference in tiny.MTL_PIPELINE_CASES:
        wav, _ = speak(model, SpeakRequest(text, seed=seed, language=language,
                                           reference=reference if use_reference else None,
                                           options={"exaggeration": exaggeration,
                                                    "max_new_tokens": tiny.FOLDER_T3_TOKENS, **options}))
        out[name] = {"tokens": drawn[-1], "wav": wav}
    return out


def check(got: dict, expected: dict, exact: bool) -> None:
    assert len(expected["fr_forced_stop"]["tokens"]) == 11 and expected["fr_forced_stop"]["tokens"][-1] == 6562
    assert set(expected) == {name for name, *_ in tiny.MTL_PIPELINE_CASES}
    for name, *_ in tiny.MTL_PIPELINE_CASES:
        assert got[name]["tokens"] == drop_invalid_tokens(expected[name]["tokens"], 6561, 6562), name
        if exact:
            assert torch.equal(got[name]["wav"], expected[name]["wav"]), name
        else:
            golden.assert_close(got[name]["wav"], expected[name]["wav"], AUDIO_BOUND, f"{name} audio")


@pytest.mark.golden
def test_speak_matches_upstream_multilingual_generate(model, monkeypatch) -> None:
    check(ours(model, monkeypatch), torch.load(HERE / "golden_mtl_pipeline.pt", weights_only=True), exact=False)


def test_multilingual_model_declares_its_languages(model) -> None:
    with model.using() as engine:
        caps = engine.capabilities
        assert caps.languages[0] == "auto" and len(caps.languages) == 24 and "zh" in caps.languages
        assert engine.options["repetition_penalty"].default == 2.0          # upstream's multilingual default
    with pytest.raises(ValueError, match="language"):
        speak(model, SpeakRequest("Hello.", seed=1, language="xx"))


@pytest.mark.skipif(not os.environ.get("CHATTERBOX_REF_PYTHON"), reason="live parity needs the reference venv "
                    "($CHATTERBOX_REF_PYTHON); the golden test above stands in for it")
def test_live_speak_is_bit_equal_to_upstream_multilingual_generate(folder, model, monkeypatch, tmp_path) -> None:
    out = tmp_path / "mtl_pipeline.pt"
    subprocess.run([os.environ["CHATTERBOX_REF_PYTHON"], str(HERE / "make_fixtures.py"), "mtl_pipeline", str(folder),
                    str(out)], check=True, capture_output=True, timeout=600)
    check(ours(model, monkeypatch), torch.load(out, weights_only=True), exact=True)


def test_multilingual_folder_checks(folder, tmp_path) -> None:
    import shutil

    from mizuoto.nodes.chatterbox.loader import load_chatterbox, missing_files
    from mizuoto.nodes.formats.checkpoint import ModelFolderError
    assert missing_files(folder) == []
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)
    (partial / "ve.pt").unlink()
    assert missing_files(partial) == ["ve.pt"]
    with pytest.raises(ModelFolderError, match="Chatterbox Multilingual: .* lacks ve.pt"):
        load_chatterbox(partial)

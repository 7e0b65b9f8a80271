"""Hostile inputs to the Voice, Script and SRT nodes (issue 32): every one is a ValueError naming the input,
never another exception, and nothing is written."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS

SCRIPT = dict(script="Hello.", seed=0, speed=1.0, language="en", unknown_characters="error")
SRT = dict(srt="1\n00:00:00,000 --> 00:00:01,000\nHi.\n", srt_file="(none)", timing="pad_trim", max_stretch=1.5,
           fallback="overlap", overlapping_cues="trim", seed=0, speed=1.0, language="en", unknown_characters="error")
VOICE = dict(name="A", library_voice="(none)", save_to_library=False, speaker="heart")


@pytest.fixture(scope="module")
def hibari():
    return NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")[0]


@pytest.fixture(autouse=True)
def library(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(tmp_path / "TTS"))
    yield tmp_path / "TTS"
    assert not (tmp_path / "TTS").exists(), "a refused input wrote into the models folder"


@pytest.mark.parametrize("change", [
    dict(script=None), dict(script=5), dict(seed=-1), dict(seed=True), dict(seed=2 ** 64), dict(speed=float("nan")),
    dict(speed="fast"), dict(language=None), dict(unknown_characters="maybe"), dict(voice_1="Bob"), dict(narrator=3),
    dict(settings="x"), dict(native_dialogue="yes"), dict(script="[" * 100_000), dict(voice_9=None),
    dict(script="\ud800"), dict(script="[pause:1e9s]"), dict(script="[speed:nan] x"),
], ids=repr)
def test_the_script_node_refuses_hostile_input_with_a_value_error(hibari, change):
    with pytest.raises(ValueError):
        NODE_CLASS_MAPPINGS["MizuotoScript"]().speak(hibari, **(SCRIPT | change))


@pytest.mark.parametrize("change", [
    dict(srt=None), dict(max_stretch=float("nan")), dict(max_stretch="2"), dict(overlapping_cues="x"),
    dict(srt_file=None), dict(srt_file=5), dict(timing=None), dict(srt="\x00" * 10), dict(srt="1\n" * 50_000),
], ids=repr)
def test_the_srt_node_refuses_hostile_input_with_a_value_error(hibari, change):
    with pytest.raises(ValueError):
        NODE_CLASS_MAPPINGS["MizuotoSrt"]().speak(hibari, **(SRT | change))


@pytest.mark.parametrize("change", [
    dict(name=None), dict(name=5), dict(library_voice=None), dict(library_voice=5), dict(library_voice="../x"),
    dict(save_to_library="yes"), dict(audio="x"), dict(audio={"waveform": "x", "sample_rate": 1}),
    dict(audio={"waveform": torch.zeros(2, 3, 4, 5), "sample_rate": 24000}), dict(transcript=None),
    dict(model="m"), dict(language=5),
], ids=repr)
def test_the_voice_node_refuses_hostile_input_with_a_value_error(change):
    with pytest.raises(ValueError):
        NODE_CLASS_MAPPINGS["MizuotoVoice"]().voice(**(VOICE | change))

"""Voices (issue 32): the Voice node, the voice library in models/TTS/voices/<name>/ (save, load, edits
seen by ComfyUI, nothing replaced or half-written) and hostile library files."""
from __future__ import annotations

import json
import os

import pytest
import torch

from mizuoto.nodes.formats import voice_library
from mizuoto.nodes.pack.voice import NO_LIBRARY_VOICE, MizuotoVoice


@pytest.fixture
def library(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(tmp_path / "TTS"))
    return tmp_path / "TTS" / "voices"


def speech(seconds=1.0, rate=22050, channels=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"waveform": 0.3 * torch.rand(1, channels, int(rate * seconds), generator=g) - 0.15, "sample_rate": rate}


def make(name="Alice", **kw):
    args = dict(library_voice=NO_LIBRARY_VOICE, save_to_library=False) | kw
    return MizuotoVoice().voice(name, **args)[0]


def test_a_saved_voice_loads_back_as_it_was_and_resaving_it_changes_nothing(library):
    audio = speech(channels=2)
    voice = make(audio=audio, transcript="  Hello there.  ", save_to_library=True)
    folder = library / "Alice"
    assert sorted(p.name for p in folder.iterdir()) == ["reference.flac", "transcript.txt", "voice.json"]
    assert json.loads((folder / "voice.json").read_text()) == {"format": 1}
    assert voice.transcript == "Hello there." and voice.audio.shape == (2, 22050)
    assert voice_library.list_voices() == ["Alice"]
    stamp = MizuotoVoice.IS_CHANGED(library_voice="Alice")
    make(audio=audio, transcript="Hello there.", save_to_library=True)          # the same voice: left as it is
    assert MizuotoVoice.IS_CHANGED(library_voice="Alice") == stamp
    loaded = make("Alice 2", library_voice="Alice")
    assert loaded.name == "Alice 2" and loaded.transcript == "Hello there." and loaded.sample_rate == 22050
    assert float((loaded.audio - voice.audio).abs().max()) <= 2.0 ** -23       # 24-bit FLAC
    with pytest.raises(FileExistsError, match="already exists"):
        make(audio=speech(seed=1), transcript="Other words.", save_to_library=True)
    assert voice_library.load("Alice").transcript == "Hello there."            # not replaced
    os.utime(folder / "transcript.txt", ns=(1, 1))
    assert MizuotoVoice.IS_CHANGED(library_voice="Alice") != stamp             # edited on disk: the node reruns
    assert not [p for p in library.iterdir() if p.name.startswith(".")]        # no staging folder left


def test_speaker_and_instruction_voices_and_their_errors(library):
    bob = make("Bob", speaker="heart", save_to_library=True)
    assert bob.audio is None and bob.speaker == "heart"
    assert make("Bob again", library_voice="Bob").speaker == "heart"
    assert bob.request("Hi.", seed=4).voice == "heart" and bob.request("Hi.").reference is None
    for kwargs, match in [
        ({}, "audio: not connected, and no speaker or instruction"),
        (dict(transcript="words"), "no speaker or instruction"),
        (dict(speaker="heart", transcript="words"), "transcript: given without audio"),
        (dict(audio=speech(), library_voice="Bob"), "audio: connected together with library_voice"),
        (dict(audio=speech(seconds=0.1)), "expected 0.5 to 600 s"),
        (dict(audio={"waveform": torch.zeros(1, 1, 22050), "sample_rate": 22050}), "silent"),
        (dict(audio={"waveform": torch.full((1, 1, 22050), float("nan")), "sample_rate": 22050}), "NaN"),
        (dict(library_voice="Nobody"), "voice 'Nobody' not found"),
    ]:
        with pytest.raises(ValueError, match=match):
            make(**kwargs)
    for bad in ("", "a/b", "..", ".hidden", "x[y]", "Bob:2", "a" * 65):
        with pytest.raises(ValueError, match="voice name"):
            make(bad, speaker="heart")


def test_loud_audio_is_scaled_to_full_scale_before_it_is_kept(library):
    loud = speech()
    loud["waveform"] = loud["waveform"] * 40
    voice = make(audio=loud, save_to_library=True)
    assert float(voice.audio.abs().max()) == pytest.approx(1.0)
    assert float(make("A2", library_voice="Alice").audio.abs().max()) <= 1.0


@pytest.mark.parametrize("files, match", [
    ({"voice.json": "{not json"}, "not JSON"),
    ({"voice.json": json.dumps({"format": 2})}, '"format": 1'),
    ({"voice.json": json.dumps({"format": 1, "speaker": 5})}, "'speaker' must be text"),
    ({"voice.json": json.dumps({"format": 1})}, "no reference.flac"),
    ({"voice.json": json.dumps({"format": 1, "pad": "x" * (70 << 10)})}, "bytes; expected at most"),
    ({"voice.json": json.dumps({"format": 1}), "reference.flac": "not audio"}, "cannot be read as audio"),
    ({"voice.json": json.dumps({"format": 1, "speaker": "a"}), "transcript.txt": b"\xff\xfe\x00bad"}, "not UTF-8"),
    ({"voice.json": json.dumps({"format": 1, "speaker": "a"}), "transcript.txt": "w " * 30_000}, "at most 20000"),
])
def test_hostile_library_files_are_clear_errors_naming_the_file(library, files, match):
    folder = library / "Eve"
    folder.mkdir(parents=True)
    for name, content in files.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=match):
        make("Eve", library_voice="Eve")


def test_a_voice_keeps_its_language_and_feeds_the_speak_node(library):
    from mizuoto.nodes import NODE_CLASS_MAPPINGS
    from mizuoto.nodes.pack.speak import MizuotoSpeak

    bob = make("Bob", speaker="heart", language="en", save_to_library=True)
    assert bob.language == "en" and make("B2", library_voice="Bob").language == "en"
    assert bob.request("Hi.").language == "en" and bob.request("Hi.", language="zh").language == "zh"
    with pytest.raises(ValueError, match="language: expected one of"):
        make("Bob", speaker="heart", language="xx")
    model = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")[0]
    (via_voice,) = MizuotoSpeak().speak(model, "Hello.", 2, 1.0, "auto", named_voice=bob)
    (direct,) = MizuotoSpeak().speak(model, "Hello.", 2, 1.0, "en", voice="heart")
    assert torch.equal(via_voice["waveform"], direct["waveform"])
    with pytest.raises(ValueError, match="voice: given together with named_voice"):
        MizuotoSpeak().speak(model, "Hello.", 2, 1.0, "auto", voice="heart", named_voice=bob)
    with pytest.raises(ValueError, match="named_voice: expected a voice from a Voice node"):
        MizuotoSpeak().speak(model, "Hello.", 2, 1.0, "auto", named_voice="Bob")

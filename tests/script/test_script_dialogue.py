"""A script as one native multi-speaker dialogue (Fish Speech S2, issue 32): the voices become speakers 0, 1,
... in order of appearance, the lines `<|speaker:i|>` turns, and the prompt holds every speaker's reference
as S2's generate_long builds it from several references (fish-speech head 3dd1f85, inference.py lines
566-583: each transcript tagged `<|speaker:i|>` unless tagged, joined by newlines; each reference's codes
concatenated in time); what one request cannot hold is an error naming the line."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.fish_speech.generate import S2Sampling
from mizuoto.nodes.fish_speech.phases import FishS2Engine
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import LoadedModel
from mizuoto.nodes.pack.registry import LoadRequest, engine
from mizuoto.nodes.pack.voice import Voice
from mizuoto.nodes.script.nodes import MizuotoScript
from mizuoto.runtime import VramPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fish_speech.tiny import conformance_case_s2  # noqa: E402
from conformance import conformance_case  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def wave(freq: float, seconds: float = 0.6, rate: int = 22050) -> torch.Tensor:
    t = torch.arange(int(rate * seconds)) / rate
    return (0.3 * torch.sin(2 * torch.pi * freq * t) * torch.sin(2 * torch.pi * 2 * t))[None]


@pytest.fixture(scope="module")
def s2(tmp_path_factory):
    case = conformance_case_s2(tmp_path_factory.mktemp("s2"))
    patch = pytest.MonkeyPatch()      # random tiny weights rarely stop on their own: a short budget
    patch.setattr(FishS2Engine, "sampling", functools.partial(S2Sampling, max_new_tokens=8))
    runtime = build_runtime(VramPolicy())
    with use_runtime(runtime):
        model = LoadedModel(engine("fish_speech"), LoadRequest("tiny", case.folder, torch.float32,
                                                               torch.device("cpu")), runtime)
        alice = Voice("Alice", wave(180), 22050, "Some reference words.")
        bob = Voice("Bob", wave(300), 22050, "<|speaker:1|>Other words.")   # a tagged transcript stays as it is
        yield runtime, model, alice, bob
    patch.undo()


def test_a_script_becomes_one_dialogue_with_every_speakers_reference(s2, monkeypatch):
    runtime, model, alice, bob = s2
    seen = {}
    real = FishS2Engine.prompt_builder

    def capture(tok, text, n, ref_text, ref_codes):
        seen.update(text=text, ref_text=ref_text, ref_codes=ref_codes)
        return real(tok, text, n, ref_text, ref_codes)
    monkeypatch.setattr(FishS2Engine, "prompt_builder", staticmethod(capture))
    with use_runtime(runtime):
        audio, report = MizuotoScript().speak(model, "[Alice] Hello world.\n[Bob] The fox!\n[Alice] Yes.", 4, 1.0,
                                              "auto", "error", voice_1=alice, voice_2=bob, native_dialogue=True)
    assert seen["text"] == "<|speaker:0|>Hello world.\n<|speaker:1|>The fox!\n<|speaker:0|>Yes."
    assert seen["ref_text"] == "<|speaker:0|>Some reference words.\n<|speaker:1|>Other words."
    with model.using() as e:               # each reference encoded alone, as upstream's references are
        from mizuoto.nodes.pack.pipeline import reference_audio
        codes = [e.bundle.codec.encode(reference_audio((v.audio, 22050), e.capabilities).wav) for v in (alice, bob)]
    assert torch.equal(seen["ref_codes"], torch.cat(codes, dim=1))
    assert "dialogue of 2 speakers (fish_speech, seed 4" in report and audio["sample_rate"] == 44100
    with use_runtime(runtime):             # the same dialogue again: the segment cache, no model run
        _, again = MizuotoScript().speak(model, "[Alice] Hello world.\n[Bob] The fox!\n[Alice] Yes.", 4, 1.0,
                                         "auto", "error", voice_1=alice, voice_2=bob, native_dialogue=True)
    assert "from the cache" in again


@pytest.mark.parametrize("script, voices, match", [
    ("[Alice] Hi.\n[pause:1s]\n[Bob] Yo.", "ab", r"script line 2: a native dialogue has no \[pause"),
    ("[Alice] Hi.\n[Bob][seed:3] Yo.", "ab", r"script line 2: .*\[seed:...\] cannot change one line"),
    ("[Alice] Hi.\n[Bob] Yo.\n[narrator] The end.", "ab", "script line 3: narrator has no reference audio"),
    ("[Alice] Hi.\n[Carl] Yo.", "ac", "script line 2: Carl has no reference audio"),
])
def test_what_one_request_cannot_hold_is_an_error_naming_the_line(s2, script, voices, match):
    runtime, model, alice, bob = s2
    cast = {"a": alice, "b": bob, "c": Voice("Carl", speaker="x")}
    inputs = {f"voice_{i}": cast[k] for i, k in enumerate(voices, 1)}
    with use_runtime(runtime), pytest.raises(ValueError, match=match):
        MizuotoScript().speak(model, script, 0, 1.0, "auto", "error", native_dialogue=True, **inputs)


def test_models_without_native_dialogue_and_too_many_speakers_are_refused(s2, tmp_path):
    runtime, model, alice, bob = s2
    case = conformance_case("fish_speech", tmp_path)          # S1-mini: one speaker per prompt
    with use_runtime(runtime):
        s1 = LoadedModel(engine("fish_speech"), LoadRequest("s1", case.folder, torch.float32, torch.device("cpu")),
                         runtime)
        with pytest.raises(ValueError, match="native_dialogue: Fish Speech .* reads no multi-speaker dialogue"):
            MizuotoScript().speak(s1, "[Alice] Hi.\n[Bob] Yo.", 0, 1.0, "auto", "error", voice_1=alice, voice_2=bob,
                                  native_dialogue=True)
        six = {f"voice_{i}": Voice(f"V{i}", wave(100 + 40 * i), 22050, "Words.") for i in range(1, 7)}
        script = "\n".join(f"[V{i}] Line {i}." for i in range(1, 7))
        with pytest.raises(ValueError, match="native_dialogue: 6 speakers; .* at most 5"):
            MizuotoScript().speak(model, script, 0, 1.0, "auto", "error", native_dialogue=True, **six)

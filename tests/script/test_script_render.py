"""Scripts spoken by a cast through the Speak pipeline (issue 32): a dialogue of two voices on two
engines' models in one script, each voice's prompt derived once, each segment equal to the same request
spoken alone, an edited line re-synthesising exactly one segment, errors before any work, and the
Script and SRT nodes on top."""
from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from mizuoto.nodes.pack import pipeline
from mizuoto.nodes.pack.audio import resample
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import LoadedModel, speak
from mizuoto.nodes.pack.registry import LoadRequest, engine
from mizuoto.nodes.pack.voice import Voice
from mizuoto.nodes.script import render
from mizuoto.nodes.script.nodes import MizuotoScript, MizuotoSrt
from mizuoto.nodes.script.parse import assign_seeds, parse_script
from mizuoto.nodes.script.timeline import to_sample
from mizuoto.runtime import VramPolicy

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from conformance import conformance_case  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

DIALOGUE = """[Alice] Hello world.
[Bob] Hi there, Alice.
[pause:0.25s]
[Alice] The fox!
[narrator] They talked.
[Bob] Goodbye now."""


@pytest.fixture(scope="module")
def cast(tmp_path_factory):
    """Alice: a cloned voice on a tiny Fish Speech model; Bob and the narrator: the embedded voice."""
    case = conformance_case("fish_speech", tmp_path_factory.mktemp("fish"))
    runtime = build_runtime(VramPolicy({"compute.simulate_vram_mb": 512}), strict=True)
    with use_runtime(runtime):
        fish = LoadedModel(engine("fish_speech"), LoadRequest("tiny", case.folder, torch.float32,
                                                              torch.device("cpu")), runtime)
        hibari = LoadedModel(engine("hibari"), LoadRequest("hibari heart", None, torch.float32,
                                                           torch.device("cpu")), runtime)
        ref = case.request.reference
        alice = Voice("Alice", ref["waveform"][0], ref["sample_rate"], case.request.reference_text, model=fish)
        bob = Voice("Bob", speaker="heart", language="en")
        yield runtime, hibari, fish, {"Alice": alice, "Bob": bob}, case.request.options


def perform(runtime, hibari, voices, options, text, seed=11, **kw):
    segments = assign_seeds(parse_script(text, characters=list(voices)), seed)
    steps = render.plan(segments, voices, hibari, language="en")
    steps = [dataclasses.replace(s, request=dataclasses.replace(s.request, options=dict(options)))
             if s.model is not None and s.model.spec.engine_id == "fish_speech" else s for s in steps]
    return render.perform(steps, **kw), steps


def test_a_dialogue_on_two_engines_equals_each_line_spoken_alone_and_encodes_each_voice_once(cast):
    runtime, hibari, fish, voices, options = cast
    runtime.prompts.clear()
    runtime.segments.clear()
    performance, steps = perform(runtime, hibari, voices, options, DIALOGUE, reuse=False)
    with fish.using() as e:
        assert performance.sample_rate == max(24000, e.capabilities.sample_rate)
    prompts = [s.voice_prompt for s in performance.spoken if s.who == "Alice"]
    assert prompts == ["computed", "reused"], "Alice's reference must be encoded once for both of her lines"
    assert runtime.prompts.stats.stored == 1
    assert [s.who for s in performance.spoken] == ["Alice", "Bob", "pause", "Alice", "narrator", "Bob"]
    assert [s.seed for s in performance.spoken if s.who != "pause"] == [11, 12, 13, 14, 15]
    runtime.prompts.clear()                  # each line alone, cold: the same samples in the same place
    out = performance.audio[0]
    for spoken, step in zip(performance.spoken, steps):
        piece = out[spoken.start:spoken.start + spoken.samples]
        if step.request is None:
            assert spoken.samples == round(0.25 * performance.sample_rate) and not piece.any()
            continue
        alone, meta = speak(step.model, step.request)
        if meta["sample_rate"] != performance.sample_rate:
            alone = resample(alone, meta["sample_rate"], performance.sample_rate, "soxr_hq")
        assert torch.equal(piece, alone), f"segment {spoken.index} ({spoken.who}) differs from its request alone"
    assert out.numel() == sum(s.samples for s in performance.spoken)


def test_editing_one_line_synthesises_exactly_that_segment(cast, monkeypatch):
    runtime, hibari, fish, voices, options = cast
    runtime.segments.clear()
    first, _ = perform(runtime, hibari, voices, options, DIALOGUE)
    assert first.synthesised == 5
    ran = []
    real = pipeline.synthesize
    monkeypatch.setattr(pipeline, "synthesize", lambda engine, req, *a, **k: ran.append(req.text) or real(engine, req, *a, **k))
    again, _ = perform(runtime, hibari, voices, options, DIALOGUE)
    assert again.synthesised == 0 and ran == [] and torch.equal(again.audio, first.audio)
    edited = DIALOGUE.replace("[Bob] Hi there, Alice.", "[Bob] Hi there, dear Alice.")
    third, _ = perform(runtime, hibari, voices, options, edited)
    assert ran == ["Hi there, dear Alice."] and third.synthesised == 1
    assert [s.cached for s in third.spoken if s.who != "pause"] == [True, False, True, True, True]
    a = [s for s in first.spoken if s.index == 4][0]
    b = [s for s in third.spoken if s.index == 4][0]        # Alice's second line, later in the track now
    assert torch.equal(first.audio[0, a.start:a.start + a.samples], third.audio[0, b.start:b.start + b.samples])
    assert "1 synthesised, 4 from the segment cache" in third.report_text()


def test_a_bad_line_fails_before_any_segment_is_spoken(cast, monkeypatch):
    runtime, hibari, fish, voices, options = cast
    runtime.segments.clear()
    ran = []
    monkeypatch.setattr(render, "speak", lambda *a, **k: ran.append(a) or (_ for _ in ()).throw(AssertionError))
    with pytest.raises(ValueError, match=r"script line 3 \(Bob, .*\): language: this model speaks"):
        perform(runtime, hibari, voices, options, "[Alice] Hello world.\n[Bob] Fine.\n[de:Bob] Gut.")
    carl = dataclasses.replace(voices["Alice"], name="Carl", model=None)     # a reference, on the embedded voice
    with pytest.raises(ValueError, match=r"script line 2 \(Carl, .*\): reference_audio: this model cannot clone"):
        perform(runtime, hibari, {**voices, "Carl": carl}, options, "Hello.\n[Carl] Hi.")
    assert ran == []


def test_the_script_node_speaks_with_named_voices_and_reports(cast):
    runtime, hibari, fish, voices, options = cast
    bob = voices["Bob"]
    with use_runtime(runtime):
        audio, report = MizuotoScript().speak(hibari, "[Bob] Hello.\n[pause:100ms]\nThe end.", 3, 1.0, "en",
                                              "error", voice_1=bob)
        assert audio["sample_rate"] == 24000 and audio["waveform"].shape[:2] == (1, 1)
        assert "2 speech segments, 1 pauses" in report and "Bob (hibari, seed 3" in report
        with pytest.raises(ValueError, match="unknown character 'Carol'"):
            MizuotoScript().speak(hibari, "[Carol] Hi.", 0, 1.0, "en", "error", voice_1=bob)
        _, report = MizuotoScript().speak(hibari, "[Carol] Hi.", 0, 1.0, "en", "narrator", voice_1=bob)
        assert "narrator (hibari" in report
        with pytest.raises(ValueError, match="voice_2: the name 'Bob' is also voice_1's"):
            MizuotoScript().speak(hibari, "Hi.", 0, 1.0, "en", "error", voice_1=bob, voice_2=bob)
        with pytest.raises(ValueError, match="model: expected a Mizuoto model"):
            MizuotoScript().speak("hibari", "Hi.", 0, 1.0, "en", "error")


SRT = """1
00:00:00,500 --> 00:00:01,000
[Bob] Hello there, this line is much too long for half a second.

2
00:00:03,000 --> 00:00:09,000
[Bob] Short.
"""


def test_the_srt_node_places_each_cue_at_its_time_and_reports_what_it_adjusted(cast):
    runtime, hibari, fish, voices, options = cast
    with use_runtime(runtime):
        audio, adjusted, report = MizuotoSrt().speak(hibari, SRT, "(none)", "pad_trim", 1.5, "overlap", "trim",
                                                     5, 1.0, "en", "error", voice_1=voices["Bob"])
    wav, sr = audio["waveform"][0, 0], audio["sample_rate"]
    first, second = to_sample(500, sr), to_sample(3000, sr)
    assert not wav[:first].any() and wav[first:first + 200].abs().sum() > 0
    assert not wav[to_sample(1000, sr):second].any()       # cue 1 trimmed at its end
    assert wav[second:second + 2000].abs().sum() > 0
    assert report.startswith("1 of 2 cues adjusted") and "cue 1 00:00:00,500 --> 00:00:01,000" in report
    assert "trimmed" in report and adjusted.startswith("1\n00:00:00,500 --> 00:00:01,000\n[Bob] Hello")
    with use_runtime(runtime):
        with pytest.raises(ValueError, match="SRT cue 2: script line 1, column 1: unknown character"):
            MizuotoSrt().speak(hibari, SRT.replace("[Bob] Short", "[Eve] Short"), "(none)", "pad_trim", 1.5,
                               "overlap", "trim", 5, 1.0, "en", "error", voice_1=voices["Bob"])
        with pytest.raises(ValueError, match="srt_file"):
            MizuotoSrt().speak(hibari, SRT, "../etc/passwd.srt", "pad_trim", 1.5, "overlap", "trim", 5, 1.0, "en",
                               "error")


@pytest.mark.parametrize("change, match", [
    (dict(timing="squeeze"), "policy: expected one of"),
    (dict(max_stretch=3.0), "max_stretch: expected a number from 1 to 2"),
    (dict(fallback="stretch"), "fallback: expected one of"),
    (dict(srt="1\n05:00:00,000 --> 05:00:01,000\nLate.\n"), "its cues run to 5.0 h; at most 4 h"),
    (dict(srt="1\n00:00:01,000 --> 00:00:00,500\nBackwards.\n"), r"cue 1 \(line 2\): ends at 00:00:00,500, before it starts"),
    (dict(srt_file="notes.txt"), "srt_file 'notes.txt': files are read from ComfyUI's input folder"),
])
def test_srt_options_and_files_are_checked_before_any_speech(cast, monkeypatch, change, match):
    runtime, hibari, fish, voices, options = cast
    monkeypatch.setattr(render, "speak", lambda *a, **k: (_ for _ in ()).throw(AssertionError("spoke")))
    args = dict(srt=SRT, srt_file="(none)", timing="pad_trim", max_stretch=1.5, fallback="overlap",
                overlapping_cues="trim", seed=0, speed=1.0, language="en", unknown_characters="error") | change
    with use_runtime(runtime), pytest.raises(ValueError, match=match):
        MizuotoSrt().speak(hibari, voice_1=voices["Bob"], **args)

"""Engine options on the Speak, Script and SRT nodes: a JSON object checked against the model's declaration
before any model runs, an audio option from the option_audio input, and clear errors for everything else."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import LoadedModel, SpeakRequest, speak
from mizuoto.nodes.pack.registry import LoadRequest, engine
from mizuoto.nodes.pack.speak import MizuotoSpeak, parse_options
from mizuoto.runtime import VramPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance import conformance_case  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
AUDIO = {"waveform": 0.1 * torch.randn(1, 1, 16000, generator=torch.Generator().manual_seed(0)), "sample_rate": 16000}


@pytest.mark.parametrize("text, audio, match", [
    ("{not json", None, "options: not JSON"),
    ("[1, 2]", None, "options: expected a JSON object"),
    ('{"emotion_reference": "option_audio"}', None, "names option_audio, which is not connected"),
    ('{"steps": 4}', AUDIO, "option_audio: connected, but no option names it"),
    ("", AUDIO, "option_audio: connected, but no option names it"),
    (5, None, "options: expected text"),
    ("{" + " " * 30_000 + "}", None, "at most 20000"),
])
def test_bad_options_text_is_a_clear_error(text, audio, match):
    with pytest.raises(ValueError, match=match):
        parse_options(text, audio)


def test_an_option_takes_the_connected_audio():
    assert parse_options('{"emotion_reference": "option_audio", "emotion_alpha": 0.5}', AUDIO) == \
        {"emotion_reference": AUDIO, "emotion_alpha": 0.5}
    assert parse_options("  ") == {}


def test_the_nodes_pass_options_to_the_model_and_refuse_undeclared_ones(tmp_path):
    case = conformance_case("fish_speech", tmp_path)
    runtime = build_runtime(VramPolicy())
    with use_runtime(runtime):
        fish = LoadedModel(engine("fish_speech"), LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu")),
                           runtime)
        ref = case.request.reference
        (audio,) = MizuotoSpeak().speak(fish, "Hello world.", 3, 1.0, "auto", reference_audio=ref,
                                        reference_text=case.request.reference_text,
                                        options='{"max_new_tokens": 8, "temperature": 0.5}')
        want, _ = speak(fish, SpeakRequest("Hello world.", seed=3, reference=ref,
                                           reference_text=case.request.reference_text,
                                           options={"max_new_tokens": 8, "temperature": 0.5}))
        assert torch.equal(audio["waveform"][0, 0], want)
        with pytest.raises(ValueError, match=r"options: \['steps'\] are not options of this model"):
            MizuotoSpeak().speak(fish, "Hello world.", 3, 1.0, "auto", reference_audio=ref,
                                 reference_text=case.request.reference_text, options='{"steps": 4}')
        with pytest.raises(ValueError, match="options: temperature: expected a finite number in"):
            MizuotoSpeak().speak(fish, "Hello world.", 3, 1.0, "auto", reference_audio=ref,
                                 reference_text=case.request.reference_text, options='{"temperature": 9}')
        hibari = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")[0]
        with pytest.raises(ValueError, match=r"script line 1 .*options: \['steps'\] are not options"):
            NODE_CLASS_MAPPINGS["MizuotoScript"]().speak(hibari, "Hello.", 0, 1.0, "en", "error", options='{"steps": 4}')

"""IndexTTS 2 (tiny folder in the published layout) with every unit streamed on the strict simulated device gives
audio equal to a plain CPU run in each mode: cloning, emotion reference, emotion weights, emotion text (the
emotion model streamed too). Half and full residency and the estimates: the registry's conformance test
(tests/indextts2/tiny.py: conformance_case)."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.indextts2.loader import load_indextts2
from mizuoto.nodes.indextts2.phases import IndexTTS2Engine
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from indextts2.tiny import reference, write_folder

UNIT = 16 << 10
MB = 1 << 20

pytestmark = pytest.mark.usefixtures("one_thread")

MODES = {
    "clone": {},
    "emotion_reference": {"emotion_reference": {"waveform": reference(0.8, 16000)[None, None], "sample_rate": 16000},
                          "emotion_alpha": 0.7},
    "weights": {"angry": 0.6, "surprised": 0.2},
    "text": {"emotion_text": "what a wonderful day"},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("indextts2") / "tiny")


def request(mode: str) -> SpeakRequest:
    return SpeakRequest("hello there", seed=11, reference={"waveform": reference()[None, None], "sample_rate": 22050},
                        options={"max_mel_tokens": 12, "diffusion_steps": 3, **MODES[mode]})


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_unit_streamed_equals_the_plain_run(folder, mode):
    # one bundle per engine: an engine's runtime hooks stay on the modules it registered
    plain, _ = synthesize(IndexTTS2Engine(load_indextts2(folder), ModelManager(DeviceService()), min_unit_bytes=UNIT),
                          request(mode))
    devices = DeviceService(simulate={"cpu": 256 * MB}, strict=True)
    engine = IndexTTS2Engine(load_indextts2(folder), ModelManager(devices, VramPolicy({"compute.vram_mode": "none"})),
                             min_unit_bytes=UNIT)
    streamed, meta = synthesize(engine, request(mode))
    assert torch.equal(streamed, plain)
    assert meta["memory"]["streamed_mb"] > 0 and meta["applied"]["oom_retries"] == 0

"""The VibeVoice-Realtime declaration (nodes/vibevoice/__init__.py ENGINE) on the conformance
suite's tiny folder (tiny.py: the recorded tiny model in the published layout, bfloat16 voice presets pickled as
upstream's, a character tokenizer.json): what a folder lacks, and the built engine speaks as `generate` does
with the folder's own model, preset and ids."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest
from mizuoto.nodes.vibevoice.generate import generate
from mizuoto.nodes.vibevoice.loader import load_realtime
from mizuoto.nodes.vibevoice import ENGINE as SPEC
from mizuoto.nodes.vibevoice.text import TextTokenizer
from mizuoto.nodes.vibevoice.voices import load_voice_preset
from mizuoto.runtime import DeviceService, ModelManager
from vibevoice.tiny import write_tiny

pytestmark = pytest.mark.usefixtures("one_thread")


def test_missing_files_and_the_built_engine(tmp_path: Path) -> None:
    folder = write_tiny(tmp_path / "tiny")
    assert SPEC.missing_files(folder) == []
    engine = SPEC.build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")), ModelManager(DeviceService()))
    assert engine.capabilities.voices == ("en-Wayne_man", "en-Alice_woman")
    wav, _ = synthesize(engine, SpeakRequest("Hi there.", seed=2, voice="en-Alice_woman"))
    ids = torch.tensor(TextTokenizer(folder / "tokenizer.json").encode("Hi there."))
    g = generate(load_realtime(folder), load_voice_preset(folder / "voices" / "en-Alice_woman.pt"), ids, cfg_scale=1.5,
                 steps=5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(wav, g.audio[0])
    shutil.rmtree(folder / "voices")
    (folder / "tokenizer.json").unlink()
    assert SPEC.missing_files(folder) == ["tokenizer.json", "voices/*.pt"]

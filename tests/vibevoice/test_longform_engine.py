"""VibeVoice 1.5B through the registry and the Speak pipeline, on the tiny recorded long-form model written as a
model folder in the published layout (config.json model_type "vibevoice", model.safetensors, tokenizer.json):

- the loader's parameters equal the recorded model's; a wrong config is refused naming the field;
- a two-speaker SpeakRequest (speakers = the recording's two clips, steps 3, cfg 2.0) gives the audio of
  `generate_longform` on the same prompt and seed bit for bit, which is transformers' (test_longform_generate.py);
  one speaker through reference_audio likewise; the script is never cut (one segment);
- `verify` (resident, half-resident, all streamed on the strict simulated device) gives equal audio and every
  phase's estimate covers its measured working memory.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from vibevoice.longform_tiny import GENERATION_BOUND, GOLDEN, TOKENIZER, model_from, read

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.nodes.pack.verify import verify
from mizuoto.nodes.vibevoice.loader import load_longform
from mizuoto.nodes.vibevoice.longform_generate import generate_longform
from mizuoto.nodes.vibevoice.longform_phases import VibeVoiceLongformEngine
from mizuoto.nodes.vibevoice.script import ScriptTokenizer
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager
from mizuoto.runtime.loading import CheckpointError

SPEC = {s.engine_id: s for s in discover()}["vibevoice"]


def write_folder(folder: Path) -> tuple[Path, dict, dict]:
    tensors, meta = read(GOLDEN)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(json.loads(meta["config"]), indent=2))
    save_file({k[len("weight."):]: v for k, v in tensors.items() if k.startswith("weight.")},
              str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    return folder, tensors, meta


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # the tiny model's clips are tens of samples (6 a frame); the real lower bound (0.5 s) would refuse them
    patch = pytest.MonkeyPatch()
    patch.setattr(VibeVoiceLongformEngine, "capabilities",
                  dataclasses.replace(VibeVoiceLongformEngine.capabilities, reference_seconds=(0.0, 120.0)))
    yield write_folder(tmp_path_factory.mktemp("vvlong") / "VibeVoice-1.5B")
    patch.undo()


def load(folder: Path) -> LoadRequest:
    return LoadRequest("VibeVoice-1.5B", folder, torch.float32, torch.device("cpu"))


def request(tensors: dict, meta: dict, tag: str) -> tuple[SpeakRequest, dict]:
    case = json.loads(meta[f"{tag}.case"])
    clips = [tensors[f"{tag}.clip{i}"] for i in range(len(case["clips"]))]
    options = {"steps": case["steps"], "cfg_scale": case["cfg"], "max_new_tokens": case["max_new_tokens"]}
    audio = [{"waveform": c[None, None], "sample_rate": 24000} for c in clips]
    if len(clips) == 1:
        return SpeakRequest(case["script"], seed=case["seed"], reference=audio[0], options=options), case
    return SpeakRequest(case["script"], seed=case["seed"], speakers=tuple((a, "") for a in audio),
                        options=options), case


def test_loader_reads_the_published_layout(tiny) -> None:
    folder, tensors, meta = tiny
    model = load_longform(folder)
    ref = model_from(tensors, meta)
    mine = dict(model.state_dict())
    for k, v in ref.state_dict().items():
        assert torch.equal(mine[k], v), k
    assert SPEC.missing_files(folder) == []
    bad = folder.parent / "bad"
    write_folder(bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["semantic_tokenizer_config"]["std_dist_type"] = "gaussian"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="semantic_tokenizer_config.std_dist_type"):
        load_longform(bad)


@pytest.mark.parametrize("tag", ["one", "two"])
def test_speak_equals_generate_which_is_upstreams(tiny, tag) -> None:
    folder, tensors, meta = tiny
    engine = SPEC.build(load(folder), ModelManager(DeviceService()))
    req, case = request(tensors, meta, tag)
    wav, _ = synthesize(engine, req)
    tok = ScriptTokenizer(folder / "tokenizer.json")
    clips = [tensors[f"{tag}.clip{i}"] for i in range(len(case["clips"]))]
    prompt = tok.prompt(case["script"], clips, engine.model.config.hop_length)
    g = generate_longform(engine.model, tok, prompt, cfg_scale=case["cfg"], steps=case["steps"],
                          generator=torch.Generator().manual_seed(case["seed"]), max_new_tokens=case["max_new_tokens"])
    assert torch.equal(wav, g.audio.float().mean(0))
    ref = tensors[f"{tag}.audio"].mean(0)
    bound = GENERATION_BOUND * max(1.0, ref.abs().max().item())
    assert wav.shape == ref.shape and (wav - ref).abs().max().item() <= bound
    assert engine.split_text(case["script"] + "\nSpeaker 1: More. And more.") == \
        [case["script"] + "\nSpeaker 1: More. And more."]


def test_verify_streamed_half_resident_equal_and_estimates_cover(tiny, one_thread) -> None:
    folder, tensors, meta = tiny
    req, _ = request(tensors, meta, "two")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ModelHandle, "MIN_UNIT_BYTES", 16 << 10)
        patch.setattr(ModelHandle, "TINY_UNIT_BYTES", 4 << 10)
        report = verify(SPEC, load(folder), req, oom_points=())
    assert report.ok, report.table()
    resident, half, streamed = report.runs
    assert half.streamed_mb > 0 and streamed.streamed_mb > 0
    assert set(report.phases) >= {"voices", "generate"}
    assert all(p["estimate_mb"] >= p["measured_mb"] for p in report.phases.values()), report.phases

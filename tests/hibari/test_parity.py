"""Parity with hibari-tts itself (needs onnx + onnxruntime: pip install onnx onnxruntime).

- the torch model (int8 Linear layers, as hibari runs them) vs onnxruntime running the shipped hibari.onnx;
- its float twin (the same model on the dequantized weights) vs onnxruntime on the dequantized graph,
  which checks every layer's structure to float rounding (reference.py says why the int8 paths agree
  only statistically end to end);
- the torch DSP vs hibari's numpy DSP on the same inputs and the same noise;
- our G2P (torch OOV net) vs hibari's G2P (onnxruntime OOV net);
- end to end: our float twin's voice vs hibari's own pipeline on the dequantized graph, same noise.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

sys.path.insert(0, str(Path(__file__).parent))               # --import-mode=importlib adds no test dirs
from reference import dequantized_model, float_twin, run, session  # noqa: E402
from ort_int8 import onnxruntime_saturates_pairs, saturating_int8_matmul  # noqa: E402

from mizuoto.nodes.blocks import int8 as int8_layers  # noqa: E402

from mizuoto.nodes.hibari import dsp  # noqa: E402
from mizuoto.nodes.hibari.engine import HibariVoice  # noqa: E402

SENTENCES = [
    "Hello there, this is hibari.",
    "The quick brown fox jumps over the lazy dog.",
    "On the 3rd of March 2024, 1,250 people paid $9.99 each to hear it read at 7:30 pm.",
    "The Zorblaxian envoy befuddled Dr. Thistlewaite with cromulent grumbleweed!",
    "Why?",
    "She sells sea shells by the sea shore, and the shells she sells are surely seashells; I'm sure of it.",
    "Kubernetes clusters in Reykjavik run Mizuoto's xylophonist scheduler.",
]
OOV_WORDS = ["Zorblaxian", "Thistlewaite", "grumbleweed", "Mizuoto", "Kubernetes", "xylophonist", "Qatarization",
             "Yggdrasil", "Ngozi", "Llanfair", "Hibari", "ComfyUI"]


class FixedNoise:
    """Stands in for hibari's numpy Generator: returns the noise we also give our DSP."""

    def __init__(self, z: np.ndarray):
        self.z = z

    def standard_normal(self, shape, dtype):
        assert shape == self.z.shape and dtype == np.float32
        return self.z.copy()


@pytest.fixture(scope="module")
def hibari_tts():
    import hibari
    return hibari.Hibari()


@pytest.fixture(scope="module")
def reference(onnx_path):
    return session(dequantized_model(str(onnx_path)))


def _noise(frames: int, seed: int) -> tuple[np.ndarray, torch.Tensor]:
    z = np.random.default_rng(seed).standard_normal((601, 2 * frames), dtype=np.float32)
    return z, torch.view_as_complex(torch.from_numpy(z.copy()).view(601, frames, 2))


def test_phonemes_equal_hibari(voice, hibari_tts):
    for text in SENTENCES + [" ".join(SENTENCES)]:
        assert voice.g2p.chunks(text) == hibari_tts.phonemize(text), text
    for word in OOV_WORDS:
        assert voice.g2p.g2p.oov(word) == hibari_tts.g2p.oov(word), word


@pytest.fixture(scope="module")
def twin(voice):
    return float_twin(voice.model)


# Both sides are float32 with other kernels (onnxruntime's MLAS vs torch's), so the sums differ in order on
# every CPU: |ours - onnxruntime| relative to the output's max-abs was at most 1.13e-5 over these sentences
# and speeds (AMD EPYC, default and avx2 kernels). An element-wise tolerance fails on whichever small value
# sits next to a large one; 1e-4 of the max-abs is ~9x the largest error measured.
OUTPUT_BOUND = 1e-4


@pytest.mark.parametrize("speed", [1.0, 1.3, 0.8])
def test_float_twin_matches_dequantized_graph(twin, hibari_tts, reference, speed):
    for text in SENTENCES:
        for phonemes in hibari_tts.phonemize(text):
            ids = hibari_tts.ids(phonemes)
            ref = run(reference, ids, speed)
            with torch.inference_mode():
                ours = twin(torch.tensor([ids]), speed)
            assert ours["f0"].shape == ref["f0"].shape, (text, speed)        # identical frame counts
            for k, r in ref.items():
                o, r = ours[k].numpy().astype(np.float64), r.astype(np.float64)
                err = np.abs(o - r).max() / np.abs(r).max()
                assert err <= OUTPUT_BOUND, (k, text, speed, err)


def _rms_error(ours: np.ndarray, ref: np.ndarray) -> float:
    ours, ref = ours.astype(np.float64), ref.astype(np.float64)
    return float(np.sqrt(((ours - ref) ** 2).mean() / (ref ** 2).mean()))


# The int8 paths agree layer for layer on equal inputs (tests/test_int8.py); end to end, float rounding before
# each quantizer moves some activations by one int8 step. Over these 21 chunks (3 speeds), our int8 model vs
# hibari's: relative RMS at most 0.3 % (f0) .. 4.6 % (phi), where hibari's own float graph vs its int8 one is
# 7.3 % .. 21 %; 3 chunks got 2 frames more or fewer (a duration rounded the other way). Bounds: 10 % (about
# 2x the worst measured, half the float graph's distance) and at most 4 frames in at most a quarter of the chunks.
INT8_RMS_BOUND = 0.10


@pytest.fixture
def sums_as_onnxruntime(monkeypatch) -> bool:
    """Our int8 layers summing as this CPU's onnxruntime does: on CPUs where its kernel clips product pairs
    (tests/ort_int8.py) hibari's graph is not the exact integer model, and the comparison would measure that.
    True when emulated (about 50x slower per layer than the exact kernel)."""
    import onnxruntime
    if not onnxruntime_saturates_pairs(onnxruntime):
        return False
    monkeypatch.setattr(int8_layers, "int8_matmul", saturating_int8_matmul)
    return True


def test_int8_model_matches_hibari_int8_graph(voice, hibari_tts, onnx_path, sums_as_onnxruntime):
    shipped = session(str(onnx_path))
    chunks = frame_diffs = 0
    # emulated sums take minutes over every case: four sentences at one speed check the same layers there
    speeds, sentences = ((1.0,), SENTENCES[:4]) if sums_as_onnxruntime else ((1.0, 1.3, 0.8), SENTENCES)
    for text, speed in [(text, speed) for speed in speeds for text in sentences]:
        for phonemes in hibari_tts.phonemize(text):
            ids = hibari_tts.ids(phonemes)
            ref = run(shipped, ids, speed)
            ours = voice.acoustic(torch.tensor([ids]), speed)
            chunks += 1
            if ours["f0"].shape != ref["f0"].shape:
                frame_diffs += 1
                assert abs(ours["f0"].shape[-1] - ref["f0"].shape[-1]) <= 4, (text, speed)
                continue
            for k, r in ref.items():
                assert _rms_error(ours[k].numpy(), r) <= INT8_RMS_BOUND, (k, text, speed)
    assert frame_diffs <= max(1, chunks // 4)


# A pulse sample where the harmonic count floor(fmax / f) or the voicing test sits on its boundary takes the
# other branch when f's last float32 bit differs (a fused multiply-add, a vector or scalar sin): upstream's
# own numpy output moves the same way between CPUs. At most one such sample per 4096 (measured: 1 in 9600,
# ATEN_CPU_CAPABILITY=default); everywhere else the trains agree to float32 rounding of values up to ~300.
PULSE_FLIPS_PER_SAMPLE = 1 / 4096


def test_dsp_matches_hibari_numpy(voice, hibari_tts, monkeypatch):
    from hibari import dsp as hibari_dsp
    upstream_pulses = hibari_dsp.pulses
    for i, text in enumerate(SENTENCES[:4]):
        parts = voice.acoustic(voice.ids(voice.chunks(text)[0]), 1.0)
        z_np, z = _noise(parts["f0"].shape[-1], i)
        np_parts = [parts[k][0].numpy() for k in ("lh", "theta", "ln", "lr", "phi", "f0")]
        ours_pulses, ref_pulses = dsp.pulses(parts["f0"][0]).numpy(), upstream_pulses(np_parts[5])
        far = ~np.isclose(ours_pulses, ref_pulses, atol=1e-3, rtol=1e-5)
        assert far.sum() <= max(1, far.size * PULSE_FLIPS_PER_SAMPLE), (text, np.nonzero(far)[0][:10])
        # the rest of the chain on one pulse train: exp(lh) up to e^7 amplifies the trains' float32 rounding
        # (1e-7 of their peak) by more than the rest of the chain's own rounding
        monkeypatch.setattr(hibari_dsp, "pulses", lambda f0: ours_pulses.copy())
        ref = hibari_dsp.synth(*np_parts, FixedNoise(z_np))
        ours = dsp.synth(parts, z).numpy()
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)


def test_end_to_end_matches_hibari_pipeline(voice, twin, onnx_path, tmp_path):
    """hibari's own Hibari class on the dequantized graph, fed the noise of our per-chunk generators, vs our
    voice (G2P, chunking, seeds, DSP) on the float twin."""
    import hibari
    voice = HibariVoice(twin, voice.g2p)
    fp32 = tmp_path / "hibari_fp32.onnx"
    fp32.write_bytes(dequantized_model(str(onnx_path)).SerializeToString())
    tts = hibari.Hibari(model=str(fp32))
    text = f"{SENTENCES[0]} {SENTENCES[3]}"
    ours, _ = voice.synthesize(text, seed=11, speed=0.8)
    ref = []
    for i, phonemes in enumerate(tts.phonemize(text)):
        frames = voice.acoustic(voice.ids(phonemes), 0.8)["f0"].shape[-1]
        z = dsp.noise(frames, torch.Generator().manual_seed(11 + i))
        ref.append(tts.from_ids(tts.ids(phonemes), 0.8, FixedNoise(torch.view_as_real(z).reshape(601, -1).numpy())))
    ref = np.concatenate(ref)
    assert len(ref) > 0 and ours.shape == ref.shape
    err = np.linalg.norm(ours.numpy() - ref) / np.linalg.norm(ref)
    # The model's ~1e-4 Hz f0 differences accumulate in the pulse phase (times the harmonic number, up to
    # ~270) and flip the harmonic count in a few samples, so this is an energy bound, not per sample;
    # measured 2e-5 .. 2.3e-3 over the sentences above at speeds 1.0 and 0.8.
    assert err < 1e-2, f"relative waveform error {err:.2e}"

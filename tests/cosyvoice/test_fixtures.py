"""Our CosyVoice 2 / 3 against golden fixtures recorded from the upstream repository (make_fixtures.py).

Tiny upstream-layout files are regenerated from the recorded upstream key lists (tiny.write_folder),
loaded through our loader, and run on the recorded inputs and seeds: LM tokens equal; flow mel and HiFT
audio in float64 against upstream's float64 run at golden.F64_BOUND, and in float32 against upstream's
float32 output at the bounds below (tests/golden.py: fp32 moves with the machine's kernels).
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # the fixtures were recorded with one intra-op thread

import golden
import mizuoto.nodes.blocks.s3gen_flow as flow_module
from mizuoto.nodes.cosyvoice.loader import CosyVoiceBundle, load_cosyvoice
from mizuoto.nodes.blocks.sampling import ras_sample

from cosyvoice.tiny import FIXTURES, write_folder

# fp32 bounds, relative to the reference's max-abs, measured under every perturbation of
# tests/test_golden_travel.py (ATEN_CPU_CAPABILITY=default / avx2, MKL_CBWR=COMPATIBLE, two threads, oneDNN off):
# flow mel <= 8.4e-7 (v3, MKL_CBWR); 1e-5 allows x12.
FLOW_FP32_BOUND = 1e-5
# HiFT audio <= 6.4e-4 (v3, MKL_CBWR; v2 <= 1.8e-4): the vocoder's exp magnitudes and sin phases amplify the
# reassociation of its convolutions (its float32 and float64 runs differ by as much); 1e-2 allows x15. The
# float64 test is the tight one.
HIFT_FP32_BOUND = 1e-2
# Our seed-0 flow noise against upstream's buffer: equal where torch's float32 randn takes its AVX2 kernel,
# 4e-7 with the scalar one (ATEN_CPU_CAPABILITY=default); 1e-5 allows x25.
NOISE_BOUND = 1e-5


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def loaded(request, tmp_path_factory) -> tuple[CosyVoiceBundle, dict]:
    folder = write_folder(tmp_path_factory.mktemp(f"cosyvoice{request.param}"), request.param)
    expected = torch.load(FIXTURES / f"outputs_v{request.param}.pt", weights_only=True)
    return load_cosyvoice(folder, torch.float32), expected


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def loaded64(request, tmp_path_factory) -> tuple[CosyVoiceBundle, dict]:
    """The same weights loaded in float64 (upstream's float64 run: its modules `.double()`)."""
    folder = write_folder(tmp_path_factory.mktemp(f"cosyvoice{request.param}_f64"), request.param)
    expected = torch.load(FIXTURES / f"outputs_v{request.param}.pt", weights_only=True)
    return load_cosyvoice(folder, torch.float64), expected


# LM tokens are compared exactly, from the float32 LM. This is NOT yet proven machine-independent: RAS sampling's
# decisions (the descending sort of the top 25 probabilities, the top_p stop, the multinomial draw among the kept
# ones) come as close as 0 to 3e-6 in log-probability to a boundary on these tiny random LMs (near-uniform
# distributions, some exactly tied probabilities), while the fp32 log-probabilities move by up to 5.7e-6 under
# MKL_CBWR=COMPATIBLE (3.8e-6 ATEN_CPU_CAPABILITY=default, 1e-6 two threads). All perturbations pass today; the
# robust check (tokens from our float64 LM against upstream's float64 run) needs the float32 islands of both
# LMs lifted (HF's Qwen2RMSNorm / RoPE and our nodes/common RMSNorm, RotaryEmbedding and ras_sample) and is
# not done yet.
@pytest.mark.golden
@pytest.mark.parametrize("case", ["zero_shot", "no_prompt"])
@pytest.mark.parametrize("seed", [0, 7])
def test_lm_tokens_equal_upstream(loaded, case, seed):
    bundle, expected = loaded
    c = bundle.lm_config
    g = torch.Generator().manual_seed(seed)
    tokens = bundle.llm.generate(expected[f"lm.{case}.text"].long(), expected[f"lm.{case}.prompt_text"].long(),
                                 expected[f"lm.{case}.prompt_speech"].long(),
                                 lambda logp, done: ras_sample(logp, done, g, top_p=c.top_p, top_k=c.top_k,
                                                               win_size=c.win_size, tau_r=c.tau_r))
    assert tokens == expected[f"lm.{case}.{seed}"].tolist()


@pytest.mark.golden
def test_flow_mel_equals_upstream(loaded):
    bundle, e = loaded
    mel = bundle.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"],
                          e["flow.embedding"], torch.Generator().manual_seed(0))
    assert mel.dtype == torch.float32
    golden.assert_close(mel, e["flow.mel"], FLOW_FP32_BOUND, "flow mel (fp32)")
    golden.assert_close(flow_module.flow_noise(e["flow.noise"].shape[2], torch.Generator().manual_seed(0)),
                        e["flow.noise"], NOISE_BOUND, "seed-0 flow noise")


@pytest.mark.golden
def test_flow_mel_f64_equals_upstream(loaded64, monkeypatch):
    bundle, e = loaded64
    # upstream's noise values themselves: torch's float32 randn rounds differently without AVX2 (NOISE_BOUND)
    monkeypatch.setattr(flow_module, "flow_noise", lambda frames, generator: e["flow.noise"][:, :, :frames])
    mel = bundle.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"].double(),
                          e["flow.embedding"].double(), None)
    assert mel.dtype == torch.float64
    golden.assert_f64(mel, e["flow.mel.f64"], "flow mel (f64)")


@pytest.mark.golden
def test_hift_audio_equals_upstream(loaded):
    bundle, e = loaded
    wav = bundle.hift(e["hift.mel"], torch.Generator().manual_seed(int(e["hift.seed"])))
    golden.assert_close(wav, e["hift.speech"], HIFT_FP32_BOUND, "HiFT audio (fp32)")


@pytest.mark.golden
def test_hift_audio_f64_equals_upstream(loaded64):
    # the same draws as upstream's float64 run: v2's initial phases in float32 and its noise in float64 (randn_like
    # of its float64 sines), v3's float32 buffers (float32 uniform and float64 normal draws are one kernel each)
    bundle, e = loaded64
    wav = bundle.hift(e["hift.mel"].double(), torch.Generator().manual_seed(int(e["hift.seed"])))
    assert wav.dtype == torch.float64
    golden.assert_f64(wav, e["hift.speech.f64"], "HiFT audio (f64)")


def test_other_seed_changes_flow_noise(loaded):
    bundle, e = loaded
    mel = bundle.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"],
                          e["flow.embedding"], torch.Generator().manual_seed(1))
    assert not torch.equal(mel, e["flow.mel"])

"""The building blocks engines share: sampling, the decode loop, reference audio, mel, safe pickles.

Equality with librosa/torchaudio runs where they are installed (the Qwen3-TTS parity venv:
tests/qwen3_tts/README.md); everything else runs in the default suite.
"""
from __future__ import annotations

import json
import math
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from mizuoto.nodes.pack import audio
from mizuoto.nodes.formats.checkpoint import load_pickle, state_dict
from mizuoto.nodes.blocks.decode import autoregress
from mizuoto.nodes.blocks.mel import log_mel, mel_filters
from mizuoto.nodes.pack.pipeline import Capabilities, reference_audio
from mizuoto.nodes.blocks.sampling import repetition_penalty, select, top_k_filter, top_p_filter
from mizuoto.runtime.loading import CheckpointError, load_module_from_state

RATES = [(44100, 24000), (48000, 24000), (16000, 24000), (22050, 24000), (44100, 16000), (8000, 24000)]


# ---- sampling ---------------------------------------------------------------------------------------
def test_select_greedy_and_seeded_sampling():
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0])
    assert select(logits, False, 1.0, 0, 1.0, None) == 1
    draws = [select(logits, True, 1.0, 2, 1.0, torch.Generator().manual_seed(s)) for s in range(40)]
    assert set(draws) == {1, 2}                                     # top-k 2: only the two best ever drawn
    again = [select(logits, True, 1.0, 2, 1.0, torch.Generator().manual_seed(s)) for s in range(40)]
    assert draws == again


def test_filters_and_repetition_penalty_match_hugging_face_rules():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.isinf(top_k_filter(scores, 2)[:2]).all() and torch.isfinite(top_k_filter(scores, 2)[2:]).all()
    kept = torch.isfinite(top_p_filter(scores, 0.5))
    assert kept.tolist() == [False, False, False, True]             # the best token alone holds > 50 %
    assert torch.isfinite(top_p_filter(scores, 1.0)).all()
    pen = repetition_penalty(torch.tensor([2.0, -2.0, 1.0]), [0, 1], 2.0)
    assert pen.tolist() == [1.0, -4.0, 1.0]


# ---- decode loop ---------------------------------------------------------------------------------------
def test_autoregress_stops_without_running_the_last_token():
    fed = []

    def step(tok, i):
        fed.append(tok)
        return torch.tensor([float(tok + 1)])

    out = autoregress(torch.tensor([0.0]), lambda logits, h: int(logits[0]), step, lambda t: t == 3, 10)
    assert out == [0, 1, 2] and fed == [0, 1, 2]                    # the stop token 3 never fed back
    fed.clear()
    out = autoregress(torch.tensor([0.0]), lambda logits, h: int(logits[0]), step, lambda t: False, 4)
    assert out == [0, 1, 2, 3] and fed == [0, 1, 2]                 # nor the token reaching max_new_tokens
    with pytest.raises(RuntimeError, match="stop"):
        autoregress(torch.tensor([0.0]), lambda *a: 0, step, lambda t: False, 5,
                    check=lambda: (_ for _ in ()).throw(RuntimeError("stop")))


# ---- reference audio -------------------------------------------------------------------------------------
@pytest.mark.parametrize("rate", [1, 3999, 384001, 10**9, float("nan"), "44100", 44100.5, True])
def test_sample_rates_outside_the_range_are_refused_before_any_allocation(rate):
    with pytest.raises(ValueError, match="sample_rate|sample rate"):
        reference_audio({"waveform": torch.zeros(1, 1, 100), "sample_rate": rate}, Capabilities(24000))


def test_coprime_rates_fall_back_to_soxr_instead_of_a_huge_kernel():
    x = torch.randn(4410)
    y = audio.resample(x, 44101, 24000, "torchaudio_sinc")                 # 8.5 GB as torchaudio's kernel
    assert torch.equal(y, audio.resample(x, 44101, 24000, "soxr_hq"))
    assert not torch.equal(audio.resample(x, 44100, 24000, "torchaudio_sinc"), audio.resample(x, 44100, 24000))


def test_integer_pcm_is_scaled_like_float_and_bad_samples_are_refused():
    pcm = torch.tensor([[0, 16384, -32768, 32767]], dtype=torch.int16)
    caps = Capabilities(24000, reference_seconds=(0, 10))
    ref = reference_audio({"waveform": pcm[None].repeat(1, 1, 500), "sample_rate": 8000}, caps)
    assert ref.wav.dtype == torch.float32 and ref.wav[:4].tolist() == [0.0, 0.5, -1.0, 32767 / 32768]
    assert torch.equal(audio.to_mono(torch.tensor([[128, 255]], dtype=torch.uint8)), torch.tensor([0.0, 127 / 128]))
    for wav, match in [(torch.full((1, 1, 8000), float("nan")), "NaN"), (torch.zeros(0, 1, 8000), "batch is empty"),
                       (torch.zeros(1, 0, 8000), "no channels"), (torch.zeros(1, 1, 0), "no samples"),
                       (torch.zeros(1, 1, 8000, dtype=torch.complex64), "real audio"),
                       (torch.zeros(1, 1, 80), r"0.01 s long; expected 0.5 to 60 s")]:
        with pytest.raises(ValueError, match=match):
            reference_audio({"waveform": wav, "sample_rate": 8000}, Capabilities(24000))


def test_references_are_resampled_to_the_engines_rate_with_its_resampler():
    caps = Capabilities(24000, reference_rate=16000, resampler="torchaudio_sinc")
    wav = 0.3 * torch.sin(2 * math.pi * 440 * torch.arange(44100) / 44100)
    ref = reference_audio((wav[None], 44100), caps)
    assert ref.sample_rate == 16000 and torch.equal(ref.wav, audio.resample(wav, 44100, 16000, "torchaudio_sinc"))
    soxr = audio.resample(wav, 44100, 16000, "soxr_hq")
    assert soxr.shape == (16000,) and (soxr[200:-200] - ref.wav[200:-200]).abs().max() < 1e-2


@pytest.mark.parametrize("orig,target", RATES)
def test_resamplers_equal_librosa_and_torchaudio(orig, target):
    librosa = pytest.importorskip("librosa")
    x = 0.3 * torch.randn(orig * 2 - 7, generator=torch.Generator().manual_seed(orig))
    want = torch.from_numpy(librosa.resample(x.numpy(), orig_sr=orig, target_sr=target))
    assert torch.equal(audio.resample(x, orig, target, "soxr_hq"), want)
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "qwen3_tts"))
    from torchaudio_shim import install
    install()
    torchaudio = pytest.importorskip("torchaudio")
    want = torchaudio.transforms.Resample(orig, target)(x[None])[0]
    assert torch.equal(audio.resample(x, orig, target, "torchaudio_sinc"), want)
    functional = torchaudio.functional.resample(x[None], orig, target)[0]     # kernel in float32
    assert torch.equal(audio.resample(x, orig, target, "torchaudio_functional"), functional)
    assert not torch.equal(functional, want)


# ---- mel ----------------------------------------------------------------------------------------------------
def test_mel_filters_and_log_mel():
    slaney = mel_filters(24000, 1024, 100, 0, 12000)
    htk = mel_filters(24000, 1024, 100, 0, None, htk=True, norm=None)
    assert slaney.shape == htk.shape == (100, 513) and htk.max() <= 1.0 + 1e-6 and slaney.max() < 0.1
    wav = torch.sin(2 * math.pi * 1000 * torch.arange(24000) / 24000)
    m = log_mel(wav, torch.from_numpy(htk), 1024, 256, 1024)
    assert m.shape == (1, 100, 24000 // 256)
    peak_hz = 700 * (10 ** (np.linspace(0, 2595 * np.log10(1 + 12000 / 700), 102)[1:-1] / 2595) - 1)
    assert abs(peak_hz[int(m[0, :, 40].argmax())] - 1000) < 120
    librosa = pytest.importorskip("librosa")
    assert np.array_equal(slaney, librosa.filters.mel(sr=24000, n_fft=1024, n_mels=100, fmin=0, fmax=12000))
    assert np.allclose(htk, librosa.filters.mel(sr=24000, n_fft=1024, n_mels=100, fmin=0, htk=True, norm=None),
                       atol=1e-7)


# ---- pickles ---------------------------------------------------------------------------------------------
class _Planted:
    def __reduce__(self):
        return (os.system, ("echo planted > /dev/null",))


def test_pickles_load_weights_only_and_strictly(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    torch.save({"state_dict": {f"model.{k}": v for k, v in net.state_dict().items()}, "epoch": 3}, tmp_path / "a.ckpt")
    state = state_dict(load_pickle(tmp_path / "a.ckpt"), tmp_path / "a.ckpt", key="state_dict", strip="model.")
    loaded = load_module_from_state(lambda: torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)),
                                    state, torch.bfloat16, source=tmp_path / "a.ckpt")
    assert torch.equal(loaded[0].weight, net[0].weight.bfloat16())
    with pytest.raises(CheckpointError, match=r"a.ckpt does not match Sequential: missing keys .*1.bias"):
        load_module_from_state(lambda: torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)),
                               {k: v for k, v in state.items() if k != "1.bias"}, source=tmp_path / "a.ckpt")
    torch.save({"w": _Planted()}, tmp_path / "planted.pth")              # a torch zip holding a global
    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"w": _Planted()}, f)                                 # a plain pickle
    with pytest.raises(CheckpointError, match=r"planted.pth: not loaded: .*GLOBAL posix.system"):
        load_pickle(tmp_path / "planted.pth")
    with pytest.raises(CheckpointError, match="evil.pth: (not loaded|a plain Python pickle)"):
        load_pickle(tmp_path / "evil.pth")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt: not"):
        load_pickle(tmp_path / "junk.pt")
    with pytest.raises(CheckpointError, match="expected an entry 'model'"):
        state_dict({"state_dict": {}}, tmp_path / "a.ckpt", key="model")


@pytest.mark.golden
def test_torchaudio_resamplers_golden():
    """Both torchaudio resamplers against their outputs recorded by tests/make_resample_golden.py:
    transforms.Resample (kernel in float64, F5-TTS) and functional.resample (kernel in the waveform's
    float32, OmniVoice). Bound 2e-7 of the scale: a float32 kernel's sin/cos may differ by an ulp between
    vector-math paths and the short dot products reassociate (0 measured here under default/avx2/avx512);
    the two resamplers differ by 1.6e-6 and 6.8e-6 on the first and last pair, so the bound tells them apart."""
    from golden import assert_close, relative_error

    recorded = json.loads((Path(__file__).parent / "resample_golden.json").read_text())
    for p in recorded["pairs"]:
        x = (0.3 * torch.randn(p["n"], dtype=torch.float64, generator=torch.Generator().manual_seed(p["seed"]))).float()
        transforms, functional = torch.tensor(p["transforms"]), torch.tensor(p["functional"])
        what = f"{p['orig']} -> {p['target']} Hz"
        assert_close(audio.resample(x, p["orig"], p["target"], "torchaudio_sinc"), transforms, 2e-7, what)
        assert_close(audio.resample(x, p["orig"], p["target"], "torchaudio_functional"), functional, 2e-7, what)
        if p["orig"] != 24000:
            assert relative_error(functional, transforms) > 1e-6, what


# ---- the Qwen2 config CosyVoice's LM and VibeVoice's decoder share ------------------------------------
def test_qwen2_config_defaults_and_errors_name_the_field():
    from mizuoto.nodes.blocks.transformer import Qwen2Config
    base = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": 100}
    c = Qwen2Config.from_dict(base)
    assert (c.num_key_value_heads, c.head_dim, c.max_position_embeddings, c.rms_norm_eps, c.rope_theta) == \
        (4, 16, 32768, 1e-6, 10000.0)
    with pytest.raises(ValueError, match=r"decoder_config\.vocab_size missing"):
        Qwen2Config.from_dict({k: v for k, v in base.items() if k != "vocab_size"}, "decoder_config")
    with pytest.raises(ValueError, match=r"config\.hidden_size '64': expected a positive integer"):
        Qwen2Config.from_dict({**base, "hidden_size": "64"})
    with pytest.raises(ValueError, match=r"config\.rope_theta -1: expected a positive number"):
        Qwen2Config.from_dict({**base, "rope_theta": -1})
    with pytest.raises(ValueError, match="do not divide"):
        Qwen2Config.from_dict({**base, "num_key_value_heads": 3})

"""S3Gen (nodes/chatterbox/s3gen.py) against upstream chatterbox-tts 0.1.7's S3Token2Wav at tiny.TINY_S3GEN
(golden_s3gen.pt, recorded by `make_fixtures.py s3gen` with one thread): the reference's prompt tokens
exactly, its mel and x-vector, the flow's mel for a seed, HiFT's audio for a seed and the whole inference
with the trim fade, float32 at the bounds below. With $CHATTERBOX_REF_PYTHON set (the reference venv's
python), the fixture is recorded again live and everything must be torch.equal."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import golden
from mizuoto.nodes.blocks.dac import fold_weight_norm
from mizuoto.nodes.chatterbox.s3gen import S3Gen, embed_ref, flow_noise, s3gen_config, trim_fade

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

pytestmark = pytest.mark.usefixtures("one_thread")   # recorded with one intra-op thread
HERE = Path(__file__).parent

# Bounds relative to the recording's max-abs, measured under the perturbations of tests/test_golden_travel.py
# (ATEN_CPU_CAPABILITY=default + MKL_CBWR=COMPATIBLE + oneDNN off; avx2 + two threads): prompt mel, x-vector
# and flow mel <= 5.7e-7 (0 on the recording machine): 1e-4 allows x175. HiFT audio <= 1.4e-4: its sine
# source integrates f0 per sample (a cumsum over 28800 samples), so a 1e-7 change of f0 moves the late
# phases by far more, and exp/sin amplify it: 1e-2 allows x70.
FEATURE_BOUND = 1e-4
HIFT_BOUND = 1e-2


def recorded(path: Path = HERE / "golden_s3gen.pt") -> dict:
    return torch.load(path, weights_only=True)


def ours(shapes: dict[str, list[int]]) -> S3Gen:
    state = fold_weight_norm(tiny.fill_s3gen(shapes))
    model = S3Gen(s3gen_config(shapes)).eval()
    model.load_state_dict(state, strict=True)
    return model


def outputs(model: S3Gen) -> dict[str, torch.Tensor]:
    tokens = tiny.s3gen_tokens()
    with torch.inference_mode():
        ref = embed_ref(model, tiny.voice_wav_24k())
        out = {"prompt_token": ref.prompt_token, "prompt_feat": ref.prompt_feat, "embedding": ref.embedding}

        def mel(g: torch.Generator) -> torch.Tensor:
            noise = flow_noise(model, ref.prompt_token.shape[1], tokens.shape[1], g)
            return model.flow.mel(tokens, ref.prompt_token, ref.prompt_feat, ref.embedding, None, noise=noise)

        out["flow_mel"] = mel(torch.Generator().manual_seed(41))
        out["hift_wav"] = model.mel2wav(out["flow_mel"], torch.Generator().manual_seed(42))
        g = torch.Generator().manual_seed(43)
        out["wav"] = trim_fade(model.mel2wav(mel(g), g))
    return out


@pytest.fixture(scope="module")
def golden_case() -> tuple[dict, dict]:
    expected = recorded()
    return expected, outputs(ours(expected["state_shapes"]))


def test_names_and_shapes_are_upstreams(golden_case) -> None:
    expected, _ = golden_case
    folded = fold_weight_norm(tiny.fill_s3gen(expected["state_shapes"]))
    model = ours(expected["state_shapes"])
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {k: tuple(v.shape) for k, v in folded.items()}


@pytest.mark.golden
def test_reference_matches_upstream(golden_case) -> None:
    expected, got = golden_case
    assert got["prompt_token"].tolist() == expected["prompt_token"].tolist()
    golden.assert_close(got["prompt_feat"], expected["prompt_feat"], FEATURE_BOUND, "prompt mel")
    golden.assert_close(got["embedding"], expected["embedding"], FEATURE_BOUND, "x-vector")


@pytest.mark.golden
def test_flow_and_vocoder_match_upstream(golden_case) -> None:
    expected, got = golden_case
    golden.assert_close(got["flow_mel"], expected["flow_mel"], FEATURE_BOUND, "flow mel")
    golden.assert_close(got["hift_wav"], expected["hift_wav"], HIFT_BOUND, "HiFT audio")
    golden.assert_close(got["wav"], expected["wav"], HIFT_BOUND, "S3Gen audio")
    assert got["wav"][0, :tiny_trim()].abs().max() == 0       # the first 20 ms are zeroed


def tiny_trim() -> int:
    return 24000 // 50


def test_trim_fade_is_upstreams() -> None:
    wav = torch.ones(1, 2000)
    out = trim_fade(wav)
    assert torch.equal(out[0, :480], torch.zeros(480))
    assert torch.equal(out[0, 480:960], (torch.cos(torch.linspace(torch.pi, 0, 480)) + 1) / 2)
    assert torch.equal(out[0, 960:], wav[0, 960:])
    assert trim_fade(torch.ones(1, 100)).abs().max() == 0        # shorter than the fade: no error


def test_config_errors_name_the_tensor() -> None:
    shapes = dict(recorded()["state_shapes"])
    del shapes["flow.encoder_proj.weight"]
    with pytest.raises(ValueError, match="flow.encoder_proj.weight"):
        s3gen_config(shapes)


@pytest.mark.skipif(not os.environ.get("CHATTERBOX_REF_PYTHON"), reason="live parity needs the reference venv "
                    "($CHATTERBOX_REF_PYTHON); the golden tests above stand in for it")
def test_live_upstream_is_bit_equal(tmp_path) -> None:
    out = tmp_path / "s3gen.pt"
    subprocess.run([os.environ["CHATTERBOX_REF_PYTHON"], str(HERE / "make_fixtures.py"), "s3gen", str(out)],
                   check=True, capture_output=True, timeout=600)
    expected = recorded(out)
    got = outputs(ours(expected["state_shapes"]))
    for key, value in got.items():
        assert torch.equal(value, expected[key]), key


def test_real_size_structure_is_upstreams() -> None:
    """Upstream's published S3Token2Wav on `meta` (real_s3gen.json, make_fixtures.py real_s3gen): the sizes read
    from its shapes are the published ones, and our S3Gen at them has exactly its names and shapes (weight
    norm folded)."""
    import json
    from mizuoto.nodes.blocks.hift import HiFTConfig
    from mizuoto.nodes.blocks.s3gen_flow import FlowConfig
    from mizuoto.nodes.blocks.s3tokenizer import S3TokenizerConfig
    from mizuoto.nodes.chatterbox.s3gen import CAMPPlusConfig, S3GenConfig
    real = json.loads((HERE / "real_s3gen.json").read_text())
    config = s3gen_config(real)
    assert config == S3GenConfig(FlowConfig(version=2, clock="grid"), HiFTConfig(sine_gen=1), CAMPPlusConfig(),
                                 S3TokenizerConfig())
    with torch.device("meta"):
        model = S3Gen(config)
        folded = fold_weight_norm({k: torch.empty(v) for k, v in real.items()})
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {k: tuple(v.shape) for k, v in folded.items()}


# The float64 flow (make_fixtures.py s3gen64: golden_s3gen64.pt) against ours in float64: weights and noise
# from integer draws (tiny.exact_normal: the same on every CPU, where torch.randn's float32 values differ in
# the last bit between CPUs), golden_s3gen.pt's stored float32 reference cast, so what is left is float64
# rounding through the conformer and 10 Euler steps. Measured: 0 here, <= 1.2e-15 of the max-abs under the
# perturbations of tests/test_golden_travel.py; 1e-9 allows x1e6.
FLOW64_BOUND = 1e-9


@pytest.mark.golden
def test_flow_float64_matches_upstream() -> None:
    expected = recorded()
    shapes = expected["state_shapes"]
    model = S3Gen(s3gen_config(shapes)).eval()
    model.load_state_dict(fold_weight_norm(tiny.fill_s3gen(shapes, exact=True)), strict=True)
    model = model.double()
    tokens = tiny.s3gen_tokens()
    prompt = expected["prompt_token"]
    with torch.inference_mode():
        noise = tiny.exact_normal((1, 80, 2 * (prompt.shape[1] + tokens.shape[1])), torch.Generator().manual_seed(41),
                                  torch.float64)
        mel = model.flow.mel(tokens, prompt, expected["prompt_feat"].double(), expected["embedding"].double(), None,
                             noise=noise)
    want = recorded(HERE / "golden_s3gen64.pt")["flow_mel"]
    assert mel.dtype == torch.float64 and want.dtype == torch.float64
    golden.assert_close(mel, want, FLOW64_BOUND, "float64 flow mel")

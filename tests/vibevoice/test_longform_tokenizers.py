"""The long-form models' acoustic tokenizer encoder (σ-VAE, with its seeded noise), semantic tokenizer encoder and
acoustic decoder against transformers' own `VibeVoiceAcousticTokenizerModel` / encoder on a tiny random config
(fixtures/longform_tokenizers.safetensors, recorded by make_longform_tokenizer_fixtures.py; the weights under
the published checkpoint's names, so this also proves the name mapping).

Golden bound: float32 within 1e-5 of each tensor's largest magnitude. Why that holds on any x86 CPU: every op is
float32; another conv / matmul kernel sums a row of at most 64 terms (4..16 channels x 7 taps, MLP 64) in
another order, about n * 2**-24 relative to the terms (~4e-6 worst case); the 3 stages add that much each and
RMS norms rescale rather than amplify. Within one machine the live test (VIBEVOICE_HF_VENV: a venv with
transformers >= 5.3) demands torch.equal.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from mizuoto.nodes.blocks.streaming_conv import StreamingConvCache
from mizuoto.nodes.vibevoice.acoustic import AcousticConfig, AcousticTokenizer, SemanticTokenizer

HERE = Path(__file__).parent
GOLDEN = HERE / "fixtures" / "longform_tokenizers.safetensors"
VENV = os.environ.get("VIBEVOICE_HF_VENV", "")
LIVE = bool(VENV and Path(VENV, "bin", "python").is_file())
BOUND = 1e-5


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).clone() for k in f.keys()}, f.metadata()


def build(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> tuple[AcousticTokenizer, SemanticTokenizer]:
    a = json.loads(meta["acoustic_tokenizer_config"])
    s = json.loads(meta["semantic_tokenizer_config"])
    acoustic = AcousticTokenizer(AcousticConfig.from_dict(a), AcousticConfig.from_dict(a, "encoder")).eval()
    semantic = SemanticTokenizer(AcousticConfig.from_dict(s, "encoder", "semantic_tokenizer_config")).eval()
    for prefix, module in (("weight.model.acoustic_tokenizer.", acoustic), ("weight.model.semantic_tokenizer.", semantic)):
        module.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}, strict=True)
    return acoustic, semantic


def ours(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> dict[str, torch.Tensor]:
    acoustic, semantic = build(tensors, meta)
    audio = tensors["audio"]
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        gen = torch.Generator().manual_seed(int(meta["seed"]))
        out["acoustic.sampled"] = acoustic.encode(audio, gen)
        mean = acoustic.encoder(audio).permute(0, 2, 1)
        out["acoustic.mean"] = mean
        out["semantic.features"] = semantic.encode(audio)
        out["decoder.whole"] = acoustic.decode(mean)
        cache = StreamingConvCache()
        out["decoder.streamed"] = torch.cat([acoustic.decode(mean[:, i:i + 1], cache) for i in range(mean.shape[1])], -1)
    return out


@pytest.mark.golden
def test_golden_encoders_and_decoder() -> None:
    tensors, meta = read(GOLDEN)
    mine = ours(tensors, meta)
    assert len(mine) == 5
    for k, v in mine.items():
        ref = tensors[k]
        bound = BOUND * max(1.0, ref.abs().max().item())
        assert v.shape == ref.shape and (v - ref).abs().max().item() <= bound, (k, (v - ref).abs().max().item())
    # the σ-VAE noise is really there (the sample is not the mean) and is the seed's
    assert (mine["acoustic.sampled"] - mine["acoustic.mean"]).abs().max() > 0.01


@pytest.mark.skipif(not LIVE, reason="live parity needs VIBEVOICE_HF_VENV (a venv with transformers >= 5.3)")
def test_live_equal_to_transformers(tmp_path: Path) -> None:
    out = tmp_path / "tok.safetensors"
    subprocess.run([str(Path(VENV, "bin", "python")), str(HERE / "make_longform_tokenizer_fixtures.py"), str(out)],
                   check=True, timeout=600, capture_output=True)
    tensors, meta = read(out)
    for k, v in ours(tensors, meta).items():
        assert torch.equal(v, tensors[k]), f"{k}: {(v - tensors[k]).abs().max().item():.3g}"


def test_encoder_streams_through_the_cache() -> None:
    """The encoder fed through one StreamingConvCache in hop-aligned chunks is the whole pass within rounding
    (strided convs keep their windows; CPU kernels sum in an order that depends on the number of rows)."""
    tensors, meta = read(GOLDEN)
    acoustic, semantic = build(tensors, meta)
    audio = tensors["audio"]
    hop = acoustic.encoder_config.hop_length
    with torch.no_grad():
        whole = semantic.encode(audio)
        assert torch.equal(semantic.encode(audio, StreamingConvCache()), whole)
        cache = StreamingConvCache()
        parts = torch.cat([semantic.encode(audio[..., a:a + 4 * hop], cache)
                           for a in range(0, audio.shape[-1], 4 * hop)], 1)
    assert parts.shape == whole.shape
    assert (parts - whole).abs().max().item() <= 1e-5 * whole.abs().max().item()


def test_bad_input_is_refused_naming_it() -> None:
    tensors, meta = read(GOLDEN)
    acoustic, semantic = build(tensors, meta)
    with pytest.raises(ValueError, match="multiple of the hop 6"):
        semantic.encode(torch.zeros(1, 1, 10))
    with pytest.raises(ValueError, match=r"expected \(batch, 1, samples\)"):
        acoustic.encode(torch.zeros(1, 2, 12))
    decoder_only = AcousticTokenizer(acoustic.config)
    with pytest.raises(ValueError, match="without its encoder"):
        decoder_only.encode(torch.zeros(1, 1, 12))
    bad = {**json.loads(meta["semantic_tokenizer_config"]), "std_dist_type": "laplace"}
    with pytest.raises(ValueError, match="semantic_tokenizer_config.std_dist_type"):
        AcousticConfig.from_dict(bad, "encoder", "semantic_tokenizer_config")
    bad = {**json.loads(meta["acoustic_tokenizer_config"]), "encoder_ratios": [2, "3"]}
    with pytest.raises(ValueError, match="acoustic_tokenizer_config.encoder_ratios"):
        AcousticConfig.from_dict(bad, "encoder")

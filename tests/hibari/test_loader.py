"""Loading the heart voice's weights: hash check, strict mapping of every initializer, the int8 weights
kept with their scales, the safetensors cache."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from mizuoto.nodes.hibari.loader import (HIBARI_ONNX_SHA256, WeightFileError, linear_weights, load_model,
                                         load_state_dict, onnx_state_dict)
from mizuoto.nodes.blocks.int8 import Int8Linear
from mizuoto.nodes.hibari.model import HibariModel
from mizuoto.nodes.formats.onnx_reader import read_model


def test_no_onnxruntime_onnx_or_protobuf_on_our_path():
    """Load and speak (an out-of-lexicon word too) in a fresh interpreter where those imports fail."""
    code = ("import sys\n"
            "for name in ('onnxruntime', 'onnx', 'google.protobuf'):\n"
            "    sys.modules[name] = None\n"                       # makes `import name` raise ImportError
            "from mizuoto.nodes.hibari.engine import HibariVoice\n"
            "wav, sr = HibariVoice.load().synthesize('Zorblaxian hello.')\n"
            "assert sr == 24000 and wav.numel() > 0\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_initializer_maps_strictly(onnx_path):
    graph = read_model(onnx_path).graph
    weights, used = linear_weights(graph)
    assert len(weights) == 2 * 45                               # the int8 Linear weights and their scales
    assert len(used) == 3 * 45                                  # each with its scale and zero point
    state = onnx_state_dict(onnx_path)
    assert len(state) == len(graph.initializers) - len(used) + len(weights) == 251
    model = HibariModel()
    assert set(state) == set(model.state_dict())
    model.load_state_dict(state, strict=True)
    linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert len(linears) == 45 and all(m.weight.dtype == torch.int8 for m in linears)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())


def test_int8_weights_kept_with_their_scale_transposed(onnx_path):
    init = read_model(onnx_path).graph.initializers
    state = onnx_state_dict(onnx_path)
    q, s = init["/head/Transpose_output_0_quantized"], init["/head/Transpose_output_0_scale"]
    assert torch.equal(state["decoder.head.weight"], torch.from_numpy(q.T.copy()))
    assert state["decoder.head.weight_scale"].dtype == torch.float32
    assert state["decoder.head.weight_scale"].item() == np.float32(s).item()
    model = load_model(dtype=torch.bfloat16)                    # half models keep the scale in float32
    assert model.decoder.head.weight.dtype == torch.int8
    assert model.decoder.head.weight_scale == np.float32(s).item()
    assert model.decoder.head.bias.dtype == torch.bfloat16
    # the attention layer shared by 6 repeats has one weight; its packed q/k/v projection is a Linear
    assert state["prosody.text.attn.self_attn.in_proj.weight"].shape == (576, 192)


def test_wrong_hash_names_file_and_expected_hash(onnx_path, tmp_path):
    data = bytearray(onnx_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "hibari.onnx"
    bad.write_bytes(bytes(data))
    with pytest.raises(WeightFileError, match=HIBARI_ONNX_SHA256) as e:
        load_state_dict(bad, use_cache=False)
    assert str(bad) in str(e.value)
    bad.write_bytes(bytes(data[: len(data) // 2]))             # truncated
    with pytest.raises(WeightFileError, match="corrupt"):
        load_state_dict(bad, use_cache=False)
    with pytest.raises(WeightFileError, match="not found"):
        load_state_dict(tmp_path / "missing.onnx")


def test_cache_is_keyed_by_hash_and_rebuilt_when_corrupt(onnx_path, tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_CACHE_DIR", str(tmp_path))
    fresh = load_state_dict(onnx_path)
    cached = tmp_path / "hibari" / f"hibari-{HIBARI_ONNX_SHA256}.safetensors"
    assert cached.is_file()
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]       # no temp files left behind
    again = load_state_dict(onnx_path)
    assert fresh.keys() == again.keys() and all(torch.equal(fresh[k], again[k]) for k in fresh)
    cached.write_bytes(b"not safetensors")
    rebuilt = load_state_dict(onnx_path)
    assert all(torch.equal(fresh[k], rebuilt[k]) for k in fresh)
    assert cached.stat().st_size > 7_000_000                   # 6.2 M parameters, 5.7 M of them int8


def test_load_model_dtype(onnx_path):
    model = load_model(dtype=torch.bfloat16)
    assert all(p.dtype == (torch.int8 if n.endswith("weight") and isinstance(model.get_submodule(n[:-7]), Int8Linear)
                           else torch.bfloat16) for n, p in model.named_parameters())
    with torch.inference_mode():
        out = model(torch.tensor([[0, 50, 83, 54, 156, 31, 4, 0]]), 1.0)
    assert out["lh"].shape[1] == 601 and torch.isfinite(out["lh"].float()).all()

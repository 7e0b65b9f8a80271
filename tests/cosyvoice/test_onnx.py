"""The speech tokenizers and CAM++ run from their ONNX files as torch modules (nodes/common/onnx_graph.py)
against onnxruntime's outputs on the same graphs (fixtures: tiny random graphs of the real structure,
exported by make_fixtures.py): tokens equal, x-vector within 1e-6."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.common.onnx_graph import OnnxModule, OnnxRuntimeError
from mizuoto.nodes.common.onnx_reader import read_model
from mizuoto.nodes.cosyvoice.loader import CampPlus, SpeechTokenizer

from cosyvoice.tiny import FIXTURES

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def expected():
    return torch.load(FIXTURES / "onnx_outputs.pt", weights_only=True)


@pytest.mark.parametrize("version", [2, 3])
def test_speech_tokens_equal_onnxruntime(expected, version):
    tokenizer = SpeechTokenizer(OnnxModule(read_model(FIXTURES / f"speech_tokenizer_v{version}.onnx")))
    tokens = tokenizer(expected["mel"])
    assert tokens.shape == expected[f"tokens.v{version}"].shape == (1, 51)
    assert torch.equal(tokens, expected[f"tokens.v{version}"].long())


def test_campplus_close_to_onnxruntime(expected):
    campplus = CampPlus(OnnxModule(read_model(FIXTURES / "campplus.onnx")))
    embedding = campplus(expected["fbank"])
    assert embedding.shape == (1, 192)
    torch.testing.assert_close(embedding, expected["campplus"], rtol=1e-5, atol=1e-6)


def test_weights_are_parameters_and_unknown_operators_are_named():
    graph = OnnxModule(read_model(FIXTURES / "campplus.onnx"))
    assert sum(p.numel() for p in graph.parameters()) > 10_000
    model = read_model(FIXTURES / "campplus.onnx")
    model.graph.nodes[0].op_type = "FancyOp"
    with pytest.raises(OnnxRuntimeError, match="FancyOp"):
        OnnxModule(model)


def test_softmax_follows_the_graph_opset():
    from mizuoto.nodes.common.onnx_graph import OPS
    from mizuoto.nodes.common.onnx_reader import Node
    x = torch.randn(2, 3, 4)
    new = OPS["Softmax"](Node("Softmax", "s", ["x"], ["y"], {"axis": 1, "_opset": 13}), [x])[0]
    old = OPS["Softmax"](Node("Softmax", "s", ["x"], ["y"], {"axis": 1, "_opset": 11}), [x])[0]
    torch.testing.assert_close(new, x.softmax(1))
    torch.testing.assert_close(old, x.reshape(2, 12).softmax(-1).reshape(2, 3, 4))

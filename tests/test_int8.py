"""Int8Linear (nodes/blocks/int8.py) against onnxruntime running the same dynamically quantized chain that
`onnxruntime.quantization.quantize_dynamic` writes (and hibari.onnx holds): DynamicQuantizeLinear ->
MatMulInteger -> Cast -> Mul -> Add. Quantized activations, their scale and zero point and the int32 sums
are integers or single IEEE operations: equal. The int32 sums are exact in ours; onnxruntime's are exact on
CPUs with VNNI and clip neighbouring product pairs to int16 on the others (tests/ort_int8.py), which is
emulated there. The output is compared to 1 ulp against onnxruntime's Cast -> Mul -> Add on the exact sums:
onnxruntime may fuse the chain, and a fused kernel on another CPU could compute the Mul and Add with one
rounding (measured: equal)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ort_int8 import onnxruntime_saturates_pairs, saturated_pair_matmul

from mizuoto.nodes.blocks.int8 import Int8Linear, _float_blocks, _int_mm_padded, int8_matmul, quantize_shifted

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _session(weight: np.ndarray, scale: float, bias: np.ndarray):
    """The quantize_dynamic chain for y = x @ (weight * scale)^T + bias, with every intermediate as an output."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["m"]),
             helper.make_node("Add", ["b", "m"], ["y"])]
    inits = [numpy_helper.from_array(np.ascontiguousarray(weight.T), "w"),
             numpy_helper.from_array(np.zeros((), np.int8), "wz"),
             numpy_helper.from_array(np.float32(scale), "ws"), numpy_helper.from_array(bias, "b")]
    outputs = [helper.make_tensor_value_info(n, t, None) for n, t in
               (("y", TensorProto.FLOAT), ("xq", TensorProto.UINT8), ("xs", TensorProto.FLOAT),
                ("xz", TensorProto.UINT8), ("acc", TensorProto.INT32))]
    graph = helper.make_graph(nodes, "int8_linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _tail_session(weight_scale: float, bias: np.ndarray):
    """The chain after MatMulInteger (Cast -> Mul -> Add) on given int32 sums."""
    nodes = [helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["m"]),
             helper.make_node("Add", ["b", "m"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(weight_scale), "ws"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "int8_linear_tail",
                              [helper.make_tensor_value_info("acc", TensorProto.INT32, None),
                               helper.make_tensor_value_info("xs", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def saturates() -> bool:
    return onnxruntime_saturates_pairs(ort)


def _inputs(rng, m: int, k: int, case: int) -> np.ndarray:
    x = rng.standard_normal((m, k)) * rng.uniform(0.01, 30)
    x = [x, np.abs(x), -np.abs(x), x + 3.0, np.zeros_like(x)][case % 5]     # ranges on both sides of 0, and none
    return x.astype(np.float32)


@pytest.mark.parametrize("m,k,n", [(1, 192, 384), (30, 192, 576), (250, 768, 256), (802, 256, 3005), (7, 130, 9)])
def test_int8_linear_equals_onnxruntime(m, k, n, saturates):
    rng = np.random.default_rng(m * k + n)
    weight = rng.integers(-127, 128, (n, k)).astype(np.int8)
    scale, bias = float(np.float32(rng.uniform(1e-3, 3e-2))), rng.standard_normal(n).astype(np.float32)
    session, tail = _session(weight, scale, bias), _tail_session(scale, bias)
    layer = Int8Linear(k, n)
    layer.load_state_dict({"weight": torch.from_numpy(weight), "bias": torch.from_numpy(bias),
                           "weight_scale": torch.tensor(scale, dtype=torch.float32)})
    for case in range(5):
        x = _inputs(rng, m, k, case)
        y, xq, xs, xz, acc = session.run(None, {"x": x})
        shifted, s, zp = quantize_shifted(torch.from_numpy(x))
        assert np.array_equal(shifted.numpy().astype(np.int16) + 128, xq) and s.item() == xs and zp.item() == xz
        exact = (int8_matmul(torch.from_numpy(xq.astype(np.int16) - 128).to(torch.int8), torch.from_numpy(weight))
                 .numpy() + (128 - int(xz)) * weight.sum(axis=1, dtype=np.int32))
        assert np.array_equal(exact, xq.astype(np.int64) @ weight.T.astype(np.int64)
                              - int(xz) * weight.sum(axis=1, dtype=np.int64))
        if saturates:       # emulated on the first 64 rows (rows are independent; the emulation is slow)
            clipped = saturated_pair_matmul(torch.from_numpy(xq[:64]), torch.from_numpy(weight)).numpy() \
                - int(xz) * weight.sum(axis=1, dtype=np.int32)
            assert np.array_equal(acc[:64], clipped)
        else:
            assert np.array_equal(acc, exact)
        with torch.inference_mode():
            ours = layer(torch.from_numpy(x).view(1, m, k)).numpy()[0]
        np.testing.assert_array_max_ulp(ours, tail.run(None, {"acc": exact, "xs": xs})[0], maxulp=1)
        if not saturates:
            np.testing.assert_array_max_ulp(ours, y, maxulp=1)


def test_every_matmul_path_is_exact():
    """The CUDA path (padded to torch._int_mm's shape rules) and the float fallback, run here on the CPU,
    equal the CPU kernel, including sums too large for float32 to hold exactly."""
    rng = np.random.default_rng(0)
    for m, k, n in [(1, 3, 5), (16, 1030, 7), (40, 2500, 33)]:
        x = torch.from_numpy(rng.integers(-128, 128, (m, k)).astype(np.int8))
        w = torch.from_numpy(rng.integers(-127, 128, (n, k)).astype(np.int8))
        exact = (x.long() @ w.long().t()).to(torch.int32)
        assert torch.equal(int8_matmul(x, w), exact)
        assert torch.equal(_int_mm_padded(x, w), exact)
        assert torch.equal(_float_blocks(x, w), exact)
    big = torch.full((2, 2500), -128, dtype=torch.int8)
    assert int8_matmul(big, torch.full((3, 2500), -127, dtype=torch.int8))[0, 0].item() == 128 * 127 * 2500


def test_scale_stays_float32_in_half_models_and_state_dict_round_trips():
    layer = Int8Linear(4, 3)
    state = {"weight": torch.tensor([[1, -2, 3, 127]] * 3, dtype=torch.int8), "bias": torch.zeros(3),
             "weight_scale": torch.tensor(0.1, dtype=torch.float32)}
    layer.load_state_dict(state)
    layer.to(torch.bfloat16)
    assert layer.weight.dtype == torch.int8 and layer.weight_scale == np.float32(0.1).item()
    saved = layer.state_dict()
    assert saved["weight_scale"].dtype == torch.float32 and saved["weight_scale"].item() == np.float32(0.1).item()
    with pytest.raises(RuntimeError, match="weight_scale"):
        Int8Linear(4, 3).load_state_dict({k: v for k, v in state.items() if k != "weight_scale"})
    with pytest.raises(RuntimeError, match="positive finite scale"):
        Int8Linear(4, 3).load_state_dict({**state, "weight_scale": torch.tensor(float("nan"))})

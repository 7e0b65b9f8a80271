"""What onnxruntime's MatMulInteger computes on the CPU running the tests.

On x86 CPUs without AVX-VNNI / AVX512-VNNI / AMX, onnxruntime's MLAS u8 x s8 kernel multiplies with
`vpmaddubsw`, which adds each two neighbouring products (inputs 2i and 2i + 1) into an int16 with
saturation before the exact int32 sums: a pair above 32767 (e.g. 255 * 127 * 2) is clipped. onnxruntime's
own quantization docs warn of it (`reduce_range`). On other CPUs the sums are exact. Our Int8Linear computes
the exact sums everywhere, so references taken from onnxruntime are compared on this CPU's terms: the
saturating sums are emulated here, as integers, where onnxruntime saturates."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

PAIR_MIN, PAIR_MAX = -(2 ** 15), 2 ** 15 - 1


def _matmul_integer_session(ort):
    from onnx import TensorProto, helper
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("a", TensorProto.UINT8, None),
                                                helper.make_tensor_value_info("b", TensorProto.INT8, None)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def onnxruntime_saturates_pairs(ort) -> bool:
    """Whether this CPU's onnxruntime clips neighbouring u8 x s8 product pairs to int16 (probed: 255 * 127
    twice is 64770 exactly, 32767 clipped, on 64 inputs so the vector kernel runs)."""
    a = np.full((16, 64), 255, np.uint8)
    b = np.full((64, 16), 127, np.int8)
    got = int(_matmul_integer_session(ort).run(None, {"a": a, "b": b})[0][0, 0])
    if got not in (64 * 255 * 127, 32 * PAIR_MAX):
        raise AssertionError(f"onnxruntime's MatMulInteger gave {got}: neither the exact sum nor pair saturation")
    return got == 32 * PAIR_MAX


def saturated_pair_matmul(a: Tensor, weight: Tensor, block: int = 4096) -> Tensor:
    """uint8-valued a [M, K] (any integer dtype) @ int8 weight [N, K]^T -> int32 [M, N], each pair of
    neighbouring products clipped to int16 before the sum, as onnxruntime's AVX2 kernel does: the exact sums
    (float64 holds them exactly), corrected only at (row, pair) where the two activations can reach past
    int16 at all (their sum times 127 above 32767)."""
    a, w = a.to(torch.int32), weight.to(torch.int32)
    if a.shape[1] % 2:
        a, w = torch.nn.functional.pad(a, (0, 1)), torch.nn.functional.pad(w, (0, 1))
    out = (a.double() @ w.double().t()).to(torch.int64)
    rows, pairs = torch.nonzero((a[:, 0::2] + a[:, 1::2]) * 127 > PAIR_MAX, as_tuple=True)
    for start in range(0, rows.numel(), block):
        r, p = rows[start:start + block], 2 * pairs[start:start + block]
        sums = a[r, p, None] * w[:, p].t() + a[r, p + 1, None] * w[:, p + 1].t()       # [block, N]
        out.index_add_(0, r, (sums.clamp(PAIR_MIN, PAIR_MAX) - sums).to(torch.int64))
    return out.to(torch.int32)


def saturating_int8_matmul(shifted: Tensor, weight: Tensor) -> Tensor:
    """A stand-in for nodes.blocks.int8.int8_matmul that gives onnxruntime's saturating sums: Int8Linear
    passes activations shifted to int8 (q - 128) and adds 128 * column sums back, which it takes from a row
    of ones (129 * 127 * 2 < 32767: that row never saturates, so the column sums stay exact)."""
    if int(weight.min()) < -127:
        raise ValueError("saturating_int8_matmul: weights of -128 would clip the column-sum row")
    column_sums = weight.sum(1, dtype=torch.int32)
    return saturated_pair_matmul(shifted.to(torch.int32) + 128, weight) - 128 * column_sums

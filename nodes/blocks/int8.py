"""Dynamically quantized Linear layers computed exactly as onnxruntime runs an int8 ONNX export.

`onnxruntime.quantization.quantize_dynamic` turns each MatMul + Add into

    DynamicQuantizeLinear(x) -> MatMulInteger(xq, wq, x_zp, 0) -> Cast -> Mul(., x_scale * w_scale) -> Add(bias, .)

with per-tensor int8 weights (zero point 0) and uint8 activations quantized per call from their own
range. Everything but the matmul is elementwise float32 with one rounding each, and the matmul is an
integer sum, exact in any order, so `Int8Linear` reproduces onnxruntime's outputs for the same input
bit for bit (tests/test_int8.py) where onnxruntime's sums are exact (CPUs with VNNI or AMX, ARM, GPUs). On
x86 CPUs without VNNI its kernel clips each pair of neighbouring products to int16; ours stays exact there,
the same on every machine. The matmul runs as int8 x int8 -> int32 (`torch._int_mm`): the uint8
activations are shifted by 128 into int8 and the shift is added back as an integer per column,

    (xq - x_zp) @ wq = (xq - 128) @ wq + (128 - x_zp) * sum(wq over inputs).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# torch._int_mm on CUDA takes M > 16 and K, N multiples of 8; zero rows and columns change no sum.
_CUDA_MIN_ROWS, _CUDA_MULTIPLE = 17, 8


def quantization_range(x: Tensor) -> tuple[Tensor, Tensor]:
    """ONNX DynamicQuantizeLinear's parameters as onnxruntime computes them (core/util/qmath.h
    GetQuantizationParameter): the range widened to include 0, scale = range / 255 (1 for an all-zero
    input), zero point = round_half_even(clamp(-min / scale, 0, 255)). Float32 [] each."""
    lo, hi = torch.aminmax(x.float())
    lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
    scale = torch.where(hi == lo, torch.ones_like(hi), (hi - lo) / 255.0)
    return scale, torch.round((0.0 - lo / scale).clamp(0.0, 255.0))


def quantize_shifted(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ONNX DynamicQuantizeLinear (MlasQuantizeLinear: q = clamp(round_half_even(x / scale) + zp, 0, 255)),
    returned as q - 128 in int8, computed straight from the float (round(x / scale) + zp is an integer, so
    the shift is exact), with the scale and the zero point."""
    scale, zero_point = quantization_range(x)
    shifted = torch.div(x.float(), scale).round_().add_(zero_point - 128.0).clamp_(-128.0, 127.0)
    return shifted.to(torch.int8), scale, zero_point


def int8_matmul(x: Tensor, weight: Tensor) -> Tensor:
    """int8 [M, K] @ int8 weight [N, K]^T -> int32 [M, N], exact."""
    if x.device.type == "cpu":
        return torch._int_mm(x, weight.t())
    if x.device.type == "cuda":
        return _int_mm_padded(x, weight)
    return _float_blocks(x, weight)


def _int_mm_padded(x: Tensor, weight: Tensor) -> Tensor:
    m, k = x.shape
    n = weight.shape[0]
    pad_k = -k % _CUDA_MULTIPLE
    x = F.pad(x, (0, pad_k, 0, max(0, _CUDA_MIN_ROWS - m)))
    w = F.pad(weight, (0, pad_k, 0, -n % _CUDA_MULTIPLE))
    return torch._int_mm(x, w.t())[:m, :n]


def _float_blocks(x: Tensor, weight: Tensor) -> Tensor:
    """Where no int8 kernel exists: float32 over blocks of 1024 inputs, where every partial sum is an
    integer below 128 * 127 * 1024 < 2**24 and so exact in any order."""
    out = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.int32, device=x.device)
    for start in range(0, x.shape[1], 1024):
        out += (x[:, start:start + 1024].float() @ weight[:, start:start + 1024].float().t()).to(torch.int32)
    return out


class Int8Linear(nn.Module):
    """y = x @ W^T + b with W stored int8 per tensor (`weight`, [out, in]; `weight_scale`, a float) and x
    quantized per call as onnxruntime does; y in x's dtype (float32 math inside, as the graph has it).

    The scale is a Python float held beside the int8 tensor and saved in the state dict as a float32
    scalar: a model cast to bf16 keeps its quantization exact (a bf16 scale would shift every output)."""

    STREAMABLE = True            # reads its weights only inside its own forward: the runtime may stream them

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.zeros(out_features, in_features, dtype=torch.int8), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.weight_scale = 1.0

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        shifted, scale, zero_point = quantize_shifted(x)
        acc = int8_matmul(shifted, self.weight)
        column_sums = int8_matmul(torch.ones(1, x.shape[1], dtype=torch.int8, device=x.device), self.weight)[0]
        acc.add_((128 - zero_point.to(torch.int32)) * column_sums)
        # Cast, Mul, Add, one rounding each; the cast is written over the int32 sums (same element size, each
        # element read before it is written), which spares an output-sized allocation per call
        y = acc.view(torch.float32).copy_(acc)
        y.mul_(scale * self.weight_scale)
        if self.bias is not None:
            y.add_(self.bias.float())
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "weight_scale"] = torch.tensor(self.weight_scale, dtype=torch.float32)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: Any, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        key = prefix + "weight_scale"
        if key in state_dict:
            scale = state_dict[key]
            if scale.numel() != 1 or not torch.isfinite(scale).all() or float(scale) <= 0:
                error_msgs.append(f"{key}: expected one positive finite scale, got shape {list(scale.shape)}")
            else:
                self.weight_scale = float(scale.to(torch.float32))
        elif strict:
            missing_keys.append(key)
        super()._load_from_state_dict({k: v for k, v in state_dict.items() if k != key}, prefix, local_metadata,
                                      strict, missing_keys, unexpected_keys, error_msgs)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight, scale={self.weight_scale:.3g}"

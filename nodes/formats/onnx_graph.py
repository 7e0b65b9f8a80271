"""Run an ONNX graph as a torch module: its initializers become parameters, its nodes torch ops.

For small upstream networks shipped only as ONNX (CosyVoice's S3 speech tokenizer and CAM++ speaker
model), whose exported graphs carry no stable parameter names to map onto a hand-written module:

    model = read_model("campplus.onnx")               # nodes/formats/onnx_reader.py (no onnx/onnxruntime)
    net = OnnxModule(model)                           # float initializers -> nn.Parameters (float32)
    (embedding,) = net(fbank)                         # graph inputs in order -> graph outputs in order

The weights are read raw by the ops (F.conv1d(x, w)), not inside nn.Linear/nn.Conv forwards, so a
runtime handle keeps the whole module in its fixed part (it never streams); these networks are small.
Only the operators below are implemented (what torch's exporter emits for such encoders); any other
is a clear error naming the operator and node, never a silent fallback. Numerics follow the ONNX
operator definitions in torch: results are close to onnxruntime's, not bit-identical.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.oom import is_oom
from .onnx_reader import Model, Node

# TensorProto.DataType -> torch dtype
DTYPES: dict[int, torch.dtype] = {1: torch.float32, 2: torch.uint8, 3: torch.int8, 5: torch.int16, 6: torch.int32,
                                  7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64,
                                  16: torch.bfloat16}


class OnnxRuntimeError(ValueError):
    """The graph uses something this interpreter does not implement, or fails on the given inputs."""


def _ints(t: Tensor | None) -> list[int]:
    return [] if t is None else [int(v) for v in t.reshape(-1).tolist()]


def _axes(node: Node, args: list[Tensor | None], index: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or the input at `index` (newer)."""
    if "axes" in node.attributes:
        return [int(a) for a in node.attributes["axes"]]
    if len(args) > index and args[index] is not None:
        return _ints(args[index])
    return None


def _reduce(fn: Callable[..., Tensor]) -> Callable[[Node, list], list[Tensor]]:
    def op(node: Node, args: list) -> list[Tensor]:
        x = args[0]
        axes = _axes(node, args, 1)
        keep = bool(node.attributes.get("keepdims", 1))
        if not axes:
            if node.attributes.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.dim()))
        return [fn(x, dim=tuple(a % x.dim() for a in axes), keepdim=keep)]
    return op


def _gather(node: Node, args: list) -> list[Tensor]:
    data, idx = args
    axis = int(node.attributes.get("axis", 0)) % data.dim()
    idx = idx.long()
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    out = data.index_select(axis, idx.reshape(-1))
    return [out.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])]


def _slice(node: Node, args: list) -> list[Tensor]:
    x = args[0]
    if len(args) > 1:
        starts, ends = _ints(args[1]), _ints(args[2])
        axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else list(range(len(starts)))
        steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(starts)
    else:
        starts, ends = list(node.attributes["starts"]), list(node.attributes["ends"])
        axes = list(node.attributes.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.dim()
        n = x.shape[axis]
        if step > 0:
            s = max(0, min(n, start + n if start < 0 else start))
            e = max(0, min(n, end + n if end < 0 else end))
            x = x.narrow(axis, s, max(0, e - s))[(slice(None),) * axis + (slice(None, None, step),)]
        else:
            s = max(-1, min(n - 1, start + n if start < 0 else start))
            e = max(-1, min(n - 1, end + n if end < 0 else end))
            idx = torch.arange(s, e, step, device=x.device)
            x = x.index_select(axis, idx)
    return [x]


def _reshape(node: Node, args: list) -> list[Tensor]:
    x, shape = args[0], _ints(args[1])
    if not node.attributes.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape)]


def _unsqueeze(node: Node, args: list) -> list[Tensor]:
    x = args[0]
    axes = sorted(a % (x.dim() + len(_axes(node, args, 1))) for a in _axes(node, args, 1))
    for a in axes:
        x = x.unsqueeze(a)
    return [x]


def _squeeze(node: Node, args: list) -> list[Tensor]:
    x = args[0]
    axes = _axes(node, args, 1)
    if axes is None:
        return [x.squeeze()]
    for a in sorted((a % x.dim() for a in axes), reverse=True):
        x = x.squeeze(a)
    return [x]


def _split(node: Node, args: list) -> list[Tensor]:
    x = args[0]
    axis = int(node.attributes.get("axis", 0))
    if len(args) > 1 and args[1] is not None:
        sizes = _ints(args[1])
    elif "split" in node.attributes:
        sizes = list(node.attributes["split"])
    else:
        parts = int(node.attributes.get("num_outputs", len(node.outputs)))
        step = -(-x.shape[axis] // parts)
        sizes = [min(step, x.shape[axis] - i * step) for i in range(parts)]
    return list(torch.split(x, sizes, dim=axis))


def _conv(node: Node, args: list) -> list[Tensor]:
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    a = node.attributes
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise OnnxRuntimeError(f"Conv {node.name!r}: auto_pad {a['auto_pad']!r} is not supported")
    dims = w.dim() - 2
    pads = list(a.get("pads", [0] * 2 * dims))
    strides = list(a.get("strides", [1] * dims))
    dilations = list(a.get("dilations", [1] * dims))
    groups = int(a.get("group", 1))
    if pads[:dims] != pads[dims:]:
        pad = []
        for i in reversed(range(dims)):
            pad += [pads[i], pads[i + dims]]
        x, padding = F.pad(x, pad), [0] * dims
    else:
        padding = pads[:dims]
    conv = {1: F.conv1d, 2: F.conv2d}.get(dims)
    if conv is None:
        raise OnnxRuntimeError(f"Conv {node.name!r}: {dims}-D convolutions are not supported")
    return [conv(x, w, b, strides, padding, dilations, groups)]


def _pad(node: Node, args: list) -> list[Tensor]:
    x = args[0]
    pads = _ints(args[1]) if len(args) > 1 else list(node.attributes["pads"])
    value = float(args[2].item()) if len(args) > 2 and args[2] is not None and args[2].numel() else \
        float(node.attributes.get("value", 0.0))
    axes = [a % x.dim() for a in _ints(args[3])] if len(args) > 3 and args[3] is not None else list(range(x.dim()))
    n = len(axes)
    begin, end = dict(zip(axes, pads[:n])), dict(zip(axes, pads[n:]))
    torch_pad: list[int] = []
    for d in reversed(range(x.dim())):   # F.pad lists the last dimension first
        torch_pad += [begin.get(d, 0), end.get(d, 0)]
    while torch_pad and torch_pad[-2:] == [0, 0]:
        torch_pad = torch_pad[:-2]
    if not torch_pad:
        return [x]
    mode = node.attributes.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "constant":
        return [F.pad(x, torch_pad, value=value)]
    return [F.pad(x, torch_pad, mode={"edge": "replicate"}.get(mode, mode))]


def _layer_norm(node: Node, args: list) -> list[Tensor]:
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axis = int(node.attributes.get("axis", -1)) % x.dim()
    eps = float(node.attributes.get("epsilon", 1e-5))
    return [F.layer_norm(x, x.shape[axis:], scale, bias, eps)]


def _batch_norm(node: Node, args: list) -> list[Tensor]:
    x, scale, bias, mean, var = args[:5]
    return [F.batch_norm(x, mean, var, scale, bias, False, 0.0, float(node.attributes.get("epsilon", 1e-5)))]


def _softmax(fn: Callable[..., Tensor]) -> Callable[[Node, list], list[Tensor]]:
    """Opset 13+: over `axis` (default -1). Before 13: over all dims from `axis` (default 1) flattened."""
    def op(node: Node, args: list) -> list[Tensor]:
        x = args[0]
        if node.attributes.get("_opset", 13) >= 13:
            return [fn(x, dim=int(node.attributes.get("axis", -1)))]
        axis = int(node.attributes.get("axis", 1)) % max(x.dim(), 1)
        return [fn(x.reshape(*x.shape[:axis], -1), dim=-1).reshape(x.shape)]
    return op


def _gemm(node: Node, args: list) -> list[Tensor]:
    a, b = args[0], args[1]
    at = node.attributes
    if at.get("transA", 0):
        a = a.t()
    if at.get("transB", 0):
        b = b.t()
    y = float(at.get("alpha", 1.0)) * (a @ b)
    if len(args) > 2 and args[2] is not None:
        y = y + float(at.get("beta", 1.0)) * args[2]
    return [y]


def _constant_of_shape(node: Node, args: list) -> list[Tensor]:
    value = node.attributes.get("value")
    fill = torch.as_tensor(np.asarray(value)) if value is not None else torch.zeros(1)
    return [torch.full(_ints(args[0]), fill.reshape(-1)[0].item(), dtype=fill.dtype, device=args[0].device)]


def _expand(node: Node, args: list) -> list[Tensor]:
    x, shape = args[0], _ints(args[1])
    return [x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(shape)))]


def _tile(node: Node, args: list) -> list[Tensor]:
    return [args[0].repeat(_ints(args[1]))]


def _clip(node: Node, args: list) -> list[Tensor]:
    lo = args[1] if len(args) > 1 and args[1] is not None else node.attributes.get("min")
    hi = args[2] if len(args) > 2 and args[2] is not None else node.attributes.get("max")
    return [torch.clamp(args[0], min=lo, max=hi)]


def _shape(node: Node, args: list) -> list[Tensor]:
    shape = list(args[0].shape)
    start, end = node.attributes.get("start", 0), node.attributes.get("end", len(shape))
    return [torch.tensor(shape[start:end], dtype=torch.int64, device=args[0].device)]


def _pool(kind: str) -> Callable[[Node, list], list[Tensor]]:
    def op(node: Node, args: list) -> list[Tensor]:
        x = args[0]
        a = node.attributes
        dims = x.dim() - 2
        if kind == "global":
            return [x.mean(dim=tuple(range(2, x.dim())), keepdim=True)]
        k = list(a["kernel_shape"])
        s = list(a.get("strides", [1] * dims))
        p = list(a.get("pads", [0] * 2 * dims))[:dims]
        fn = {("avg", 1): F.avg_pool1d, ("avg", 2): F.avg_pool2d, ("max", 1): F.max_pool1d,
              ("max", 2): F.max_pool2d}[(kind, dims)]
        if kind == "avg":
            return [fn(x, k, s, p, bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)))]
        return [fn(x, k, s, p, ceil_mode=bool(a.get("ceil_mode", 0)))]
    return op


def _unary(fn: Callable[[Tensor], Tensor]) -> Callable[[Node, list], list[Tensor]]:
    return lambda node, args: [fn(args[0])]


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Node, list], list[Tensor]]:
    return lambda node, args: [fn(args[0], args[1])]


def _variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Node, list], list[Tensor]]:
    def op(node: Node, args: list) -> list[Tensor]:
        out = args[0]
        for a in args[1:]:
            out = fn(out, a)
        return [out]
    return op


def _flatten(node: Node, args: list) -> list[Tensor]:
    """2-D [prod(shape[:axis]), prod(shape[axis:])]; axis may equal the rank (then [numel, 1])."""
    x = args[0]
    axis = int(node.attributes.get("axis", 1))
    axis = axis + x.dim() if axis < 0 else axis
    return [x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))]


def _div(a: Tensor, b: Tensor) -> Tensor:
    if not a.dtype.is_floating_point and not b.dtype.is_floating_point:
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


def _mod(node: Node, args: list) -> list[Tensor]:
    a, b = args
    return [torch.fmod(a, b) if node.attributes.get("fmod", 0) else torch.remainder(a, b)]


OPS: dict[str, Callable[[Node, list], list[Tensor]]] = {
    "Add": _binary(torch.add), "Sub": _binary(torch.sub), "Mul": _binary(torch.mul), "Div": _binary(_div),
    "Pow": _binary(lambda a, b: torch.pow(a, b.to(a.dtype) if a.dtype.is_floating_point else b)),
    "MatMul": _binary(torch.matmul), "Gemm": _gemm, "Mod": _mod,
    "Equal": _binary(torch.eq), "Less": _binary(torch.lt), "Greater": _binary(torch.gt),
    "LessOrEqual": _binary(torch.le), "GreaterOrEqual": _binary(torch.ge),
    "And": _binary(torch.logical_and), "Or": _binary(torch.logical_or), "Not": _unary(torch.logical_not),
    "Max": _variadic(torch.maximum), "Min": _variadic(torch.minimum), "Sum": _variadic(torch.add),
    "Sqrt": _unary(torch.sqrt), "Exp": _unary(torch.exp), "Log": _unary(torch.log), "Neg": _unary(torch.neg),
    "Abs": _unary(torch.abs), "Erf": _unary(torch.erf), "Tanh": _unary(torch.tanh), "Sigmoid": _unary(torch.sigmoid),
    "Relu": _unary(torch.relu), "Sin": _unary(torch.sin), "Cos": _unary(torch.cos), "Round": _unary(torch.round),
    "Floor": _unary(torch.floor), "Ceil": _unary(torch.ceil), "Sign": _unary(torch.sign),
    "Reciprocal": _unary(torch.reciprocal), "Identity": _unary(lambda x: x), "Softplus": _unary(F.softplus),
    "IsNaN": _unary(torch.isnan),
    "LeakyRelu": lambda n, a: [F.leaky_relu(a[0], float(n.attributes.get("alpha", 0.01)))],
    "Elu": lambda n, a: [F.elu(a[0], float(n.attributes.get("alpha", 1.0)))],
    "Gelu": lambda n, a: [F.gelu(a[0], approximate="tanh" if n.attributes.get("approximate", b"none")
                                 in (b"tanh", "tanh") else "none")],
    "Dropout": lambda n, a: [a[0]],
    "Softmax": _softmax(torch.softmax), "LogSoftmax": _softmax(torch.log_softmax),
    "ReduceMean": _reduce(torch.mean), "ReduceSum": _reduce(torch.sum),
    "ReduceMax": _reduce(lambda x, dim, keepdim: torch.amax(x, dim=dim, keepdim=keepdim)),
    "ReduceMin": _reduce(lambda x, dim, keepdim: torch.amin(x, dim=dim, keepdim=keepdim)),
    "ReduceProd": _reduce(lambda x, dim, keepdim: _prod(x, dim, keepdim)),
    "ArgMax": lambda n, a: [torch.argmax(a[0], dim=int(n.attributes.get("axis", 0)),
                                         keepdim=bool(n.attributes.get("keepdims", 1)))],
    "CumSum": lambda n, a: [torch.cumsum(a[0], dim=int(a[1].item()))],
    "Transpose": lambda n, a: [a[0].permute(*(n.attributes.get("perm") or reversed(range(a[0].dim()))))],
    "Reshape": _reshape, "Flatten": _flatten,
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Concat": lambda n, a: [torch.cat(
        [t for t in a if t is not None], dim=int(n.attributes["axis"]))],
    "Split": _split, "Slice": _slice, "Gather": _gather, "Shape": _shape,
    "Size": lambda n, a: [torch.tensor(a[0].numel(), dtype=torch.int64, device=a[0].device)],
    "Cast": lambda n, a: [a[0].to(DTYPES[int(n.attributes["to"])])],
    "ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile, "Clip": _clip,
    "Range": lambda n, a: [torch.arange(a[0].item(), a[1].item(), a[2].item(), dtype=a[0].dtype,
                                        device=a[0].device)],
    "Where": lambda n, a: [torch.where(a[0], a[1], a[2])],
    "Conv": _conv, "Pad": _pad, "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "GlobalAveragePool": _pool("global"), "AveragePool": _pool("avg"), "MaxPool": _pool("max"),
    "Trilu": lambda n, a: [torch.triu(a[0], int(a[1].item()) if len(a) > 1 and a[1] is not None else 0)
                           if n.attributes.get("upper", 1) else
                           torch.tril(a[0], int(a[1].item()) if len(a) > 1 and a[1] is not None else 0)],
}


def _prod(x: Tensor, dim: tuple[int, ...], keepdim: bool) -> Tensor:
    for d in sorted(dim, reverse=True):
        x = torch.prod(x, dim=d, keepdim=keepdim)
    return x


class OnnxModule(nn.Module):
    """An ONNX graph whose float initializers are float32 parameters (`weights.w<i>`, in file order;
    `names[i]` is the initializer's own name); other initializers and Constant values are buffers."""

    def __init__(self, model: Model, what: str = "ONNX model") -> None:
        super().__init__()
        g = model.graph
        self.what = what
        self.opset = model.opsets.get("", model.opsets.get("ai.onnx", 13))
        unknown = sorted({n.op_type for n in g.nodes if n.op_type not in OPS and n.op_type != "Constant"})
        if unknown or any(n.domain not in ("", "ai.onnx") for n in g.nodes):
            others = sorted({f"{n.domain}:{n.op_type}" for n in g.nodes if n.domain not in ("", "ai.onnx")})
            raise OnnxRuntimeError(f"{what}: operators not supported: {', '.join(unknown + others)}")
        self.weights = nn.ParameterDict()
        self.names: list[str] = []
        self._keys: dict[str, str] = {}
        for i, (name, arr) in enumerate(g.initializers.items()):
            t = torch.from_numpy(np.array(arr, copy=True))
            key = f"w{i}"
            self._keys[name] = key
            self.names.append(name)
            if t.dtype.is_floating_point:
                self.weights[key] = nn.Parameter(t.float(), requires_grad=False)
            else:
                self.register_buffer(f"c_{key}", t, persistent=False)
        for j, node in enumerate(n for n in g.nodes if n.op_type == "Constant"):
            a = node.attributes
            if "value" in a:
                value = torch.from_numpy(np.array(a["value"], copy=True))
            elif "value_float" in a:
                value = torch.tensor(float(a["value_float"]))
            elif "value_int" in a:
                value = torch.tensor(int(a["value_int"]))
            elif "value_ints" in a:
                value = torch.tensor([int(v) for v in a["value_ints"]])
            elif "value_floats" in a:
                value = torch.tensor([float(v) for v in a["value_floats"]])
            else:
                raise OnnxRuntimeError(f"{what}: Constant {node.name!r} has an unsupported value {sorted(a)}")
            key = f"k{j}"
            self._keys[node.outputs[0]] = key
            self.register_buffer(f"c_{key}", value.float() if value.dtype == torch.float64 else value,
                                 persistent=False)
        self.nodes = [n for n in g.nodes if n.op_type != "Constant"]
        for n in self.nodes:
            if n.op_type in ("Softmax", "LogSoftmax"):
                n.attributes["_opset"] = self.opset
        self.inputs = [name for name in g.inputs if name not in g.initializers]
        self.outputs = list(g.outputs)
        # Free every value after its last use.
        last: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            for name in n.inputs:
                last[name] = i
        self._free = [[name for name in n.inputs if last.get(name) == i and name not in self.outputs]
                      for i, n in enumerate(self.nodes)]

    def _value(self, name: str) -> Tensor:
        key = self._keys[name]
        return self.weights[key] if key in self.weights else getattr(self, f"c_{key}")

    def forward(self, *inputs: Tensor) -> list[Tensor]:
        if len(inputs) != len(self.inputs):
            raise OnnxRuntimeError(f"{self.what}: expected {len(self.inputs)} inputs ({', '.join(self.inputs)}), "
                                   f"got {len(inputs)}")
        values: dict[str, Any] = dict(zip(self.inputs, inputs))
        for node, free in zip(self.nodes, self._free):
            args = [None if not name else values[name] if name in values else self._value(name)
                    for name in node.inputs]
            try:
                outs = OPS[node.op_type](node, args)
            except OnnxRuntimeError:
                raise
            except (RuntimeError, ValueError, IndexError, KeyError, TypeError) as e:
                if is_oom(e):
                    raise       # out of device memory: the manager's exact retry, not a graph error
                raise OnnxRuntimeError(f"{self.what}: node {node.name!r} ({node.op_type}) failed: {e}") from None
            for name, out in zip(node.outputs, outs):
                if name:
                    values[name] = out
            for name in free:
                values.pop(name, None)
        return [values[name] if name in values else self._value(name) for name in self.outputs]

"""Reference tools for the parity tests (need `onnx` and `onnxruntime`; only imported by test_parity.py
and the benchmark, never by the pack).

hibari.onnx quantizes activations dynamically (DynamicQuantizeLinear -> MatMulInteger). Our model
does the same, layer for layer bit for bit, but a 1-ulp difference in any float op before a quantizer
(LayerNorm, convolutions, GELU: other kernels) can move an activation to the next int8 step, so the
int8 paths agree only statistically end to end. The structural reference is therefore the same graph
with each dynamic-quant MatMul replaced by a float MatMul on the dequantized weight (int8 x scale in
float32), against our model's `float_twin`.
"""
from __future__ import annotations

import copy
from collections import defaultdict

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper, numpy_helper


def dequantized_model(path: str) -> onnx.ModelProto:
    model = onnx.load(path)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers = defaultdict(list)
    for n in g.node:
        for i in n.input:
            consumers[i].append(n)
    drop, new_nodes, new_inits = set(), {}, {}
    for n in g.node:
        if n.op_type != "MatMulInteger":
            continue
        dql = producer[n.input[0]]                                   # DynamicQuantizeLinear(x)
        assert dql.op_type == "DynamicQuantizeLinear"
        cast = consumers[n.output[0]][0]
        mul = consumers[cast.output[0]][0]
        scales = producer[next(i for i in mul.input if i != cast.output[0])]
        w_scale = next(i for i in scales.input if i in inits)
        wq = numpy_helper.to_array(inits[n.input[1]])
        assert not numpy_helper.to_array(inits[n.input[3]]).any()
        w_name = n.input[1] + "_dequantized"
        new_inits[w_name] = wq.astype(np.float32) * numpy_helper.to_array(inits[w_scale]).astype(np.float32)
        new_nodes[id(n)] = helper.make_node("MatMul", [dql.input[0], w_name], [mul.output[0]], name=n.name + "_fp32")
        drop.update(id(x) for x in (cast, mul, scales))
        if all(c.op_type in ("MatMulInteger", "Mul") for c in sum((consumers[o] for o in dql.output), [])):
            drop.add(id(dql))
    nodes = [new_nodes.get(id(n), n) for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in new_inits.items())
    assert not any(n.op_type in ("MatMulInteger", "DynamicQuantizeLinear") for n in g.node)
    onnx.checker.check_model(model)
    return model


def session(model: onnx.ModelProto | str, threads: int = 1) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = threads
    so.log_severity_level = 3
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def run(sess: ort.InferenceSession, ids: list[int], speed: float) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(None, {"ids": np.asarray([ids], np.int64), "speed": np.asarray([speed], np.float32)})
    return dict(zip(names, outs))


def float_twin(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of our model with every Int8Linear replaced by an nn.Linear on its dequantized weight
    (int8 x scale in float32): the torch counterpart of `dequantized_model`."""
    from mizuoto.nodes.blocks.int8 import Int8Linear
    twin = copy.deepcopy(model)
    for name, module in list(twin.named_modules()):
        if isinstance(module, Int8Linear):
            linear = torch.nn.Linear(module.in_features, module.out_features, dtype=module.bias.dtype)
            with torch.no_grad():
                linear.weight.copy_(module.weight.to(torch.float32) * torch.tensor(module.weight_scale, dtype=torch.float32))
                linear.bias.copy_(module.bias)
            parent, _, child = name.rpartition(".")
            setattr(twin.get_submodule(parent) if parent else twin, child, linear)
    return twin.eval()

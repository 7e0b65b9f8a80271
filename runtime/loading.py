"""Dtype-first loading: the host holds one copy of the weights, in the dtype they will run in.

The usual way to load a half-precision checkpoint builds the module in float32 (random init, twice
the checkpoint's bytes), reads the checkpoint into a dict (one more copy, plus the file's pages while
it is mapped) and converts the module (a third copy, tensor by tensor): three to four times the
checkpoint in host RAM at the peak. `load_module` builds the module with its parameters on the
`meta` device (no memory, no random init), reads each tensor of the safetensors file straight into
a tensor of the target dtype and puts it in place: the peak is the checkpoint's bytes plus one
slice of a tensor being converted (`_SLICE`). The result is bit-identical to building in float32,
`load_state_dict` and `.to(dtype)`.

    model = load_module(lambda: Talker(config), "talker.safetensors", torch.bfloat16)

Non-persistent buffers are built normally by the factory (so computed ones such as RoPE
frequencies keep their values); persistent buffers are built on `meta` and loaded from the file like
parameters. While the factory runs, `nn.Module.register_parameter` / `register_buffer` are patched
(the way `accelerate.init_empty_weights` does it) and `torch.nn.init`'s initialisers skip meta
tensors, so do not build other modules on another thread at the same time.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import re
import struct
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

__all__ = ["CheckpointError", "SizeSource", "load_module", "load_module_from_state", "read_safetensors_header"]

MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit
_CHUNK = 64 << 20  # bytes read per call (large reads in one call can come back short)
_SLICE = 16 << 20  # bytes converted or checked at a time: bounds every temporary of a load

SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "C64": torch.complex64,
}
for _name, _attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
                     ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, _attr):
        SAFETENSORS_DTYPES[_name] = getattr(torch, _attr)


class CheckpointError(ValueError):
    """The file is not a readable safetensors checkpoint, or it does not match the module."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int  # absolute offset in the file
    nbytes: int


def read_safetensors_header(path: str | os.PathLike) -> dict[str, TensorInfo]:
    """The tensors a safetensors file holds (name -> dtype, shape, offset), validated against its size."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: not a safetensors file ({size} bytes, too short for a header)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise CheckpointError(f"{path}: not a safetensors file, or truncated (header of {n} bytes "
                                  f"in a file of {size} bytes)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    data_start, data_size = 8 + n, size - 8 - n
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            shape = tuple(int(s) for s in shape)
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: malformed header entry for {name!r}: {entry!r}") from None
        dtype = SAFETENSORS_DTYPES.get(dtype_name)
        if dtype is None:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype_name!r}, which this torch "
                                  f"cannot hold")
        if any(s < 0 for s in shape):
            raise CheckpointError(f"{path}: tensor {name!r} has a negative dimension {shape}")
        expected = math.prod(shape) * dtype.itemsize
        if not 0 <= begin <= end or end - begin != expected:
            raise CheckpointError(f"{path}: tensor {name!r} ({dtype_name} {list(shape)}) has offsets "
                                  f"[{begin}, {end}], expected {expected} bytes")
        if end > data_size:
            raise CheckpointError(f"{path}: truncated: tensor {name!r} ends at byte {data_start + end} "
                                  f"of a file of {size} bytes")
        tensors[name] = TensorInfo(dtype, shape, data_start + begin, expected)
    spans = sorted((t.begin, t.begin + t.nbytes, name) for name, t in tensors.items() if t.nbytes)
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise CheckpointError(f"{path}: tensors {a!r} and {b!r} overlap in the file")
    return tensors


@dataclass(frozen=True)
class SizeSource:
    """The config file a module's sizes were read from. When the checkpoint disagrees with the module built
    from it, the error names that file's field (`hidden_size = 500000`), not only a tensor shape: the
    config, not the weights, is usually what is wrong."""

    path: str | os.PathLike
    data: Mapping


# torch.nn.init's in-place initialisers: on a `meta` weight they have nothing to fill, and running them
# there makes torch import its Python meta kernels (sympy, dynamo: ~70 MB of RSS, seconds) on first use.
_INITIALISERS = ("constant_", "dirac_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
                 "orthogonal_", "sparse_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_")


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter and persistent buffer registered in the block lives on `meta` (both are read
    from the checkpoint; non-persistent buffers stay where they are built), and `torch.nn.init`
    leaves meta tensors alone."""
    original_parameter, original_buffer = nn.Module.register_parameter, nn.Module.register_buffer
    initialisers = {name: getattr(nn.init, name) for name in _INITIALISERS if hasattr(nn.init, name)}

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original_parameter(module, name, param)
        p = module._parameters.get(name)
        if p is None or p.device.type == "meta" or isinstance(p, nn.parameter.UninitializedParameter):
            return
        module._parameters[name] = nn.Parameter(p.detach().to("meta"), requires_grad=p.requires_grad)

    def register_buffer(module: nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True) -> None:
        # Freed at once, so the next buffer reuses its memory: no full set of throwaway buffers (the
        # codec's codebook statistics: 64 MB) beside the weights at the peak of the load.
        if persistent and tensor is not None and not isinstance(tensor, nn.parameter.UninitializedBuffer):
            tensor = tensor.to("meta")
        original_buffer(module, name, tensor, persistent)

    def skip_meta(init: Callable) -> Callable:
        def initialise(tensor: torch.Tensor, *args, **kwargs):
            return tensor if tensor.device.type == "meta" else init(tensor, *args, **kwargs)
        return initialise

    nn.Module.register_parameter, nn.Module.register_buffer = register_parameter, register_buffer
    for name, init in initialisers.items():
        setattr(nn.init, name, skip_meta(init))
    try:
        yield
    finally:
        nn.Module.register_parameter, nn.Module.register_buffer = original_parameter, original_buffer
        for name, init in initialisers.items():
            setattr(nn.init, name, init)


def _return_freed_heap() -> None:
    """Give the pages of freed heap memory back to the OS (glibc's `malloc_trim`; elsewhere nothing).

    A factory's throwaway tensors (buffers it fills before they go to `meta`, parameters it creates
    before registering them) are small enough for the heap, where other allocations land between them,
    so their freed pages stay resident: 98 MB for the Qwen3-TTS codec, beside the weights at the peak.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # musl and other C libraries without it
        pass


@dataclass
class _Slot:
    """One tensor of the module and every (owner, attribute, key) it is reachable as (tied weights)."""

    tensor: torch.Tensor
    is_param: bool
    places: list[tuple[nn.Module, str, str]]


def _slots(module: nn.Module) -> list[_Slot]:
    slots: dict[int, _Slot] = {}
    for prefix, owner in module.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for attr, p in owner._parameters.items():
            if p is not None:
                slots.setdefault(id(p), _Slot(p, True, [])).places.append((owner, attr, dot + attr))
        for attr, b in owner._buffers.items():
            if b is not None and attr not in owner._non_persistent_buffers_set:
                slots.setdefault(id(b), _Slot(b, False, [])).places.append((owner, attr, dot + attr))
    for s in slots.values():  # a module reachable twice lists the same place twice
        s.places = list({key: (o, a, key) for o, a, key in s.places}.values())
    return list(slots.values())


def _final_dtype(slot: _Slot, dtype: torch.dtype | None) -> torch.dtype:
    declared = slot.tensor.dtype
    return dtype if dtype is not None and declared.is_floating_point else declared


def _bytes(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous tensor, writable in place (numpy has no bfloat16: go through uint8)."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


def _read_exact(f, view: memoryview, path: Path, key: str) -> None:
    done = 0
    while done < len(view):
        got = f.readinto(view[done:done + _CHUNK])
        if not got:
            raise CheckpointError(f"{path}: truncated while reading {key!r}")
        done += got


def _read_into(f, info: TensorInfo, slot: _Slot, dtype: torch.dtype | None, path: Path, key: str) -> torch.Tensor:
    """Read one tensor from the file into a new tensor of its final dtype, checked for NaN/inf.

    The same dtype is read straight into the result. A conversion goes slice by slice through a
    buffer of at most `_SLICE` bytes, so no full-size temporary in the file's dtype exists beside the
    result (the peak stays the checkpoint plus one slice, and the heap is not left with holes).
    """
    final = _final_dtype(slot, dtype)
    out = torch.empty(info.shape, dtype=final)
    if info.nbytes == 0:
        return out
    f.seek(info.begin)
    if info.dtype == final:
        _read_exact(f, _bytes(out), path, key)
        _check_finite(out, key, path)
        return out
    numel, per = out.numel(), max(1, _SLICE // info.dtype.itemsize)
    scratch = torch.empty(min(per, numel), dtype=info.dtype)
    dest = out.reshape(-1)
    for start in range(0, numel, per):
        piece = scratch[:min(per, numel - start)]
        _read_exact(f, _bytes(piece), path, key)
        _check_finite(piece, key, path)
        _convert_into(dest[start:start + piece.numel()], piece, slot.tensor.dtype)
    return out


def _convert_into(dest: torch.Tensor, value: torch.Tensor, declared: torch.dtype) -> None:
    # Through the declared dtype first, exactly as load_state_dict then .to(dtype) rounds; a cast is
    # per element, so converting slice by slice gives the same bits as converting the whole tensor.
    dest.copy_(value.to(declared))


def _check_finite(value: torch.Tensor, key: str, source) -> None:
    """A NaN or infinity anywhere is a corrupt checkpoint. Checked with a min/max reduction (NaN
    propagates, an infinity is a bound), which allocates nothing the size of the tensor, unlike
    `isfinite(value).all()` (an abs copy and two boolean masks: 2.5 times a bf16 tensor)."""
    if not value.is_floating_point() or value.numel() == 0:
        return
    if value.element_size() == 1:   # float8: no CPU reductions; widen a bounded slice at a time
        flat, step = value.reshape(-1), _SLICE // 4
        pieces = (flat[i:i + step].float() for i in range(0, flat.numel(), step))
    else:
        pieces = (value,)
    for piece in pieces:
        lo, hi = torch.aminmax(piece)
        if not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
            raise CheckpointError(f"{source}: tensor {key!r} holds NaN or infinite values; the checkpoint is corrupt")


def _place(slot: _Slot, value: torch.Tensor) -> None:
    """Put `value` (already in its final dtype) at every place of the slot."""
    new = nn.Parameter(value, requires_grad=slot.tensor.requires_grad) if slot.is_param else value
    for owner, attr, _ in slot.places:
        setattr(owner, attr, new)  # through __setattr__: modules such as nn.LSTM track their weights


def _describe(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return f"({len(keys)}) {shown}" + (", ..." if len(keys) > limit else "")


def _headers(path: Path) -> dict[str, tuple[TensorInfo, Path]]:
    """Tensor infos and the file holding each: one safetensors file, or a sharded checkpoint's
    `*.safetensors.index.json` (`{"weight_map": {key: shard file}}`)."""
    if not path.name.endswith(".index.json"):
        return {key: (info, path) for key, info in read_safetensors_header(path).items()}
    try:
        weight_map = json.loads(path.read_text(encoding="utf-8"))["weight_map"]
        names = set(weight_map.values())
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a sharded-checkpoint index (expected a weight_map): "
                              f"{type(e).__name__}") from None
    for name in names:
        # Shards are files beside the index: a name with a folder, "..", or an absolute path would read
        # weights (or leak bytes) from outside the model folder.
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", "..") \
                or "\\" in name or "\x00" in name:
            raise CheckpointError(f"{path}: weight_map names shard {str(name)[:80]!r}; expected a file name "
                                  f"beside the index (no folders, no absolute paths)")
    shards = {f: path.parent / f for f in names}
    headers = {f: read_safetensors_header(shard) for f, shard in shards.items()}
    out = {}
    for key, f in weight_map.items():
        if key not in headers[f]:
            raise CheckpointError(f"{path}: {key!r} is listed in {f}, which does not hold it")
        out[key] = (headers[f][key], shards[f])
    return out


def checkpoint_path(folder: str | os.PathLike, stem: str = "model") -> Path:
    """`<stem>.safetensors` in `folder`, or its sharded index `<stem>.safetensors.index.json`."""
    single = Path(folder) / f"{stem}.safetensors"
    index = Path(folder) / f"{stem}.safetensors.index.json"
    return index if not single.exists() and index.exists() else single


def load_module(factory: Callable[[], nn.Module], path: str | os.PathLike,
                dtype: torch.dtype | None = None, config: SizeSource | None = None,
                rename: Callable[[str], str] | None = None, unused: tuple[str, ...] = ()) -> nn.Module:
    """Build `factory()` without allocating its parameters, then load the safetensors file at `path`
    (or the shards a `*.safetensors.index.json` names).

    Floating-point parameters and buffers end in `dtype` (None: the dtypes the factory declares);
    the result equals `m = factory(); m.load_state_dict(file); m.to(dtype)` bit for bit, with one
    copy of the weights in host memory instead of three or four. Every parameter and persistent
    buffer must be in the file (a tied weight under any of its names) and the file must hold nothing
    else; shapes must match. Raises FileNotFoundError for a missing file and CheckpointError for a
    file that is not safetensors, is truncated, or does not match the module (naming the field of
    `config` that disagrees with the file, when one does). The check uses the file's header only and
    runs before any tensor is read. `rename(file key) -> module key` maps a checkpoint whose names
    differ from the module's by a fixed rule (a prefix the module does not have); errors name keys as
    the module does. `unused`: prefixes of file keys the model deliberately never reads (a part of the
    published file another use of it needs); they are neither matched nor read.
    """
    path = Path(path)
    located = _headers(path)
    if unused:
        located = {key: entry for key, entry in located.items() if not key.startswith(unused)}
    if rename is not None:
        renamed: dict[str, tuple[TensorInfo, Path]] = {}
        for key, entry in located.items():
            new = rename(key)
            if new in renamed:
                raise CheckpointError(f"{path}: two tensors (one is {key!r}) both name the module's {new!r}")
            renamed[new] = entry
        located = renamed
    infos = {key: info for key, (info, _) in located.items()}
    with _parameters_on_meta():
        module = factory()
    _return_freed_heap()
    if not isinstance(module, nn.Module):
        raise TypeError(f"load_module: the factory returned {type(module).__name__}, not an nn.Module")

    plan = _match(module, {key: info.shape for key, info in infos.items()}, path, config)
    for file in sorted({located[key][1] for _, key in plan}):
        with open(file, "rb") as f:
            for slot, key in (entry for entry in plan if located[entry[1]][1] == file):
                _place(slot, _read_into(f, infos[key], slot, dtype, file, key))
    return _finish(module, dtype, path)


def load_module_from_state(factory: Callable[[], nn.Module], state: Mapping[str, torch.Tensor],
                           dtype: torch.dtype | None = None, source: str | os.PathLike = "state dict",
                           config: SizeSource | None = None) -> nn.Module:
    """`load_module` for tensors already in memory (a `.pth` read with `torch.load(weights_only=True,
    mmap=True)`): the same strict matching, dtype handling and errors naming `source`."""
    with _parameters_on_meta():
        module = factory()
    _return_freed_heap()
    if not isinstance(module, nn.Module):
        raise TypeError(f"load_module_from_state: the factory returned {type(module).__name__}, not an nn.Module")
    bad = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
    if bad:
        raise CheckpointError(f"{source}: entries that are not tensors: {_describe(bad)}")
    for slot, key in _match(module, {k: tuple(v.shape) for k, v in state.items()}, source, config):
        value = state[key].detach().cpu()
        _check_finite(value, key, source)
        final = _final_dtype(slot, dtype)
        if value.dtype != final:
            out = torch.empty(value.shape, dtype=final)
            flat, dest, per = value.reshape(-1), out.reshape(-1), max(1, _SLICE // value.element_size())
            for start in range(0, flat.numel(), per):
                _convert_into(dest[start:start + per], flat[start:start + per], slot.tensor.dtype)
            value = out
        elif value.untyped_storage().nbytes() != value.nbytes:
            value = value.clone()  # a view into a pickle's shared storage: own the weight alone
        _place(slot, value)
    return _finish(module, dtype, source)


def _match(module: nn.Module, shapes: Mapping[str, tuple[int, ...]], source,
           config: SizeSource | None = None) -> list[tuple[_Slot, str]]:
    """Pair every parameter and persistent buffer with its checkpoint key; a CheckpointError names every
    missing, unexpected and mis-shaped key (after the config field that explains them, if one does)."""
    plan: list[tuple[_Slot, str]] = []
    missing: list[str] = []
    mismatched: list[str] = []
    expected: dict[str, tuple[int, ...]] = {}
    for slot in _slots(module):
        keys = [key for _, _, key in slot.places]
        expected.update((key, tuple(slot.tensor.shape)) for key in keys)
        present = [k for k in keys if k in shapes]
        if not present:
            missing.append(keys[0])
            continue
        key = present[-1]  # as load_state_dict: the last alias in state_dict order wins
        if tuple(shapes[key]) != tuple(slot.tensor.shape):
            mismatched.append(f"{key}: checkpoint {list(shapes[key])}, module {list(slot.tensor.shape)}")
            continue
        plan.append((slot, key))
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected or mismatched:
        problems = []
        if missing:
            problems.append(f"missing keys {_describe(missing)}")
        if unexpected:
            problems.append(f"unexpected keys {_describe(unexpected)}")
        if mismatched:
            problems.append(f"shape mismatch {_describe(mismatched)}")
        blame = _blame(config, expected, shapes, source) if config is not None else ""
        raise CheckpointError(blame + f"{source} does not match {type(module).__name__}: " + "; ".join(problems))
    return plan


_SIZE_NAME = re.compile(r"size|dim|hidden|heads?|layers?|channels|depth|width|units|blocks|^n_|^num_")


def _int_fields(data, prefix: str = "") -> Iterator[tuple[str, int]]:
    items = data.items() if isinstance(data, Mapping) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, (Mapping, list)):
            yield from _int_fields(value, name)
        elif isinstance(value, int) and not isinstance(value, bool):
            yield name, value


def _counts(keys) -> dict[str, int]:
    """How many numbered children each `a.b.<i>.` list has (`layers` -> 24): the layer counts of a key set."""
    out: dict[str, int] = {}
    for key in keys:
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if part.isdigit():
                head = ".".join(parts[:i])
                out[head] = max(out.get(head, 0), int(part) + 1)
    return out


def _blame(config: SizeSource, expected: Mapping[str, tuple[int, ...]], shapes: Mapping[str, tuple[int, ...]],
           source) -> str:
    """The config fields whose values explain the disagreement: a width the module has where the file has
    another, or a layer count the file does not hold. Empty when no field's value is the culprit."""
    fields = list(_int_fields(config.data))
    found: dict[str, str] = {}

    def blame(value: int, what: str) -> None:
        for name, v in fields:
            if v == value and name not in found:
                found[name] = f"{name} = {value} ({what})"

    for key, want in expected.items():
        have = shapes.get(key)
        if have is not None and len(have) == len(want) and have != want:
            for w, h in zip(want, have):
                if w != h:
                    blame(w, f"{key} is {list(have)} in the checkpoint, {list(want)} from the config")
    ours, theirs = _counts(expected), _counts(shapes)
    for head, n in ours.items():
        if head in theirs and theirs[head] != n:
            blame(n, f"the checkpoint holds {theirs[head]} of {head or 'the top-level list'}")
    for head, n in theirs.items():      # a count of 0 (conv_layers: 0) builds no list at all
        if head and head not in ours and not any(k.startswith(head + ".") for k in expected):
            blame(0, f"the checkpoint holds {n} of {head}")
    if not found:
        return ""
    sizes = [name for name in found if _SIZE_NAME.search(name.rsplit(".", 1)[-1].lower())]
    lines = [found[name] for name in sizes or found]  # a size-named field over an id that happens to be equal
    return f"{config.path}: " + "; ".join(lines[:4]) + \
        f" -- the config does not fit the weights in {source}. "


def _finish(module: nn.Module, dtype: torch.dtype | None, source) -> nn.Module:
    if dtype is not None:
        module.to(dtype)  # the factory's own (non-persistent) floating buffers; loaded tensors are already there
    left = [n for n, t in list(module.named_parameters()) + list(module.named_buffers()) if t.device.type == "meta"]
    if left:
        raise CheckpointError(f"{source}: {type(module).__name__} still has weights on the meta device after "
                              f"loading: {_describe(left)}")
    return module

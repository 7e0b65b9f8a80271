"""Pickled checkpoints (`.pt`, `.pth`, `.ckpt`, `.bin`) read safely: `torch.load(weights_only=True)` only.

Several upstream engines ship pickles. `weights_only=True` unpickles tensors and plain containers and
refuses every other global, so a planted pickle cannot run code; `mmap=True` maps the file instead of
reading it, so a large checkpoint costs page cache, not a second copy in RAM.

    state = state_dict(load_pickle(folder / "model.pth"), folder / "model.pth", key="state_dict", strip="model.")
    model = load_module_from_state(lambda: Model(config), state, torch.bfloat16, source=folder / "model.pth")
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...runtime.loading import CheckpointError, checkpoint_path

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def load_pickle(path: str | os.PathLike) -> Any:
    """The object in a torch pickle, unpickled with `weights_only=True` (memory-mapped when the file is a
    zip archive, torch's format since 1.6). Errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    mmap = zipfile.is_zipfile(path)  # legacy (pre-1.6) pickles cannot be mapped
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except _UNREADABLE as e:
        raise _unpickle_error(path, e, "tensors and plain containers") from None


# What torch.load raises for bytes that are not a checkpoint: random bytes reach the weights-only unpickler's
# opcode loop, which pops an empty stack (IndexError), reads an unknown memo key (KeyError) or unpacks a short
# buffer (struct.error). MemoryError and KeyboardInterrupt are not among them: they are not the file's fault.
_UNREADABLE = (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, zipfile.BadZipFile, LookupError,
               TypeError, AttributeError, struct.error, OverflowError, RecursionError)


def _plain_pickle(path: Path) -> bool:
    """pickle.dump's output: no torch zip archive, and a protocol-2+ pickle not preceded by torch's legacy
    magic number (which torch.save's own legacy format starts with)."""
    with open(path, "rb") as f:
        head = f.read(2)
    return not zipfile.is_zipfile(path) and len(head) == 2 and head[0] == 0x80 and head[1] >= 4


def _unpickle_error(path: Path, e: BaseException, allowed: str) -> CheckpointError:
    """The CheckpointError for a pickle torch.load refused: names the file, says what is read."""
    if isinstance(e, pickle.UnpicklingError) and "Unsupported operand" in str(e) and _plain_pickle(path):
        return CheckpointError(f"{path}: a plain Python pickle (pickle.dump), not a torch.save checkpoint; expected "
                               "the file as upstream publishes it (torch.save writes a zip archive)")
    if isinstance(e, pickle.UnpicklingError):
        text = " ".join(str(e).split())
        detail = text.split("WeightsUnpickler error:", 1)[-1].split("Check the documentation", 1)[0]
        detail = detail.split("trusted source.", 1)[-1].split("Please use `torch.serialization", 1)[0].strip()
        return CheckpointError(f"{path}: not loaded: only torch checkpoints of {allowed} are read (weights-only "
                               f"unpickler: {detail[:300]})")
    first = str(e).splitlines()[0][:200] if str(e) else ""
    return CheckpointError(f"{path}: not a PyTorch checkpoint, or a truncated or corrupt one (expected a torch.save "
                           f"zip archive or legacy pickle; {type(e).__name__}: {first})")


def state_dict(obj: Any, path: str | os.PathLike, key: str | None = None, strip: str = "") -> dict[str, torch.Tensor]:
    """The tensors of a loaded pickle: `obj[key]` when given (a Lightning/training checkpoint), keys
    starting with `strip` only, with that prefix removed (e.g. "ema_model.")."""
    if key is not None:
        if not isinstance(obj, Mapping) or key not in obj:
            found = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
            raise CheckpointError(f"{path}: expected an entry {key!r} holding the weights, found {found}")
        obj = obj[key]
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path}: expected a mapping of tensor names to tensors, got {type(obj).__name__}")
    out = {}
    for name, value in obj.items():
        if not isinstance(name, str) or not name.startswith(strip):
            continue
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: entry {name!r} is a {type(value).__name__}, expected a tensor")
        out[name[len(strip):]] = value
    if not out:
        raise CheckpointError(f"{path}: no tensors{f' under {strip!r}' if strip else ''}")
    return out


class ModelFolderError(FileNotFoundError):
    """A folder that is not a complete model of an engine (a required file is missing)."""


# ---- config and tokenizer files: parsing bounded by size, nesting and (YAML) alias expansion -----------------
MAX_DATA_FILE_BYTES = 256 << 20   # tokenizer.json files reach ~30 MB; configs are kilobytes
MAX_NESTING = 100                 # published configs nest < 10 deep
MAX_NODES = 2_000_000             # values after expanding every YAML alias / !ref (a 150k-token vocab: 300k)


def check_data_file(path: str | os.PathLike, engine: str, limit: int = MAX_DATA_FILE_BYTES) -> Path:
    """`path`, a model folder's config or tokenizer file that exists and is at most `limit` bytes (checked
    before anything reads it); errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise ModelFolderError(f"{engine}: {path} not found")
    size = path.stat().st_size
    if size > limit:
        raise CheckpointError(f"{engine}: {path} is {size >> 20} MB; expected a config or tokenizer file under "
                              f"{limit >> 20} MB")
    return path


def read_text_bounded(path: str | os.PathLike, engine: str, limit: int = MAX_DATA_FILE_BYTES) -> str:
    """A model folder's text file, refused past `limit` bytes before it is read; errors name the file."""
    path = check_data_file(path, engine, limit)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{engine}: {path} is not UTF-8 text ({e})") from None


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_nesting(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings not counted), in linear
    time without recursion. `json.loads` is bounded only by the interpreter's recursion limit: where that is
    raised, or on a thread with a small stack, a 100 000-deep array overflows the C stack and kills the process."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps, dtype=np.int64).max())


def load_json(path: str | os.PathLike, engine: str, kind: type | tuple[type, ...] = dict) -> Any:
    """The JSON value of a model folder's file, of type `kind`; errors name the engine, the file and what was
    expected (a corrupt or hostile file: invalid, too deep, too large, or another type)."""
    path = Path(path)
    text = read_text_bounded(path, engine)
    depth = json_nesting(text)
    if depth > MAX_NESTING:
        raise CheckpointError(f"{engine}: {path} is nested {depth} deep; expected a config or vocabulary nested "
                              f"at most {MAX_NESTING} deep (published ones nest a few levels)")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CheckpointError(f"{engine}: {path} is not valid JSON ({type(e).__name__}: {str(e)[:120]}); the "
                              f"download is incomplete or corrupt") from None
    if not isinstance(data, kind):
        names = {dict: "object", list: "array", str: "string"}
        wanted = " or ".join(names.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise CheckpointError(f"{engine}: {path} holds a JSON {type(data).__name__}, expected a JSON {wanted}")
    return data


def missing_hub_files(folder: str | os.PathLike, configs: tuple[str, ...], weights: tuple[str, ...]) -> list[str]:
    """What a Hugging Face style folder lacks ([] when complete): the `configs` files, and in each of the
    `weights` subfolders ("" is the folder itself) a model.safetensors or its sharded index."""
    folder = Path(folder)
    return [f for f in configs if not (folder / f).is_file()] + \
        [str(checkpoint_path(folder / w).relative_to(folder)) for w in weights if not checkpoint_path(folder / w).is_file()]


def read_json(path: str | os.PathLike, engine: str) -> dict[str, Any]:
    """A JSON object from a model folder's config file, sizes checked; errors name the engine and the file."""
    data = load_json(path, engine)
    check_sizes(data, path, engine)
    return data


def _node_children(node: Any) -> list:
    import yaml
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def check_yaml_graph(root: Any, limit_nodes: int = MAX_NODES, limit_depth: int = MAX_NESTING) -> None:
    """Refuse a composed YAML node graph whose expansion (every alias counted at each use) exceeds
    `limit_nodes`, that nests deeper than `limit_depth` or that is recursive, before anything walks it: a
    500-byte alias bomb expands to 10^9 values. Linear in the distinct nodes (sizes are memoised)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _node_children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > limit_nodes:
                raise ValueError(f"more than {limit_nodes} values once its aliases are expanded")
            if depth[key] > limit_depth:
                raise ValueError(f"nested more than {limit_depth} deep")
            continue
        if key in size:
            continue
        if key in on_path:
            raise ValueError("a recursive alias (a value that contains itself)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _node_children(node) if id(k) not in size)


def load_yaml(path: str | os.PathLike, engine: str, loader: type | None = None) -> Any:
    """A model folder's YAML file as plain data (`yaml.SafeLoader` or a subclass of it: nothing is
    constructed but plain values), bounded by file size, nesting and alias expansion; errors name the file."""
    import yaml
    path = Path(path)
    base = loader or yaml.SafeLoader
    if not issubclass(base, yaml.SafeLoader):
        raise TypeError(f"load_yaml: {base.__name__} is not a SafeLoader")

    class Bounded(base):
        def get_single_node(self):
            node = super().get_single_node()
            if node is not None:
                check_yaml_graph(node)
            return node

    text = read_text_bounded(path, engine)
    try:
        return yaml.load(text, Loader=Bounded)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{engine}: {path} is not readable YAML ({type(e).__name__}: {str(e)[:200]})") from None


@contextlib.contextmanager
def tokenizer_errors(engine: str, *paths: str | os.PathLike,
                     expected: str = "a `tokenizers` tokenizer.json") -> Iterator[None]:
    """Inside: building a `tokenizers` tokenizer from the files `paths`. The library raises a bare `Exception`
    for every malformed file ("EOF while parsing", "Token `x` out of vocabulary"); it becomes a CheckpointError
    naming the engine, the files and what was expected."""
    try:
        yield
    except (CheckpointError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - tokenizers' errors have no narrower type
        detail = " ".join(str(e).split())[:200]
        names = " / ".join(str(p) for p in paths)
        raise CheckpointError(f"{engine}: {names} is not {expected} ({type(e).__name__}: {detail}); the download "
                              f"is incomplete or corrupt") from None


def load_tokenizer(path: str | os.PathLike, engine: str) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a model folder's tokenizer.json, size-bounded like every data file (the
    library's JSON parser bounds nesting itself); errors name the engine and the file."""
    from tokenizers import Tokenizer
    text = read_text_bounded(path, engine)
    with tokenizer_errors(engine, path):
        return Tokenizer.from_str(text)


# ---- numbers in config files: every field a loader may read is bounded by its name -----------------------------
# A careless or hostile config (0, -1 or 10^12 in a sample rate, a hop, a layer count, a token id, ...) must be a
# clear error naming the file and the field before any module is built, not a ZeroDivisionError, an IndexError,
# NaN audio or an allocation of terabytes. The bounds are generous: every published model of every engine is far
# inside them. Fields HF's save_pretrained writes with 0 for "off" (chunk_size_feed_forward,
# no_repeat_ngram_size, min_length) and data/training settings loaders never read match no rule or allow 0.
MAX_WIDTH = 1 << 20
MAX_COUNT = 4096
MAX_TOKENS = 1 << 24          # vocabularies and codebooks (published: <= 262 144 entries)
MAX_POSITIONS = 1 << 20       # position tables, some built at load (published: <= 131 072)
MAX_SAMPLES = 1 << 16         # hops, windows, FFT sizes, up/downsampling factors (published: <= 3840)


@dataclass(frozen=True)
class Bound:
    """What a config number must be: `low <= value <= high` (`low_open`: `low < value`); `integer`: an int."""
    low: float
    high: float
    what: str
    integer: bool = True
    low_open: bool = False

    def expected(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low_open:
            return f"{kind} above {self.low:g} and at most {self.high:g} ({self.what})"
        return f"{kind} from {self.low:g} to {self.high:g} ({self.what})"

    def admits(self, value: int | float) -> bool:
        if self.integer and not isinstance(value, int):
            return False
        if value != value or value in (float("inf"), float("-inf")):
            return False
        return (self.low < value if self.low_open else self.low <= value) and value <= self.high


# (field-name pattern, bound), the first match wins; a list's items are checked under the list's name. Only
# the last part of a dotted name is matched (lower case).
NUMBER_RULES: tuple[tuple[re.Pattern, Bound | None], ...] = tuple((re.compile(p), b) for p, b in (
    # training and generation settings no loader reads, some 0 or -1 in published files (BigVGAN's num_gpus)
    (r"^(num_gpus|num_workers|seed|world_size|num_warmup_steps|num_warmup_updates|num_beams|num_beam_groups|"
     r"num_return_sequences|batch_size|max_epoch)$", None),
    # zero means "off" or "none" in HF configs and CosyVoice's chunked attention; -1 is "all chunks"
    (r"^(chunk_size_feed_forward|no_repeat_ngram_size|encoder_no_repeat_ngram_size|static_chunk_size)$",
     Bound(0, MAX_WIDTH, "0 for off")),
    (r"^num_decoding_left_chunks$", Bound(-1, MAX_COUNT, "-1 for all")),
    (r"(^|_)min(_|$)|^fmin$|mel_fmin", Bound(0, 1e9, "a lower limit", integer=False)),
    # sampling defaults (generation_config.json, CosyVoice's sampling section): refused at load, not per request
    (r"top_p$", Bound(0, 1, "a nucleus probability", integer=False, low_open=True)),
    (r"top_k$", Bound(0, MAX_TOKENS, "a top-k count, 0 for off")),
    (r"temperature$|repetition_penalty$", Bound(0, 100, "a positive sampling setting", integer=False,
                                                low_open=True)),
    (r"dropout|layerdrop|(^|_)probs?(_|$)", Bound(0, 1, "a probability", integer=False)),
    # inference settings read at load: classifier-free guidance, HiFT's source filter, output clamp, RAS window
    (r"cfg_rate$|cfg_strength$", Bound(0, 100, "a guidance scale", integer=False)),
    (r"^nsf_(alpha|sigma)$|(^|_)slope$|^tau_r$", Bound(0, 1, "a fraction", integer=False)),
    (r"voiced_threshold$", Bound(0, 1e6, "a threshold", integer=False)),
    (r"^audio_limit$", Bound(0, 1, "a sample limit", integer=False, low_open=True)),
    (r"(^|_)fmax$", Bound(0, 1e6, "a frequency in Hz", integer=False, low_open=True)),
    (r"harmonics", Bound(1, MAX_COUNT, "a harmonic count")),
    (r"(^|_)eps$|epsilon", Bound(0, 0.1, "a small positive number", integer=False, low_open=True)),
    (r"rope_theta|rope_base|^theta$", Bound(1, 1e10, "a rotary base", integer=False)),
    (r"(^|_)(sample|sampling)_rates?$|(^|_)sr$|^sr_bin_boundaries$",
     Bound(1000, 1_000_000, "a sample rate in Hz", integer=False)),
    (r"frame_rate$", Bound(0, 10_000, "frames per second", integer=False, low_open=True)),
    (r"(^|_)(hop|win|fft|n_fft|compress|patch_size|length_compression|token_mel_ratio|upsample_rates?|"
     r"downsample_rates?|downsample_factor|upsample_factor|decode_upsample_rate|encode_downsample_rate)(_|$)",
     Bound(1, MAX_SAMPLES, "a length in samples or frames")),
    (r"bandwidths?$", Bound(0, 10_000, "a bit rate in kbps", integer=False, low_open=True)),
    (r"^channel_ratios$|ffn_ratio$|mlp_ratio$", Bound(0, MAX_COUNT, "a width ratio", integer=False, low_open=True)),
    (r"long_factor|short_factor|(^|_)factor$", Bound(0, 1e6, "a scale factor", integer=False, low_open=True)),
    (r"lookahead", Bound(1, MAX_COUNT, "a look-ahead in frames")),
    (r"(^|_)(rates|ratios|strides?|kernel|kernel_sizes?|dilations?|dilation_sizes|dilation_rate|"
     r"dilation_growth_rate|groups|mult|res2net_scale)(_|$)|kernel_size|conv_pos_embeddings$",
     Bound(1, MAX_COUNT, "a factor, kernel size or group count")),
    (r"scale", Bound(0, 1e6, "a scale", integer=False, low_open=True)),
    (r"(^|_)(id|ids|token_id)$|_token$|^(start|stop|bos|eos|pad)_", Bound(0, MAX_TOKENS, "a token id")),
    (r"codebooks?$|quantizers$|^num_class$|^n_spks$|code_groups$", Bound(1, MAX_COUNT, "a codebook or class count")),
    (r"vocab|codebook_size|_bins$|(^|_)tokens$|_codes$", Bound(1, MAX_TOKENS, "a token or code count")),
    (r"position|max_seq_len|max_length|^block_size$|sliding_window", Bound(1, MAX_POSITIONS, "a position count")),
    (r"^emo_num$", Bound(1, MAX_COUNT, "a count of emotion vectors")),   # IndexTTS 2: rows of feat1/feat2.pt
    (r"(^|_)blocks?(_|$)|^conv_layers$", Bound(0, MAX_COUNT, "a block count, 0 for none")),   # F5's E2: no convs
    (r"(^|_)(depth|heads?|layers?)(_|$)", Bound(1, MAX_COUNT, "a layer or head count")),
    (r"(^|_)(dim|size|hidden|channels?|units|width|filters|dimension|mels)(_|$)",
     Bound(1, MAX_WIDTH, "a width")),
    (r"^n_|^num_", Bound(0, MAX_WIDTH, "a count")),
))


def number_rule(key: str) -> Bound | None:
    """The bound a config field named `key` (its last dotted part) must keep, or None."""
    key = key.lower()
    for pattern, bound in NUMBER_RULES:
        if pattern.search(key):
            return bound
    return None


def config_error(engine: str, path: str | os.PathLike, name: str, value: Any, expected: str) -> CheckpointError:
    """The error for a config field with a value a loader cannot use: names the file, the field, what was
    expected."""
    return CheckpointError(f"{engine}: {path}: {name} = {value!r}; expected {expected}")


def check_sizes(data: Any, path: str | os.PathLike, engine: str, prefix: str = "", key: str = "") -> None:
    """Every number of a config's data whose field name has a rule in NUMBER_RULES (sizes, counts, rates,
    hops, token ids, probabilities, ...) is within its bound; a CheckpointError names the file, the dotted
    field and what was expected. List items are checked under the list's field name."""
    if isinstance(data, dict):
        for k, value in data.items():
            check_sizes(value, path, engine, f"{prefix}.{k}" if prefix else str(k), str(k))
        return
    if isinstance(data, list):
        for i, value in enumerate(data):
            check_sizes(value, path, engine, f"{prefix}[{i}]", key)
        return
    if isinstance(data, bool) or not isinstance(data, (int, float)) or not key:
        return                                          # flags such as scale_codebook_embeddings are not sizes
    bound = number_rule(key)
    if bound is not None and not bound.admits(data):
        raise config_error(engine, path, prefix, data, bound.expected())


def check_ids(ids: Mapping[str, Any], size: int, size_field: str, path: str | os.PathLike, engine: str) -> None:
    """Every token id in `ids` (dotted field name -> an id or a list of ids) indexes a table of `size` rows
    (`size_field`: the config field or weight that sizes it), so an embedding lookup cannot fail mid-request
    with an IndexError; a CheckpointError names the file and the field."""
    for name, value in ids.items():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < size:
                raise config_error(engine, path, name, value,
                                   f"a token id from 0 to {size - 1} (the table is {size_field} = {size})")


# ---- pickles that hold one plain-data class besides tensors (GPT-SoVITS's s2G*.pth) --------------------------


class PickledRecord:
    """Stand-in for an upstream class whose instances carry only plain attributes (GPT-SoVITS's
    `utils.HParams`). The weights-only unpickler creates it (NEWOBJ, no arguments) and hands it its
    `__dict__` (BUILD); nothing of the upstream class is imported or run."""

    def __new__(cls, *args: object, **kwargs: object) -> PickledRecord:
        # A real record is created bare (NEWOBJ without arguments); a pickle that calls it with arguments
        # (REDUCE) is not one torch.save wrote.
        if args or kwargs:
            raise pickle.UnpicklingError(f"a pickled record is created with arguments {args!r:.80} {kwargs!r:.80}; "
                                         "expected none (its attributes come from BUILD)")
        return super().__new__(cls)

    def __setstate__(self, state: object) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise pickle.UnpicklingError(f"a pickled record holds {type(state).__name__}, expected attributes")
        self.fields = dict(state)


def pickled_output(*args: object) -> OrderedDict:
    """Stand-in for an upstream dict-like class that pickles by calling itself with its field values (REDUCE)
    and then sets its items (SETITEMS): transformers' `ModelOutput` dataclasses such as
    `BaseModelOutputWithPast`. It returns an empty OrderedDict for the items to land in; the positional
    values (objects the unpickler already rebuilt) repeat the items and are dropped. Nothing of the class is
    imported or run."""
    return OrderedDict()


def plain(obj: Any) -> Any:
    """`obj` with every PickledRecord replaced by a dict of its fields (recursively)."""
    if isinstance(obj, PickledRecord):
        return {k: plain(v) for k, v in obj.fields.items()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj)
    return obj


def load_pickle_with_records(path: str | os.PathLike, records: tuple[str, ...], *, header: bytes = b"PK",
                             called: tuple[str, ...] = ()) -> Any:
    """A torch zip checkpoint unpickled with `weights_only=True`, the globals named in `records` (e.g.
    "utils.HParams") allowed as PickledRecord stand-ins, those in `called` (e.g.
    "transformers.modeling_outputs.BaseModelOutputWithPast") as `pickled_output` (their items become a dict), and every other
    non-tensor global refused.

    `header`: the zip magic the file must start with. GPT-SoVITS overwrites a v2Pro/v3/v4 checkpoint's
    first two bytes with a version code ("05", "06", ...); they are put back in memory, the file is not
    touched. Returns plain data (records become dicts)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    data = bytearray(path.read_bytes())
    if len(data) < 4:
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (only {len(data)} bytes; expected a torch.save zip "
                              "archive)")
    if data[:2] != header[:2] and data[2:4] == b"\x03\x04":   # a zip local-file header behind a version code
        data[:2] = header
    allowed = [(PickledRecord, name) for name in records] + [(pickled_output, name) for name in called]
    try:
        with torch.serialization.safe_globals(allowed):
            obj = torch.load(io.BytesIO(bytes(data)), map_location="cpu", weights_only=True)
    except _UNREADABLE as e:
        raise _unpickle_error(path, e, f"tensors, plain containers and {', '.join(records + called)} records") from None
    return plain(obj)

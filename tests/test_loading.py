"""runtime.loading.load_module: dtype-first loading equals build-in-float32, load, convert, bit for bit."""
import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from mizuoto.runtime import loading
from mizuoto.runtime.loading import (CheckpointError, checkpoint_path, load_module, load_module_from_state,
                                     read_safetensors_header)


class Net(nn.Module):
    """Tied head, a computed non-persistent buffer, persistent float and integer buffers, conv, norms."""

    def __init__(self, vocab: int = 40, dim: int = 24) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, dim, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                                  nn.Linear(2 * dim, dim)) for _ in range(2))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.scale = nn.Parameter(torch.randn(dim))
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim)), persistent=False)
        self.register_buffer("mean", torch.randn(dim))
        self.register_buffer("steps", torch.tensor([3, 1, 4], dtype=torch.int64))

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        for block in self.blocks:
            x = x + block(x)
        x = self.norm(x) * self.scale + self.mean + self.inv_freq.repeat(2)
        return self.head(x)


def _checkpoint(tmp_path, dtype, name="net.safetensors", drop=(), extra=None):
    torch.manual_seed(0)
    source = Net()
    state = {k: v.detach().to(v.dtype if not v.is_floating_point() else dtype).clone()
             for k, v in source.state_dict().items() if k != "head.weight" and k not in drop}
    state.update(extra or {})
    path = tmp_path / name
    save_file(state, str(path))
    return path


def _reference(path, dtype):
    torch.manual_seed(123)  # any init: every weight is overwritten
    ref = Net()
    ref.load_state_dict(load_file(str(path)), strict=False)  # head.weight is tied, stored once
    return ref.to(dtype) if dtype is not None else ref


def _tensors(m):
    return dict(m.named_parameters()) | dict(m.named_buffers())


@pytest.mark.parametrize("file_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, None])
def test_bit_identical_to_float32_load_then_convert(tmp_path, file_dtype, dtype):
    path = _checkpoint(tmp_path, file_dtype)
    ref = _reference(path, dtype)
    got = load_module(Net, path, dtype)
    want, have = _tensors(ref), _tensors(got)
    assert want.keys() == have.keys()
    for name, t in want.items():
        assert have[name].dtype == t.dtype, name
        assert have[name].device.type == "cpu", name
        assert torch.equal(have[name], t), name
    assert got.head.weight is got.embed.weight  # the tie survives
    assert isinstance(got.scale, nn.Parameter) and got.scale.requires_grad
    ids = torch.tensor([[1, 7, 3, 9]])
    with torch.no_grad():
        assert torch.equal(got(ids), ref(ids))


def test_both_names_of_a_tied_weight_in_the_file(tmp_path):
    torch.manual_seed(0)
    state = {k: v.detach().clone() for k, v in Net().state_dict().items()}
    save_file(state, str(tmp_path / "both.safetensors"))
    got = load_module(Net, tmp_path / "both.safetensors", torch.bfloat16)
    assert got.head.weight is got.embed.weight
    assert torch.equal(got.embed.weight, state["head.weight"].to(torch.bfloat16))


def test_parameters_are_never_allocated_in_float32(tmp_path):
    """The factory's parameters are built on meta: no float32 copy, no random init."""
    path = _checkpoint(tmp_path, torch.bfloat16)
    seen = []

    def factory():
        m = Net()
        seen.extend(p.device.type for p in m.parameters())
        return m

    load_module(factory, path, torch.bfloat16)
    assert seen and set(seen) == {"meta"}
    assert nn.Module.register_parameter is torch.nn.modules.module.Module.register_parameter
    assert nn.Linear(2, 2).weight.device.type == "cpu"  # the patch is gone


def test_patch_removed_when_the_factory_raises(tmp_path):
    path = _checkpoint(tmp_path, torch.bfloat16)
    original = nn.Module.register_parameter

    def factory():
        raise RuntimeError("boom")

    originals = (nn.Module.register_buffer, nn.init.normal_, nn.init.kaiming_uniform_)
    with pytest.raises(RuntimeError, match="boom"):
        load_module(factory, path)
    assert nn.Module.register_parameter is original
    assert (nn.Module.register_buffer, nn.init.normal_, nn.init.kaiming_uniform_) == originals


def test_factory_builds_persistent_buffers_on_meta_and_skips_init_there(tmp_path):
    """Persistent buffers come from the file: built on meta (no throwaway copy); computed ones stay;
    torch.nn.init skips meta weights but still fills real tensors inside the factory."""
    seen = {}

    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("stats", torch.zeros(4))
            self.register_buffer("table", torch.arange(4.0), persistent=False)
            real = nn.init.constant_(torch.empty(3), 2.0)
            seen.update(stats=self.stats.device.type, table=self.table.device.type, real=real.tolist(),
                        weight=nn.init.normal_(self.lin.weight).device.type)

    state = {"lin.weight": torch.randn(4, 4), "lin.bias": torch.randn(4), "stats": torch.randn(4)}
    save_file(state, str(tmp_path / "b.safetensors"))
    originals = (nn.Module.register_buffer, nn.init.normal_, nn.init.constant_)
    got = load_module(WithBuffers, tmp_path / "b.safetensors")
    assert seen == {"stats": "meta", "table": "cpu", "real": [2.0, 2.0, 2.0], "weight": "meta"}
    assert torch.equal(got.stats, state["stats"]) and torch.equal(got.lin.weight, state["lin.weight"])
    assert torch.equal(got.table, torch.arange(4.0))
    assert (nn.Module.register_buffer, nn.init.normal_, nn.init.constant_) == originals
    with pytest.raises(CheckpointError, match="missing keys .*stats"):   # a persistent buffer must be in the file
        load_module(WithBuffers, _write(tmp_path, {k: v for k, v in state.items() if k != "stats"}))


def _write(tmp_path, state, name="w.safetensors"):
    save_file(state, str(tmp_path / name))
    return tmp_path / name


@pytest.mark.parametrize("file_dtype", [torch.float32, torch.float16])
def test_conversion_slice_by_slice_is_bit_identical(tmp_path, monkeypatch, file_dtype):
    """Converting reads go through a bounded buffer: slices far smaller than the tensors (and not
    dividing them) give the bits of converting whole tensors, from a file and from memory."""
    monkeypatch.setattr(loading, "_SLICE", 36)
    path = _checkpoint(tmp_path, file_dtype)
    want = _tensors(_reference(path, torch.bfloat16))
    for got in (load_module(Net, path, torch.bfloat16),
                load_module_from_state(Net, load_file(str(path)), torch.bfloat16)):
        have = _tensors(got)
        assert want.keys() == have.keys()
        assert all(have[k].dtype == t.dtype and torch.equal(have[k], t) for k, t in want.items())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])  # read straight / converted slice by slice
def test_nan_or_infinity_anywhere_is_found(tmp_path, monkeypatch, bad, dtype):
    monkeypatch.setattr(loading, "_SLICE", 16)
    weight = torch.ones(8, 8)
    weight[6, 5] = bad                   # in a later slice
    path = _write(tmp_path, {"weight": weight})
    with pytest.raises(CheckpointError, match="'weight' holds NaN or infinite"):
        load_module(lambda: nn.Linear(8, 8, bias=False), path, dtype)
    with pytest.raises(CheckpointError, match="'weight' holds NaN or infinite"):
        load_module_from_state(lambda: nn.Linear(8, 8, bias=False), {"weight": weight}, dtype)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no float8")
def test_float8_checkpoint(tmp_path, monkeypatch):
    """float8 has no CPU min/max or isfinite: checked a widened slice at a time."""
    monkeypatch.setattr(loading, "_SLICE", 64)
    weight = torch.randn(8, 16, generator=torch.Generator().manual_seed(0)).to(torch.float8_e4m3fn)
    got = load_module(lambda: nn.Linear(16, 8, bias=False), _write(tmp_path, {"weight": weight}))
    assert got.weight.dtype == torch.float32 and torch.equal(got.weight, weight.float())
    weight.view(torch.uint8)[7, 3] = 0x7F  # e4m3fn NaN
    with pytest.raises(CheckpointError, match="holds NaN or infinite"):
        load_module(lambda: nn.Linear(16, 8, bias=False), _write(tmp_path, {"weight": weight}))


def test_missing_keys(tmp_path):
    path = _checkpoint(tmp_path, torch.bfloat16, drop=("blocks.1.3.weight", "mean"))
    with pytest.raises(CheckpointError, match=r"does not match Net: missing keys \(2\)") as e:
        load_module(Net, path, torch.bfloat16)
    assert "blocks.1.3.weight" in str(e.value) and "mean" in str(e.value)


def test_unexpected_keys(tmp_path):
    path = _checkpoint(tmp_path, torch.bfloat16, extra={"decoder.proj.weight": torch.zeros(2, 2)})
    with pytest.raises(CheckpointError, match=r"unexpected keys \(1\) decoder\.proj\.weight"):
        load_module(Net, path, torch.bfloat16)


def test_unused_prefixes_are_not_read(tmp_path, monkeypatch):
    path = _checkpoint(tmp_path, torch.float32, extra={"encoder.proj.weight": torch.zeros(2, 2),
                                                       "encoder.norm.bias": torch.zeros(3)})
    read = []
    real = loading._read_into
    monkeypatch.setattr(loading, "_read_into", lambda f, info, slot, dtype, p, key: read.append(key) or
                        real(f, info, slot, dtype, p, key))
    m = load_module(Net, path, torch.float32, unused=("encoder.",))
    assert read and not any(k.startswith("encoder.") for k in read)
    ref = _tensors(_reference(path, None))
    assert all(torch.equal(v, ref[k]) for k, v in _tensors(m).items())
    with pytest.raises(CheckpointError, match=r"unexpected keys \(2\)"):
        load_module(Net, path, torch.float32, unused=("decoder.",))


def test_shape_mismatch(tmp_path):
    path = _checkpoint(tmp_path, torch.bfloat16, drop=("scale",), extra={"scale": torch.zeros(5)})
    with pytest.raises(CheckpointError, match=r"shape mismatch \(1\) scale: checkpoint \[5\], module \[24\]"):
        load_module(Net, path, torch.bfloat16)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint not found: .*nowhere.safetensors"):
        load_module(Net, tmp_path / "nowhere.safetensors", torch.bfloat16)


def test_not_safetensors(tmp_path):
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(b"this is not a checkpoint at all, just some text that goes on")
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        load_module(Net, path, torch.bfloat16)
    path.write_bytes(struct.pack("<Q", 4) + b"{no}")
    with pytest.raises(CheckpointError, match="header is not JSON"):
        load_module(Net, path, torch.bfloat16)
    path.write_bytes(b"abc")
    with pytest.raises(CheckpointError, match="too short"):
        load_module(Net, path, torch.bfloat16)


def test_truncated_file(tmp_path):
    path = _checkpoint(tmp_path, torch.bfloat16)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match="truncated"):
        load_module(Net, path, torch.bfloat16)


def test_inconsistent_offsets(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    with pytest.raises(CheckpointError, match="expected 16 bytes"):
        read_safetensors_header(path)


def test_header_matches_safetensors(tmp_path):
    path = _checkpoint(tmp_path, torch.bfloat16)
    infos = read_safetensors_header(path)
    reference = load_file(str(path))
    assert infos.keys() == reference.keys()
    for k, t in reference.items():
        assert infos[k].dtype == t.dtype and infos[k].shape == tuple(t.shape)


class Recurrent(nn.Module):
    """nn.LSTM keeps its own list of weight references; weight-norm keeps its weights as parametrizations."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(16, 16, 3, padding=1))
        self.legacy = nn.utils.weight_norm(nn.Conv1d(16, 4, 3, padding=1))

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.legacy(self.conv(y.transpose(1, 2)))


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_lstm_and_weight_norm(tmp_path, dtype):
    torch.manual_seed(0)
    state = {k: v.detach().clone() for k, v in Recurrent().state_dict().items()}
    path = tmp_path / "recurrent.safetensors"
    save_file(state, str(path))
    ref = Recurrent()
    ref.load_state_dict(load_file(str(path)))
    if dtype is not None:
        ref = ref.to(dtype)
    got = load_module(Recurrent, path, dtype)
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1)).to(dtype or torch.float32)
    with torch.no_grad():
        assert torch.equal(got(x), ref(x))
    assert all(w.device.type == "cpu" for w in got.lstm._flat_weights)


def test_sharded_checkpoint_loads_like_a_single_file(tmp_path):
    torch.manual_seed(0)
    src = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4))
    state = {k: v.contiguous() for k, v in src.state_dict().items()}
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[:3], "model-00002-of-00002.safetensors": keys[3:]}
    for name, names in shards.items():
        save_file({k: state[k] for k in names}, str(tmp_path / name))
    index = {"metadata": {}, "weight_map": {k: name for name, names in shards.items() for k in names}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    path = checkpoint_path(tmp_path)
    assert path.name == "model.safetensors.index.json"
    factory = lambda: torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4))  # noqa: E731
    loaded = load_module(factory, path, torch.bfloat16)
    expected = factory()
    expected.load_state_dict(state)
    expected.to(torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), expected.state_dict().values()))
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError):
        load_module(factory, path)
    index["weight_map"][keys[0]] = "model-00002-of-00002.safetensors"
    save_file({k: state[k] for k in keys[3:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="does not hold it"):
        load_module(factory, path)

"""VibeVoice-Realtime voice presets read without executing the pickle: a preset written the way upstream's
are (transformers' BaseModelOutputWithPast holding a DynamicCache, torch.save) loads; a hostile one is
refused naming the file, with nothing run; with the reference venv, a real preset from the repository reads
to the same tensors as upstream's torch.load(weights_only=False)."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mizuoto.nodes.formats.checkpoint import CheckpointError
from mizuoto.nodes.vibevoice.voices import PARTS, load_voice_preset, voice_names

VENV = os.environ.get("VIBEVOICE_VENV", "")
SRC = os.environ.get("VIBEVOICE_SRC", "")
PRESET = Path(SRC, "demo", "voices", "streaming_model", "en-Davis_man.pt") if SRC else None
LIVE = bool(VENV and PRESET and Path(VENV, "bin", "python").is_file() and PRESET.is_file())


class DynamicCache:       # pickled as transformers.cache_utils.DynamicCache: NEWOBJ + BUILD(__dict__)
    def __init__(self, keys: list, values: list) -> None:
        self._seen_tokens = keys[0].shape[2]
        self.key_cache, self.value_cache = keys, values


class BaseModelOutputWithPast(OrderedDict):   # like ModelOutput: REDUCE(field values) + SETITEMS + BUILD
    def __reduce__(self):  # type: ignore[override]
        return (type(self), (self["last_hidden_state"], self["past_key_values"], None, None), dict(self), None,
                iter(self.items()))


@pytest.fixture()
def upstream_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes the two classes pickle under transformers' names (no transformers needed)."""
    for mod, cls in (("transformers.cache_utils", DynamicCache),
                     ("transformers.modeling_outputs", BaseModelOutputWithPast)):
        m = types.ModuleType(mod)
        setattr(m, cls.__name__, cls)
        monkeypatch.setattr(cls, "__module__", mod)
        monkeypatch.setitem(sys.modules, mod, m)
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))


def part(t: int, layers: int) -> BaseModelOutputWithPast:
    g = torch.Generator().manual_seed(t * 10 + layers)
    keys = [torch.randn(1, 2, t, 4, generator=g).bfloat16() for _ in range(layers)]
    values = [torch.randn(1, 2, t, 4, generator=g).bfloat16() for _ in range(layers)]
    return BaseModelOutputWithPast(last_hidden_state=torch.randn(1, t, 8, generator=g).bfloat16(),
                                   past_key_values=DynamicCache(keys, values))


def write_preset(path: Path, **override: object) -> dict:
    obj = {"lm": part(5, 2), "tts_lm": part(7, 3), "neg_lm": part(1, 2), "neg_tts_lm": part(1, 3), **override}
    torch.save(obj, path)
    return obj


def test_preset_loads_to_its_tensors(tmp_path: Path, upstream_names: None) -> None:
    obj = write_preset(tmp_path / "en-Test_woman.pt")
    preset = load_voice_preset(tmp_path / "en-Test_woman.pt")
    for name in PARTS:
        got, want = getattr(preset, name), obj[name]
        assert torch.equal(got.last_hidden_state, want["last_hidden_state"])
        assert all(torch.equal(a, b) for a, b in zip(got.keys, want["past_key_values"].key_cache, strict=True))
        assert all(torch.equal(a, b) for a, b in zip(got.values, want["past_key_values"].value_cache, strict=True))
    assert (preset.lm.length, preset.tts_lm.length, len(preset.tts_lm.keys)) == (5, 7, 3)
    assert voice_names(tmp_path) == ["en-Test_woman"]


def test_preset_with_mismatched_cache_is_refused(tmp_path: Path, upstream_names: None) -> None:
    write_preset(tmp_path / "bad.pt", neg_lm=part(1, 3))
    with pytest.raises(CheckpointError, match=r"bad\.pt.*'lm' and 'neg_lm'"):
        load_voice_preset(tmp_path / "bad.pt")
    torch.save({"lm": torch.zeros(2)}, tmp_path / "short.pt")
    with pytest.raises(CheckpointError, match=r"short\.pt.*expected the parts"):
        load_voice_preset(tmp_path / "short.pt")


class Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[override]
        return (open, (str(self.marker), "w"))    # would create the marker file if called


def test_hostile_preset_is_refused_naming_the_file_nothing_run(tmp_path: Path, upstream_names: None) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "en-Evil_man.pt"
    write_preset(path, lm=Hostile(marker))
    with pytest.raises(CheckpointError, match=r"en-Evil_man\.pt: not loaded.*open"):
        load_voice_preset(path)
    assert not marker.exists()


@pytest.mark.skipif(not LIVE, reason="a real preset needs VIBEVOICE_SRC (an upstream checkout) and VIBEVOICE_VENV")
def test_real_preset_equals_upstreams_torch_load(tmp_path: Path) -> None:
    out = tmp_path / "ref.safetensors"
    code = ("import sys, torch; from safetensors.torch import save_file\n"
            "d = torch.load(sys.argv[1], map_location='cpu', weights_only=False); t = {}\n"
            "for k, v in d.items():\n"
            "    t[k + '.h'] = v.last_hidden_state.contiguous()\n"
            "    for i, (a, b) in enumerate(zip(v.past_key_values.key_cache, v.past_key_values.value_cache)):\n"
            "        t[f'{k}.k{i}'], t[f'{k}.v{i}'] = a.contiguous(), b.contiguous()\n"
            "save_file(t, sys.argv[2])\n")
    subprocess.run([str(Path(VENV, "bin", "python")), "-c", code, str(PRESET), str(out)], check=True, timeout=120)
    ref = load_file(str(out))
    preset = load_voice_preset(PRESET)
    n = 0
    for name in PARTS:
        p = getattr(preset, name)
        assert torch.equal(p.last_hidden_state, ref[name + ".h"])
        for i, (k, v) in enumerate(zip(p.keys, p.values, strict=True)):
            assert torch.equal(k, ref[f"{name}.k{i}"]) and torch.equal(v, ref[f"{name}.v{i}"])
            n += 2
    assert n + 4 == len(ref)

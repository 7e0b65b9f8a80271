"""VramPolicy: defaults, sources and their precedence, validation messages, paths, allocator."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from mizuoto.runtime import paths
from mizuoto.runtime.allocator import apply_cuda_allocator
from mizuoto.runtime.policy import SettingsError, VramPolicy, _auto_pinned_bytes

GB = 1 << 30


@pytest.fixture
def nofile(tmp_path: Path) -> dict:
    """Constructor arguments that read no user settings: no file, empty environment."""
    return {"settings_path": tmp_path / "absent.json", "environ": {}}


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_defaults(nofile):
    p = VramPolicy(**nofile)
    assert p.as_dict() == {
        "compute.async_offload": 1, "compute.cuda_allocator": "auto", "compute.gpu_jobs": 1,
        "compute.host_copies": "auto", "compute.kv_cache": "auto", "compute.max_pinned_mb": None,
        "compute.max_resident_models": None, "compute.oom_fallback": False, "compute.oom_retry": True,
        "compute.ram_reserve_mb": None, "compute.simulate_vram_mb": None,
        "compute.unload_after_minutes": None, "compute.vram_limit_mb": None,
        "compute.vram_mode": "normal", "compute.vram_reserve_mb": None,
    }
    assert p["engines.qwen3tts.pinned_models"] == []
    assert p.source("compute.vram_mode") == "default"


def test_design_example_constructs():
    assert VramPolicy({"compute.vram_mode": "normal"})["compute.vram_mode"] == "normal"


def test_precedence_file_env_constructor_call(tmp_path):
    settings = write(tmp_path / "s.json", {"compute": {"vram_mode": "low", "gpu_jobs": 2,
                                                       "async_offload": 3, "kv_cache": "static"}})
    environ = {"MIZUOTO_SETTINGS": json.dumps({"compute.gpu_jobs": 3, "compute.async_offload": 4}),
               "MIZUOTO_COMPUTE_ASYNC_OFFLOAD": "5", "MIZUOTO_COMPUTE_VRAM_MODE": "none"}
    p = VramPolicy({"compute.vram_mode": "high"}, settings_path=settings, environ=environ)
    assert p["compute.kv_cache"] == "static"          # file
    assert p["compute.gpu_jobs"] == 3                 # MIZUOTO_SETTINGS over file
    assert p["compute.async_offload"] == 5            # per-key variable over MIZUOTO_SETTINGS
    assert p["compute.vram_mode"] == "high"           # constructor over environment
    q = p.with_overrides({"compute.vram_mode": "shared"})
    assert q["compute.vram_mode"] == "shared" and p["compute.vram_mode"] == "high"
    assert q.source("compute.vram_mode") == "per-call override"
    assert p.source("compute.kv_cache") == f"settings file {settings}"
    assert p.source("compute.async_offload") == "environment variable MIZUOTO_COMPUTE_ASYNC_OFFLOAD"


@pytest.mark.parametrize(("variable", "text", "key", "value"), [
    ("MIZUOTO_COMPUTE_VRAM_MODE", "LOW", "compute.vram_mode", "low"),
    ("MIZUOTO_COMPUTE_VRAM_RESERVE_MB", "auto", "compute.vram_reserve_mb", None),
    ("MIZUOTO_COMPUTE_VRAM_RESERVE_MB", "0", "compute.vram_reserve_mb", 0),
    ("MIZUOTO_COMPUTE_OOM_RETRY", "no", "compute.oom_retry", False),
    ("MIZUOTO_COMPUTE_OOM_FALLBACK", "1", "compute.oom_fallback", True),
    ("MIZUOTO_COMPUTE_OOM_FALLBACK", "Yes", "compute.oom_fallback", True),
    ("MIZUOTO_COMPUTE_UNLOAD_AFTER_MINUTES", "2.5", "compute.unload_after_minutes", 2.5),
    ("MIZUOTO_COMPUTE_SIMULATE_VRAM_MB", "256", "compute.simulate_vram_mb", 256),
])
def test_environment_parsed_by_type(tmp_path, variable, text, key, value):
    p = VramPolicy(settings_path=tmp_path / "absent.json", environ={variable: text})
    assert p[key] == value and type(p[key]) is type(value)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("compute.vram_mode", "medium", "one of high, normal, low, none, shared"),
    ("compute.async_offload", 9, "an integer from 0 to 8"),
    ("compute.async_offload", True, "an integer from 0 to 8"),
    ("compute.gpu_jobs", 0, "an integer >= 1"),
    ("compute.vram_limit_mb", 0, "an integer >= 1"),
    ("compute.vram_reserve_mb", -1, "an integer >= 0"),
    ("compute.oom_retry", "yes", "true or false"),
    ("compute.unload_after_minutes", 0, "a number > 0"),
    ("compute.unload_after_minutes", float("nan"), "a number > 0"),
    ("compute.max_resident_models", 0, "an integer >= 1"),
    ("engines.qwen3tts.pinned_models", "talker", "a list of model names"),
])
def test_bad_value_names_key_value_source_expected(nofile, key, value, expected):
    with pytest.raises(SettingsError) as e:
        VramPolicy({key: value}, **nofile)
    message = str(e.value)
    assert repr(key) in message and repr(value) in message
    assert "constructor override" in message and expected in message


def test_unknown_keys(nofile):
    with pytest.raises(SettingsError, match=r"'compute\.vram_mod'.*did you mean 'compute\.vram_mode'"):
        VramPolicy({"compute.vram_mod": "low"}, **nofile)
    for key in ("engines.Bad-Id.pinned_models", "engines.qwen.other", "server.port"):
        with pytest.raises(SettingsError, match="unknown setting"):
            VramPolicy({key: []}, **nofile)
    with pytest.raises(KeyError):
        VramPolicy(**nofile).get("compute.nope")


def test_errors_name_their_source(tmp_path):
    bad_file = write(tmp_path / "s.json", {"compute.gpu_jobs": "two"})
    with pytest.raises(SettingsError, match=f"settings file {bad_file}.*'two'"):
        VramPolicy(settings_path=bad_file, environ={})
    absent = tmp_path / "absent.json"
    with pytest.raises(SettingsError, match="MIZUOTO_COMPUTE_GPU_JOBS.*'two'.*integer >= 1"):
        VramPolicy(settings_path=absent, environ={"MIZUOTO_COMPUTE_GPU_JOBS": "two"})
    with pytest.raises(SettingsError, match="MIZUOTO_COMPUTE_OOM_RETRY.*'maybe'.*true or false"):
        VramPolicy(settings_path=absent, environ={"MIZUOTO_COMPUTE_OOM_RETRY": "maybe"})
    with pytest.raises(SettingsError, match="unknown setting 'compute.turbo'.*MIZUOTO_COMPUTE_TURBO"):
        VramPolicy(settings_path=absent, environ={"MIZUOTO_COMPUTE_TURBO": "1"})
    with pytest.raises(SettingsError, match="MIZUOTO_SETTINGS is not valid JSON"):
        VramPolicy(settings_path=absent, environ={"MIZUOTO_SETTINGS": "{vram"})
    with pytest.raises(SettingsError, match="per-call override"):
        VramPolicy(settings_path=absent, environ={}).with_overrides({"compute.kv_cache": "paged"})


def test_malformed_file_names_file(tmp_path):
    broken = tmp_path / "settings.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(SettingsError, match=f"settings file {broken} is not valid JSON"):
        VramPolicy(settings_path=broken, environ={})
    write(broken, ["compute.vram_mode"])
    with pytest.raises(SettingsError, match="must hold a JSON object"):
        VramPolicy(settings_path=broken, environ={})


def test_pinned_models_copied_not_shared(nofile):
    names = ["talker"]
    p = VramPolicy({"engines": {"qwen3tts": {"pinned_models": names}}}, **nofile)
    names.append("codec")
    p["engines.qwen3tts.pinned_models"].append("x")
    assert p["engines.qwen3tts.pinned_models"] == ["talker"]
    assert p.as_dict()["engines.qwen3tts.pinned_models"] == ["talker"]


def test_default_settings_path(tmp_path, monkeypatch):
    write(tmp_path / "settings.json", {"compute.vram_mode": "low"})
    p = VramPolicy(environ={"MIZUOTO_CONFIG_DIR": str(tmp_path)})
    assert p["compute.vram_mode"] == "low"


def test_paths(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "folder_paths", raising=False)
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")
    assert paths.cache_dir({}) == tmp_path / "home/.cache/mizuoto"
    assert paths.config_dir({}) == tmp_path / "home/.config/mizuoto"
    assert paths.cache_dir({"MIZUOTO_CACHE_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    fake = types.ModuleType("folder_paths")
    fake.get_user_directory = lambda: str(tmp_path / "comfy/user")
    monkeypatch.setitem(sys.modules, "folder_paths", fake)
    assert paths.cache_dir({}) == tmp_path / "comfy/user/mizuoto/cache"
    assert paths.config_dir({}) == tmp_path / "comfy/user/mizuoto"
    assert paths.config_dir({"MIZUOTO_CONFIG_DIR": str(tmp_path / "x")}) == tmp_path / "x"


def test_memory_budgets(nofile):
    p = VramPolicy(**nofile)
    assert _auto_pinned_bytes(64 * GB, windows=False) == int(0.9 * 64 * GB)
    assert _auto_pinned_bytes(8 * GB, windows=False) == int(0.5 * 8 * GB)      # RAM - 4 GB
    assert _auto_pinned_bytes(4 * GB, windows=False) == int(0.4 * 4 * GB)
    assert _auto_pinned_bytes(64 * GB, windows=True) == int(0.4 * 64 * GB)
    assert p.max_pinned_bytes(total_ram=64 * GB) == _auto_pinned_bytes(64 * GB, sys.platform == "win32")
    assert p.max_pinned_bytes() > 0
    assert p.with_overrides({"compute.max_pinned_mb": 0}).max_pinned_bytes() == 0
    assert p.ram_reserve_bytes(total_ram=8 * GB) == 2 * GB
    assert p.ram_reserve_bytes(total_ram=64 * GB) == 64 * GB // 10
    assert p.with_overrides({"compute.ram_reserve_mb": 512}).ram_reserve_bytes() == 512 << 20


def test_cuda_allocator(nofile, monkeypatch):
    """Only expandable segments are applied (through torch's settings call, never the environment);
    the backend is fixed at torch's import. In a fresh interpreter: tests/test_cuda_path_cpu.py."""
    import mizuoto.runtime.allocator as allocator

    applied: list[str] = []
    monkeypatch.setattr(allocator, "_set_allocator_settings", applied.append)  # not this process's allocator
    p = VramPolicy(**nofile)
    for mode in ("auto", "native", "async"):
        environ: dict[str, str] = {}
        assert apply_cuda_allocator(p.with_overrides({"compute.cuda_allocator": mode}), environ) is None
        assert environ == {} and applied == []
    environ = {}
    assert apply_cuda_allocator(p.with_overrides({"compute.cuda_allocator": "expandable"}), environ) \
        == "expandable_segments:True"
    assert environ == {} and applied == ["expandable_segments:True"]
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        environ = {name: "max_split_size_mb:128"}
        assert apply_cuda_allocator(p.with_overrides({"compute.cuda_allocator": "expandable"}), environ) is None
        assert environ == {name: "max_split_size_mb:128"} and applied == ["expandable_segments:True"]

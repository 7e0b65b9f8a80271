"""The VRAM policy: the `compute.*` settings (and per-engine pinned models) the runtime obeys.

==============================  ==========  ============================================================
key                             default     accepted values
==============================  ==========  ============================================================
compute.vram_mode               "normal"    high | normal | low | none | shared ("shared": MPS unified memory)
compute.vram_reserve_mb         None        None = auto (the manager: 0 on a simulated device, ComfyUI's
                                            400 MB, 600 MB on Windows, on a real GPU) or int >= 0
compute.vram_limit_mb           None        None or int > 0: never use more than this much VRAM
compute.async_offload           1           int 0..8: streamed copies in flight besides the running one
compute.max_pinned_mb           None        None = auto (ComfyUI's budget, `max_pinned_bytes`) or int >= 0
compute.host_copies             "auto"      auto | on | off
compute.ram_reserve_mb          None        None = auto (max(2 GB, RAM / 10), `ram_reserve_bytes`) or
                                            int >= 0
compute.oom_retry               True        bool
compute.oom_fallback            False       bool
compute.gpu_jobs                1           int >= 1
compute.max_resident_models     None        None (unlimited) or int >= 1
compute.unload_after_minutes    None        None (never) or number > 0
compute.kv_cache                "auto"      auto | dynamic | static (auto: the layout of the engine's upstream)
compute.cuda_allocator          "auto"      auto | native | async | expandable (auto is native)
compute.simulate_vram_mb        None        None or int > 0
engines.<id>.pinned_models      []          list of model names; <id> matches [a-z0-9_]+
==============================  ==========  ============================================================

Sources, lowest precedence first: the defaults above; the settings file (JSON, flat dotted keys or
nested objects; default `config_dir()/settings.json`, a missing file is fine); the environment
(`MIZUOTO_SETTINGS` holding a JSON object, then `MIZUOTO_COMPUTE_<NAME>` per compute key, e.g.
`MIZUOTO_COMPUTE_VRAM_MODE=low`, parsed by the key's type: "auto"/"none"/"null"/"" mean None where
None is allowed, booleans accept true/false/1/0/yes/no/on/off); constructor overrides; per-call
`with_overrides`. Every value is validated where it enters: an unknown key or a bad value is a
`SettingsError` naming the key, the value, the source and what is expected.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from .paths import config_dir

_MB = 1 << 20
_GB = 1 << 30
_NONE_WORDS = {"", "auto", "none", "null"}
_TRUE_WORDS = {"true", "1", "yes", "on"}
_FALSE_WORDS = {"false", "0", "no", "off"}
_ENGINE_KEY = re.compile(r"engines\.([a-z0-9_]+)\.pinned_models")
_ENV_PREFIX = "MIZUOTO_COMPUTE_"


class SettingsError(ValueError):
    """A setting that cannot be used: unknown key, bad value, or unreadable settings file."""


@dataclass(frozen=True)
class _Kind:
    expected: str                                   # for error messages
    valid: Callable[[Any], bool]                    # is a typed value (JSON, Python) acceptable
    parse: Callable[[str], Any] | None = None       # environment string -> typed value, or ValueError
    choices: tuple[str, ...] = ()                   # the words of a choice setting (UI lists)


def _choice(*options: str) -> _Kind:
    return _Kind("one of " + ", ".join(options),
                 lambda v: isinstance(v, str) and v in options, lambda s: s.strip().lower(), options)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)      # True is not a count of megabytes


def _integer(low: int, high: int | None = None, *, none: str | None = None) -> _Kind:
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
    if none is not None:
        expected += f", or null ({none})"

    def valid(v: Any) -> bool:
        if v is None:
            return none is not None
        return _is_int(v) and v >= low and (high is None or v <= high)

    def parse(s: str) -> Any:
        return None if none is not None and s.strip().lower() in _NONE_WORDS else int(s)

    return _Kind(expected, valid, parse)


def _positive_number_or_none(none: str) -> _Kind:
    def valid(v: Any) -> bool:
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                             and math.isfinite(v) and v > 0)

    def parse(s: str) -> Any:
        return None if s.strip().lower() in _NONE_WORDS else float(s)

    return _Kind(f"a number > 0, or null ({none})", valid, parse)


def _parse_bool(s: str) -> bool:
    word = s.strip().lower()
    if word in _TRUE_WORDS or word in _FALSE_WORDS:
        return word in _TRUE_WORDS
    raise ValueError(s)


_BOOL = _Kind("true or false", lambda v: isinstance(v, bool), _parse_bool)
# No parser: only compute keys have a per-key environment variable.
_NAMES = _Kind("a list of model names (strings)",
               lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v))

_COMPUTE: dict[str, tuple[Any, _Kind]] = {
    "compute.vram_mode": ("normal", _choice("high", "normal", "low", "none", "shared")),
    "compute.vram_reserve_mb": (None, _integer(0, none="auto")),
    "compute.vram_limit_mb": (None, _integer(1, none="no limit")),
    "compute.async_offload": (1, _integer(0, 8)),
    "compute.max_pinned_mb": (None, _integer(0, none="auto")),
    "compute.host_copies": ("auto", _choice("auto", "on", "off")),
    "compute.ram_reserve_mb": (None, _integer(0, none="auto")),
    "compute.oom_retry": (True, _BOOL),
    "compute.oom_fallback": (False, _BOOL),
    "compute.gpu_jobs": (1, _integer(1)),
    "compute.max_resident_models": (None, _integer(1, none="unlimited")),
    "compute.unload_after_minutes": (None, _positive_number_or_none("never")),
    "compute.kv_cache": ("auto", _choice("auto", "dynamic", "static")),   # auto: the engine's upstream layout
    "compute.cuda_allocator": ("auto", _choice("auto", "native", "async", "expandable")),
    "compute.simulate_vram_mb": (None, _integer(1, none="off")),
}


# Read outside any request (upkeep, pinning, the device, CUDA's start), so a request cannot change them.
PROCESS_WIDE = {
    "compute.max_resident_models": "kept by the upkeep between requests",
    "compute.unload_after_minutes": "kept by the upkeep between requests",
    "compute.ram_reserve_mb": "kept by the upkeep between requests",
    "compute.simulate_vram_mb": "chooses the device when the runtime starts",
    "compute.max_pinned_mb": "one pin budget for every model",
    "compute.cuda_allocator": "fixed when CUDA starts",
}


def _kind(key: str, source: str) -> _Kind:
    if key in _COMPUTE:
        return _COMPUTE[key][1]
    if _ENGINE_KEY.fullmatch(key):
        return _NAMES
    close = difflib.get_close_matches(key, list(_COMPUTE), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise SettingsError(f"unknown setting {key!r} from {source}: expected a compute.* key or "
                        f"engines.<id>.pinned_models with <id> in [a-z0-9_]+{hint}")


def _checked(key: str, value: Any, source: str) -> Any:
    kind = _kind(key, source)
    if not kind.valid(value):
        raise SettingsError(f"setting {key!r} from {source}: {value!r} is not valid; "
                            f"expected {kind.expected}")
    return list(value) if kind is _NAMES else value


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    # Files may nest ({"compute": {"vram_mode": "low"}}) or use dotted keys; both mean the same.
    for name, value in mapping.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            yield from _flatten(value, key + ".")
        else:
            yield key, value


def _read_file(path: Path) -> Mapping[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SettingsError(f"settings file {path} cannot be read: {e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SettingsError(f"settings file {path} is not UTF-8 text (byte {e.start}); expected a JSON object") from None
    return json_object(text, f"settings file {path}")


def json_object(text: str, source: str) -> Mapping[str, Any]:
    """A JSON object from `text`; anything else (bad JSON, nesting deep enough to exhaust the stack,
    integers past Python's digit limit) is a SettingsError naming the source."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SettingsError(f"{source} is not valid JSON: {e}") from None
    except (RecursionError, ValueError) as e:
        raise SettingsError(f"{source} cannot be used: {type(e).__name__}: {str(e)[:120]}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{source} must hold a JSON object, not {type(data).__name__}")
    return data


def setting_choices(key: str) -> tuple[str, ...]:
    """The words a choice setting accepts (the Runtime Settings node lists exactly these)."""
    return _kind(key, "setting_choices").choices


def parse_setting(key: str, text: str, source: str = "command line") -> Any:
    """A setting's value from text (environment, command line, UI): typed and validated."""
    kind = _kind(key, source)
    if kind.parse is None:
        value = [name.strip() for name in text.split(",") if name.strip()]
    else:
        try:
            value = kind.parse(text)
        except ValueError:
            raise SettingsError(f"setting {key!r} from {source}: {text!r} is not valid; "
                                f"expected {kind.expected}") from None
    return _checked(key, value, source)


def _from_environment(environ: Mapping[str, str]) -> Iterator[tuple[str, Any, str]]:
    if environ.get("MIZUOTO_SETTINGS"):
        source = "environment variable MIZUOTO_SETTINGS"
        for key, value in _flatten(json_object(environ["MIZUOTO_SETTINGS"], source)):
            yield key, value, source
    # Per-key variables come last: the more specific setting wins.
    for variable in sorted(v for v in environ if v.startswith(_ENV_PREFIX)):
        key = "compute." + variable[len(_ENV_PREFIX):].lower()
        source = f"environment variable {variable}"
        yield key, parse_setting(key, environ[variable], source), source


def _auto_pinned_bytes(ram: int, windows: bool) -> int:
    # ComfyUI's pinned-memory budget, so we pin no more than ComfyUI itself would.
    if windows:
        return int(0.4 * ram)
    return int(max(0.4 * ram, min(0.9 * ram, ram - 4 * _GB)))


class VramPolicy:
    """Validated `compute.*` settings with their sources; immutable, `with_overrides` derives."""

    def __init__(self, overrides: Mapping[str, Any] | None = None, *,
                 settings_path: str | os.PathLike[str] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        path = Path(settings_path) if settings_path is not None else config_dir(environ) / "settings.json"
        self._values: dict[str, Any] = {key: default for key, (default, _) in _COMPUTE.items()}
        self._sources: dict[str, str] = dict.fromkeys(_COMPUTE, "default")
        for key, value in _flatten(_read_file(path)):
            self._set(key, value, f"settings file {path}")
        for key, value, source in _from_environment(environ):
            self._set(key, value, source)
        for key, value in _flatten(overrides or {}):
            self._set(key, value, "constructor override")

    def _set(self, key: str, value: Any, source: str) -> None:
        self._values[key] = _checked(key, value, source)
        self._sources[key] = source

    def with_overrides(self, mapping: Mapping[str, Any]) -> VramPolicy:
        """A new policy with per-call overrides on top of this one (validated the same way)."""
        if not isinstance(mapping, Mapping):
            raise SettingsError(f"per-call settings: expected a mapping of setting names to values, got "
                                f"{type(mapping).__name__}")
        derived = object.__new__(VramPolicy)
        derived._values = dict(self._values)
        derived._sources = dict(self._sources)
        for key, value in _flatten(mapping):
            derived._set(key, value, "per-call override")
        return derived

    def for_request(self, settings: Mapping[str, Any]) -> VramPolicy:
        """`with_overrides` for one request's settings (the Runtime Settings node, `manager.request`):
        keys that only work for the whole process are refused, naming where to set them."""
        if not isinstance(settings, Mapping):
            raise SettingsError(f"per-request settings: expected a mapping of setting names to values, got "
                                f"{type(settings).__name__}")
        for key, _ in _flatten(settings):
            if key in PROCESS_WIDE or _ENGINE_KEY.fullmatch(key):
                env = _ENV_PREFIX + key.removeprefix("compute.").upper() if key in PROCESS_WIDE else "MIZUOTO_SETTINGS"
                raise SettingsError(f"setting {key!r} applies to the whole process ({PROCESS_WIDE.get(key, 'read when a model is loaded')}), "
                                    f"not to one request: set it in {config_dir() / 'settings.json'} or the "
                                    f"environment variable {env}")
        return self.with_overrides(settings)

    def get(self, key: str) -> Any:
        """The value of `key`; KeyError for a key that does not exist."""
        if key in self._values:
            value = self._values[key]
            return list(value) if isinstance(value, list) else value
        if _ENGINE_KEY.fullmatch(key):
            return []
        raise KeyError(f"unknown setting {key!r}")

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def source(self, key: str) -> str:
        """Where the value of `key` came from ("default", "settings file …", "environment variable …")."""
        self.get(key)
        return self._sources.get(key, "default")

    def as_dict(self) -> dict[str, Any]:
        """Every compute key, plus the engine keys that were set."""
        return {key: self.get(key) for key in sorted(self._values)}

    def max_pinned_bytes(self, total_ram: int | None = None) -> int:
        """`compute.max_pinned_mb` in bytes; auto is ComfyUI's budget for this machine's RAM."""
        if self._values["compute.max_pinned_mb"] is not None:
            return self._values["compute.max_pinned_mb"] * _MB
        ram = psutil.virtual_memory().total if total_ram is None else total_ram
        return _auto_pinned_bytes(ram, sys.platform == "win32")

    def ram_reserve_bytes(self, total_ram: int | None = None) -> int:
        """`compute.ram_reserve_mb` in bytes; auto is max(2 GB, RAM / 10)."""
        if self._values["compute.ram_reserve_mb"] is not None:
            return self._values["compute.ram_reserve_mb"] * _MB
        ram = psutil.virtual_memory().total if total_ram is None else total_ram
        return max(2 * _GB, ram // 10)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.as_dict().items() if self._sources.get(k, "default") != "default"}
        return f"VramPolicy({changed!r})"

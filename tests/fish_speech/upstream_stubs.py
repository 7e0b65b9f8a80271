"""Stand-ins for the heavy imports of fish-speech 0.1.0 that its model code never uses on our path
(transformers' AutoTokenizer, audiotools, librosa, dac/__init__'s argbind); parity venv only. The S2
golden script (s2_golden.py) keeps the real transformers: the head's tokenizer is AutoTokenizer."""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch


def _stub(name: str, **attrs) -> types.ModuleType:
    mod = sys.modules.get(name) or types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules.setdefault(name, mod)
    return mod


def install_stubs(upstream: Path, keep_transformers: bool = False) -> None:
    # This folder is also named fish_speech (pytest imports it as that namespace): let the namespace
    # reach upstream's package too (both are namespace packages, upstream has no __init__.py).
    ns = sys.modules.get("fish_speech")
    if ns is not None and hasattr(ns, "__path__") and str(upstream) not in list(ns.__path__):
        ns.__path__.append(str(upstream))
    if "audiotools" not in sys.modules:
        base = type("BaseModel", (torch.nn.Module,), {"INTERN": [], "EXTERN": []})
        ml = _stub("audiotools.ml", BaseModel=base)
        _stub("audiotools", AudioSignal=object, STFTParams=object, ml=ml)
    if not keep_transformers:         # the S2 golden script runs the head's real AutoTokenizer (whose
        _stub("transformers", AutoTokenizer=None)   # import probes librosa; the head's codec needs none)
        _stub("librosa")
    if "dac" not in sys.modules:      # the real package's modules, without dac/__init__ (argbind, utils)
        spec = importlib.util.find_spec("dac")
        pkg = types.ModuleType("dac")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["dac"] = pkg

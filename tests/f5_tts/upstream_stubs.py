"""Make f5-tts 1.1.22 and vocos 0.1.0 importable for inference only (parity venv only).

Their package imports pull training and UI dependencies inference never uses (wandb, accelerate,
datasets, ema_pytorch, librosa, encodec, pydub, matplotlib, transformers, ...): each becomes a
module where any name is a class taking any arguments, unless that package is installed (a real
package is never shadowed). The CUDA-linked PyPI torchaudio wheel loads through
tests/qwen3_tts/torchaudio_shim.py. Call `install()` before importing f5_tts or vocos, and only where
they are installed (`available()`): the stubs stay for the rest of the session.
"""
from __future__ import annotations

import importlib.util
import sys
import types

STUBBED = ("wandb", "accelerate", "accelerate.utils", "datasets", "ema_pytorch", "librosa", "librosa.filters",
           "encodec", "cached_path", "pydub", "soundfile", "matplotlib", "matplotlib.pylab", "transformers")


class _Anything:
    def __init__(self, *args, **kwargs) -> None:
        pass


class _Stub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything


def available() -> bool:
    """f5-tts and vocos are installed (the parity venv)."""
    return importlib.util.find_spec("vocos") is not None and importlib.util.find_spec("f5_tts.model") is not None


def install() -> None:
    from qwen3_tts.torchaudio_shim import install as cpu_torchaudio
    cpu_torchaudio()
    missing = {top for top in {n.split(".")[0] for n in STUBBED}
               if top not in sys.modules and importlib.util.find_spec(top) is None}
    for name in STUBBED:
        if name.split(".")[0] in missing:
            sys.modules.setdefault(name, _Stub(name))

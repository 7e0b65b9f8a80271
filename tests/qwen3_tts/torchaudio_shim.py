"""Let the CUDA-linked PyPI torchaudio wheel import on a CPU-only torch (parity venv only).

qwen-tts imports torchaudio but uses none of its compiled kernels. torchaudio's `_load_lib` raises
OSError when `_torchaudio.so` exists but cannot be loaded (it links libc10_cuda); we make that failure
mean "extension not available", exactly as when the file is absent. Nothing changes when it loads.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_TARGET = "torchaudio._extension.utils"


class _Patch(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        load = module._load_lib

        def _load_lib(lib: str) -> bool:
            try:
                return load(lib)
            except OSError:
                return False

        module._load_lib = _load_lib


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Patch(spec.loader)
        return spec


def install() -> None:
    """Idempotent; must run before torchaudio is first imported."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

"""Mizuoto for ComfyUI: text-to-speech nodes sharing the GPU through a VRAM runtime.

ComfyUI imports this folder by its name; every internal import is relative so the folder can be
called anything. Importing it never needs ComfyUI, and imports nothing heavy: the node mappings (and
with them torch and every engine) load when ComfyUI first reads them, so `python -m mizuoto` answers
an argument error at once.
"""
from typing import Any

WEB_DIRECTORY = "./web"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]


def __getattr__(name: str) -> Any:
    if name in ("NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"):
        from . import nodes
        return getattr(nodes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

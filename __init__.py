"""Mizuoto for ComfyUI: text-to-speech nodes sharing the GPU through a VRAM runtime.

ComfyUI imports this folder by its name; every internal import is relative so the folder can be
called anything. Importing it never needs ComfyUI.
"""
from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

WEB_DIRECTORY = "./web"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]

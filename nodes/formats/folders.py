"""Model folders: `models/TTS/<engine>/<model>/`, registered with ComfyUI's folder_paths so
extra_model_paths.yaml works, and the only places a model name from the UI can resolve to.

A model name is a plain folder name (no separators, no "..", not absolute). Symbolic links the user
placed inside a registered folder (models kept on another drive) are followed, as ComfyUI follows
them: listing, resolving and downloading all see the same folders.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

FOLDER = "TTS"


class ModelNotFound(FileNotFoundError):
    """A model name that does not name a model folder inside the registered TTS folders."""


def register() -> None:
    """Add `models/TTS` to ComfyUI's folders (inside ComfyUI only; never replaces a user's entry)."""
    folder_paths = sys.modules.get("folder_paths")
    if folder_paths is not None:
        folder_paths.add_model_folder_path(FOLDER, os.path.join(folder_paths.models_dir, FOLDER))


def roots() -> list[Path]:
    """Every registered TTS folder: ComfyUI's (with extra_model_paths.yaml), or $MIZUOTO_MODELS_DIR."""
    folder_paths = sys.modules.get("folder_paths")
    if folder_paths is not None and FOLDER in folder_paths.folder_names_and_paths:
        return [Path(p) for p in folder_paths.get_folder_paths(FOLDER)]
    env = os.environ.get("MIZUOTO_MODELS_DIR")
    return [Path(env)] if env else [Path.home() / ".cache" / "mizuoto" / "models" / FOLDER]


def list_models(engine: str) -> list[str]:
    """Model folder names of an engine across all registered folders (sorted, no duplicates)."""
    names = set()
    for root in roots():
        folder = root / engine
        if folder.is_dir():
            names.update(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    return sorted(names)


def resolve(engine: str, name: str) -> Path:
    """The folder of model `name` of `engine`; only plain names inside a registered folder."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name \
            or os.path.isabs(name) or "\x00" in name:
        raise ModelNotFound(f"model name {name!r}: expected a folder name from models/{FOLDER}/{engine}/, "
                            f"without path separators")
    for root in roots():
        candidate = root / engine / name
        if candidate.is_dir():  # a link the user placed in a registered folder is followed, as ComfyUI does
            return candidate
    searched = ", ".join(str(r / engine) for r in roots())
    raise ModelNotFound(f"model {name!r} not found in {searched}; available: {list_models(engine) or 'none'}")

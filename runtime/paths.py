"""Where Mizuoto keeps settings and caches.

Inside ComfyUI both live under ComfyUI's user directory, so they travel with the user's ComfyUI
setup; standalone (tests, command line) they use the usual per-user folders. An environment
variable overrides either.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$MIZUOTO_CONFIG_DIR`, else `<ComfyUI user dir>/mizuoto`, else `~/.config/mizuoto`."""
    return _resolve("MIZUOTO_CONFIG_DIR", (), Path.home() / ".config" / "mizuoto", environ)


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$MIZUOTO_CACHE_DIR`, else `<ComfyUI user dir>/mizuoto/cache`, else `~/.cache/mizuoto`."""
    return _resolve("MIZUOTO_CACHE_DIR", ("cache",), Path.home() / ".cache" / "mizuoto", environ)


def _resolve(variable: str, under_comfy: tuple[str, ...], standalone: Path,
             environ: Mapping[str, str] | None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get(variable):
        return Path(environ[variable]).expanduser()
    # Only when ComfyUI has already imported it: importing ComfyUI ourselves would pull it into
    # the command line and tests, and it is not installable from PyPI anyway.
    folder_paths = sys.modules.get("folder_paths")
    if folder_paths is not None:
        return Path(folder_paths.get_user_directory(), "mizuoto", *under_comfy)
    return standalone

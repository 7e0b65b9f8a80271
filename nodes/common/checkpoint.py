"""Pickled checkpoints (`.pth`, `.pt`, `.bin`, `.ckpt`) read safely: `torch.load(weights_only=True)`
only (tensors, containers and plain values; never arbitrary objects), memory-mapped where the file
format allows, on the CPU. Errors name the file.

    state = load_state_dict(folder / "pytorch_model.bin")            # {name: tensor}
    state = load_state_dict(path, key="state_dict")                   # a nested state dict
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from ...runtime.loading import CheckpointError


def load_pickle(path: str | os.PathLike) -> Any:
    """The object a torch pickle holds, loaded with `weights_only=True` on the CPU (mmap for zip files)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):                # legacy (non-zip) pickles cannot be mapped
                raise
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = [line.strip() for line in str(e).splitlines() if "Unsupported global" in line]
        if found:
            raise CheckpointError(f"{path}: refused: it holds objects other than tensors and plain data "
                                  f"(weights_only=True): {found[0]}") from None
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({str(e).splitlines()[0]}); the download "
                              "is incomplete or corrupt") from None
    except (RuntimeError, EOFError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({e}); the download is incomplete "
                              "or corrupt") from None


def load_state_dict(path: str | os.PathLike, key: str | None = None) -> dict[str, torch.Tensor]:
    """A flat {name: tensor} state dict from a torch pickle (`key`: the entry holding it, if nested)."""
    obj = load_pickle(path)
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            raise CheckpointError(f"{path}: expected a dict with a {key!r} entry")
        obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise CheckpointError(f"{path}: expected a state dict (names -> tensors), got {type(obj).__name__}")
    return obj


def load_into(module: torch.nn.Module, state: dict[str, torch.Tensor], path: str | os.PathLike) -> torch.nn.Module:
    """`module.load_state_dict(state)` strictly, with one error naming `path` and every missing,
    unexpected or mis-shaped key (persistent buffers included)."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    mismatched = [f"{k}: checkpoint {list(state[k].shape)}, module {list(own[k].shape)}"
                  for k in sorted(set(own) & set(state)) if state[k].shape != own[k].shape]
    if missing or unexpected or mismatched:
        problems = [f"{what} ({len(keys)}) {', '.join(keys[:8])}{', ...' if len(keys) > 8 else ''}"
                    for what, keys in (("missing keys", missing), ("unexpected keys", unexpected),
                                       ("shape mismatch", mismatched)) if keys]
        raise CheckpointError(f"{path} does not match {type(module).__name__}: " + "; ".join(problems))
    module.load_state_dict(state, strict=True)
    return module

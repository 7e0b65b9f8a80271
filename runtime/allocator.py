"""`compute.cuda_allocator`: what can still be chosen about torch's CUDA allocator once torch is imported.

The allocator *backend* (native or cudaMallocAsync) is fixed when torch is imported: writing
`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync` afterwards does nothing, or trips torch's internal
assert when CUDA initialises, and this pack always runs after torch's import (inside ComfyUI, long
after). So `async` is only reported: start ComfyUI with `--cuda-malloc`, or set the environment
variable before Python starts. `expandable` (expandable segments of the native allocator) can change
at run time through torch's allocator-settings call; it applies to segments allocated afterwards.
A configuration the user already wrote in the environment always wins; the environment itself is
never modified.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import torch

from .policy import VramPolicy

log = logging.getLogger(__name__)

EXPANDABLE = "expandable_segments:True"
ASYNC_BACKEND = "backend:cudaMallocAsync"
# Every name torch reads its allocator configuration from (PYTORCH_ALLOC_CONF is the newest).
_ENV_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")


def _set_allocator_settings(conf: str) -> None:
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)  # torch 2.9+
    if setter is None:
        setter = torch.cuda.memory._set_allocator_settings
    setter(conf)


def apply_cuda_allocator(policy: VramPolicy, environ: Mapping[str, str] = os.environ) -> str | None:
    """Apply `compute.cuda_allocator` to this process; returns the setting applied, or None."""
    choice = policy["compute.cuda_allocator"]
    if choice in ("auto", "native"):
        return None
    configured = {name: environ[name] for name in _ENV_NAMES if environ.get(name)}
    if choice == "async":
        if any("cudamallocasync" in v.lower() for v in configured.values()):
            log.info("compute.cuda_allocator=async: already chosen by the environment (%s)", configured)
        else:
            log.warning("compute.cuda_allocator=async cannot be applied: torch fixes its allocator backend "
                        "when it is imported. Start ComfyUI with --cuda-malloc, or set "
                        "PYTORCH_CUDA_ALLOC_CONF=%s before starting Python", ASYNC_BACKEND)
        return None
    if configured:
        log.info("compute.cuda_allocator=%s not applied: the environment configures the allocator (%s)",
                 choice, configured)
        return None
    try:
        _set_allocator_settings(EXPANDABLE)
    except (RuntimeError, AttributeError) as e:  # e.g. a backend without expandable segments
        log.warning("compute.cuda_allocator=expandable not applied: %s", e)
        return None
    return EXPANDABLE


def allocator_env(policy: VramPolicy, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The allocator variables a new process (a training job) starts with: what the environment already
    configures wins; else `compute.cuda_allocator` (a new process can still choose the backend)."""
    configured = {name: environ[name] for name in _ENV_NAMES if environ.get(name)}
    if configured:
        return configured
    choice = policy["compute.cuda_allocator"]
    if choice == "async":
        return {"PYTORCH_CUDA_ALLOC_CONF": ASYNC_BACKEND}
    if choice == "expandable":
        return {"PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE}
    return {}

"""`compute.cuda_allocator`: choose torch's CUDA caching allocator through the environment.

torch reads its allocator configuration once, when CUDA initialises, so the host writes it before
the first CUDA use; training subprocesses inherit it from the environment. A value the user already
set in the environment always wins.
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping

from .policy import VramPolicy

log = logging.getLogger(__name__)

_CONF = {"async": "backend:cudaMallocAsync", "expandable": "expandable_segments:True"}
# Every name torch reads its allocator configuration from (PYTORCH_ALLOC_CONF is the newest).
_ENV_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")


def apply_cuda_allocator(policy: VramPolicy,
                         environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Write PYTORCH_CUDA_ALLOC_CONF for async/expandable; returns what was written, or None."""
    conf = _CONF.get(policy["compute.cuda_allocator"])
    if conf is None:                                    # auto and native: torch's own default
        return None
    existing = next((name for name in _ENV_NAMES if environ.get(name)), None)
    if existing is not None:
        log.info("compute.cuda_allocator=%s not applied: %s=%r is already set",
                 policy["compute.cuda_allocator"], existing, environ[existing])
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        log.warning("compute.cuda_allocator=%s takes effect at the next start: CUDA is already "
                    "initialised", policy["compute.cuda_allocator"])
    environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return conf

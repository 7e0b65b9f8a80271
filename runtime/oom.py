"""What counts as running out of device memory, as ComfyUI's `model_management.is_oom` decides it.

`torch.OutOfMemoryError` is the caching allocator's. Libraries that allocate their own workspaces
(cuDNN, cuFFT, cuBLAS) report the same condition as an accelerator error (`torch.AcceleratorError`,
a `RuntimeError` before torch 2.8) whose code is cudaErrorMemoryAllocation (2) or whose text says so.
Such an error can stay pending in the CUDA runtime: torch raised it from a synchronous return and did
not consume it, so the next unrelated kernel launch would raise it again. `discard_pending_error`
consumes it the way ComfyUI does (a tiny kernel and a synchronize whose error is dropped).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

import torch

log = logging.getLogger("mizuoto.runtime")

CUDA_ERROR_MEMORY_ALLOCATION = 2
# How cuDNN, cuFFT and cuBLAS word a failed workspace allocation.
_MESSAGES = ("out of memory", "cufft_alloc_failed", "cudnn_status_alloc_failed", "cublas_status_alloc_failed")


def accelerator_error() -> type[BaseException]:
    """torch.AcceleratorError where torch has it (2.8+), else RuntimeError (what it subclasses)."""
    return getattr(torch, "AcceleratorError", RuntimeError)


def is_oom(error: BaseException, devices: Iterable[torch.device | str] = ()) -> bool:
    """Whether `error` means the device ran out of memory; clears a pending CUDA error if so.

    `devices` are the devices the failed work ran on (where a pending error may wait)."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    if not isinstance(error, accelerator_error()):
        return False
    text = str(error).lower()
    if getattr(error, "error_code", None) != CUDA_ERROR_MEMORY_ALLOCATION and not any(m in text for m in _MESSAGES):
        return False
    discard_pending_error(devices)
    return True


def discard_pending_error(devices: Iterable[torch.device | str] = ()) -> None:
    """Consume an error the CUDA runtime still holds, on each CUDA device given (else the current one)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    cuda = [torch.device(d) for d in devices if torch.device(d).type == "cuda"]
    for device in cuda or [torch.device("cuda", torch.cuda.current_device())]:
        try:
            a = torch.ones(1, dtype=torch.uint8, device=device)
            _ = a + a
            torch.cuda.synchronize(device)
        except RuntimeError as e:  # the pending error itself: already known from its synchronous return
            log.debug("discarded a pending CUDA error on %s: %s", device, e)

"""Frugal alternatives an engine offers `ctx.run(..., fallback=(what, fn))` after OOM retries fail.

They change the numbers slightly, so they run only with `compute.oom_fallback` and are named in
`applied.fallbacks`.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def tiled_1d(decode: Callable[[Tensor], Tensor], latents: Tensor, tile: int = 256,
             overlap: int = 32) -> Tensor:
    """Decode `latents` ([..., T]) in tiles of `tile` frames overlapping by `overlap` frames.

    The output's samples per frame come from the first tile (each tile must give a whole multiple
    of its frames); overlapping output regions crossfade linearly from one tile to the next, as
    ComfyUI's tiled audio VAE decode does. Only one tile's output is alive besides the result.
    """
    if tile <= 0 or overlap < 0 or overlap >= tile:
        raise ValueError(f"tiled_1d needs 0 <= overlap < tile, got tile={tile}, overlap={overlap}")
    frames = latents.shape[-1]
    if frames <= tile:
        return decode(latents)
    stride = tile - overlap
    out: Tensor | None = None
    ratio = 0
    start = 0
    while True:
        end = min(start + tile, frames)
        piece = decode(latents[..., start:end].contiguous())
        if out is None:
            ratio = piece.shape[-1] // (end - start)
            out = piece.new_empty(*piece.shape[:-1], frames * ratio)
        if piece.shape[-1] != (end - start) * ratio or ratio == 0:
            raise ValueError(f"tiled_1d: decode gave {piece.shape[-1]} samples for {end - start} "
                             f"frames; expected a whole multiple, {ratio} per frame as the first tile")
        head = overlap * ratio if start else 0
        if head:
            # lerp(a, b, w) is exactly a where a == b, so tiles that agree stay bit-identical.
            ramp = torch.arange(1, head + 1, device=piece.device, dtype=torch.float32) / (head + 1)
            ramp = ramp.to(piece.dtype)     # built in float32: half precision cannot count that far
            region = out[..., start * ratio:start * ratio + head]
            region.copy_(torch.lerp(region, piece[..., :head], ramp))
        out[..., start * ratio + head:end * ratio] = piece[..., head:]
        if end == frames:
            return out
        del piece                           # freed before the next tile decodes
        start += stride

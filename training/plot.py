"""The loss curve as a ComfyUI IMAGE ([1, H, W, 3] float in [0, 1]) drawn with torch alone."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

MARGIN = 16


def loss_curve(losses: Sequence[float], width: int = 512, height: int = 256) -> Tensor:
    """Each loss against its step, scaled to the image (white ground, grey axes, a blue line; the last
    tenth of the steps' mean as a red level line), so a falling loss reads at a glance."""
    if width < 4 * MARGIN or height < 4 * MARGIN:
        raise ValueError(f"loss curve: {width}x{height} is too small")
    image = torch.ones(height, width, 3)
    image[MARGIN:height - MARGIN, MARGIN] = 0.6
    image[height - MARGIN, MARGIN:width - MARGIN] = 0.6
    values = torch.tensor([float(x) for x in losses if x == x], dtype=torch.float64)
    if values.numel() == 0:
        return image[None]
    lo, hi = float(values.min()), float(values.max())
    span = hi - lo or 1.0
    w, h = width - 2 * MARGIN - 1, height - 2 * MARGIN - 1

    def row(v: float) -> int:
        return MARGIN + int(round((hi - v) / span * h))

    tail = float(values[-max(1, values.numel() // 10):].mean())
    image[row(tail), MARGIN + 1:width - MARGIN] = torch.tensor([0.85, 0.2, 0.2])
    n = values.numel()
    xs = [MARGIN + 1 + (int(round(i / (n - 1) * (w - 1))) if n > 1 else 0) for i in range(n)]
    ys = [row(float(v)) for v in values]
    blue = torch.tensor([0.1, 0.3, 0.85])
    for i in range(n):
        x0, y0 = xs[i], ys[i]
        x1, y1 = (xs[i + 1], ys[i + 1]) if i + 1 < n else (x0, y0)
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for t in range(steps + 1):
            x = x0 + (x1 - x0) * t // steps
            y = y0 + (y1 - y0) * t // steps
            image[max(0, y - 1):y + 1, x] = blue
    return image[None]

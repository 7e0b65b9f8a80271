"""Conditional flow matching: the ODE solver the flow-matching engines share (F5-TTS, CosyVoice,
IndexTTS 2, VoxCPM 2).

    times = time_grid(32, sway=-1.0, dtype=x0.dtype)                        # 0 -> 1, 33 points
    x0 = noise((frames, 100), generator, device=dev, dtype=dtype)           # seeded on the CPU, then moved
    step = guided(lambda x, t: dit(x, t, ...), strength=2.0)                # one batch: [cond; uncond]
    mel = solve(step, x0, times, method="euler", callback=lambda i, n: ...)

The velocity field is a plain callable `fn(x, t) -> v` so each engine calls its own estimator
module normally (through `__call__`: the runtime's streaming hooks fire on every step). Integration
follows torchdiffeq's fixed-grid solvers exactly (`odeint(fn, x0, t, method="euler" | "midpoint")`
on the grid `t`, the way F5-TTS calls it): the same operations in the same order, so the result is
bit-identical, not merely close.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Velocity = Callable[[Tensor, Tensor], Tensor]
Combine = Callable[[Tensor, Tensor, float], Tensor]

# F5-TTS's "Empirically Pruned Step Sampling": for a few small step counts, the grid (in 1/32 units)
# that upstream found better than a uniform one. Other counts use the uniform grid.
EPSS_GRIDS: dict[int, tuple[int, ...]] = {
    5: (0, 2, 4, 8, 16, 32),
    6: (0, 2, 4, 6, 8, 16, 32),
    7: (0, 2, 4, 6, 8, 16, 24, 32),
    10: (0, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32),
    12: (0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32),
    16: (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32),
}


def time_grid(steps: int, *, sway: float | None = None, epss: bool = False, start: float = 0.0,
              device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """`steps + 1` time points from `start` to 1: uniform (`torch.linspace`), or F5-TTS's EPSS grid
    when `epss` and one is defined for `steps` (and `start` is 0), then warped by sway sampling
    (`sway` coefficient s: t + s * (cos(pi/2 t) - 1 + t); s < 0 puts more steps early)."""
    if steps < 1:
        raise ValueError(f"steps: expected at least 1, got {steps}")
    grid = EPSS_GRIDS.get(steps) if epss and start == 0 else None
    if grid is not None:
        t = (1 / 32) * torch.tensor(grid, device=device, dtype=dtype)
    else:
        t = torch.linspace(start, 1, steps + 1, device=device, dtype=dtype)
    return t if sway is None else sway_sampling(t, sway)


def sway_sampling(t: Tensor, coef: float) -> Tensor:
    """F5-TTS's sway sampling schedule t + coef * (cos(pi/2 t) - 1 + t) (keeps 0 and 1 fixed)."""
    return t + coef * (torch.cos(torch.pi / 2 * t) - 1 + t)


def noise(shape: Sequence[int], generator: torch.Generator | None, *, device: torch.device | str = "cpu",
          dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard normal noise drawn on the CPU from `generator` (so a seed gives the same noise on every
    device, streamed or not), then moved to `device`. `generator=None` draws from torch's global CPU
    generator, which is what `torch.manual_seed(seed); torch.randn(...)` upstream code does."""
    return torch.randn(tuple(shape), generator=generator, dtype=dtype).to(device)


def extrapolate(cond: Tensor, uncond: Tensor, strength: float) -> Tensor:
    """cond + (cond - uncond) * strength (F5-TTS, IndexTTS 2)."""
    return cond + (cond - uncond) * strength


def mix(cond: Tensor, uncond: Tensor, strength: float) -> Tensor:
    """(1 + strength) * cond - strength * uncond (CosyVoice's form; equal in exact arithmetic, not in floats)."""
    return (1.0 + strength) * cond - strength * uncond


def guided(fn: Velocity, strength: float, combine: Combine = extrapolate, *, double: bool = False) -> Velocity:
    """Classifier-free guidance with both halves in one batch.

    `fn(x, t)` returns the conditional and the unconditional velocity concatenated on dim 0 (first
    half conditional). With `double=True` the input is duplicated first (`fn(cat([x, x]), t)`), for
    estimators that take the doubled batch as input; without it `fn` builds its own doubled batch
    (F5-TTS's DiT drops the conditions inside). `combine(cond, uncond, strength)` forms the result.
    """
    def step(x: Tensor, t: Tensor) -> Tensor:
        both = fn(torch.cat((x, x), dim=0) if double else x, t)
        cond, uncond = torch.chunk(both, 2, dim=0)
        return combine(cond, uncond, strength)
    return step


def solve(fn: Velocity, x0: Tensor, times: Tensor, *, method: str = "euler", clock: str = "grid",
          callback: Callable[[int, int], None] | None = None) -> Tensor:
    """Integrate dx/dt = fn(x, t) from x0 over the grid `times` and return x at `times[-1]`.

    `clock="grid"` is exactly torchdiffeq's fixed-grid `odeint(fn, x0, times, method=...)[-1]` (F5-TTS):
    t is cast to x's dtype before each call, dt = t1 - t0 as a tensor, Euler x + dt * f(t0, x);
    midpoint x + dt * f(t0 + dt/2, x + f(t0, x) * dt/2). `clock="accumulate"` is the hand-written
    Euler loop of CosyVoice's flow decoder (and the models built on it): t advances as t + dt and the
    next dt is `times[k + 1] - t`, so t drifts from the grid by rounding; Euler only. `clock="drift"`
    is the Seed-VC loop (IndexTTS 2's s2mel): dt is always the grid's step, t advances as t + dt (so t
    drifts, dt does not); Euler only. Grids may run downwards (dt < 0). `callback(done, total)` runs
    after each step (progress; raise to cancel).
    """
    if method not in ("euler", "midpoint"):
        raise ValueError(f"method: expected 'euler' or 'midpoint', got {method!r}")
    if clock not in ("grid", "accumulate", "drift") or (clock != "grid" and method != "euler"):
        raise ValueError(f"clock: expected 'grid', or 'accumulate' / 'drift' with Euler, got {clock!r} with "
                         f"{method!r}")
    if times.dim() != 1 or times.numel() < 2:
        raise ValueError(f"times: expected a 1-D grid of at least 2 points, got shape {tuple(times.shape)}")
    real = x0.abs().dtype

    def f(t: Tensor, x: Tensor) -> Tensor:
        return fn(x, t.to(real))

    x = x0
    total = times.numel() - 1
    t, dt = times[0], times[1] - times[0]
    for i in range(total):
        if clock == "grid":
            t, dt = times[i], times[i + 1] - times[i]
        elif clock == "drift":
            dt = times[i + 1] - times[i]
        if method == "euler":
            dx = dt * f(t, x)
        else:
            half = 0.5 * dt
            mid = x + f(t, x) * half
            dx = dt * f(t + half, mid)
        x = x + dx
        if clock != "grid":
            t = t + dt
            if clock == "accumulate" and i + 2 <= total:
                dt = times[i + 2] - t
        if callback is not None:
            callback(i + 1, total)
    return x


def steps_of(method: str, steps: int) -> int:
    """Estimator calls (NFE) of `steps` solver steps: 1 per Euler step, 2 per midpoint step."""
    return steps * (2 if method == "midpoint" else 1)


__all__ = ["EPSS_GRIDS", "extrapolate", "guided", "mix", "noise", "solve", "steps_of", "sway_sampling",
           "time_grid"]


# ---- appended by the VoxCPM 2 engine -------------------------------------------------------------------------


def cfg_zero_star(cond: Tensor, uncond: Tensor, strength: float) -> Tensor:
    """CFG-Zero* (VoxCPM's UnifiedCFM), a `guided` combine: the unconditional velocity scaled by its
    least-squares projection on the conditional one, s = <cond, uncond> / (|uncond|^2 + 1e-8) per batch row,
    then uncond * s + strength * (cond - uncond * s)."""
    b = cond.shape[0]
    dot = torch.sum(cond.view(b, -1) * uncond.view(b, -1), dim=1, keepdim=True)
    scale = (dot / (torch.sum(uncond.view(b, -1) ** 2, dim=1, keepdim=True) + 1e-8)).view(b, *[1] * (cond.dim() - 1))
    return uncond * scale + strength * (cond - uncond * scale)


__all__ += ["cfg_zero_star"]

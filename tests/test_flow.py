"""The shared flow-matching solver (nodes/blocks/flow.py): time grids, sway sampling, guidance,
seeded noise, Euler/midpoint integration, callbacks, and estimator hooks firing on every step.
Where torchdiffeq is installed (the F5-TTS parity venv), integration equals `odeint` bit for bit."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mizuoto.nodes.blocks import flow


def test_time_grid_uniform_epss_and_sway():
    t = flow.time_grid(32)
    assert torch.equal(t, torch.linspace(0, 1, 33))
    assert torch.equal(flow.time_grid(16, epss=True), torch.tensor(flow.EPSS_GRIDS[16], dtype=torch.float32) / 32)
    assert torch.equal(flow.time_grid(32, epss=True), t)            # no EPSS grid for 32 steps: uniform
    assert torch.equal(flow.time_grid(16, epss=True, start=0.1), torch.linspace(0.1, 1, 17))
    s = flow.time_grid(32, sway=-1.0)
    assert torch.equal(s, t + -1.0 * (torch.cos(torch.pi / 2 * t) - 1 + t))
    assert s[0] == 0 and abs(s[-1].item() - 1) < 1e-6 and bool((s[1:] > s[:-1]).all())
    assert (s[1] - s[0]) < (t[1] - t[0])                             # negative sway: small steps first
    assert flow.time_grid(4, dtype=torch.float16).dtype == torch.float16
    with pytest.raises(ValueError, match="steps"):
        flow.time_grid(0)


def test_noise_is_seeded_on_the_cpu():
    a = flow.noise((5, 3), torch.Generator().manual_seed(7), dtype=torch.float32)
    torch.manual_seed(7)
    assert torch.equal(a, torch.randn(5, 3))                         # upstream's manual_seed + randn
    assert torch.equal(a, flow.noise((5, 3), torch.Generator().manual_seed(7)))
    assert flow.noise((2,), torch.Generator().manual_seed(1), dtype=torch.float16).dtype == torch.float16


def test_guidance_combinations_and_one_batch():
    seen = []

    def both(x, t):
        seen.append(x.shape[0])
        return torch.cat((x * 3, x), dim=0)                          # cond = 3x, uncond = x

    x = torch.ones(1, 4)
    assert torch.equal(flow.guided(both, 2.0)(x, torch.tensor(0.0)), 3 * x + (3 * x - x) * 2.0)
    assert torch.equal(flow.guided(both, 2.0, flow.mix)(x, torch.tensor(0.0)), (1 + 2.0) * 3 * x - 2.0 * x)
    assert seen == [1, 1]                                            # the estimator builds its own doubled batch
    flow.guided(both, 1.0, double=True)(x, torch.tensor(0.0))
    assert seen[-1] == 2                                             # or gets it doubled


def test_euler_and_midpoint_orders():
    """dx/dt = x from 1 to t=1: Euler error halves with the step, midpoint's quarters."""
    def errors(method):
        return [abs(flow.solve(lambda x, t: x, torch.ones((), dtype=torch.float64),
                               torch.linspace(0, 1, n + 1, dtype=torch.float64), method=method).item() - math.e)
                for n in (16, 32)]
    e16, e32 = errors("euler")
    assert 1.9 < e16 / e32 < 2.1
    m16, m32 = errors("midpoint")
    assert 3.8 < m16 / m32 < 4.2 and m32 < e32 / 50
    x = flow.solve(lambda x, t: torch.full_like(x, 2.0), torch.zeros(3), flow.time_grid(8))
    assert torch.allclose(x, torch.full((3,), 2.0))
    with pytest.raises(ValueError, match="method"):
        flow.solve(lambda x, t: x, torch.zeros(1), flow.time_grid(2), method="rk4")
    with pytest.raises(ValueError, match="grid"):
        flow.solve(lambda x, t: x, torch.zeros(1), torch.zeros(1))


def test_time_is_passed_in_the_state_dtype_and_callback_can_cancel():
    seen, done = [], []

    def fn(x, t):
        seen.append((t.dtype, t.dim()))
        return -x

    grid = flow.time_grid(4, dtype=torch.float64)
    flow.solve(fn, torch.ones(2, dtype=torch.float32), grid, callback=lambda i, n: done.append((i, n)))
    assert seen == [(torch.float32, 0)] * 4 and done == [(1, 4), (2, 4), (3, 4), (4, 4)]

    class Stop(Exception):
        pass

    def stop(i, n):
        if i == 2:
            raise Stop
    calls = []
    with pytest.raises(Stop):
        flow.solve(lambda x, t: calls.append(1) or x, torch.ones(1), flow.time_grid(8), callback=stop)
    assert len(calls) == 2


def test_estimator_hooks_fire_on_every_evaluation():
    """The velocity is a plain callable calling the module normally: per-forward hooks (the
    runtime's streaming) run once per evaluation, twice per midpoint step."""
    net = nn.Linear(4, 4)
    calls = []
    net.register_forward_pre_hook(lambda m, a: calls.append(1))
    x0 = torch.randn(1, 4, generator=torch.Generator().manual_seed(0))
    flow.solve(flow.guided(lambda x, t: net(x), 1.0, double=True), x0, flow.time_grid(5))
    assert len(calls) == 5 == flow.steps_of("euler", 5)
    calls.clear()
    flow.solve(lambda x, t: net(x), x0, flow.time_grid(3), method="midpoint")
    assert len(calls) == 6 == flow.steps_of("midpoint", 3)


@pytest.mark.parametrize("method", ["euler", "midpoint"])
def test_equals_torchdiffeq_odeint(method):
    """Bit-identical to torchdiffeq's fixed-grid solvers (runs where torchdiffeq is installed)."""
    torchdiffeq = pytest.importorskip("torchdiffeq")
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 6, generator=g) / 3
    x0 = torch.randn(2, 6, generator=g)
    grid = flow.time_grid(12, sway=-1.0)

    def fn(x, t):
        return torch.tanh(x @ w) * (1 + t) - x * t.cos()

    want = torchdiffeq.odeint(lambda t, x: fn(x, t), x0, grid, method=method)[-1]
    assert torch.equal(flow.solve(fn, x0, grid, method=method), want)


def test_accumulated_clock_is_cosyvoices_loop():
    """CosyVoice's solve_euler: t advances by dt, the next dt is measured from that t (not the grid)."""
    g = torch.Generator().manual_seed(4)
    w = torch.randn(5, 5, generator=g) / 2
    x0 = torch.randn(1, 5, generator=g)
    grid = 1 - torch.cos(torch.linspace(0, 1, 11) * 0.5 * torch.pi)       # CosyVoice's cosine schedule

    def fn(x, t):
        return torch.sin(x @ w) + t

    x, t, dt = x0, grid[0], grid[1] - grid[0]
    for step in range(1, len(grid)):
        x = x + dt * fn(x, t)
        t = t + dt
        if step < len(grid) - 1:
            dt = grid[step + 1] - t
    assert torch.equal(flow.solve(fn, x0, grid, clock="accumulate"), x)
    down = flow.solve(fn, x0, grid.flip(0), clock="accumulate")          # a grid running from 1 to 0
    assert torch.isfinite(down).all() and not torch.equal(down, x)
    with pytest.raises(ValueError, match="clock"):
        flow.solve(fn, x0, grid, method="midpoint", clock="accumulate")

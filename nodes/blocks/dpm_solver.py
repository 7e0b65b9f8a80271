"""DPM-Solver++ multistep sampling for discrete-time diffusion models (VibeVoice's diffusion head).

    sched = DPMSolverMultistep(num_train_timesteps=1000, beta_schedule="cosine", prediction_type="v_prediction")
    state = sched.schedule(steps)                  # timesteps + sigmas for one sampling run
    for i, t in enumerate(state.timesteps):
        x = state.step(model(x, t), x)            # the solver's history lives in `state`, not in `sched`

Follows diffusers' `DPMSolverMultistepScheduler` (the copy VibeVoice ships as
`vibevoice/schedule/dpm_solver.py`) on the settings that copy is used with: algorithm "dpmsolver++",
solver order 1 or 2, "midpoint" second-order update, "linspace" timestep spacing, final sigma zero
(so the last step is first order; `lower_order_final` changes nothing below order 3), no thresholding,
no Karras / Lu sigmas. The same float32 operations run in the same
order, so sampled latents are bit-identical to upstream's, not merely close. Other settings are refused
by name rather than approximated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")
BETA_SCHEDULES = ("linear", "scaled_linear", "cosine", "squaredcos_cap_v2")


def cosine_betas(num_timesteps: int, max_beta: float = 0.999) -> Tensor:
    """The squared-cosine ("cosine" / "squaredcos_cap_v2") beta schedule, float32 like upstream's."""
    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    betas = [min(1 - alpha_bar((i + 1) / num_timesteps) / alpha_bar(i / num_timesteps), max_beta)
             for i in range(num_timesteps)]
    return torch.tensor(betas, dtype=torch.float32)


def _alpha_sigma(sigma: Tensor) -> tuple[Tensor, Tensor]:
    alpha_t = 1 / ((sigma**2 + 1) ** 0.5)
    return alpha_t, sigma * alpha_t


@dataclass
class SolverRun:
    """One sampling run: the timesteps, the sigmas (one more than timesteps, ending at 0) and the
    multistep history. Made by `DPMSolverMultistep.schedule`; `step` advances it."""
    timesteps: Tensor
    sigmas: Tensor
    prediction_type: str
    solver_order: int
    outputs: list[Tensor | None] = field(default_factory=list)
    index: int = 0
    lower_order_nums: int = 0

    def _x0(self, model_output: Tensor, sample: Tensor) -> Tensor:
        if self.prediction_type == "sample":
            return model_output
        alpha_t, sigma_t = _alpha_sigma(self.sigmas[self.index])
        if self.prediction_type == "epsilon":
            return (sample - sigma_t * model_output) / alpha_t
        return alpha_t * sample - sigma_t * model_output

    def _first_order(self, m0: Tensor, sample: Tensor) -> Tensor:
        alpha_t, sigma_t = _alpha_sigma(self.sigmas[self.index + 1])
        alpha_s, sigma_s = _alpha_sigma(self.sigmas[self.index])
        h = (torch.log(alpha_t) - torch.log(sigma_t)) - (torch.log(alpha_s) - torch.log(sigma_s))
        return (sigma_t / sigma_s) * sample - (alpha_t * (torch.exp(-h) - 1.0)) * m0

    def _second_order(self, sample: Tensor) -> Tensor:
        alpha_t, sigma_t = _alpha_sigma(self.sigmas[self.index + 1])
        alpha_s0, sigma_s0 = _alpha_sigma(self.sigmas[self.index])
        alpha_s1, sigma_s1 = _alpha_sigma(self.sigmas[self.index - 1])
        lambda_t = torch.log(alpha_t) - torch.log(sigma_t)
        lambda_s0 = torch.log(alpha_s0) - torch.log(sigma_s0)
        lambda_s1 = torch.log(alpha_s1) - torch.log(sigma_s1)
        m0, m1 = self.outputs[-1], self.outputs[-2]
        h, h_0 = lambda_t - lambda_s0, lambda_s0 - lambda_s1
        r0 = h_0 / h
        d0, d1 = m0, (1.0 / r0) * (m0 - m1)
        return ((sigma_t / sigma_s0) * sample - (alpha_t * (torch.exp(-h) - 1.0)) * d0
                - 0.5 * (alpha_t * (torch.exp(-h) - 1.0)) * d1)

    def step(self, model_output: Tensor, sample: Tensor) -> Tensor:
        """The sample at the next timestep from the model's output at the current one."""
        n = len(self.timesteps)
        if self.index >= n:
            raise RuntimeError(f"DPM-Solver run already finished its {n} steps")
        last = self.index == n - 1      # final sigma zero: always first order at the end
        m = self._x0(model_output, sample)
        self.outputs = self.outputs[1:] + [m]
        sample = sample.to(torch.float32)
        if self.solver_order == 1 or self.lower_order_nums < 1 or last:
            prev = self._first_order(m, sample)
        else:
            prev = self._second_order(sample)
        if self.lower_order_nums < self.solver_order:
            self.lower_order_nums += 1
        self.index += 1
        return prev.to(m.dtype)


class DPMSolverMultistep:
    """The noise schedule of a discrete-time diffusion model and DPM-Solver++ runs over it."""

    def __init__(self, num_train_timesteps: int = 1000, beta_schedule: str = "linear",
                 prediction_type: str = "epsilon", beta_start: float = 0.0001, beta_end: float = 0.02,
                 solver_order: int = 2) -> None:
        if not isinstance(num_train_timesteps, int) or num_train_timesteps < 2:
            raise ValueError(f"num_train_timesteps must be an integer >= 2, got {num_train_timesteps!r}")
        if prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction_type {prediction_type!r} is not supported; expected one of "
                             f"{', '.join(PREDICTION_TYPES)}")
        if solver_order not in (1, 2):
            raise ValueError(f"solver_order {solver_order!r} is not supported; expected 1 or 2")
        if beta_schedule == "linear":
            betas = torch.linspace(beta_start, beta_end, num_train_timesteps, dtype=torch.float32)
        elif beta_schedule == "scaled_linear":
            betas = torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
        elif beta_schedule in ("cosine", "squaredcos_cap_v2"):
            betas = cosine_betas(num_train_timesteps)
        else:
            raise ValueError(f"beta_schedule {beta_schedule!r} is not supported; expected one of "
                             f"{', '.join(BETA_SCHEDULES)}")
        self.num_train_timesteps = num_train_timesteps
        self.prediction_type = prediction_type
        self.solver_order = solver_order
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        alpha_t = torch.sqrt(self.alphas_cumprod)
        sigma_t = torch.sqrt(1 - self.alphas_cumprod)
        self.lambda_t = torch.log(alpha_t) - torch.log(sigma_t)

    def timesteps(self, steps: int) -> np.ndarray:
        """The `steps` training timesteps a run visits, high to low (linspace spacing)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= self.num_train_timesteps:
            raise ValueError(f"diffusion steps must be an integer in 1..{self.num_train_timesteps}, got {steps!r}")
        clipped_idx = torch.searchsorted(torch.flip(self.lambda_t, [0]), -float("inf"))
        last_timestep = (self.num_train_timesteps - clipped_idx).numpy().item()
        return np.linspace(0, last_timestep - 1, steps + 1).round()[::-1][:-1].copy().astype(np.int64)

    def schedule(self, steps: int) -> SolverRun:
        """A fresh run of `steps` solver steps."""
        timesteps = self.timesteps(steps)
        sigmas = (((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5).numpy()
        sigmas = np.interp(timesteps, np.arange(0, len(sigmas)), sigmas)
        sigmas = np.concatenate([sigmas, [0]]).astype(np.float32)
        return SolverRun(timesteps=torch.from_numpy(timesteps), sigmas=torch.from_numpy(sigmas),
                         prediction_type=self.prediction_type, solver_order=self.solver_order,
                         outputs=[None] * self.solver_order)

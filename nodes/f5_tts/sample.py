"""F5-TTS's sampler (`CFM.sample` for one request) on the shared flow-matching solver.

    mel = sample(dit, cond_mel, ids, duration, generator=g)        # [1, duration, mel]: reference + new frames

The reference mel fills the first frames of the conditioning (zeros after), the noise is drawn from
`generator` on the CPU (upstream: `torch.manual_seed(seed); torch.randn(...)`, the same numbers for
the same seed), the time grid is uniform (EPSS for 5-16 steps) warped by sway sampling, the ODE is
integrated with torchdiffeq's Euler (or midpoint) steps, and each step runs the DiT once on the
doubled batch [conditional; unconditional] combined as cond + (cond - uncond) * cfg_strength.
Finally the reference frames are put back. Bit-identical to upstream in float32 on the CPU.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..blocks import flow
from .model import DiT

MAX_DURATION = 65536


@dataclass(frozen=True)
class FlowSettings:
    """Upstream's inference defaults (f5_tts.infer.utils_infer)."""

    steps: int = 32                  # nfe_step
    cfg_strength: float = 2.0
    sway_sampling_coef: float | None = -1.0
    method: str = "euler"            # ode_method
    use_epss: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or not 1 <= self.steps <= 256:
            raise ValueError(f"steps: expected an integer in 1..256, got {self.steps!r}")
        if self.method not in ("euler", "midpoint"):
            raise ValueError(f"method: expected euler or midpoint, got {self.method!r}")
        if not 0 <= self.cfg_strength <= 20:
            raise ValueError(f"cfg_strength: expected 0..20, got {self.cfg_strength!r}")

    @property
    def evaluations(self) -> int:
        return flow.steps_of(self.method, self.steps)


def total_frames(text_len: int, ref_frames: int, duration: int) -> int:
    """Upstream's rule: at least the text or the reference plus one frame; at most 65536."""
    return min(max(max(text_len, ref_frames) + 1, duration), MAX_DURATION)


def sample(dit: DiT, cond: Tensor, text: Tensor, duration: int, *, generator: torch.Generator | None,
           settings: FlowSettings = FlowSettings(), callback: Callable[[int, int], None] | None = None) -> Tensor:
    """Reference mel `cond` [1, T_ref, mel] (in the DiT's dtype, on its device) and token ids `text`
    [1, Nt] -> mel [1, frames, mel] with the reference frames in front."""
    dtype, device = cond.dtype, cond.device
    ref_frames = cond.shape[1]
    frames = total_frames(int((text != -1).sum()), ref_frames, duration)
    cond = F.pad(cond, (0, 0, 0, frames - ref_frames), value=0.0)
    cond_mask = (torch.arange(frames, device=device) < ref_frames)[None, :, None]
    step_cond = torch.where(cond_mask, cond, torch.zeros_like(cond))

    # The text embedding depends on the text and the frame count only: computed once, through the
    # module's __call__ (upstream caches it on the first step).
    text_cond = dit.text_embed(text, frames)
    text_uncond = dit.text_embed(text, frames, drop_text=True) if settings.cfg_strength >= 1e-5 else None

    if text_uncond is None:
        def velocity(x: Tensor, t: Tensor) -> Tensor:
            return dit(x, step_cond, text_cond, None, t)
    else:
        velocity = flow.guided(lambda x, t: dit(x, step_cond, text_cond, text_uncond, t), settings.cfg_strength,
                               flow.extrapolate)

    x0 = flow.noise((frames, cond.shape[-1]), generator, device=device, dtype=dtype)[None]
    times = flow.time_grid(settings.steps, sway=settings.sway_sampling_coef, epss=settings.use_epss,
                           device=device, dtype=dtype)
    out = flow.solve(velocity, x0, times, method=settings.method, callback=callback)
    return torch.where(cond_mask, cond, out)

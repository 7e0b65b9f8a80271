"""ScaledAdam, the optimizer GPT-SoVITS trains its GPT (s1) with (AR/modules/optim.py, from icefall:
Copyright 2022 Xiaomi Corp., Daniel Povey; Apache License 2.0).

Adam whose update of each tensor is scaled by that tensor's RMS (so it learns the direction of a tensor
and, every `size_update_period` steps, its size in log space), with a simplified Adam for scalars and a
whole-model gradient clip at `clipping_scale` x the median norm of the last `clipping_update_period`
steps (no clip before that many steps). Parameters of one (dtype, shape) are stacked and updated as one
batch, in the order of the sorted (dtype, shape) keys, as upstream does; the operations are upstream's,
in its order, so one step gives the same bits. Kept as upstream has it, because the recipe depends on it:

- `_init_state` tests the *stacked* element count, so scalars stacked two or more together get the
  `param_rms` / `scale_*` state (never read: the step takes the scalar path from the per-tensor count);
- the clip's running norms and threshold live in the state of the first batch.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


class ScaledAdam(Optimizer):
    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 3e-2, clipping_scale: float | None = None,
                 betas: tuple[float, float] = (0.9, 0.98), scalar_lr_scale: float = 0.1, eps: float = 1.0e-8,
                 param_min_rms: float = 1.0e-5, param_max_rms: float = 3.0, scalar_max: float = 10.0,
                 size_update_period: int = 4, clipping_update_period: int = 100) -> None:
        if not 0.0 < betas[0] <= betas[1] < 1.0:
            raise ValueError(f"ScaledAdam: betas = {betas}; expected 0 < beta1 <= beta2 < 1")
        if size_update_period < 1 or clipping_update_period < 1:
            raise ValueError("ScaledAdam: size_update_period and clipping_update_period must be at least 1")
        defaults = dict(lr=lr, clipping_scale=clipping_scale, betas=betas, scalar_lr_scale=scalar_lr_scale, eps=eps,
                        param_min_rms=param_min_rms, param_max_rms=param_max_rms, scalar_max=scalar_max,
                        size_update_period=size_update_period, clipping_update_period=clipping_update_period)
        super().__init__(params, defaults)

    @contextmanager
    def _batched(self, params: list[Tensor]) -> Iterator[list[tuple[Tensor, dict]]]:
        """(stacked parameters with stacked grads, the state of the batch's first parameter) per (dtype, shape),
        keys sorted; the stacked values are written back to the parameters on exit."""
        groups: dict[tuple, list[Tensor]] = defaultdict(list)
        for p in params:
            groups[(str(p.dtype), *p.shape)].append(p)
        batches = [groups[k] for k in sorted(groups)]
        stacked = []
        for batch in batches:
            p_stacked = torch.stack(batch)
            p_stacked.grad = torch.stack([torch.zeros_like(p) if p.grad is None else p.grad for p in batch])
            stacked.append((p_stacked, self.state[batch[0]]))
        yield stacked
        for (p_stacked, _), batch in zip(stacked, batches):
            for i, p in enumerate(batch):
                p.copy_(p_stacked[i])

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise ValueError("ScaledAdam.step: closures are not supported")
        for group in self.param_groups:
            with self._batched(group["params"]) as batches:
                clipping_scale = 1.0 if len(batches[0][1]) == 0 else self._clipping_scale(group, batches)
                for p, state in batches:
                    if p.grad.is_sparse:
                        raise RuntimeError("ScaledAdam does not support sparse gradients")
                    if len(state) == 0:
                        self._init_state(group, p, state)
                    self._step_one_batch(group, p, state, clipping_scale)

    def _init_state(self, group: dict, p: Tensor, state: dict) -> None:
        state["step"] = 0
        state["delta"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if p.numel() > 1:          # the stacked count, as upstream (see the module docstring)
            param_rms = (p**2).mean(dim=list(range(1, p.ndim)), keepdim=True).sqrt()
            state["param_rms"] = param_rms
            state["scale_exp_avg_sq"] = torch.zeros_like(param_rms)
            state["scale_grads"] = torch.zeros(group["size_update_period"], *param_rms.shape, device=p.device,
                                               dtype=p.dtype)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)

    def _clipping_scale(self, group: dict, batches: list[tuple[Tensor, dict]]) -> float:
        clipping_scale = group["clipping_scale"]
        first_p, first_state = batches[0]
        step = first_state["step"]
        if clipping_scale is None or step == 0:
            return 1.0
        period = group["clipping_update_period"]
        tot_sumsq = torch.tensor(0.0, device=first_p.device)
        for p, state in batches:
            grad = p.grad
            if p.numel() == p.shape[0]:   # a batch of scalars
                tot_sumsq += (grad**2).sum()
            else:
                tot_sumsq += ((grad * state["param_rms"]) ** 2).sum()
        tot_norm = tot_sumsq.sqrt()
        if "model_norms" not in first_state:
            first_state["model_norms"] = torch.zeros(period, device=first_p.device)
        first_state["model_norms"][step % period] = tot_norm
        if step % period == 0:
            sorted_norms = first_state["model_norms"].sort()[0].to("cpu")
            median = sorted_norms[min(period - 1, (period // 4) * 2)].item()
            first_state["model_norm_threshold"] = clipping_scale * median
            first_state["num_clipped"] = 0
        if step < period:
            return 1.0
        if "model_norm_threshold" not in first_state:
            return 1.0
        ans = min(1.0, (first_state["model_norm_threshold"] / (tot_norm + 1.0e-20)).item())
        if ans < 1.0:
            first_state["num_clipped"] += 1
        return ans

    def _step_one_batch(self, group: dict, p: Tensor, state: dict, clipping_scale: float) -> None:
        size_update_period = group["size_update_period"]
        beta1 = group["betas"][0]
        grad = p.grad
        if clipping_scale != 1.0:
            grad = grad * clipping_scale   # as upstream: the scaled grad feeds only the size update below
        step = state["step"]
        state["delta"].mul_(beta1)
        numel = p.numel() // p.shape[0]
        if numel > 1:
            scale_grads = state["scale_grads"]
            scale_grads[step % size_update_period] = (p * grad).sum(dim=list(range(1, p.ndim)), keepdim=True)
            if step % size_update_period == size_update_period - 1:
                param_rms = state["param_rms"]
                param_rms.copy_((p**2).mean(dim=list(range(1, p.ndim)), keepdim=True).sqrt())
                if step > 0:
                    self._size_update(group, scale_grads, p, state)
        if numel == 1:
            self._step_scalar(group, p, state)
        else:
            self._step(group, p, state)
        state["step"] = step + 1

    def _size_update(self, group: dict, scale_grads: Tensor, p: Tensor, state: dict) -> None:
        param_rms = state["param_rms"]
        beta1, beta2 = group["betas"]
        size_lr = group["lr"] * group["scalar_lr_scale"]
        eps = group["eps"]
        size_update_period = scale_grads.shape[0]
        beta2_corr = beta2**size_update_period
        scale_exp_avg_sq = state["scale_exp_avg_sq"]
        scale_exp_avg_sq.mul_(beta2_corr).add_((scale_grads**2).mean(dim=0), alpha=1 - beta2_corr)
        size_step = (state["step"] + 1) // size_update_period
        bias_correction2 = 1 - beta2_corr**size_step
        denom = scale_exp_avg_sq.sqrt() + eps
        scale_step = -size_lr * (bias_correction2**0.5) * scale_grads.sum(dim=0) / denom
        scale_step.masked_fill_(param_rms < group["param_min_rms"], 0.0)
        scale_step.masked_fill_(param_rms > group["param_max_rms"], -size_lr * size_update_period)
        state["delta"].add_(p * scale_step, alpha=(1 - beta1))

    def _step(self, group: dict, p: Tensor, state: dict) -> None:
        grad = p.grad
        lr = group["lr"]
        beta1, beta2 = group["betas"]
        exp_avg_sq = state["exp_avg_sq"]
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=(1 - beta2))
        this_step = state["step"] - state.get("zero_step", 0)
        bias_correction2 = 1 - beta2 ** (this_step + 1)
        if bias_correction2 < 0.99:
            exp_avg_sq = exp_avg_sq * (1.0 / bias_correction2)
        denom = exp_avg_sq.sqrt()
        denom += group["eps"]
        grad = grad / denom
        alpha = -lr * (1 - beta1) * state["param_rms"].clamp(min=group["param_min_rms"])
        delta = state["delta"]
        delta.add_(grad * alpha)
        p.add_(delta)

    def _step_scalar(self, group: dict, p: Tensor, state: dict) -> None:
        beta1, beta2 = group["betas"]
        scalar_max = group["scalar_max"]
        lr = group["lr"] * group["scalar_lr_scale"]
        grad = p.grad
        exp_avg_sq = state["exp_avg_sq"]
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction2 = 1 - beta2 ** (state["step"] + 1)
        denom = (exp_avg_sq / bias_correction2).sqrt() + group["eps"]
        delta = state["delta"]
        delta.add_(grad / denom, alpha=-lr * (1 - beta1))
        p.clamp_(min=-scalar_max, max=scalar_max)
        p.add_(delta)

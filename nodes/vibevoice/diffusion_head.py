"""VibeVoice's diffusion head (upstream `modular_vibevoice_diffusion_head.py`, parameter names kept) and
the per-frame latent sampler with classifier-free guidance (upstream `sample_speech_tokens`).

The head is a small adaLN MLP stack: the noisy latent is projected to the LM width, each layer modulates a
SwiGLU feed-forward by the LM hidden state of the frame plus a sinusoidal timestep embedding, and a final
adaLN layer projects back to the latent size. It runs `steps` times per speech frame on 2 rows (the
conditioned and the negative prompt), so it is the engine's hot module.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.dpm_solver import DPMSolverMultistep
from ..blocks.transformer import RMSNorm


@dataclass(frozen=True)
class HeadConfig:
    """`diffusion_head_config` of a VibeVoice config.json (the fields the head and its sampler use)."""
    hidden_size: int
    head_layers: int
    head_ffn_ratio: float
    rms_norm_eps: float
    latent_size: int
    prediction_type: str
    ddpm_num_steps: int
    ddpm_num_inference_steps: int
    ddpm_beta_schedule: str


class _PlainRMSNorm(nn.Module):
    """RMS normalisation without a weight (the final layer's `norm_final`)."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


def _modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale) + shift


class _Mlp(nn.Sequential):
    """Upstream's `nn.Sequential(Linear, SiLU, Linear)` (keys mlp.0 / mlp.2)."""

    def __init__(self, d_in: int, d: int) -> None:
        super().__init__(nn.Linear(d_in, d, bias=False), nn.SiLU(), nn.Linear(d, d, bias=False))


class _AdaLN(nn.Sequential):
    """Upstream's `nn.Sequential(SiLU, Linear)` (key adaLN_modulation.1)."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__(nn.SiLU(), nn.Linear(d_in, d_out, bias=False))


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size: int, frequency_embedding_size: int = 256) -> None:
        super().__init__()
        self.mlp = _Mlp(frequency_embedding_size, hidden_size)
        self.frequency_embedding_size = frequency_embedding_size

    def forward(self, t: Tensor) -> Tensor:
        half = self.frequency_embedding_size // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs.to(t.device)[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if self.frequency_embedding_size % 2:
            emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
        return self.mlp(emb.to(t.dtype))


class FeedForwardNetwork(nn.Module):
    def __init__(self, embed_dim: int, ffn_dim: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(embed_dim, ffn_dim, bias=False)
        self.up_proj = nn.Linear(embed_dim, ffn_dim, bias=False)
        self.down_proj = nn.Linear(ffn_dim, embed_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class HeadLayer(nn.Module):
    def __init__(self, embed_dim: int, ffn_dim: int, cond_dim: int, norm_eps: float) -> None:
        super().__init__()
        self.ffn = FeedForwardNetwork(embed_dim, ffn_dim)
        self.norm = RMSNorm(embed_dim, eps=norm_eps)
        self.adaLN_modulation = _AdaLN(cond_dim, 3 * embed_dim)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale, gate = self.adaLN_modulation(c).chunk(3, dim=-1)
        return x + gate * self.ffn(_modulate(self.norm(x), shift, scale))


class FinalLayer(nn.Module):
    def __init__(self, hidden_size: int, output_size: int, cond_size: int, norm_eps: float) -> None:
        super().__init__()
        self.norm_final = _PlainRMSNorm(norm_eps)
        self.linear = nn.Linear(hidden_size, output_size, bias=False)
        self.adaLN_modulation = _AdaLN(cond_size, 2 * hidden_size)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(_modulate(self.norm_final(x), shift, scale))


class DiffusionHead(nn.Module):
    """`prediction_head` of a VibeVoice model: (noisy latents, timesteps, LM condition) -> model output."""

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.noisy_images_proj = nn.Linear(cfg.latent_size, d, bias=False)
        self.cond_proj = nn.Linear(d, d, bias=False)
        self.t_embedder = TimestepEmbedder(d)
        ffn = int(d * cfg.head_ffn_ratio)
        self.layers = nn.ModuleList(HeadLayer(d, ffn, d, cfg.rms_norm_eps) for _ in range(cfg.head_layers))
        self.final_layer = FinalLayer(d, cfg.latent_size, d, cfg.rms_norm_eps)

    def forward(self, noisy_images: Tensor, timesteps: Tensor, condition: Tensor) -> Tensor:
        x = self.noisy_images_proj(noisy_images)
        c = self.cond_proj(condition) + self.t_embedder(timesteps)
        for layer in self.layers:
            x = layer(x, c)
        return self.final_layer(x, c)


def scheduler_for(cfg: HeadConfig) -> DPMSolverMultistep:
    """The noise schedule upstream builds for this head (`noise_scheduler`)."""
    return DPMSolverMultistep(num_train_timesteps=cfg.ddpm_num_steps, beta_schedule=cfg.ddpm_beta_schedule,
                              prediction_type=cfg.prediction_type)


def sample_latents(head: DiffusionHead, scheduler: DPMSolverMultistep, condition: Tensor, neg_condition: Tensor,
                   noise: Tensor, steps: int, cfg_scale: float) -> Tensor:
    """Speech latents for a batch of frames (upstream `sample_speech_tokens`): `condition` / `neg_condition`
    (frames, hidden) are the LM's last hidden states for the text and the negative prompt, `noise`
    (2 * frames, latent) the starting sample upstream draws with `torch.randn` for both halves. Both
    halves are denoised from the conditioned half; the guided output is shared, as upstream does."""
    if condition.shape != neg_condition.shape or condition.dim() != 2:
        raise ValueError(f"condition {tuple(condition.shape)} and neg_condition {tuple(neg_condition.shape)} "
                         "must both be (frames, hidden)")
    if noise.dim() != 2 or noise.shape[0] != 2 * condition.shape[0]:
        raise ValueError(f"noise {tuple(noise.shape)} must be (2 * frames, latent) for {condition.shape[0]} frames")
    run = scheduler.schedule(steps)
    cond = torch.cat([condition, neg_condition], dim=0)
    speech = noise.to(cond)
    rows = len(speech) // 2
    for t in run.timesteps:
        half = speech[:rows]
        combined = torch.cat([half, half], dim=0)
        eps = head(combined, t.repeat(combined.shape[0]).to(combined), cond)
        cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
        half_eps = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
        speech = run.step(torch.cat([half_eps, half_eps], dim=0), speech)
    return speech[:rows]

"""IndexTTS 2's s2mel: semantic tokens + GPT latents -> 22 kHz 80-band mel (Seed-VC style CFM).

    cond   = length_regulator(codec.vq2emb(codes) + gpt_layer(latent), frames = codes * 1.72)
    mel    = CFM: 25 Euler steps of a DiT (gpt-fast blocks, AdaLN on the time embedding, U-ViT skips)
             with a WaveNet head, guided by a zero-condition pass (rate 0.7), the reference mel as prompt

Module names are upstream's (`s2mel.pth` -> net.cfm / net.length_regulator / net.gpt_layer). Weight-norm
layers are plain layers here: the loader folds `weight_g`/`weight_v` with `torch._weight_norm`, the very
tensor upstream computes on every forward. Upstream's WaveNet convolutions pad by reflection (its
`SConv1d` ignores the `padding` argument it is given and pads `kernel - 1` itself).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.flow import guided, mix, solve
from ..blocks.transformer import RMSNorm, apply_interleaved_rotary, interleaved_rope_table, upcast


@dataclass(frozen=True)
class S2MelConfig:
    in_channels: int            # mel bands (80)
    hidden_dim: int             # DiT width
    num_heads: int
    depth: int
    content_dim: int            # length regulator channels feeding the DiT
    content_codebook_size: int  # DiT's unused discrete-content table (kept: it is in the file)
    style_dim: int              # CAM++ embedding (192)
    wavenet_hidden: int
    wavenet_layers: int
    wavenet_kernel: int
    wavenet_dilation: int
    regulator_channels: int
    regulator_in: int           # semantic codec width (1024)
    regulator_codebook: int
    sampling_ratios: tuple[int, ...]
    latent_dim: int = 1280      # GPT width feeding gpt_layer (hard-coded upstream)
    uvit_skip_connection: bool = True
    long_skip_connection: bool = True


# ---------------------------------------------------------------------------------------------
# Length regulator

class InterpolateRegulator(nn.Module):
    """Linear in, nearest interpolation to the target frames, [conv3 + GroupNorm + Mish] x n, conv1."""

    def __init__(self, c: S2MelConfig) -> None:
        super().__init__()
        ch = c.regulator_channels
        layers: list[nn.Module] = []
        for _ in c.sampling_ratios:
            layers += [nn.Conv1d(ch, ch, 3, 1, 1), nn.GroupNorm(1, ch), nn.Mish()]
        layers.append(nn.Conv1d(ch, ch, 1, 1))
        self.model = nn.Sequential(*layers)
        self.interpolate = len(c.sampling_ratios) > 0
        self.embedding = nn.Embedding(c.regulator_codebook, ch)   # unused by continuous input; in the file
        self.mask_token = nn.Parameter(torch.zeros(1, ch))         # training only; in the file
        self.content_in_proj = nn.Linear(c.regulator_in, ch)

    def forward(self, x: Tensor, frames: Tensor) -> Tensor:
        """x (B, T, in) -> (B, frames, ch), zero past each row's length."""
        mask = (torch.arange(int(frames.max()), device=x.device)[None] < frames[:, None]).unsqueeze(-1)
        x = self.content_in_proj(x).transpose(1, 2).contiguous()
        if self.interpolate:
            x = F.interpolate(x, size=int(frames.max()), mode="nearest")
        else:
            mask = mask[:, :x.size(2), :]
        return self.model(x).transpose(1, 2).contiguous() * mask


# ---------------------------------------------------------------------------------------------
# DiT (gpt-fast blocks)

class AdaptiveLayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.project_layer = nn.Linear(dim, 2 * dim)
        self.norm = RMSNorm(dim, eps)
        self.dim = dim

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        weight, bias = torch.split(self.project_layer(c), self.dim, dim=-1)
        return weight * self.norm(x) + bias


class DiTAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (s.view(b, t, self.heads, self.head_dim) for s in self.wqkv(x).split([d, d, d], dim=-1))
        q, k = apply_interleaved_rotary(q, rope), apply_interleaved_rotary(k, rope)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
        return self.wo(y.transpose(1, 2).contiguous().view(b, t, d))


class DiTFeedForward(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        hidden = int(2 * 4 * dim / 3)
        hidden = hidden if hidden % 256 == 0 else hidden + 256 - hidden % 256
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, uvit: bool) -> None:
        super().__init__()
        self.attention = DiTAttention(dim, heads)
        self.feed_forward = DiTFeedForward(dim)
        self.ffn_norm = AdaptiveLayerNorm(dim)
        self.attention_norm = AdaptiveLayerNorm(dim)
        self.skip_in_linear = nn.Linear(dim * 2, dim) if uvit else None

    def forward(self, x: Tensor, c: Tensor, rope: Tensor, mask: Tensor, skip: Tensor | None) -> Tensor:
        if skip is not None:
            x = self.skip_in_linear(torch.cat([x, skip], dim=-1))
        h = x + self.attention(self.attention_norm(x, c), rope, mask)
        return h + self.feed_forward(self.ffn_norm(h, c))


class Transformer(nn.Module):
    def __init__(self, dim: int, heads: int, depth: int, uvit: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DiTBlock(dim, heads, uvit) for _ in range(depth))
        self.norm = AdaptiveLayerNorm(dim)
        self.uvit = uvit
        self.head_dim = dim // heads

    def forward(self, x: Tensor, c: Tensor, mask: Tensor) -> Tensor:
        table = torch.float64 if x.dtype == torch.float64 else torch.float32    # upstream: the weights' dtype
        rope = interleaved_rope_table(x.size(1), self.head_dim, 10000.0, table).to(x.device)
        n = len(self.layers)
        skips: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            skip = skips.pop() if self.uvit and i > n // 2 else None
            x = layer(x, c, rope, mask, skip)
            if self.uvit and i < n // 2:
                skips.append(x)
        return self.norm(x, c)


def timestep_freqs(half: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.exp(-math.log(10000) * torch.arange(start=0, end=half, dtype=dtype) / half)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.register_buffer("freqs", timestep_freqs(freq_dim // 2), persistent=False)   # float32, as upstream

    def forward(self, t: Tensor) -> Tensor:
        # a float64 run computes the frequencies in float64 (float32's exp differs in the last bit between
        # CPUs' kernels: MKL's, for one)
        freqs = timestep_freqs(self.freqs.numel(), t.dtype).to(t.device) if t.dtype == torch.float64 else self.freqs
        args = 1000 * upcast(t[:, None]) * freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))


class WNConv(nn.Module):
    """Upstream's SConv1d (non-causal, stride 1): reflection padding of kernel - 1, then the conv."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.ModuleDict({"conv": nn.Conv1d(cin, cout, kernel, dilation=dilation)})
        total = (kernel - 1) * dilation
        self.pad = (total - total // 2, total // 2)

    def forward(self, x: Tensor) -> Tensor:
        if self.pad != (0, 0):
            x = F.pad(x, self.pad, "reflect")
        return self.conv["conv"](x)


class WaveNet(nn.Module):
    def __init__(self, hidden: int, kernel: int, dilation_rate: int, layers: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cond_layer = WNConv(hidden, 2 * hidden * layers, 1)
        self.in_layers = nn.ModuleList(WNConv(hidden, 2 * hidden, kernel, dilation_rate ** i) for i in range(layers))
        self.res_skip_layers = nn.ModuleList(WNConv(hidden, 2 * hidden if i < layers - 1 else hidden, 1)
                                             for i in range(layers))

    def forward(self, x: Tensor, mask: Tensor, g: Tensor) -> Tensor:
        out = torch.zeros_like(x)
        g = self.cond_layer(g)
        h = self.hidden
        last = len(self.in_layers) - 1
        for i, (inp, res) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            a, b = torch.split(inp(x) + g[:, i * 2 * h:(i + 1) * 2 * h, :], h, dim=1)
            acts = res(torch.tanh(a) * torch.sigmoid(b))
            if i < last:
                x = (x + acts[:, :h, :]) * mask
                out = out + acts[:, h:, :]
            else:
                out = out + acts
        return out * mask


class FinalLayer(nn.Module):
    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(self.norm_final(x) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1))


class DiT(nn.Module):
    def __init__(self, c: S2MelConfig) -> None:
        super().__init__()
        d, wn = c.hidden_dim, c.wavenet_hidden
        self.transformer = Transformer(d, c.num_heads, c.depth, c.uvit_skip_connection)
        self.x_embedder = nn.Linear(c.in_channels, d)                    # unused upstream; in the file
        self.cond_embedder = nn.Embedding(c.content_codebook_size, d)    # unused upstream; in the file
        self.cond_projection = nn.Linear(c.content_dim, d)
        self.t_embedder = TimestepEmbedder(d)
        self.t_embedder2 = TimestepEmbedder(wn)
        self.conv1 = nn.Linear(d, wn)
        self.conv2 = nn.Conv1d(wn, c.in_channels, 1)
        self.wavenet = WaveNet(wn, c.wavenet_kernel, c.wavenet_dilation, c.wavenet_layers)
        self.final_layer = FinalLayer(wn, wn)
        self.res_projection = nn.Linear(d, wn)
        self.content_mask_embedder = nn.Embedding(1, d)                   # training only; in the file
        self.skip_linear = nn.Linear(d + c.in_channels, d)
        self.cond_x_merge_linear = nn.Linear(d + c.in_channels * 2 + c.style_dim, d)
        self.long_skip = c.long_skip_connection

    def forward(self, x: Tensor, prompt_x: Tensor, x_lens: Tensor, t: Tensor, style: Tensor, cond: Tensor) -> Tensor:
        """x, prompt_x (B, mel, T); cond (B, T, content); style (B, style); t (B,) -> velocity (B, mel, T)."""
        T = x.size(2)
        t1 = self.t_embedder(t)
        cond = self.cond_projection(cond)
        x = x.transpose(1, 2)
        x_in = torch.cat([x, prompt_x.transpose(1, 2), cond], dim=-1)
        x_in = torch.cat([x_in, style[:, None, :].repeat(1, T, 1)], dim=-1)
        x_in = self.cond_x_merge_linear(x_in)
        x_mask = (torch.arange(T, device=x.device)[None] < x_lens[:, None]).unsqueeze(1)
        x_res = self.transformer(x_in, t1.unsqueeze(1), x_mask[:, None, :].repeat(1, 1, T, 1))
        if self.long_skip:
            x_res = self.skip_linear(torch.cat([x_res, x], dim=-1))
        h = self.conv1(x_res).transpose(1, 2)
        h = self.wavenet(h, x_mask, self.t_embedder2(t).unsqueeze(2)).transpose(1, 2) + self.res_projection(x_res)
        return self.conv2(self.final_layer(h, t1).transpose(1, 2))


class CFM(nn.Module):
    def __init__(self, c: S2MelConfig) -> None:
        super().__init__()
        self.estimator = DiT(c)
        self.in_channels = c.in_channels

    def forward(self, mu: Tensor, prompt: Tensor, style: Tensor, noise: Tensor, steps: int = 25,
                cfg_rate: float = 0.7, callback=None) -> Tensor:
        """Upstream's CFM.inference: mu (1, T, content); prompt mel (1, mel, P); noise (1, mel, T).
        The prompt's frames are zero in x before every estimator call (upstream zeroes them after each step)."""
        plen = prompt.size(-1)
        x_lens = torch.tensor([mu.size(1)], device=mu.device)
        prompt_x = torch.zeros_like(noise)
        prompt_x[..., :plen] = prompt[..., :plen]
        prompt_x = torch.cat([prompt_x, torch.zeros_like(prompt_x)], dim=0)
        style2 = torch.cat([style, torch.zeros_like(style)], dim=0)
        mu2 = torch.cat([mu, torch.zeros_like(mu)], dim=0)

        def velocity(x2: Tensor, t: Tensor) -> Tensor:
            x2 = x2.clone()
            x2[..., :plen] = 0
            return self.estimator(x2, prompt_x, x_lens, torch.cat([t.unsqueeze(0), t.unsqueeze(0)]), style2, mu2)

        grid = torch.promote_types(noise.dtype, torch.float32)   # upstream's default dtype; float64 stays
        times = torch.linspace(0, 1, steps + 1, device=mu.device, dtype=grid)
        x = solve(guided(velocity, cfg_rate, mix, double=True), noise, times, method="euler", clock="drift",
                  callback=callback)
        x[..., :plen] = 0
        return x


class S2Mel(nn.Module):
    """`s2mel.pth`'s three models under upstream's names (net.cfm, net.length_regulator, net.gpt_layer)."""

    def __init__(self, c: S2MelConfig) -> None:
        super().__init__()
        self.config = c
        self.cfm = CFM(c)
        self.length_regulator = InterpolateRegulator(c)
        self.gpt_layer = nn.Sequential(nn.Linear(c.latent_dim, 256), nn.Linear(256, 128),
                                       nn.Linear(128, c.regulator_in))

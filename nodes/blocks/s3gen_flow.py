"""The S3Gen flow of CosyVoice 2 / 3 (shared with Chatterbox's S3Gen, which is CosyVoice 2's): speech tokens -> 80-bin mel, by conditional flow matching with classifier-free guidance.

Parameter names follow upstream `flow.pt`.

    FlowV2 (CosyVoice 2, `CausalMaskedDiffWithXvec`)
      input_embedding            speech token -> 512
      spk_embed_affine_layer     192-d x-vector -> 80
      encoder                    UpsampleConformerEncoder: linear embed + ESPnet rel-pos, pre-lookahead conv,
                                 6 conformer layers, 2x upsample, 4 more layers (no conv module, no macaron)
      encoder_proj               512 -> 80 (mu)
      decoder.estimator          CausalConditionalDecoder: 1-D UNet of causal resnet blocks + transformer blocks
    FlowV3 (CosyVoice 3, `CausalMaskedDiffWithDiT`)
      input_embedding, spk_embed_affine_layer, pre_lookahead_layer (80 -> 1024 -> 80, residual)
      decoder.estimator          DiT: AdaLN-zero blocks, x-transformers RoPE on the first head's dims

Inference (upstream non-streaming `inference(..., streaming=False, finalize=True)`): prompt tokens and
tokens are encoded together, the prompt's mel is the condition of its frames, 10 cosine-scheduled Euler
steps with CFG 0.7 (batch of 2: conditioned and unconditioned), the prompt's frames cut off. Attention
masks of a single full-length utterance are all-true upstream (additive zeros / no-op fills), so they
are left out here; the parity fixtures check that this changes no bit. A hop of upstream's stream=True
(`mel(..., streaming=True, finalize=False)`) adds upstream's block-causal chunk masks (`chunk_mask`: the v2
encoder's `static_chunk_size` tokens, twice that after its upsampling, the estimators' in mel frames) and
reads the last pre_lookahead_len tokens only as the look-ahead layer's context.

Upstream CosyVoice draws the initial noise from a 1x80x15000 buffer made with seed 0 at construction; we
draw the same-shaped buffer from the request's generator (seed 0 reproduces upstream) and take its first
frames. Chatterbox's S3Gen instead draws `randn_like(mu)` from the global RNG: the caller passes that
noise in (`mel(..., noise=...)`), and its Euler loop takes t and dt from the grid (`clock="grid"`) where
CosyVoice accumulates t.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .conformer import FeedForward, RelPositionAttention
from .flow import guided, mix, solve

NOISE_FRAMES = 15000   # upstream's rand_noise buffer: 50 * 300 frames


@dataclass(frozen=True)
class FlowConfig:
    version: int                       # 2: conformer + UNet, 3: DiT
    vocab_size: int = 6561
    input_size: int = 512
    output_size: int = 80
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    # upstream's stream=True (chunk masks): the encoder's static chunk in tokens, the estimator's in mel frames
    encoder_chunk_size: int = 25
    decoder_chunk_size: int = 50
    n_timesteps: int = 10
    inference_cfg_rate: float = 0.7
    t_scheduler: str = "cosine"
    clock: str = "accumulate"          # the Euler loop's clock (flow.solve): "grid" for Chatterbox
    # v2 encoder
    encoder_size: int = 512
    encoder_heads: int = 8
    encoder_units: int = 2048
    encoder_blocks: int = 6
    up_blocks: int = 4
    # v2 UNet estimator
    in_channels: int = 320
    channels: tuple[int, ...] = (256,)
    attention_head_dim: int = 64
    n_blocks: int = 4
    num_mid_blocks: int = 12
    num_heads: int = 8
    # v3 DiT estimator
    pre_lookahead_channels: int = 1024
    dit_dim: int = 1024
    dit_depth: int = 22
    dit_heads: int = 16
    dit_dim_head: int = 64
    dit_ff_mult: int = 2
    mel_dim: int = 80
    mu_dim: int = 80
    spk_dim: int = 80


# ---- shared pieces ------------------------------------------------------------------------------------


class PreLookaheadLayer(nn.Module):
    """Two convolutions seeing `pre_lookahead_len` future tokens, added back to the input ([B, T, C])."""

    def __init__(self, in_channels: int, channels: int, pre_lookahead_len: int) -> None:
        super().__init__()
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, 3)

    def forward(self, inputs: Tensor, context: Tensor | None = None) -> Tensor:
        """`context` [B, n <= pre_lookahead_len, C]: the tokens after `inputs` upstream's streaming hop sees
        (finalize=False) instead of zeros."""
        x = inputs.transpose(1, 2).contiguous()
        if context is None or context.shape[1] == 0:
            x = F.pad(x, (0, self.pre_lookahead_len))
        else:
            x = F.pad(torch.cat([x, context.transpose(1, 2).contiguous()], dim=2),
                      (0, self.pre_lookahead_len - context.shape[1]))
        x = F.leaky_relu(self.conv1(x))
        x = self.conv2(F.pad(x, (2, 0)))
        return x.transpose(1, 2).contiguous() + inputs


def chunk_mask(length: int, chunk: int, device: torch.device) -> Tensor:
    """Upstream's `subsequent_chunk_mask` [1, L, L] (True = attend): a position sees every position before
    the end of its chunk (the block-causal attention of stream=True)."""
    pos = torch.arange(length, device=device)
    return (pos.unsqueeze(0) < ((pos // chunk + 1) * chunk).unsqueeze(1)).unsqueeze(0)


def sinusoidal(t: Tensor, dim: int, scale: float = 1000) -> Tensor:
    """Matcha/F5 timestep embedding: [sin, cos] of scale * t * 10000^(-i / (dim/2 - 1)) (frequencies in float32
    as upstream makes them, in float64 for a float64 t)."""
    half = dim // 2
    step = math.log(10000) / (half - 1)
    work = torch.float64 if t.dtype == torch.float64 else torch.float32
    freqs = torch.exp(torch.arange(half, device=t.device, dtype=work) * -step)
    emb = scale * t.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((emb.sin(), emb.cos()), dim=-1)


# ---- v2 encoder -----------------------------------------------------------------------------------------


def rel_positions(length: int, dim: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """ESPnet relative positional encoding [1, 2L-1, D]: positions L-1 .. 0 .. -(L-1) (made in float32 as
    upstream makes it, in float64 for a float64 model)."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    pos = torch.arange(0, length, dtype=work, device=device).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=work, device=device) * -(math.log(10000.0) / dim))
    pe_pos = torch.zeros(length, dim, device=device, dtype=work)
    pe_neg = torch.zeros(length, dim, device=device, dtype=work)
    pe_pos[:, 0::2] = torch.sin(pos * div)
    pe_pos[:, 1::2] = torch.cos(pos * div)
    pe_neg[:, 0::2] = torch.sin(-1 * pos * div)
    pe_neg[:, 1::2] = torch.cos(-1 * pos * div)
    return torch.cat([torch.flip(pe_pos, [0]), pe_neg[1:]], dim=0).unsqueeze(0).to(dtype)


class LinearEmbed(nn.Module):
    """`LinearNoSubsampling` + ESPnet rel-pos scaling: returns (x * sqrt(D), pos_emb)."""

    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5))
        self.odim = odim

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.out(x) * math.sqrt(self.odim)
        return x, rel_positions(x.shape[1], self.odim, x.dtype, x.device)


class ConformerLayer(nn.Module):
    """Pre-norm self-attention + feed-forward (upstream's conformer layer without conv module or macaron)."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(heads, dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.norm_ff = nn.LayerNorm(dim, eps=1e-12)
        self.norm_mha = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: Tensor, pos_emb: Tensor, mask: Tensor | None = None) -> Tensor:
        x = x + self.self_attn(self.norm_mha(x), pos_emb, mask)
        return x + self.feed_forward(self.norm_ff(x))


class Upsample1D(nn.Module):
    def __init__(self, channels: int, stride: int = 2) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, channels, stride * 2 + 1)

    def forward(self, x: Tensor) -> Tensor:
        x = F.interpolate(x, scale_factor=float(self.stride), mode="nearest")
        return self.conv(F.pad(x, (self.stride * 2, 0), value=0.0))


class UpsampleConformerEncoder(nn.Module):
    def __init__(self, c: FlowConfig) -> None:
        super().__init__()
        self.chunk = c.encoder_chunk_size
        d = c.encoder_size
        self.embed = LinearEmbed(c.input_size, d)
        self.pre_lookahead_layer = PreLookaheadLayer(d, d, c.pre_lookahead_len)
        self.encoders = nn.ModuleList(ConformerLayer(d, c.encoder_heads, c.encoder_units)
                                      for _ in range(c.encoder_blocks))
        self.up_layer = Upsample1D(d, c.token_mel_ratio)
        self.up_embed = LinearEmbed(c.input_size, d)
        self.up_encoders = nn.ModuleList(ConformerLayer(d, c.encoder_heads, c.encoder_units)
                                         for _ in range(c.up_blocks))
        self.after_norm = nn.LayerNorm(d, eps=1e-5)

    def forward(self, x: Tensor, context: Tensor | None = None, streaming: bool = False) -> Tensor:
        """`context`: the look-ahead tokens of a streaming hop (embedded as `x` is, not encoded); `streaming`:
        upstream's chunk masks (encoder_chunk_size tokens, times the upsampling after it). Without them every
        position sees every other one (upstream's all-true mask)."""
        x, pos = self.embed(x)
        if context is not None and context.shape[1] > 0:
            context = self.embed(context)[0]
        mask = chunk_mask(x.shape[1], self.chunk, x.device) if streaming and self.chunk > 0 else None
        x = self.pre_lookahead_layer(x, context)
        for layer in self.encoders:
            x = layer(x, pos, mask)
        x = self.up_layer(x.transpose(1, 2).contiguous()).transpose(1, 2).contiguous()
        x, pos = self.up_embed(x)
        up = self.chunk * self.up_layer.stride
        mask = chunk_mask(x.shape[1], up, x.device) if streaming and up > 0 else None
        for layer in self.up_encoders:
            x = layer(x, pos, mask)
        return self.after_norm(x)


# ---- v2 UNet estimator ----------------------------------------------------------------------------------


class CausalConv1d(nn.Conv1d):
    """Left-padded by kernel_size - 1 (stride 1)."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0), value=0.0))


class Transpose(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.transpose(1, 2)


class CausalBlock1D(nn.Module):
    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.block = nn.Sequential(CausalConv1d(dim, dim_out, 3), Transpose(), nn.LayerNorm(dim_out), Transpose(),
                                   nn.Mish())

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.block(x * mask) * mask


class CausalResnetBlock1D(nn.Module):
    def __init__(self, dim: int, dim_out: int, time_emb_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_emb_dim, dim_out))
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: Tensor, mask: Tensor, t: Tensor) -> Tensor:
        h = self.block1(x, mask)
        h += self.mlp(t).unsqueeze(-1)
        h = self.block2(h, mask)
        return h + self.res_conv(x * mask)


class DiffusersAttention(nn.Module):
    """diffusers `Attention` as Matcha's transformer block builds it: q/k/v without bias, to_out.0 with."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        """`bias` [B, L, L]: upstream's additive mask (mask_to_bias), repeated per head as diffusers'
        prepare_attention_mask does."""
        b = x.shape[0]
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        hd = k.shape[-1] // self.heads
        q, k, v = (t.view(b, -1, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        if bias is not None:
            bias = bias.repeat_interleave(self.heads, dim=0).view(b, self.heads, -1, bias.shape[-1])
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.0, is_causal=False)
        return self.to_out[0](y.transpose(1, 2).reshape(b, -1, self.heads * hd))


class GELUProj(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, inner)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.proj(x))


class MatchaFeedForward(nn.Module):
    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, dim * mult), nn.Identity(), nn.Linear(dim * mult, dim)])

    def forward(self, x: Tensor) -> Tensor:
        for m in self.net:
            x = m(x)
        return x


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = DiffusersAttention(dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = MatchaFeedForward(dim)

    def forward(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        x = self.attn1(self.norm1(x), bias) + x
        return self.ff(self.norm3(x)) + x


class TimestepEmbedding(nn.Module):
    def __init__(self, in_channels: int, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, t: Tensor) -> Tensor:
        return self.linear_2(F.silu(self.linear_1(t)))


class ConvSampler(nn.Module):
    """Matcha's Downsample1D (conv k3 s2) / Upsample1D (transposed conv k4 s2): the weights sit under `.conv`."""

    def __init__(self, channels: int, up: bool) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(channels, channels, 4, 2, 1) if up else nn.Conv1d(channels, channels, 3, 2, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


def unet_level(dim: int, dim_out: int, time_dim: int, c: FlowConfig, sampler: nn.Module | None) -> nn.ModuleList:
    """One UNet level as upstream lists it: [resnet, transformer blocks, down/up sampler (not in mid levels)]."""
    blocks = nn.ModuleList(BasicTransformerBlock(dim_out, c.num_heads, c.attention_head_dim) for _ in range(c.n_blocks))
    parts = [CausalResnetBlock1D(dim, dim_out, time_dim), blocks]
    return nn.ModuleList(parts + ([sampler] if sampler is not None else []))


def run_level(level: nn.ModuleList, x: Tensor, mask: Tensor, t: Tensor, chunk: int = 0) -> Tensor:
    """`chunk` > 0: upstream's streaming chunk mask as its additive bias (0 / -1e10, mask_to_bias)."""
    x = level[0](x, mask, t).transpose(1, 2).contiguous()
    bias = None
    if chunk > 0:
        attend = chunk_mask(x.shape[1], chunk, x.device) & mask.bool()
        bias = (1.0 - attend.to(x.dtype)) * -1.0e+10
    for block in level[1]:
        x = block(x, bias)
    return x.transpose(1, 2).contiguous()


class CausalConditionalDecoder(nn.Module):
    """The 1-D UNet: down levels (causal conv at the last), mid levels, up levels with skip connections."""

    def __init__(self, c: FlowConfig) -> None:
        super().__init__()
        ch = tuple(c.channels)
        time_dim = ch[0] * 4
        self.in_channels = c.in_channels
        self.chunk = c.decoder_chunk_size
        self.time_mlp = TimestepEmbedding(c.in_channels, time_dim)
        self.down_blocks = nn.ModuleList()
        out = c.in_channels
        for i, width in enumerate(ch):
            inp, out = out, width
            last = i == len(ch) - 1
            sampler = CausalConv1d(out, out, 3) if last else ConvSampler(out, up=False)
            self.down_blocks.append(unet_level(inp, out, time_dim, c, sampler))
        self.mid_blocks = nn.ModuleList(unet_level(ch[-1], out, time_dim, c, None) for _ in range(c.num_mid_blocks))
        up = ch[::-1] + (ch[0],)
        self.up_blocks = nn.ModuleList()
        for i in range(len(up) - 1):
            last = i == len(up) - 2
            sampler = CausalConv1d(up[i + 1], up[i + 1], 3) if last else ConvSampler(up[i + 1], up=True)
            self.up_blocks.append(unet_level(up[i] * 2, up[i + 1], time_dim, c, sampler))
        self.final_block = CausalBlock1D(up[-1], up[-1])
        self.final_proj = nn.Conv1d(up[-1], c.mel_dim, 1)

    def forward(self, x: Tensor, mask: Tensor, mu: Tensor, t: Tensor, spks: Tensor, cond: Tensor,
                streaming: bool = False) -> Tensor:
        chunk = self.chunk if streaming else 0
        t = self.time_mlp(sinusoidal(t, self.in_channels).to(t.dtype))
        x = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[-1]), cond], dim=1)
        hiddens, masks = [], [mask]
        for level in self.down_blocks:
            m = masks[-1]
            x = run_level(level, x, m, t, chunk)
            hiddens.append(x)
            x = level[2](x * m)
            masks.append(m[:, :, ::2])
        masks = masks[:-1]
        for level in self.mid_blocks:
            x = run_level(level, x, masks[-1], t, chunk)
        for level in self.up_blocks:
            m = masks.pop()
            skip = hiddens.pop()
            x = run_level(level, torch.cat([x[:, :, :skip.shape[-1]], skip], dim=1), m, t, chunk)
            x = level[2](x * m)
        x = self.final_block(x, m)
        return self.final_proj(x * m) * mask


# ---- v3 DiT estimator -----------------------------------------------------------------------------------


def rotate_half_interleaved(x: Tensor) -> Tensor:
    x = x.unflatten(-1, (-1, 2))
    x1, x2 = x.unbind(dim=-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class RotaryEmbedding(nn.Module):
    """x-transformers' RotaryEmbedding(dim_head): its `inv_freq` buffer is saved in flow.pt, so it is
    loaded from there (float32, never cast); `forward(L)` is `forward_from_seq_len`: interleaved
    frequencies [L, dim_head]."""

    def __init__(self, dim_head: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, dim_head, 2).float() / dim_head)))

    def forward(self, length: int) -> Tensor:
        inv_freq = self.inv_freq.to(torch.promote_types(self.inv_freq.dtype, torch.float32))   # float64 stays
        freqs = torch.arange(length, device=inv_freq.device).type_as(inv_freq)[:, None] * inv_freq[None]
        return torch.stack((freqs, freqs), dim=-1).flatten(-2)


def apply_dit_rope(t: Tensor, freqs: Tensor) -> Tensor:
    """x-transformers' apply_rotary_pos_emb on [B, L, H*D] before the head split: only the first
    dim_head channels rotate (upstream's F5-style behaviour)."""
    rot = freqs.shape[-1]
    head, rest = t[..., :rot], t[..., rot:]
    head = (head * freqs.cos() * 1.0) + (rotate_half_interleaved(head) * freqs.sin() * 1.0)
    return torch.cat((head, rest), dim=-1).type(t.dtype)


class AdaLayerNormZero(nn.Module):
    def __init__(self, dim: int, chunks: int = 6) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * chunks)
        self.dim = dim

    def forward(self, emb: Tensor) -> tuple[Tensor, ...]:
        return torch.chunk(self.linear(F.silu(emb)), self.linear.out_features // self.dim, dim=1)


class DiTAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.heads = heads
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor | None = None) -> Tensor:
        """`mask` [B, 1, L, L] bool (True = attend): upstream's streaming chunk mask. (Upstream then zeroes
        the output where the mask's last row is False: never, for a chunk mask.)"""
        b = x.shape[0]
        q = apply_dit_rope(self.to_q(x), rope)
        k = apply_dit_rope(self.to_k(x), rope)
        v = self.to_v(x)
        hd = k.shape[-1] // self.heads
        q, k, v = (t.view(b, -1, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)
        y = y.transpose(1, 2).reshape(b, -1, self.heads * hd).to(q.dtype)
        return self.to_out[0](y)


class DiTFeedForward(nn.Module):
    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, dim * mult), nn.GELU(approximate="tanh")), nn.Identity(),
                                nn.Linear(dim * mult, dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: int) -> None:
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim)
        self.attn = DiTAttention(dim, heads, dim_head)
        self.ff = DiTFeedForward(dim, ff_mult)

    def forward(self, x: Tensor, t: Tensor, rope: Tensor, mask: Tensor | None = None) -> Tensor:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(t)
        d = x.shape[-1]
        norm = F.layer_norm(x, (d,), eps=1e-6) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        x = x + gate_msa.unsqueeze(1) * self.attn(norm, rope, mask)
        norm = F.layer_norm(x, (d,), eps=1e-6) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        return x + gate_mlp.unsqueeze(1) * self.ff(norm)


class DiTTimeEmbedding(nn.Module):
    def __init__(self, dim: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: Tensor) -> Tensor:
        return self.time_mlp(sinusoidal(t, self.freq_dim).to(t.dtype))


class CausalConvPositionEmbedding(nn.Module):
    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())

    def forward(self, x: Tensor) -> Tensor:
        x = x.permute(0, 2, 1)
        x = self.conv1(F.pad(x, (self.kernel_size - 1, 0, 0, 0)))
        x = self.conv2(F.pad(x, (self.kernel_size - 1, 0, 0, 0)))
        return x.permute(0, 2, 1)


class InputEmbedding(nn.Module):
    def __init__(self, mel_dim: int, mu_dim: int, out_dim: int, spk_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + mu_dim + spk_dim, out_dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(out_dim)

    def forward(self, x: Tensor, cond: Tensor, mu: Tensor, spks: Tensor) -> Tensor:
        x = self.proj(torch.cat([x, cond, mu, spks[:, None].expand(-1, x.shape[1], -1)], dim=-1))
        return self.conv_pos_embed(x) + x


class DiT(nn.Module):
    def __init__(self, c: FlowConfig) -> None:
        super().__init__()
        self.chunk = c.decoder_chunk_size
        self.time_embed = DiTTimeEmbedding(c.dit_dim)
        self.rotary_embed = RotaryEmbedding(c.dit_dim_head)
        self.input_embed = InputEmbedding(c.mel_dim, c.mu_dim, c.dit_dim, c.spk_dim)
        self.transformer_blocks = nn.ModuleList(DiTBlock(c.dit_dim, c.dit_heads, c.dit_dim_head, c.dit_ff_mult)
                                                for _ in range(c.dit_depth))
        self.norm_out = AdaLayerNormZero(c.dit_dim, chunks=2)
        self.proj_out = nn.Linear(c.dit_dim, c.mel_dim)

    def forward(self, x: Tensor, mask: Tensor, mu: Tensor, t: Tensor, spks: Tensor, cond: Tensor,
                streaming: bool = False) -> Tensor:
        t = self.time_embed(t)
        x = self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks)
        rope = self.rotary_embed(x.shape[1]).to(x.dtype)
        attend = None
        if streaming and self.chunk > 0:
            attend = (chunk_mask(x.shape[1], self.chunk, x.device) & mask.bool()).unsqueeze(1)
        for block in self.transformer_blocks:
            x = block(x, t, rope, attend)
        scale, shift = self.norm_out(t)
        x = F.layer_norm(x, (x.shape[-1],), eps=1e-6) * (1 + scale)[:, None, :] + shift[:, None, :]
        return self.proj_out(x).transpose(1, 2)


# ---- the flow models --------------------------------------------------------------------------------------


class CFM(nn.Module):
    """Upstream `CausalConditionalCFM`: only its estimator has weights."""

    def __init__(self, c: FlowConfig) -> None:
        super().__init__()
        self.estimator = CausalConditionalDecoder(c) if c.version == 2 else DiT(c)


def cosine_t_span(steps: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    t = torch.linspace(0, 1, steps + 1, device=device, dtype=dtype)
    return 1 - torch.cos(t * 0.5 * torch.pi)


def flow_noise(frames: int, generator: torch.Generator | None) -> Tensor:
    """The initial noise of a request: upstream's 1x80x15000 buffer drawn from `generator` (seed 0 =
    upstream's values), its first `frames` frames."""
    if frames > NOISE_FRAMES:
        raise ValueError(f"CosyVoice flow: {frames} mel frames exceed upstream's limit of {NOISE_FRAMES} (5 minutes)")
    return torch.randn((1, 80, NOISE_FRAMES), generator=generator)[:, :, :frames]


class Flow(nn.Module):
    def __init__(self, config: FlowConfig) -> None:
        super().__init__()
        c = self.config = config
        self.input_embedding = nn.Embedding(c.vocab_size, c.input_size)
        self.spk_embed_affine_layer = nn.Linear(c.spk_embed_dim, c.output_size)
        if c.version == 2:
            self.encoder = UpsampleConformerEncoder(c)
            self.encoder_proj = nn.Linear(c.encoder_size, c.output_size)
        else:
            self.pre_lookahead_layer = PreLookaheadLayer(c.input_size, c.pre_lookahead_channels, c.pre_lookahead_len)
        self.decoder = CFM(c)

    def encode(self, token: Tensor, prompt_token: Tensor, embedding: Tensor, streaming: bool = False,
               finalize: bool = True) -> tuple[Tensor, Tensor]:
        """(mu [1, 80, T_mel], speaker condition [1, 80]) for prompt tokens + tokens. `finalize=False`
        (upstream's streaming hop): the last pre_lookahead_len tokens are only the look-ahead's context, so
        mu covers the tokens before them; `streaming`: the v2 encoder's chunk masks."""
        spks = self.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        tokens = torch.cat([prompt_token, token], dim=1)
        mask = torch.ones(1, tokens.shape[1], 1, dtype=spks.dtype, device=tokens.device)
        x = self.input_embedding(torch.clamp(tokens, min=0)) * mask
        context = None
        if not finalize:
            n = self.config.pre_lookahead_len
            if x.shape[1] <= n:
                raise ValueError(f"S3Gen flow: a streaming hop needs more than {n} tokens, got {x.shape[1]}")
            x, context = x[:, :-n], x[:, -n:]
        if self.config.version == 2:
            h = self.encoder_proj(self.encoder(x, context, streaming))
        else:
            h = self.pre_lookahead_layer(x, context).repeat_interleave(self.config.token_mel_ratio, dim=1)
        return h.transpose(1, 2).contiguous(), spks

    def mel(self, token: Tensor, prompt_token: Tensor, prompt_feat: Tensor, embedding: Tensor,
            generator: torch.Generator | None, callback: Callable[[int, int], None] | None = None,
            noise: Tensor | None = None, streaming: bool = False, finalize: bool = True) -> Tensor:
        """Mel [1, 80, T] of `token` after the prompt (upstream `inference(streaming=False, finalize=True)`):
        n_timesteps cosine-scheduled Euler steps of the shared solver on the config's clock, CFG in
        upstream's form. The initial noise is `noise` [1, 80, frames of prompt + tokens] when given,
        otherwise CosyVoice's buffer drawn from `generator`. `streaming` / `finalize`: upstream's
        `inference(streaming, finalize)` of a stream=True hop (chunk masks; the look-ahead tokens as context)."""
        c = self.config
        mu, spks = self.encode(token, prompt_token, embedding, streaming, finalize)
        frames, prompt_frames = mu.shape[2], prompt_feat.shape[1]
        cond = torch.zeros(1, frames, c.output_size, device=mu.device, dtype=mu.dtype)
        cond[:, :prompt_frames] = prompt_feat
        cond = cond.transpose(1, 2)
        # The estimator's batch of 2: conditioned, then everything but x zeroed (upstream's CFG buffers).
        mask = torch.ones(2, 1, frames, device=mu.device, dtype=mu.dtype)
        mu2, spks2, cond2 = (torch.cat([v, torch.zeros_like(v)]) for v in (mu, spks, cond))

        def both(x: Tensor, t: Tensor) -> Tensor:
            return self.decoder.estimator(x, mask, mu2, t.reshape(1).expand(2), spks2, cond2, streaming)

        if noise is None:
            noise = flow_noise(frames, generator)
        elif tuple(noise.shape) != (1, c.output_size, frames):
            raise ValueError(f"S3Gen flow: noise must be [1, {c.output_size}, {frames}], got {tuple(noise.shape)}")
        x0 = noise.to(device=mu.device, dtype=mu.dtype)
        times = cosine_t_span(c.n_timesteps, mu.dtype, mu.device)
        x = solve(guided(both, c.inference_cfg_rate, mix, double=True), x0, times, method="euler", clock=c.clock,
                  callback=callback)
        # float32 as upstream returns it from half precision; a float64 run stays float64
        return x.to(torch.promote_types(x.dtype, torch.float32))[:, :, prompt_frames:]

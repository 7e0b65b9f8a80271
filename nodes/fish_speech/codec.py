"""Fish Speech's modded DAC codec (`codec.pth`): 44.1 kHz audio <-> 10 codebooks at ~21.5 Hz.

    FishCodec
      encoder        DAC encoder (causal), a window-limited transformer closing its last block(s)
      quantizer      downsample x4 (causal conv + ConvNeXt), pre transformer, semantic RVQ (1 book of 4096)
                     + residual RVQ (9 books of 1024), post transformer, upsample x4
      decoder        DAC decoder (causal); 512 x 4 = 2048 samples per frame

The structure is not in the checkpoint folder (upstream builds it from the package's
`configs/modded_dac_vq.yaml`); `CodecConfig.from_shapes` reads every size from the tensors of
`codec.pth` and takes the rest (head size 64, windows, RoPE base) from that YAML.
DAC blocks and the residual quantizer are the shared ones (nodes/blocks/dac.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.dac import (CausalConv1d, CausalConvTranspose1d, Decoder, Encoder, EncoderBlock,
                          ResidualVectorQuantize)
from ..blocks.transformer import RMSNorm, apply_interleaved_rotary, interleaved_rope_table

HEAD_DIM = 64                 # modded_dac_vq.yaml: every codec transformer uses 64-wide heads
ROPE_BASE = 10000.0
NORM_EPS = 1e-5
ENCODER_WINDOW = 512          # modded_dac.EncoderBlock's window
QUANTIZER_WINDOW = 128        # the yaml's pre/post module window


@dataclass(frozen=True)
class TransformerConfig:
    layers: int
    dim: int
    intermediate: int
    input_dim: int
    window: int | None

    @property
    def heads(self) -> int:
        return self.dim // HEAD_DIM


@dataclass(frozen=True)
class CodecConfig:
    """Defaults: the published `modded_dac_vq.yaml` (OpenAudio S1 / S1-mini)."""

    sample_rate: int = 44100
    encoder_dim: int = 64
    encoder_rates: tuple[int, ...] = (2, 4, 8, 8)
    encoder_transformers: tuple[TransformerConfig | None, ...] = (
        None, None, None, TransformerConfig(4, 1024, 3072, 1024, ENCODER_WINDOW))
    latent_dim: int = 1024
    decoder_dim: int = 1536
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)
    n_codebooks: int = 9
    codebook_size: int = 1024
    codebook_dim: int = 8
    semantic_codebook_size: int = 4096
    downsample_factor: tuple[int, ...] = (2, 2)
    downsample_dims: tuple[int, ...] = (1024, 1024)
    pre_module: TransformerConfig | None = TransformerConfig(8, 1024, 3072, 1024, QUANTIZER_WINDOW)
    post_module: TransformerConfig | None = TransformerConfig(8, 1024, 3072, 1024, QUANTIZER_WINDOW)

    @property
    def hop_length(self) -> int:
        return math.prod(self.encoder_rates)

    @property
    def frame_length(self) -> int:
        """Samples per code frame (upstream: hop x 4, the quantizer's downsampling)."""
        return self.hop_length * 4

    @property
    def num_codebooks(self) -> int:
        return self.n_codebooks + 1

    @classmethod
    def from_shapes(cls, shapes: dict[str, tuple[int, ...]]) -> CodecConfig:
        """The codec's sizes from the tensor shapes of `codec.pth` (weight norm folded or not)."""
        def shape(key: str) -> tuple[int, ...]:
            for k in (key, key + "_v", key.replace(".weight", ".parametrizations.weight.original1")):
                if k in shapes:
                    return shapes[k]
            raise KeyError(key)

        def count(pattern: str) -> int:
            rx = re.compile(pattern)
            return len({m.group(1) for k in shapes if (m := rx.match(k))})

        def transformer(prefix: str, window: int | None) -> TransformerConfig | None:
            n = count(re.escape(prefix) + r"layers\.(\d+)\.attention\.wqkv\.weight")
            if n == 0:
                return None
            dim = shape(prefix + "norm.weight")[0]
            proj = prefix + "input_proj.weight"
            return TransformerConfig(n, dim, shape(prefix + "layers.0.feed_forward.w1.weight")[0],
                                     shape(proj)[1] if proj in shapes else dim, window)

        blocks = count(r"encoder\.block\.(\d+)\.block\.4\.")
        rates = tuple(shape(f"encoder.block.{i + 1}.block.4.conv.weight")[2] // 2 for i in range(blocks))
        enc_tf = tuple(transformer(f"encoder.block.{i + 1}.block.5.", ENCODER_WINDOW) for i in range(blocks))
        dec_blocks = count(r"decoder\.model\.(\d+)\.block\.1\.conv\.")
        dec_rates = tuple(shape(f"decoder.model.{i + 1}.block.1.conv.weight")[2] // 2 for i in range(dec_blocks))
        book = shape("quantizer.quantizer.quantizers.0.codebook.weight")
        downs = count(r"quantizer\.downsample\.(\d+)\.0\.conv\.")
        return cls(
            encoder_dim=shape("encoder.block.0.conv.weight")[0], encoder_rates=rates, encoder_transformers=enc_tf,
            latent_dim=shape(f"encoder.block.{blocks + 2}.conv.weight")[0],
            decoder_dim=shape("decoder.model.0.conv.weight")[0], decoder_rates=dec_rates,
            n_codebooks=count(r"quantizer\.quantizer\.quantizers\.(\d+)\.codebook\.weight"),
            codebook_size=book[0], codebook_dim=book[1],
            semantic_codebook_size=shape("quantizer.semantic_quantizer.quantizers.0.codebook.weight")[0],
            downsample_factor=tuple(shape(f"quantizer.downsample.{i}.0.conv.weight")[2] for i in range(downs)),
            downsample_dims=tuple(shape(f"quantizer.downsample.{i}.0.conv.weight")[0] for i in range(downs)),
            pre_module=transformer("quantizer.pre_module.", QUANTIZER_WINDOW),
            post_module=transformer("quantizer.post_module.", QUANTIZER_WINDOW))


# ---- the codec's transformer (gpt-fast layout, layer scales, window-limited causal attention) ----------


class CodecAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.wqkv = nn.Linear(dim, 3 * heads * HEAD_DIM, bias=False)
        self.wo = nn.Linear(heads * HEAD_DIM, dim, bias=False)

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor) -> Tensor:
        b, t, _ = x.shape
        size = self.heads * HEAD_DIM
        q, k, v = self.wqkv(x).split([size, size, size], dim=-1)
        q = apply_interleaved_rotary(q.view(b, t, self.heads, HEAD_DIM), rope)
        k = apply_interleaved_rotary(k.view(b, t, self.heads, HEAD_DIM), rope)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.view(b, t, self.heads, HEAD_DIM).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).contiguous().view(b, t, size))


class FeedForward(nn.Module):
    """w2(silu(w1 x) * w3 x): the gpt-fast names of a SwiGLU."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), 1e-2))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class CodecBlock(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.attention = CodecAttention(dim, heads)
        self.feed_forward = FeedForward(dim, hidden)
        self.ffn_norm = RMSNorm(dim, NORM_EPS)
        self.attention_norm = RMSNorm(dim, NORM_EPS)
        self.attention_layer_scale = LayerScale(dim)
        self.ffn_layer_scale = LayerScale(dim)

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention_layer_scale(self.attention(self.attention_norm(x), rope, mask))
        return h + self.ffn_layer_scale(self.feed_forward(self.ffn_norm(h)))


class WindowLimitedTransformer(nn.Module):
    """Causal transformer over [B, C, T] features; each position sees the last `window` positions."""

    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.window = c.window
        self.layers = nn.ModuleList(CodecBlock(c.dim, c.heads, c.intermediate) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, NORM_EPS)
        self.input_proj = nn.Linear(c.input_dim, c.dim) if c.input_dim != c.dim else nn.Identity()
        self.output_proj = nn.Linear(c.dim, c.input_dim) if c.input_dim != c.dim else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = self.input_proj(x.transpose(1, 2))
        t = x.shape[1]
        rows = torch.arange(t)[:, None]
        cols = torch.arange(t)[None, :]
        mask = cols <= rows
        if self.window is not None:
            mask = mask & (cols >= (rows - self.window + 1).clamp(min=0))
        rope = interleaved_rope_table(t, HEAD_DIM, ROPE_BASE).to(x.device)
        mask = mask[None, None].to(x.device)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.output_proj(self.norm(x)).transpose(1, 2)


# ---- the quantizer ------------------------------------------------------------------------------------


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv 7, LayerNorm, 4x pointwise MLP with GELU, layer scale, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm(self.dwconv(x).permute(0, 2, 1))
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(y)))
        return x + y.permute(0, 2, 1)


class DownsampleResidualVectorQuantize(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        dims = (c.latent_dim, *c.downsample_dims)
        self.semantic_quantizer = ResidualVectorQuantize(c.latent_dim, 1, c.semantic_codebook_size, c.codebook_dim)
        self.quantizer = ResidualVectorQuantize(c.latent_dim, c.n_codebooks, c.codebook_size, c.codebook_dim)
        self.downsample = nn.Sequential(*[
            nn.Sequential(CausalConv1d(dims[i], dims[i + 1], f, stride=f), ConvNeXtBlock(dims[i + 1]))
            for i, f in enumerate(c.downsample_factor)])
        self.upsample = nn.Sequential(*[
            nn.Sequential(CausalConvTranspose1d(dims[i + 1], dims[i], f, stride=f), ConvNeXtBlock(dims[i]))
            for i, f in reversed(list(enumerate(c.downsample_factor)))])
        self.pre_module = WindowLimitedTransformer(c.pre_module) if c.pre_module else nn.Identity()
        self.post_module = WindowLimitedTransformer(c.post_module) if c.post_module else nn.Identity()

    def encode(self, z: Tensor) -> Tensor:
        """Encoder latents [B, D, T] -> codes [B, 1 + N, T / 4]."""
        z = self.pre_module(self.downsample(z))
        semantic_codes, semantic_z = self.semantic_quantizer(z)
        codes, _ = self.quantizer(z - semantic_z)
        return torch.cat([semantic_codes, codes], dim=1)

    def decode(self, codes: Tensor) -> Tensor:
        """Codes [B, 1 + N, T] (clamped into each codebook) -> latents [B, D, 4 T]."""
        semantic = codes[:, :1].clamp(max=self.semantic_quantizer.codebook_size - 1)
        rest = codes[:, 1:].clamp(max=self.quantizer.codebook_size - 1)
        z = self.semantic_quantizer.from_codes(semantic) + self.quantizer.from_codes(rest)
        return self.upsample(self.post_module(z))


class FishCodec(nn.Module):
    """The root of `codec.pth`: encoder, quantizer, decoder."""

    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        self.config = c
        after = [WindowLimitedTransformer(t) if t is not None else None for t in c.encoder_transformers]
        self.encoder = Encoder(c.encoder_dim, c.encoder_rates, c.latent_dim, causal=True, after=after)
        self.quantizer = DownsampleResidualVectorQuantize(c)
        self.decoder = Decoder(c.latent_dim, c.decoder_dim, c.decoder_rates, causal=True)

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def memory_units(self) -> list[nn.Module]:
        """Encoder stages (a stage closing with a transformer split into its parts and layers), the
        quantizer's resampling stages and transformer layers, decoder stages. The residual quantizers
        (codebooks read through `.weight`, small projections) and the norms are the fixed part."""
        def parts(m: nn.Module) -> list[nn.Module]:
            if isinstance(m, WindowLimitedTransformer):
                return list(m.layers)
            if isinstance(m, EncoderBlock) and isinstance(m.block[-1], WindowLimitedTransformer):
                return [u for child in m.block for u in parts(child)]
            return [m]

        q = self.quantizer
        return [*(u for m in self.encoder.block for u in parts(m)), *q.downsample, *parts(q.pre_module),
                *parts(q.post_module), *q.upsample, *self.decoder.model]

    def encode(self, wav: Tensor) -> Tensor:
        """Mono waveform [T] at the codec's rate -> codes [1 + N, ceil(T / frame_length)] (int64)."""
        x = wav.reshape(1, 1, -1)
        frame = self.config.frame_length
        x = F.pad(x, (0, math.ceil(x.shape[-1] / frame) * frame - x.shape[-1]))
        return self.quantizer.encode(self.encoder(x))[0]

    def decode(self, codes: Tensor) -> Tensor:
        """Codes [1 + N, F] -> waveform [F * frame_length]."""
        return self.decoder(self.quantizer.decode(codes[None])).reshape(-1)

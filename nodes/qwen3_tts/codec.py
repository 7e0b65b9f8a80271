"""The Qwen3-TTS 12 Hz speech tokenizer (`speech_tokenizer/`): 16 codebooks per 80 ms frame at 24 kHz.

    SpeechTokenizer
      encoder   Mimi encoder (voice prompts): SEANet conv stack -> causal transformer -> stride-2 conv
                -> split residual VQ (1 semantic + acoustic codebooks; the first 16 are used)
      decoder   codes -> split RVQ lookup -> causal conv -> sliding-window transformer -> 2 x (transposed
                conv + ConvNeXt) -> conv -> 4 upsampling blocks with SnakeBeta residual units -> waveform,
                decoded in chunks of 300 frames with 25 frames of left context

Names follow the upstream file (`decoder.decoder.1.block.2.conv1.conv.weight`, `encoder.encoder.layers.0.conv.weight`).
Codebooks are read as tensors (the fixed part); SnakeBeta's alpha/beta, layer scales and ConvNeXt gammas
are plain parameters (fixed part as well); convolutions and linears stream.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.transformer import Attention, DecoderLayer, LayerScale, RMSNorm, RotaryEmbedding

# ---- configuration ----------------------------------------------------------------------------------


@dataclass
class DecoderConfig:
    codebook_size: int = 2048
    codebook_dim: int = 512
    hidden_size: int = 1024
    latent_dim: int = 1024
    rope_theta: float = 10000.0
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int | None = None
    attention_bias: bool = False
    sliding_window: int = 72
    intermediate_size: int = 3072
    layer_scale_initial_scale: float = 0.01
    rms_norm_eps: float = 1e-5
    num_hidden_layers: int = 8
    num_quantizers: int = 16
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536


@dataclass
class EncoderConfig:                 # transformers' MimiConfig fields that shape the encoder
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "constant"
    compress: int = 2
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    use_conv_shortcut: bool = False
    vector_quantization_hidden_dimension: int = 256
    num_hidden_layers: int = 8
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int | None = None
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    layer_scale_initial_scale: float = 0.01
    attention_bias: bool = False
    sampling_rate: int = 24000
    frame_rate: float = 12.5


def _pick(cls, d: dict[str, Any]):
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class CodecConfig:
    encoder: EncoderConfig
    decoder: DecoderConfig
    encoder_valid_num_quantizers: int = 16
    input_sample_rate: int = 24000
    output_sample_rate: int = 24000
    decode_upsample_rate: int = 1920
    encode_downsample_rate: int = 1920

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodecConfig:
        if d.get("model_type", "qwen3_tts_tokenizer_12hz") != "qwen3_tts_tokenizer_12hz":
            raise ValueError(f"speech tokenizer model_type {d.get('model_type')!r}: expected qwen3_tts_tokenizer_12hz")
        return cls(_pick(EncoderConfig, d.get("encoder_config") or {}), _pick(DecoderConfig, d.get("decoder_config") or {}),
                   **{k: int(d[k]) for k in ("encoder_valid_num_quantizers", "input_sample_rate", "output_sample_rate",
                                             "decode_upsample_rate", "encode_downsample_rate") if k in d})


# ---- convolutions -------------------------------------------------------------------------------------


class CausalConv(nn.Module):
    """Conv1d padded on the left by (kernel - stride) and on the right to a whole number of strides."""

    def __init__(self, cin: int, cout: int, k: int, dilation: int = 1, stride: int = 1, groups: int = 1,
                 bias: bool = True, pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride=stride, dilation=dilation, groups=groups, bias=bias)
        self.stride = stride
        self.kernel = (k - 1) * dilation + 1
        self.padding = self.kernel - stride
        self.pad_mode = pad_mode

    def forward(self, x: Tensor) -> Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.kernel + self.padding) / self.stride + 1) - 1
        extra = frames * self.stride + self.kernel - self.padding - length
        mode = "constant" if self.pad_mode in ("constant", "zero") else self.pad_mode
        return self.conv(F.pad(x, (self.padding, extra), mode=mode))


class CausalConvTranspose(nn.Module):
    """ConvTranspose1d with the (kernel - stride) overhang trimmed on the right."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, k, stride=stride, bias=bias)
        self.trim = k - stride

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        return x[..., : x.shape[-1] - self.trim] if self.trim > 0 else x


class SnakeBeta(nn.Module):
    """x + sin^2(x e^alpha) / (e^beta + 1e-9), per channel ([B, C, T])."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = torch.exp(self.alpha[None, :, None])
        beta = torch.exp(self.beta[None, :, None])
        return x + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


class ConvNeXt(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(self.dwconv(x).permute(0, 2, 1))
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(h)))
        return x + h.permute(0, 2, 1)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.act2(self.conv1(self.act1(x)))) + x


class UpsampleBlock(nn.Module):
    def __init__(self, cin: int, cout: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(cin), CausalConvTranspose(cin, cout, 2 * rate, rate),
                                    *(ResidualUnit(cout, d) for d in (1, 3, 9))])

    def forward(self, x: Tensor) -> Tensor:
        for m in self.block:
            x = m(x)
        return x


# ---- decoder ----------------------------------------------------------------------------------------


class Codebook(nn.Module):
    """EMA codebook stored as (cluster_usage, embedding_sum); the vectors are their ratio."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def decode(self, codes: Tensor) -> Tensor:
        table = self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]
        return F.embedding(codes, table)


class VQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(size, dim)


class RVQ(nn.Module):
    """Residual VQ with 1x1 input/output projections (the input one serves encoding upstream)."""

    def __init__(self, n_q: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = nn.Module()
        self.vq.layers = nn.ModuleList(VQ(size, dim) for _ in range(n_q))

    def decode(self, codes: Tensor) -> Tensor:               # [B, n_q, T] -> [B, io_dim, T]
        q = torch.zeros([1], device=codes.device)[0]
        for i, layer in enumerate(self.vq.layers):
            q = q + layer._codebook.decode(codes[:, i]).transpose(1, 2)
        return self.output_proj(q)


class SplitRVQ(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        dim = c.codebook_dim // 2
        self.rvq_first = RVQ(1, c.codebook_size, dim, c.codebook_dim)
        self.rvq_rest = RVQ(c.num_quantizers - 1, c.codebook_size, dim, c.codebook_dim)

    def decode(self, codes: Tensor) -> Tensor:
        q = self.rvq_first.decode(codes[:, :1])
        if codes.shape[1] > 1:
            q = q + self.rvq_rest.decode(codes[:, 1:])
        return q


class DecoderTransformer(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        head_dim = c.head_dim or c.hidden_size // c.num_attention_heads
        self.layers = nn.ModuleList(
            DecoderLayer(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, head_dim, c.intermediate_size,
                         eps=c.rms_norm_eps, qk_norm=False, bias=c.attention_bias,
                         layer_scale=c.layer_scale_initial_scale)
            for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.input_proj = nn.Linear(c.latent_dim, c.hidden_size)
        self.output_proj = nn.Linear(c.hidden_size, c.latent_dim)
        self.rotary = RotaryEmbedding(head_dim, c.rope_theta)
        self.window = c.sliding_window

    def forward(self, x: Tensor) -> Tensor:                   # [B, T, latent]
        x = self.input_proj(x)
        rope = self.rotary(torch.arange(x.shape[1], device=x.device), x.dtype)
        for layer in self.layers:
            x = layer(x, rope, None, 0, self.window)
        return self.output_proj(self.norm(x))


class Decoder(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.config = c
        self.total_upsample = math.prod(c.upsample_rates + c.upsampling_ratios)
        self.pre_transformer = DecoderTransformer(c)
        self.quantizer = SplitRVQ(c)
        self.pre_conv = CausalConv(c.codebook_dim, c.latent_dim, 3)
        self.upsample = nn.ModuleList(nn.ModuleList([CausalConvTranspose(c.latent_dim, c.latent_dim, f, f),
                                                     ConvNeXt(c.latent_dim)]) for f in c.upsampling_ratios)
        out = c.decoder_dim // 2 ** len(c.upsample_rates)
        self.decoder = nn.ModuleList(
            [CausalConv(c.latent_dim, c.decoder_dim, 7)]
            + [UpsampleBlock(c.decoder_dim // 2 ** i, c.decoder_dim // 2 ** (i + 1), r)
               for i, r in enumerate(c.upsample_rates)]
            + [SnakeBeta(out), CausalConv(out, 1, 7)])

    def forward(self, codes: Tensor) -> Tensor:
        """codes [B, n_q, T] -> waveform [B, 1, T * total_upsample] in [-1, 1]."""
        if codes.shape[1] != self.config.num_quantizers:
            raise ValueError(f"codec decoder: expected {self.config.num_quantizers} codebooks, got {codes.shape[1]}")
        h = self.pre_conv(self.quantizer.decode(codes)).transpose(1, 2)
        h = self.pre_transformer(h).permute(0, 2, 1)
        for pair in self.upsample:
            for m in pair:
                h = m(h)
        for m in self.decoder:
            h = m(h)
        return h.clamp(min=-1, max=1)

    def window(self, codes: Tensor, start: int, end: int, context: int = 25) -> Tensor:
        """Frames [start, end) of [B, n_q, T] decoded with up to `context` frames of left context: one chunk
        of upstream's chunked_decode, which depends on nothing but these codes."""
        ctx = context if start - context > 0 else start
        return self(codes[..., start - ctx: end])[..., ctx * self.total_upsample:]

    def chunked(self, codes: Tensor, chunk: int = 300, context: int = 25) -> Tensor:
        """Decode [B, n_q, T] in chunks of `chunk` frames, each with up to `context` frames of left context."""
        total = codes.shape[-1]
        return torch.cat([self.window(codes, start, min(start + chunk, total), context)
                          for start in range(0, total, chunk)], dim=-1)


# ---- encoder (Mimi) -----------------------------------------------------------------------------------


class ResnetBlock(nn.Module):
    def __init__(self, c: EncoderConfig, dim: int, dilations: tuple[int, int]) -> None:
        super().__init__()
        hidden = dim // c.compress
        k = (c.residual_kernel_size, 1)
        self.block = nn.ModuleList([nn.ELU(), CausalConv(dim, hidden, k[0], dilations[0], pad_mode=c.pad_mode),
                                    nn.ELU(), CausalConv(hidden, dim, k[1], dilations[1], pad_mode=c.pad_mode)])
        self.shortcut = CausalConv(dim, dim, 1, pad_mode=c.pad_mode) if c.use_conv_shortcut else None

    def forward(self, x: Tensor) -> Tensor:
        h = x
        for m in self.block:
            h = m(h)
        return (x if self.shortcut is None else self.shortcut(x)) + h


class SEANetEncoder(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [CausalConv(c.audio_channels, c.num_filters, c.kernel_size, pad_mode=c.pad_mode)]
        scale = 1
        for ratio in reversed(c.upsampling_ratios):
            dim = scale * c.num_filters
            layers += [ResnetBlock(c, dim, (c.dilation_growth_rate ** j, 1)) for j in range(c.num_residual_layers)]
            layers += [nn.ELU(), CausalConv(dim, dim * 2, ratio * 2, stride=ratio, pad_mode=c.pad_mode)]
            scale *= 2
        layers += [nn.ELU(), CausalConv(scale * c.num_filters, c.hidden_size, c.last_kernel_size, pad_mode=c.pad_mode)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> Tensor:
        for m in self.layers:
            x = m(x)
        return x


class MimiMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MimiLayer(nn.Module):
    def __init__(self, c: EncoderConfig, head_dim: int) -> None:
        super().__init__()
        d = c.hidden_size
        self.self_attn = Attention(d, c.num_attention_heads, c.num_key_value_heads, head_dim, bias=c.attention_bias)
        self.mlp = MimiMLP(d, c.intermediate_size)
        self.input_layernorm = nn.LayerNorm(d, eps=c.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(d, eps=c.norm_eps)
        self.self_attn_layer_scale = LayerScale(d, c.layer_scale_initial_scale)
        self.mlp_layer_scale = LayerScale(d, c.layer_scale_initial_scale)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), rope))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class MimiTransformer(nn.Module):
    """Causal over the whole prompt (transformers 4.57.3 builds Mimi's encoder mask without a window)."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        head_dim = c.head_dim or c.hidden_size // c.num_attention_heads
        self.layers = nn.ModuleList(MimiLayer(c, head_dim) for _ in range(c.num_hidden_layers))
        self.rotary = RotaryEmbedding(head_dim, c.rope_theta)

    def forward(self, x: Tensor) -> Tensor:
        rope = self.rotary(torch.arange(x.shape[1], device=x.device), x.dtype)
        for layer in self.layers:
            x = layer(x, rope)
        return x


class EMACodebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("initialized", torch.tensor([True], dtype=torch.float32))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def table(self) -> Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class MimiVQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = EMACodebook(size, dim)


class MimiRVQ(nn.Module):
    def __init__(self, c: EncoderConfig, n_q: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MimiVQ(c.codebook_size, c.codebook_dim) for _ in range(n_q))
        if c.vector_quantization_hidden_dimension != c.hidden_size:
            self.input_proj = nn.Conv1d(c.hidden_size, c.vector_quantization_hidden_dimension, 1, bias=False)
            self.output_proj = nn.Conv1d(c.vector_quantization_hidden_dimension, c.hidden_size, 1, bias=False)
        else:
            self.input_proj = self.output_proj = None

    def encode(self, x: Tensor, n_q: int) -> Tensor:          # [B, C, T] -> [n_q, B, T]
        if self.input_proj is not None:
            x = self.input_proj(x)
        residual, out = x, []
        for layer in self.layers[:n_q]:
            table = layer.codebook.table()
            flat = residual.permute(0, 2, 1)
            shape = flat.shape
            flat = flat.reshape(-1, shape[-1])
            idx = torch.cdist(flat[None].float(), table[None].float(), p=2)[0].argmin(dim=-1).view(*shape[:-1])
            residual = residual - F.embedding(idx, table).permute(0, 2, 1)
            out.append(idx)
        return torch.stack(out)


class MimiSplitRVQ(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.semantic = c.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = MimiRVQ(c, c.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = MimiRVQ(c, c.num_quantizers - c.num_semantic_quantizers)

    def encode(self, x: Tensor, n_q: int) -> Tensor:
        codes = self.semantic_residual_vector_quantizer.encode(x, self.semantic)
        if n_q > self.semantic:
            codes = torch.cat([codes, self.acoustic_residual_vector_quantizer.encode(x, n_q - self.semantic)])
        return codes


class Encoder(nn.Module):
    """Mimi's encoding path: waveform [B, T] -> codes [B, T_frames, n_q]."""

    def __init__(self, c: EncoderConfig, valid_quantizers: int) -> None:
        super().__init__()
        self.config = c
        self.valid_quantizers = valid_quantizers
        self.encoder = SEANetEncoder(c)
        self.encoder_transformer = MimiTransformer(c)
        encodec_rate = c.sampling_rate / math.prod(c.upsampling_ratios)
        if c.frame_rate != encodec_rate:
            k = 2 * int(encodec_rate / c.frame_rate)
            self.downsample = CausalConv(c.hidden_size, c.hidden_size, k, stride=2, bias=False, pad_mode="replicate")
        else:
            self.downsample = None
        self.quantizer = MimiSplitRVQ(c)

    def forward(self, wav: Tensor) -> Tensor:
        h = self.encoder(wav[:, None])
        h = self.encoder_transformer(h.transpose(1, 2)).transpose(1, 2)
        if self.downsample is not None:
            h = self.downsample(h)
        n_q = min(self.valid_quantizers, self.config.num_quantizers)
        return self.quantizer.encode(h, n_q).permute(1, 2, 0)


class SpeechTokenizer(nn.Module):
    """The root of `speech_tokenizer/model.safetensors`: `encoder.*` and `decoder.*`."""

    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        self.config = c
        self.encoder = Encoder(c.encoder, c.encoder_valid_num_quantizers)
        self.decoder = Decoder(c.decoder)

    def encode(self, wav: Tensor) -> Tensor:
        """Mono 24 kHz waveform [T] -> codes [ceil(T / 1920), 16]."""
        codes = self.encoder(wav[None])[0]
        frames = -(-wav.shape[-1] // self.config.encode_downsample_rate)
        return codes[:frames]

    def decode(self, codes: Tensor, chunk: int = 300) -> Tensor:
        """Codes [F, 16] -> waveform [F * 1920], decoded `chunk` frames at a time with 25 frames of left
        context (upstream decodes with 300; fewer is the frugal OOM fallback, close but not equal)."""
        wav = self.decoder.chunked(self.decoder_input(codes), chunk)[0, 0]
        return wav[: codes.shape[0] * self.config.decode_upsample_rate]

    def decoder_input(self, codes: Tensor) -> Tensor:
        """Codes [F, 16] as the decoder reads them: [1, 16, F], padding (-1) as code 0 (upstream's clamp)."""
        return codes.clamp(min=0).T[None]

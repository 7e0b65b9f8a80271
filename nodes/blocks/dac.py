"""DAC-family codec blocks (Descript Audio Codec and its descendants), shared by the engines.

    state = fold_weight_norm(state)                 # weight_g/weight_v or parametrization originals -> weight
    enc = Encoder(64, (2, 4, 8, 8), 1024, causal=True)
    dec = Decoder(1024, 1536, (8, 8, 4, 2), causal=True)
    rvq = ResidualVectorQuantize(1024, n_codebooks=9, codebook_size=1024, codebook_dim=8)
    codes, z_q = rvq(enc(wav[None, None]))          # codes [B, N, T]
    wav = dec(rvq.from_codes(codes))

Weight-normed convolutions are plain `nn.Conv1d` / `nn.ConvTranspose1d` here: upstream computes
`torch._weight_norm(v, g, 0)` on every forward, `fold_weight_norm` computes exactly the same tensor
once at load time, so the checkpoint loads unchanged, the forward is bit-identical, and the runtime
sees ordinary streamable convolutions (no parametrization reading weights outside a forward).
Module and parameter names follow upstream (`block.1.conv.weight` for causal convs, `block.1.weight`
for DAC's padded ones), so the folded state dict matches by name.

Codebooks are `nn.Embedding`s read through `.weight` (F.embedding, the normalised lookup): they belong
to the runtime's fixed part, as every embedding does.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_PARAM_ORIGINALS = (".parametrizations.weight.original0", ".parametrizations.weight.original1")


def fold_weight_norm(state: dict[str, Tensor], dim: int = 0) -> dict[str, Tensor]:
    """A state dict with every weight-normed pair replaced by the weight it stands for.

    Both layouts: `X.weight_g` + `X.weight_v` (torch.nn.utils.weight_norm) and
    `X.parametrizations.weight.original0` (g) + `.original1` (v) (torch.nn.utils.parametrizations).
    The result is `torch._weight_norm(v, g, dim)`, the very call upstream makes per forward. A pair
    with one half missing is left as it is (strict loading then names it).
    """
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key.endswith(".weight_g") and key[:-2] + "_v" in state:
            base = key[: -len("_g")]
            out[base] = torch._weight_norm(state[base + "_v"], value, dim)
        elif key.endswith(".weight_v") and key[:-2] + "_g" in state:
            continue
        elif key.endswith(_PARAM_ORIGINALS[0]) and key[: -1] + "1" in state:
            base = key[: -len(_PARAM_ORIGINALS[0])]
            out[base + ".weight"] = torch._weight_norm(state[key[:-1] + "1"], value, dim)
        elif key.endswith(_PARAM_ORIGINALS[1]) and key[: -1] + "0" in state:
            continue
        else:
            out[key] = value
    return out


class Snake1d(nn.Module):
    """x + sin(alpha x)^2 / (alpha + 1e-9), per channel (DAC's scripted `snake`, same operations)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(shape[0], shape[1], -1)
        x = x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)
        return x.reshape(shape)


def _extra_padding(length: int, kernel: int, stride: int, padding: int) -> int:
    frames = (length - kernel + padding) / stride + 1
    return (math.ceil(frames) - 1) * stride + (kernel - padding) - length


class CausalConv1d(nn.Module):
    """Left-padded convolution (plus the right padding that makes the last frame whole); `.conv` as upstream."""

    def __init__(self, cin: int, cout: int, kernel_size: int, dilation: int = 1, stride: int = 1,
                 groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size, stride=stride, dilation=dilation, groups=groups)
        self.stride = stride
        self.kernel_size = (kernel_size - 1) * dilation + 1
        self.padding = self.kernel_size - stride

    def forward(self, x: Tensor) -> Tensor:
        extra = _extra_padding(x.shape[-1], self.kernel_size, self.stride, self.padding)
        return self.conv(F.pad(x, (self.padding, extra))).contiguous()


class CausalConvTranspose1d(nn.Module):
    """Transposed convolution with `kernel - stride` samples cut from the right; `.conv` as upstream."""

    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel_size, stride=stride)
        self.trim = kernel_size - stride

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        return x[..., : x.shape[-1] - self.trim].contiguous()


def conv1d(cin: int, cout: int, kernel_size: int, causal: bool, *, stride: int = 1, dilation: int = 1,
           padding: int = 0) -> nn.Module:
    """DAC's two convolution flavours: causal (`CausalConv1d`, weight at `.conv.weight`) or padded."""
    if causal:
        return CausalConv1d(cin, cout, kernel_size, dilation=dilation, stride=stride)
    return nn.Conv1d(cin, cout, kernel_size, stride=stride, dilation=dilation, padding=padding)


def conv_transpose1d(cin: int, cout: int, stride: int, causal: bool) -> nn.Module:
    """The upsampling convolution of a decoder block (kernel 2 x stride)."""
    if causal:
        return CausalConvTranspose1d(cin, cout, 2 * stride, stride=stride)
    return nn.ConvTranspose1d(cin, cout, 2 * stride, stride=stride, padding=math.ceil(stride / 2))


class ResidualUnit(nn.Module):
    """Snake, dilated conv 7, Snake, conv 1, plus the (trimmed) input."""

    def __init__(self, dim: int, dilation: int = 1, causal: bool = False) -> None:
        super().__init__()
        self.block = nn.Sequential(
            Snake1d(dim), conv1d(dim, dim, 7, causal, dilation=dilation, padding=3 * dilation),
            Snake1d(dim), conv1d(dim, dim, 1, causal))
        self.causal = causal

    def forward(self, x: Tensor) -> Tensor:
        y = self.block(x)
        pad = x.shape[-1] - y.shape[-1]
        if pad > 0:
            x = x[..., :-pad] if self.causal else x[..., pad // 2: -pad // 2]
        return x + y


class EncoderBlock(nn.Module):
    """Three residual units at dim/2, Snake, strided conv to dim, then an optional module (a transformer)."""

    def __init__(self, dim: int, stride: int, causal: bool = False, after: nn.Module | None = None) -> None:
        super().__init__()
        self.block = nn.Sequential(
            ResidualUnit(dim // 2, 1, causal), ResidualUnit(dim // 2, 3, causal), ResidualUnit(dim // 2, 9, causal),
            Snake1d(dim // 2), conv1d(dim // 2, dim, 2 * stride, causal, stride=stride, padding=math.ceil(stride / 2)),
            after if after is not None else nn.Identity())

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class Encoder(nn.Module):
    """Conv 7, encoder blocks doubling the channels per stride, Snake, conv 3 to the latent size.

    `after[i]`: an optional module closing block i (Fish's window-limited transformers)."""

    def __init__(self, d_model: int, strides: Sequence[int], d_latent: int, causal: bool = False,
                 after: Sequence[nn.Module | None] | None = None) -> None:
        super().__init__()
        after = list(after) if after is not None else [None] * len(strides)
        blocks: list[nn.Module] = [conv1d(1, d_model, 7, causal, padding=3)]
        for stride, extra in zip(strides, after):
            d_model *= 2
            blocks.append(EncoderBlock(d_model, stride, causal, extra))
        blocks += [Snake1d(d_model), conv1d(d_model, d_latent, 3, causal, padding=1)]
        self.block = nn.Sequential(*blocks)
        self.enc_dim = d_model

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class DecoderBlock(nn.Module):
    """Snake, upsampling transposed conv, three residual units."""

    def __init__(self, input_dim: int, output_dim: int, stride: int, causal: bool = False) -> None:
        super().__init__()
        self.block = nn.Sequential(
            Snake1d(input_dim), conv_transpose1d(input_dim, output_dim, stride, causal),
            ResidualUnit(output_dim, 1, causal), ResidualUnit(output_dim, 3, causal),
            ResidualUnit(output_dim, 9, causal))

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class Decoder(nn.Module):
    """Conv 7, decoder blocks halving the channels per rate, Snake, conv 7 to `d_out`, tanh."""

    def __init__(self, input_channel: int, channels: int, rates: Sequence[int], d_out: int = 1,
                 causal: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv1d(input_channel, channels, 7, causal, padding=3)]
        out = channels
        for i, stride in enumerate(rates):
            out = channels // 2 ** (i + 1)
            layers.append(DecoderBlock(channels // 2 ** i, out, stride, causal))
        layers += [Snake1d(out), conv1d(out, d_out, 7, causal, padding=3), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


class VectorQuantize(nn.Module):
    """Factorised, l2-normalised codebook lookup (DAC): project down, nearest code by cosine, project up."""

    def __init__(self, input_dim: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.codebook_size = codebook_size
        self.in_proj = nn.Conv1d(input_dim, codebook_dim, 1)
        self.out_proj = nn.Conv1d(codebook_dim, input_dim, 1)
        self.codebook = nn.Embedding(codebook_size, codebook_dim)

    def decode_code(self, codes: Tensor) -> Tensor:
        """Codes [B, T] -> codebook vectors [B, D, T]."""
        return F.embedding(codes, self.codebook.weight).transpose(1, 2)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """z [B, D, T] -> (quantized [B, D, T] after out_proj, codes [B, T])."""
        z_e = self.in_proj(z)
        b, d, t = z_e.shape
        enc = F.normalize(z_e.transpose(1, 2).reshape(b * t, d))
        book = F.normalize(self.codebook.weight)
        dist = enc.pow(2).sum(1, keepdim=True) - 2 * enc @ book.t() + book.pow(2).sum(1, keepdim=True).t()
        codes = (-dist).max(1)[1].reshape(b, t)
        z_q = self.decode_code(codes)
        z_q = z_e + (z_q - z_e)     # upstream's straight-through sum: the same value, rounded the same way
        return self.out_proj(z_q), codes


class ResidualVectorQuantize(nn.Module):
    """Codebooks applied in turn to what the previous ones left (inference: no quantizer dropout)."""

    def __init__(self, input_dim: int, n_codebooks: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.n_codebooks = n_codebooks
        self.codebook_size = codebook_size
        self.quantizers = nn.ModuleList(VectorQuantize(input_dim, codebook_size, codebook_dim)
                                        for _ in range(n_codebooks))

    def forward(self, z: Tensor, n_quantizers: int | None = None) -> tuple[Tensor, Tensor]:
        """z [B, D, T] -> (codes [B, N, T], quantized sum [B, D, T])."""
        z_q: Tensor | float = 0.0
        residual = z
        codes = []
        for quantizer in self.quantizers[: n_quantizers or self.n_codebooks]:
            z_q_i, codes_i = quantizer(residual)
            z_q = z_q + z_q_i
            residual = residual - z_q_i
            codes.append(codes_i)
        return torch.stack(codes, dim=1), z_q

    def from_codes(self, codes: Tensor) -> Tensor:
        """Codes [B, N, T] -> the sum of the projected codebook vectors [B, D, T]."""
        z_q: Tensor | float = 0.0
        for i in range(codes.shape[1]):
            q = self.quantizers[i]
            z_q = z_q + q.out_proj(q.decode_code(codes[:, i]))
        return z_q


# ---- transformers' DacModel layout (Higgs Audio V2's acoustic codec) -------------------------------------
# The same DAC arithmetic under the parameter names of transformers' DacEncoder/DacDecoder
# (`conv1`, `block.N.res_unit1.snake1.alpha`, `block.N.conv_t1`, ...), with plain convolutions (weight
# norm already folded in those checkpoints), and EnCodec-style Euclidean residual codebooks.
#
#     enc = DacEncoder(64, (8, 5, 4, 2, 3), 256)            # waveform [B, 1, T] -> [B, 256, T / 960]
#     dec = DacDecoder(256, 1024, (8, 5, 4, 2, 3))          # [B, 256, F] -> waveform [B, 1, F * 960]
#     rvq = EuclideanRVQ(8, 1024, 1024, 64)                  # codes [8, B, F] <-> [B, 1024, F]


class DacResidualUnit(nn.Module):
    """x + conv2(snake(conv1(snake(x)))) with a dilated kernel-7 conv1 and a 1x1 conv2."""

    def __init__(self, channels: int, dilation: int = 1) -> None:
        super().__init__()
        self.snake1 = Snake1d(channels)
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=7, dilation=dilation, padding=3 * dilation)
        self.snake2 = Snake1d(channels)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv2(self.snake2(self.conv1(self.snake1(x))))
        trim = (x.shape[-1] - y.shape[-1]) // 2
        if trim > 0:
            x = x[..., trim:-trim]
        return x + y


class DacEncoderBlock(nn.Module):
    """Three residual units (dilations 1, 3, 9), snake, then a strided conv doubling the channels."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.res_unit1 = DacResidualUnit(channels, 1)
        self.res_unit2 = DacResidualUnit(channels, 3)
        self.res_unit3 = DacResidualUnit(channels, 9)
        self.snake1 = Snake1d(channels)
        self.conv1 = nn.Conv1d(channels, 2 * channels, kernel_size=2 * stride, stride=stride,
                               padding=math.ceil(stride / 2))

    def forward(self, x: Tensor) -> Tensor:
        x = self.res_unit2(self.res_unit1(x))
        return self.conv1(self.snake1(self.res_unit3(x)))


class DacDecoderBlock(nn.Module):
    """Snake, a transposed conv halving the channels, then three residual units (dilations 1, 3, 9)."""

    def __init__(self, channels: int, stride: int, output_padding: int = 0) -> None:
        super().__init__()
        self.snake1 = Snake1d(channels)
        self.conv_t1 = nn.ConvTranspose1d(channels, channels // 2, kernel_size=2 * stride, stride=stride,
                                          padding=math.ceil(stride / 2), output_padding=output_padding)
        self.res_unit1 = DacResidualUnit(channels // 2, 1)
        self.res_unit2 = DacResidualUnit(channels // 2, 3)
        self.res_unit3 = DacResidualUnit(channels // 2, 9)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv_t1(self.snake1(x))
        return self.res_unit3(self.res_unit2(self.res_unit1(x)))


class DacEncoder(nn.Module):
    """conv1 (1 -> width), blocks doubling the width at each stride, snake, conv2 (-> latent)."""

    def __init__(self, width: int, strides: Sequence[int], latent: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(1, width, kernel_size=7, padding=3)
        self.block = nn.ModuleList(DacEncoderBlock(width * 2 ** i, s) for i, s in enumerate(strides))
        d = width * 2 ** len(strides)
        self.snake1 = Snake1d(d)
        self.conv2 = nn.Conv1d(d, latent, kernel_size=3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        for block in self.block:
            x = block(x)
        return self.conv2(self.snake1(x))


class DacDecoder(nn.Module):
    """conv1 (latent -> width), blocks halving the width at each stride, snake, conv2 (-> 1), tanh.

    `odd_output_padding`: output padding `stride % 2` on each transposed conv (Higgs Audio's variant,
    exact lengths for odd strides); `tanh=False` drops the final tanh (Higgs Audio too).
    """

    def __init__(self, latent: int, width: int, strides: Sequence[int], *, odd_output_padding: bool = False,
                 tanh: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(latent, width, kernel_size=7, padding=3)
        self.block = nn.ModuleList(DacDecoderBlock(width // 2 ** i, s, s % 2 if odd_output_padding else 0)
                                   for i, s in enumerate(strides))
        d = width // 2 ** len(strides)
        self.snake1 = Snake1d(d)
        self.conv2 = nn.Conv1d(d, 1, kernel_size=7, padding=3)
        self.tanh = tanh

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        for block in self.block:
            x = block(x)
        x = self.conv2(self.snake1(x))
        return torch.tanh(x) if self.tanh else x


class EuclideanCodebook(nn.Module):
    """Nearest-neighbour codebook (EnCodec/SpeechTokenizer style). `inited`, `cluster_size` and
    `embed_avg` are the EMA-training buffers the checkpoints carry; only `embed` is used."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("inited", torch.ones(1))
        self.register_buffer("cluster_size", torch.zeros(size))
        self.register_buffer("embed", torch.zeros(size, dim))
        self.register_buffer("embed_avg", torch.zeros(size, dim))

    def encode(self, x: Tensor) -> Tensor:
        """x [..., dim] -> indices [...] of the nearest rows (largest negative squared distance)."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        embed = self.embed.t()
        dist = -(x.pow(2).sum(1, keepdim=True) - 2 * x @ embed + embed.pow(2).sum(0, keepdim=True))
        return dist.max(dim=-1).indices.view(*shape[:-1])

    def decode(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.embed)


class EuclideanVQ(nn.Module):
    """project_in (hidden -> dim), a Euclidean codebook, project_out (dim -> hidden); channels-first."""

    def __init__(self, hidden: int, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = EuclideanCodebook(size, dim)
        self.project_in = nn.Linear(hidden, dim)
        self.project_out = nn.Linear(dim, hidden)

    def encode(self, x: Tensor) -> Tensor:
        return self.codebook.encode(self.project_in(x.permute(0, 2, 1)))

    def decode(self, indices: Tensor) -> Tensor:
        return self.project_out(self.codebook.decode(indices)).permute(0, 2, 1)


class EuclideanRVQ(nn.Module):
    """Residual vector quantization over `quantizers` Euclidean VQs (attribute `quantizers`)."""

    def __init__(self, quantizers: int, hidden: int, size: int, dim: int) -> None:
        super().__init__()
        self.quantizers = nn.ModuleList(EuclideanVQ(hidden, size, dim) for _ in range(quantizers))

    def encode(self, x: Tensor, n: int | None = None) -> Tensor:
        """x [B, hidden, T] -> codes [n, B, T]."""
        residual, codes = x, []
        for q in self.quantizers[:n]:
            idx = q.encode(residual)
            residual = residual - q.decode(idx)
            codes.append(idx)
        return torch.stack(codes)

    def decode(self, codes: Tensor) -> Tensor:
        """codes [n, B, T] -> the summed quantized vectors [B, hidden, T]."""
        out = torch.tensor(0.0, device=codes.device)
        for q, idx in zip(self.quantizers, codes):
            out = out + q.decode(idx)
        return out

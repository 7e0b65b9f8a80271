"""HiFT vocoder (neural source filter + iSTFT) of CosyVoice 2 (`HiFTGenerator`, also Chatterbox's S3Gen `mel2wav`)
and 3 (`CausalHiFTGenerator`).

Parameter names follow upstream `hift.pt` with weight norm folded: the loader turns each
`X.parametrizations.weight.original0/1` (or old-style `X.weight_g/_v`) pair into `X.weight` with the
same `torch._weight_norm` upstream runs in every forward, so the result is the same bits and the
convolutions are plain modules the runtime can stream.

    f0_predictor     5 convs + ELU, linear, |.|  (v3: causal convs, run in float64 as upstream does)
    m_source         harmonic sines of f0 (9 harmonics), merged by l_linear + tanh
    conv_pre, ups, resblocks (Snake), source_downs/source_resblocks (the source's STFT injected per stage),
    conv_post -> magnitude/phase -> iSTFT (n_fft 16, hop 4)

Noise: upstream v2 draws its initial phases and noise from the global RNG; v3 uses buffers drawn at
construction. Both are drawn here from the request's generator in upstream's order and shapes.

Sine source: CosyVoice 2 and 3 use `SineGen2` (phases integrated at the frame rate, then interpolated);
Chatterbox's S3Gen keeps CosyVoice 1's `SineGen` (`sine_gen=1`: phases integrated per sample, initial
phases uniform in [-pi, pi), and the unused `randn_like(uv)` noise of `SourceModuleHnNSF` drawn too, so
the generator ends where upstream's global RNG does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class HiFTConfig:
    causal: bool = False                     # v3's CausalHiFTGenerator
    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    n_fft: int = 16
    hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    conv_pre_look_right: int = 4
    f0_cond_channels: int = 512
    sine_gen: int = 2                        # 1: CosyVoice 1's SineGen (Chatterbox), 2: SineGen2

    @property
    def upsample_scale(self) -> int:
        return int(np.prod(self.upsample_rates)) * self.hop_len

    def working_memory(self, frames: int) -> int:
        """Bytes a vocoder call on `frames` mel frames allocates at most in float32: the widest upsampled
        activation (8 live copies), the harmonic source (SineGen's per-sample temporaries are more than
        SineGen2's) and the STFT of the source."""
        samples = frames * self.upsample_scale
        t, ch, widest = frames, self.base_channels, self.base_channels * frames
        for r in self.upsample_rates:
            t *= r
            ch //= 2
            widest = max(widest, ch * t)
        source = samples * (self.nb_harmonics + 1) * 4 * (10 if self.sine_gen == 1 else 8)
        return widest * 4 * 8 + source + (self.n_fft + 2) * (samples // self.hop_len + 1) * 4 * 4 + (1 << 20)


class CausalConv1d(nn.Conv1d):
    """Upstream's causal conv: zeros of `causal_padding` frames on the left (or right, for look-ahead)."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1, right: bool = False) -> None:
        super().__init__(cin, cout, kernel, dilation=dilation)
        self.causal_padding = int((kernel * dilation - dilation) / 2) * 2 + (kernel + 1) % 2
        self.right = right

    def forward(self, x: Tensor, cache: Tensor | None = None) -> Tensor:
        """`cache` [B, C, causal_padding]: upstream's cache argument, the frames used instead of the zeros
        (a streaming hop's look-ahead for the right-padded convolutions)."""
        pad = x.new_zeros(x.shape[0], x.shape[1], self.causal_padding) if cache is None else cache
        if pad.shape[2] != self.causal_padding:
            raise ValueError(f"HiFT: a causal convolution's cache must hold {self.causal_padding} frames, "
                             f"got {pad.shape[2]}")
        return super().forward(torch.cat([x, pad] if self.right else [pad, x], dim=2))


class CausalConv1dDownSample(nn.Conv1d):
    def forward(self, x: Tensor) -> Tensor:
        return super().forward(F.pad(x, (self.stride[0] - 1, 0), value=0.0))


class CausalConv1dUpsample(nn.Conv1d):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__(cin, cout, kernel)
        self.scale = stride

    def forward(self, x: Tensor) -> Tensor:
        x = F.interpolate(x, scale_factor=float(self.scale), mode="nearest")
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0), value=0.0))


class Snake(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        return x + (1.0 / (alpha + 0.000000001)) * pow(torch.sin(x * alpha), 2)


class ResBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...], causal: bool) -> None:
        super().__init__()

        def conv(d: int) -> nn.Conv1d:
            if causal:
                return CausalConv1d(channels, channels, kernel, dilation=d)
            return nn.Conv1d(channels, channels, kernel, 1, dilation=d, padding=int((kernel * d - d) / 2))

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: Tensor) -> Tensor:
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = c2(a2(c1(a1(x)))) + x
        return x


class F0Predictor(nn.Module):
    """ConvRNNF0Predictor / CausalConvRNNF0Predictor (`condnet` indices 0, 2, .., 8 are the convs)."""

    def __init__(self, c: HiFTConfig) -> None:
        super().__init__()
        ch = c.f0_cond_channels
        layers: list[nn.Module] = []
        for i in range(5):
            cin = c.in_channels if i == 0 else ch
            if c.causal:
                layers.append(CausalConv1d(cin, ch, 4, right=True) if i == 0 else CausalConv1d(cin, ch, 3))
            else:
                layers.append(nn.Conv1d(cin, ch, 3, padding=1))
            layers.append(nn.ELU())
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(ch, 1)

    def forward(self, x: Tensor, finalize: bool = True) -> Tensor:
        """`finalize=False` (v3's streaming hop): the first conv's look-ahead frames are the input's last
        ones, not zeros, so the output is that many frames shorter."""
        if finalize:
            x = self.condnet(x)
        else:
            n = self.condnet[0].causal_padding
            x = self.condnet[0](x[:, :, :-n], x[:, :, -n:])
            for layer in self.condnet[1:]:
                x = layer(x)
        return torch.abs(self.classifier(x.transpose(1, 2)).squeeze(-1))


class SourceModule(nn.Module):
    """`SourceModuleHnNSF` with `SineGen2`: harmonic sines of f0 with random initial phases, plus noise."""

    def __init__(self, c: HiFTConfig) -> None:
        super().__init__()
        self.c = c
        self.l_linear = nn.Linear(c.nb_harmonics + 1, 1)

    def forward(self, f0: Tensor, generator: torch.Generator | None) -> Tensor:
        """f0 [1, L, 1] at the audio rate -> source [1, L, 1]."""
        c = self.c
        if c.sine_gen == 1:
            return self.sine_gen_v1(f0, generator)
        dim = c.nb_harmonics + 1
        fn = torch.multiply(f0, torch.tensor([[list(range(1, dim + 1))]], dtype=torch.float32, device=f0.device))
        rad = (fn / c.sampling_rate) % 1
        rand_ini = torch.rand((fn.shape[0], dim), generator=generator).to(fn.device)
        rand_ini[:, 0] = 0
        rad[:, 0, :] = rad[:, 0, :] + rand_ini
        scale = c.upsample_scale
        rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / scale, mode="linear").transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * np.pi
        phase = F.interpolate(phase.transpose(1, 2) * scale, scale_factor=scale,
                              mode="nearest" if c.causal else "linear").transpose(1, 2)
        sines = torch.sin(phase) * c.nsf_alpha
        uv = (f0 > c.nsf_voiced_threshold).type(torch.float32)
        noise_amp = uv * c.nsf_sigma + (1 - uv) * c.nsf_alpha / 3
        if c.causal:   # upstream: a uniform buffer, not Gaussian
            noise = noise_amp * torch.rand((1, sines.shape[1], dim), generator=generator).to(fn.device)
        else:
            # randn_like upstream: drawn into a tensor of the sines' (transposed) strides, which orders the draws
            noise = noise_amp * torch.empty_like(sines, device="cpu").normal_(generator=generator).to(fn.device)
            # upstream's SourceModuleHnNSF then draws a noise branch it returns unused (randn_like(uv)): drawn
            # and dropped here too, so a request's later segments continue the stream where upstream's do
            torch.empty(uv.shape).normal_(generator=generator)
        return torch.tanh(self.l_linear(sines * uv + noise))

    def sine_gen_v1(self, f0: Tensor, generator: torch.Generator | None) -> Tensor:
        """Upstream `SourceModuleHnNSF(SineGen)` (CosyVoice 1, Chatterbox) on f0 [B, L, 1], the same
        operations and draws in upstream's order."""
        c = self.c
        dim = c.nb_harmonics + 1
        f0 = f0.transpose(1, 2)                                             # [B, 1, L]
        f_mat = torch.zeros((f0.size(0), dim, f0.size(-1)), device=f0.device)
        for i in range(dim):
            f_mat[:, i: i + 1, :] = f0 * (i + 1) / c.sampling_rate
        theta = 2 * np.pi * (torch.cumsum(f_mat, dim=-1) % 1)
        # torch.distributions.Uniform(-pi, pi).sample(): low + rand * (high - low), in float32
        low, high = torch.tensor(-np.pi, dtype=torch.float32), torch.tensor(np.pi, dtype=torch.float32)
        phase = (low + torch.rand((f0.size(0), dim, 1), generator=generator) * (high - low)).to(f0.device)
        phase[:, 0, :] = 0
        sines = c.nsf_alpha * torch.sin(theta + phase)
        uv = (f0 > c.nsf_voiced_threshold).type(torch.float32)
        noise_amp = uv * c.nsf_sigma + (1 - uv) * c.nsf_alpha / 3
        noise = noise_amp * torch.randn(sines.shape, generator=generator).to(f0.device)
        sines = (sines * uv + noise).transpose(1, 2)
        torch.randn((uv.shape[0], uv.shape[2], 1), generator=generator)   # upstream's unused noise source
        return torch.tanh(self.l_linear(sines.to(self.l_linear.weight.dtype)))   # float32 unless bf16/fp16


def hann_window(n: int) -> Tensor:
    """scipy.signal.get_window('hann', n, fftbins=True) in float64, cast to float32 as upstream does."""
    fac = np.linspace(-np.pi, np.pi, n + 1)[:n]
    w = np.zeros(n) + 0.5 * np.cos(0 * fac) + 0.5 * np.cos(fac)
    return torch.from_numpy(w.astype(np.float32))


class HiFT(nn.Module):
    def __init__(self, config: HiFTConfig) -> None:
        super().__init__()
        c = self.config = config
        base = c.base_channels
        causal = c.causal
        self.m_source = SourceModule(c)
        self.f0_predictor = F0Predictor(c)
        self.conv_pre = (CausalConv1d(c.in_channels, base, c.conv_pre_look_right + 1, right=True) if causal
                         else nn.Conv1d(c.in_channels, base, 7, 1, padding=3))
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(c.upsample_rates, c.upsample_kernel_sizes)):
            cin, cout = base // 2 ** i, base // 2 ** (i + 1)
            self.ups.append(CausalConv1dUpsample(cin, cout, k, u) if causal
                            else nn.ConvTranspose1d(cin, cout, k, u, padding=(k - u) // 2))
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        down_rates = np.cumprod([1] + list(c.upsample_rates[::-1][:-1]))
        for i, (u, k, d) in enumerate(zip(down_rates[::-1], c.source_resblock_kernel_sizes,
                                          c.source_resblock_dilation_sizes)):
            u, cout = int(u), base // 2 ** (i + 1)
            if u == 1:
                down = CausalConv1d(c.n_fft + 2, cout, 1) if causal else nn.Conv1d(c.n_fft + 2, cout, 1, 1)
            elif causal:
                down = CausalConv1dDownSample(c.n_fft + 2, cout, u * 2, u)
            else:
                down = nn.Conv1d(c.n_fft + 2, cout, u * 2, u, padding=u // 2)
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(cout, k, tuple(d), causal))
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = base // 2 ** (i + 1)
            for k, d in zip(c.resblock_kernel_sizes, c.resblock_dilation_sizes):
                self.resblocks.append(ResBlock(ch, k, tuple(d), causal))
        self.conv_post = CausalConv1d(ch, c.n_fft + 2, 7) if causal else nn.Conv1d(ch, c.n_fft + 2, 7, 1, padding=3)

    def f0(self, mel: Tensor, finalize: bool = True) -> Tensor:
        if self.config.causal:   # upstream runs the causal predictor in float64
            return self.f0_predictor(mel.to(torch.float64), finalize).to(mel)
        return self.f0_predictor(mel)

    def source(self, mel: Tensor, generator: torch.Generator | None, finalize: bool = True) -> Tensor:
        f0 = self.f0(mel, finalize)
        s = F.interpolate(f0[:, None], scale_factor=float(self.config.upsample_scale), mode="nearest").transpose(1, 2)
        return self.m_source(s, generator).transpose(1, 2)

    def decode(self, x: Tensor, s: Tensor, finalize: bool = True) -> Tensor:
        """`finalize=False` (v3's streaming hop, causal only): conv_pre's look-ahead frames are the mel's
        last conv_pre_look_right frames, the source's STFT and the audio lose what those frames make."""
        c = self.config
        window = hann_window(c.n_fft).to(x.device)
        # the STFT in float32 at least (torch has none in bf16), its result in the convolutions' dtype: a no-op
        # in float32 and float64
        s = s.to(torch.promote_types(s.dtype, torch.float32))
        spec = torch.view_as_real(torch.stft(s.squeeze(1), c.n_fft, c.hop_len, c.n_fft, window=window,
                                             return_complex=True))
        s_stft = torch.cat([spec[..., 0], spec[..., 1]], dim=1).to(x.dtype)
        ahead = c.conv_pre_look_right
        rates = int(np.prod(c.upsample_rates))
        if finalize:
            x = self.conv_pre(x)
        else:
            if not c.causal:
                raise ValueError("HiFT: finalize=False is CosyVoice 3's causal HiFT only")
            x = self.conv_pre(x[:, :, :-ahead], x[:, :, -ahead:])
            s_stft = s_stft[:, :, :-rates * ahead]
        k = len(c.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, c.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](s_stft))
            xs = self.resblocks[i * k](x)
            for j in range(1, k):
                xs += self.resblocks[i * k + j](x)
            x = xs / k
        x = self.conv_post(F.leaky_relu(x))
        x = x.to(torch.promote_types(x.dtype, torch.float32))   # the iSTFT head in float32 at least (no bf16/fp16 FFT)
        half = c.n_fft // 2 + 1
        magnitude = torch.clip(torch.exp(x[:, :half, :]), max=1e2)
        phase = torch.sin(x[:, half:, :])
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        wav = torch.istft(spec, c.n_fft, c.hop_len, c.n_fft, window=window)
        if not finalize:
            wav = wav[:, :-rates * c.hop_len]
        return torch.clamp(wav, -c.audio_limit, c.audio_limit)

    def forward(self, mel: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """mel [1, 80, T] -> waveform [1, T * upsample_scale]."""
        return self.decode(mel, self.source(mel, generator))

    def stream(self, mel: Tensor, generator: torch.Generator | None, cache_source: Tensor | None = None,
               finalize: bool = True) -> tuple[Tensor, Tensor]:
        """Upstream's `inference` of a stream=True hop: (waveform [1, T'], source [1, 1, T'']).
        v2 (`cache_source` [1, 1, n]): the source's first n samples are the previous hop's, so the overlap
        is not a new draw's. v3 (`finalize=False`): the f0 predictor's and conv_pre's look-ahead frames are
        the mel's own last frames (the result is shorter by what they would make)."""
        if not finalize and not self.config.causal:
            raise ValueError("HiFT: finalize=False is CosyVoice 3's causal HiFT only")
        s = self.source(mel, generator, finalize)
        if cache_source is not None and cache_source.shape[2] > 0:
            s[:, :, :cache_source.shape[2]] = cache_source
        x = mel if finalize else mel[:, :, :-self.f0_predictor.condnet[0].causal_padding]
        return self.decode(x, s, finalize), s

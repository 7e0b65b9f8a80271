"""Kokoro-82M (hexgrad, `kokoro` 0.9.4 `KModel`) in plain torch, under upstream's module names.

    ids [1, L] --bert (ALBERT)--> bert_encoder --> predictor.text_encoder (LSTMs + AdaLayerNorm, style s)
              --> predictor.lstm --> duration_proj --> durations (frames per phoneme, / speed)
              --> alignment --> predictor.F0Ntrain (shared LSTM, AdaIN res blocks) --> F0, N per 2 frames
    ids --text_encoder (CNN + LSTM)--> aligned --> decoder (AdaIN res blocks, iSTFTNet generator with
              its harmonic-plus-noise source) --> waveform at 24 kHz

Weight-normed convolutions are plain `nn.Conv1d`/`nn.ConvTranspose1d` here: the loader folds each
`weight_g`/`weight_v` pair with `torch._weight_norm(v, g, 0)`, the function upstream's hook runs in every
forward, so the weights are the same bits. The source module draws its random phase and noise from a
generator in the order upstream draws them from torch's global generator.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- ALBERT (transformers AlbertModel, inference, no padding) ------------------------------------------
class AlbertEmbeddings(nn.Module):
    def __init__(self, vocab: int, emb: int, positions: int, types: int, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, emb)
        self.position_embeddings = nn.Embedding(positions, emb)
        self.token_type_embeddings = nn.Embedding(types, emb)
        self.LayerNorm = nn.LayerNorm(emb, eps=eps)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        L = ids.shape[1]
        x = self.word_embeddings(ids) + self.token_type_embeddings(torch.zeros_like(ids))
        x = x + self.position_embeddings(torch.arange(L, device=ids.device)[None])
        return self.LayerNorm(x)


class AlbertSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.dense = nn.Linear(dim, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = (p(x).view(B, T, -1, hd).transpose(1, 2) for p in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=hd ** -0.5, is_causal=False)
        y = y.transpose(1, 2).contiguous().reshape(B, T, -1).contiguous()
        return self.LayerNorm(x + self.dense(y))


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """transformers' NewGELUActivation (ALBERT's hidden_act "gelu_new"), written as it is."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class AlbertLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ff: int, eps: float):
        super().__init__()
        self.attention = AlbertSelfAttention(dim, heads, eps)
        self.ffn = nn.Linear(dim, ff)
        self.ffn_output = nn.Linear(ff, dim)
        self.full_layer_layer_norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attention(x)
        return self.full_layer_layer_norm(self.ffn_output(gelu_new(self.ffn(a))) + a)


class AlbertLayerGroup(nn.Module):
    def __init__(self, dim: int, heads: int, ff: int, eps: float, inner: int):
        super().__init__()
        self.albert_layers = nn.ModuleList([AlbertLayer(dim, heads, ff, eps) for _ in range(inner)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.albert_layers:
            x = layer(x)
        return x


class AlbertTransformer(nn.Module):
    def __init__(self, emb: int, dim: int, heads: int, ff: int, eps: float, layers: int, groups: int, inner: int):
        super().__init__()
        self.layers, self.groups = layers, groups
        self.embedding_hidden_mapping_in = nn.Linear(emb, dim)
        self.albert_layer_groups = nn.ModuleList([AlbertLayerGroup(dim, heads, ff, eps, inner) for _ in range(groups)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embedding_hidden_mapping_in(x)
        for i in range(self.layers):                  # ALBERT shares one group's weights across layers
            x = self.albert_layer_groups[int(i / (self.layers / self.groups))](x)
        return x


class Albert(nn.Module):
    """PL-BERT: ids [B, L] -> last hidden state [B, L, hidden] (Kokoro reads no pooler output)."""

    def __init__(self, vocab_size: int, plbert: dict):
        super().__init__()
        c = {"embedding_size": 128, "num_hidden_groups": 1, "inner_group_num": 1, "type_vocab_size": 2,
             "layer_norm_eps": 1e-12, "hidden_act": "gelu_new", "max_position_embeddings": 512, **plbert}
        if c["hidden_act"] != "gelu_new":
            raise ValueError(f"plbert.hidden_act: only gelu_new (Kokoro's) is implemented, got {c['hidden_act']!r}")
        self.max_positions = c["max_position_embeddings"]
        self.embeddings = AlbertEmbeddings(vocab_size, c["embedding_size"], c["max_position_embeddings"],
                                           c["type_vocab_size"], c["layer_norm_eps"])
        self.encoder = AlbertTransformer(c["embedding_size"], c["hidden_size"], c["num_attention_heads"],
                                         c["intermediate_size"], c["layer_norm_eps"], c["num_hidden_layers"],
                                         c["num_hidden_groups"], c["inner_group_num"])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embeddings(ids))


# -- shared pieces (kokoro.modules / kokoro.istftnet) -----------------------------------------------
class LinearNorm(nn.Module):
    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.linear_layer = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_layer(x)


class LayerNorm(nn.Module):
    """LayerNorm over channels of [B, C, T] with upstream's gamma/beta names."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels, self.eps = channels, eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.transpose(1, -1), (self.channels,), self.gamma, self.beta, self.eps).transpose(1, -1)


class AdaLayerNorm(nn.Module):
    def __init__(self, style_dim: int, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels, self.eps = channels, eps
        self.fc = nn.Linear(style_dim, channels * 2)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        x = x.transpose(-1, -2).transpose(1, -1)
        h = self.fc(s)
        h = h.view(h.size(0), h.size(1), 1)
        gamma, beta = torch.chunk(h, chunks=2, dim=1)
        gamma, beta = gamma.transpose(1, -1), beta.transpose(1, -1)
        x = F.layer_norm(x, (self.channels,), eps=self.eps)
        return ((1 + gamma) * x + beta).transpose(1, -1).transpose(-1, -2)


class AdaIN1d(nn.Module):
    def __init__(self, style_dim: int, num_features: int):
        super().__init__()
        self.norm = nn.InstanceNorm1d(num_features, affine=True)
        self.fc = nn.Linear(style_dim, num_features * 2)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        h = self.fc(s)
        gamma, beta = torch.chunk(h.view(h.size(0), h.size(1), 1), chunks=2, dim=1)
        return (1 + gamma) * self.norm(x) + beta


def _lstm(lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """A bidirectional LSTM over one unpadded sequence [1, T, C], packed as upstream packs it."""
    lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.long)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    y, _ = lstm(packed)
    return nn.utils.rnn.pad_packed_sequence(y, batch_first=True)[0]


class AdainResBlk1d(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, style_dim: int, upsample: bool = False):
        super().__init__()
        self.upsample_type = "nearest" if upsample else "none"
        self.learned_sc = dim_in != dim_out
        self.conv1 = nn.Conv1d(dim_in, dim_out, 3, 1, 1)
        self.conv2 = nn.Conv1d(dim_out, dim_out, 3, 1, 1)
        self.norm1 = AdaIN1d(style_dim, dim_in)
        self.norm2 = AdaIN1d(style_dim, dim_out)
        if self.learned_sc:
            self.conv1x1 = nn.Conv1d(dim_in, dim_out, 1, 1, 0, bias=False)
        if upsample:
            self.pool = nn.ConvTranspose1d(dim_in, dim_in, kernel_size=3, stride=2, groups=dim_in, padding=1,
                                           output_padding=1)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        r = F.leaky_relu(self.norm1(x, s), 0.2)
        if self.upsample_type != "none":
            r = self.pool(r)
        r = self.conv2(F.leaky_relu(self.norm2(self.conv1(r), s), 0.2))
        sc = F.interpolate(x, scale_factor=2, mode="nearest") if self.upsample_type != "none" else x
        if self.learned_sc:
            sc = self.conv1x1(sc)
        return (r + sc) * torch.rsqrt(torch.tensor(2))


# -- text side --------------------------------------------------------------------------------------
class TextEncoder(nn.Module):
    def __init__(self, channels: int, kernel_size: int, depth: int, n_symbols: int):
        super().__init__()
        self.embedding = nn.Embedding(n_symbols, channels)
        pad = (kernel_size - 1) // 2
        self.cnn = nn.ModuleList([nn.Sequential(nn.Conv1d(channels, channels, kernel_size, padding=pad),
                                                LayerNorm(channels), nn.LeakyReLU(0.2)) for _ in range(depth)])
        self.lstm = nn.LSTM(channels, channels // 2, 1, batch_first=True, bidirectional=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:      # [1, L] -> [1, C, L]
        x = self.embedding(ids).transpose(1, 2)
        for c in self.cnn:
            x = c(x)
        return _lstm(self.lstm, x.transpose(1, 2)).transpose(-1, -2)


class DurationEncoder(nn.Module):
    def __init__(self, sty_dim: int, d_model: int, nlayers: int):
        super().__init__()
        self.lstms = nn.ModuleList()
        for _ in range(nlayers):
            self.lstms.append(nn.LSTM(d_model + sty_dim, d_model // 2, num_layers=1, batch_first=True,
                                      bidirectional=True))
            self.lstms.append(AdaLayerNorm(sty_dim, d_model))

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:   # [1, C, L] -> [1, L, C + S]
        x = x.permute(2, 0, 1)
        s = style.expand(x.shape[0], x.shape[1], -1)
        x = torch.cat([x, s], dim=-1).transpose(0, 1).transpose(-1, -2)
        for block in self.lstms:
            if isinstance(block, AdaLayerNorm):
                x = block(x.transpose(-1, -2), style).transpose(-1, -2)
                x = torch.cat([x, s.permute(1, 2, 0)], dim=1)
            else:
                x = _lstm(block, x.transpose(-1, -2)).transpose(-1, -2)
        return x.transpose(-1, -2)


class ProsodyPredictor(nn.Module):
    def __init__(self, style_dim: int, d_hid: int, nlayers: int, max_dur: int):
        super().__init__()
        self.text_encoder = DurationEncoder(style_dim, d_hid, nlayers)
        self.lstm = nn.LSTM(d_hid + style_dim, d_hid // 2, 1, batch_first=True, bidirectional=True)
        self.duration_proj = LinearNorm(d_hid, max_dur)
        self.shared = nn.LSTM(d_hid + style_dim, d_hid // 2, 1, batch_first=True, bidirectional=True)
        h = d_hid // 2
        self.F0 = nn.ModuleList([AdainResBlk1d(d_hid, d_hid, style_dim), AdainResBlk1d(d_hid, h, style_dim, True),
                                 AdainResBlk1d(h, h, style_dim)])
        self.N = nn.ModuleList([AdainResBlk1d(d_hid, d_hid, style_dim), AdainResBlk1d(d_hid, h, style_dim, True),
                                AdainResBlk1d(h, h, style_dim)])
        self.F0_proj = nn.Conv1d(h, 1, 1, 1, 0)
        self.N_proj = nn.Conv1d(h, 1, 1, 1, 0)

    def durations(self, d: torch.Tensor, speed: float) -> torch.Tensor:
        """Duration-encoder output [1, L, C + S] -> frames per phoneme [L] (int64, >= 1)."""
        x, _ = self.lstm(d)                                   # upstream runs this one unpacked
        duration = torch.sigmoid(self.duration_proj(x)).sum(dim=-1) / speed
        return torch.round(duration).clamp(min=1).long().view(-1)

    def F0Ntrain(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, _ = self.shared(x.transpose(-1, -2))
        f0 = x.transpose(-1, -2)
        for block in self.F0:
            f0 = block(f0, s)
        n = x.transpose(-1, -2)
        for block in self.N:
            n = block(n, s)
        return self.F0_proj(f0).squeeze(1), self.N_proj(n).squeeze(1)


# -- iSTFTNet decoder -------------------------------------------------------------------------------
def _padding(kernel: int, dilation: int = 1) -> int:
    return int((kernel * dilation - dilation) / 2)


class AdaINResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilation: tuple[int, ...], style_dim: int):
        super().__init__()
        self.convs1 = nn.ModuleList([nn.Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                               padding=_padding(kernel_size, d)) for d in dilation])
        self.convs2 = nn.ModuleList([nn.Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                               padding=_padding(kernel_size)) for _ in dilation])
        self.adain1 = nn.ModuleList([AdaIN1d(style_dim, channels) for _ in dilation])
        self.adain2 = nn.ModuleList([AdaIN1d(style_dim, channels) for _ in dilation])
        self.alpha1 = nn.ParameterList([nn.Parameter(torch.ones(1, channels, 1)) for _ in dilation])
        self.alpha2 = nn.ParameterList([nn.Parameter(torch.ones(1, channels, 1)) for _ in dilation])

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        for c1, c2, n1, n2, a1, a2 in zip(self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2):
            xt = n1(x, s)
            xt = xt + (1 / a1) * (torch.sin(a1 * xt) ** 2)      # Snake1D
            xt = c1(xt)
            xt = n2(xt, s)
            xt = xt + (1 / a2) * (torch.sin(a2 * xt) ** 2)
            x = c2(xt) + x
        return x


def _randn_like(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """torch.randn_like(x) drawn on the CPU from `generator`: in x's memory order (x may be a transposed
    view, and randn_like fills memory, not logical order), then moved to x's device."""
    return torch.empty_like(x, device="cpu").normal_(generator=generator).to(x.device)


class SourceModuleHnNSF(nn.Module):
    """Harmonic-plus-noise source: f0 [1, T, 1] at the sample rate -> tanh(linear(sines)) [1, T, 1].

    Random numbers, as upstream draws them: the initial phase per harmonic (uniform), the sine noise
    (normal, like the sines) and the unused noise source (normal, like uv); all from `generator`."""

    def __init__(self, sampling_rate: int, upsample_scale: int, harmonic_num: int = 8, sine_amp: float = 0.1,
                 noise_std: float = 0.003, voiced_threshold: float = 10.0):
        super().__init__()
        self.sampling_rate, self.upsample_scale = sampling_rate, upsample_scale
        self.harmonic_num, self.sine_amp, self.noise_std = harmonic_num, sine_amp, noise_std
        self.voiced_threshold = voiced_threshold
        self.l_linear = nn.Linear(harmonic_num + 1, 1)

    def sines(self, f0: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        fn = torch.multiply(f0, torch.tensor([[list(range(1, self.harmonic_num + 2))]], dtype=torch.float32,
                                             device=f0.device))
        rad = (fn / self.sampling_rate) % 1
        rand_ini = torch.rand(fn.shape[0], fn.shape[2], generator=generator).to(f0.device)
        rand_ini[:, 0] = 0
        rad[:, 0, :] = rad[:, 0, :] + rand_ini
        rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / self.upsample_scale, mode="linear").transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * torch.pi
        phase = F.interpolate(phase.transpose(1, 2) * self.upsample_scale, scale_factor=self.upsample_scale,
                              mode="linear").transpose(1, 2)
        sine = torch.sin(phase) * self.sine_amp
        uv = (f0 > self.voiced_threshold).type(torch.float32)
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        noise = noise_amp * _randn_like(sine, generator)
        _randn_like(uv, generator)                          # upstream's noise source: drawn, never used
        return sine * uv + noise

    def forward(self, f0: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.tanh(self.l_linear(self.sines(f0, generator)))


class Generator(nn.Module):
    def __init__(self, style_dim: int, resblock_kernel_sizes: list[int], upsample_rates: list[int],
                 upsample_initial_channel: int, resblock_dilation_sizes: list[list[int]],
                 upsample_kernel_sizes: list[int], gen_istft_n_fft: int, gen_istft_hop_size: int):
        super().__init__()
        self.num_kernels = len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_rates)
        self.upsample_scale = math.prod(upsample_rates) * gen_istft_hop_size
        self.m_source = SourceModuleHnNSF(24000, self.upsample_scale)
        self.noise_convs = nn.ModuleList()
        self.noise_res = nn.ModuleList()
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes)):
            self.ups.append(nn.ConvTranspose1d(upsample_initial_channel // (2 ** i),
                                               upsample_initial_channel // (2 ** (i + 1)), k, u, padding=(k - u) // 2))
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = upsample_initial_channel // (2 ** (i + 1))
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(AdaINResBlock1(ch, k, tuple(d), style_dim))
            if i + 1 < len(upsample_rates):
                stride = math.prod(upsample_rates[i + 1:])
                self.noise_convs.append(nn.Conv1d(gen_istft_n_fft + 2, ch, kernel_size=stride * 2, stride=stride,
                                                  padding=(stride + 1) // 2))
                self.noise_res.append(AdaINResBlock1(ch, 7, (1, 3, 5), style_dim))
            else:
                self.noise_convs.append(nn.Conv1d(gen_istft_n_fft + 2, ch, kernel_size=1))
                self.noise_res.append(AdaINResBlock1(ch, 11, (1, 3, 5), style_dim))
        self.post_n_fft = gen_istft_n_fft
        self.hop = gen_istft_hop_size
        self.conv_post = nn.Conv1d(ch, self.post_n_fft + 2, 7, 1, padding=3)

    def _window(self, device: torch.device) -> torch.Tensor:
        return torch.hann_window(self.post_n_fft, periodic=True, dtype=torch.float32).to(device)

    def forward(self, x: torch.Tensor, s: torch.Tensor, f0: torch.Tensor,
                generator: torch.Generator | None = None) -> torch.Tensor:
        f0 = F.interpolate(f0[:, None], scale_factor=self.upsample_scale, mode="nearest").transpose(1, 2)
        har = self.m_source(f0, generator).transpose(1, 2).squeeze(1)
        n = self.post_n_fft
        spec = torch.stft(har, n, self.hop, n, window=self._window(har.device), return_complex=True)
        har = torch.cat([torch.abs(spec), torch.angle(spec)], dim=1).to(x.dtype)
        for i in range(self.num_upsamples):
            x = F.leaky_relu(x, negative_slope=0.1)
            x_source = self.noise_res[i](self.noise_convs[i](har), s)
            x = self.ups[i](x)
            if i == self.num_upsamples - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + x_source
            xs = None
            for j in range(self.num_kernels):
                y = self.resblocks[i * self.num_kernels + j](x, s)
                xs = y if xs is None else xs + y
            x = xs / self.num_kernels
        x = self.conv_post(F.leaky_relu(x)).float()
        mag = torch.exp(x[:, :n // 2 + 1, :])
        phase = torch.sin(x[:, n // 2 + 1:, :])
        return torch.istft(mag * torch.exp(phase * 1j), n, self.hop, n, window=self._window(x.device)).unsqueeze(-2)


class Decoder(nn.Module):
    def __init__(self, dim_in: int, style_dim: int, istftnet: dict):
        super().__init__()
        self.encode = AdainResBlk1d(dim_in + 2, 1024, style_dim)
        self.decode = nn.ModuleList([AdainResBlk1d(1024 + 2 + 64, 1024, style_dim) for _ in range(3)]
                                    + [AdainResBlk1d(1024 + 2 + 64, 512, style_dim, upsample=True)])
        self.F0_conv = nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1)
        self.N_conv = nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1)
        self.asr_res = nn.Sequential(nn.Conv1d(512, 64, kernel_size=1))
        self.generator = Generator(style_dim, **istftnet)

    def features(self, asr: torch.Tensor, f0_curve: torch.Tensor, n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        f0 = self.F0_conv(f0_curve.unsqueeze(1))
        n = self.N_conv(n.unsqueeze(1))
        x = self.encode(torch.cat([asr, f0, n], dim=1), s)
        asr_res = self.asr_res(asr)
        res = True
        for block in self.decode:
            if res:
                x = torch.cat([x, asr_res, f0, n], dim=1)
            x = block(x, s)
            if block.upsample_type != "none":
                res = False
        return x


ISTFTNET_KEYS = ("resblock_kernel_sizes", "upsample_rates", "upsample_initial_channel", "resblock_dilation_sizes",
                 "upsample_kernel_sizes", "gen_istft_n_fft", "gen_istft_hop_size")


class KModel(nn.Module):
    """Kokoro from its config.json: `acoustic` (ids, style) -> durations and decoder features, `vocode`
    (features, F0, style) -> waveform; `forward` does both, as upstream's forward_with_tokens."""

    def __init__(self, config: dict):
        super().__init__()
        if config.get("hidden_dim") != 512:
            # the decoder's asr_res is a fixed 512-channel conv upstream; no other width can run
            raise ValueError(f"hidden_dim: Kokoro's decoder takes 512 text channels, got {config.get('hidden_dim')!r}")
        self.vocab: dict[str, int] = dict(config["vocab"])
        self.bert = Albert(config["n_token"], config["plbert"])
        self.bert_encoder = nn.Linear(config["plbert"]["hidden_size"], config["hidden_dim"])
        self.context_length = self.bert.max_positions
        self.style_dim = config["style_dim"]
        self.predictor = ProsodyPredictor(config["style_dim"], config["hidden_dim"], config["n_layer"], config["max_dur"])
        self.text_encoder = TextEncoder(config["hidden_dim"], config["text_encoder_kernel_size"], config["n_layer"],
                                        config["n_token"])
        self.decoder = Decoder(config["hidden_dim"], config["style_dim"], {k: config["istftnet"][k] for k in ISTFTNET_KEYS})

    def prosody(self, ids: torch.Tensor, ref_s: torch.Tensor, speed: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [1, L], ref_s [1, 256] -> duration-encoder output, durations [L]."""
        d_en = self.bert_encoder(self.bert(ids)).transpose(-1, -2)
        d = self.predictor.text_encoder(d_en, ref_s[:, 128:])
        return d, self.predictor.durations(d, speed)

    def acoustic(self, ids: torch.Tensor, ref_s: torch.Tensor, speed: float = 1.0) -> dict[str, torch.Tensor]:
        """ids [1, L], ref_s [1, 256] -> durations [L], decoder features, F0 curve."""
        d, dur = self.prosody(ids, ref_s, speed)
        return self.features(ids, d, dur, ref_s)

    def features(self, ids: torch.Tensor, d: torch.Tensor, dur: torch.Tensor, ref_s: torch.Tensor) -> dict[str, torch.Tensor]:
        s = ref_s[:, 128:]
        index = torch.repeat_interleave(torch.arange(ids.shape[1], device=ids.device), dur)
        aln = torch.zeros((ids.shape[1], index.shape[0]), device=ids.device, dtype=d.dtype)
        aln[index, torch.arange(index.shape[0], device=ids.device)] = 1
        aln = aln.unsqueeze(0)
        en = d.transpose(-1, -2) @ aln
        f0, n = self.predictor.F0Ntrain(en, s)
        asr = self.text_encoder(ids) @ aln
        return {"durations": dur, "features": self.decoder.features(asr, f0, n, ref_s[:, :128]), "f0": f0}

    def vocode(self, parts: dict[str, torch.Tensor], ref_s: torch.Tensor,
               generator: torch.Generator | None = None) -> torch.Tensor:
        return self.decoder.generator(parts["features"], ref_s[:, :128], parts["f0"], generator).squeeze()

    def forward(self, ids: torch.Tensor, ref_s: torch.Tensor, speed: float = 1.0,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        parts = self.acoustic(ids, ref_s, speed)
        return self.vocode(parts, ref_s, generator), parts["durations"]

    def ids(self, phonemes: str) -> list[int]:
        """Upstream KModel.forward: vocab ids (unknown symbols skipped) with the 0 pad at both ends."""
        return [0, *(self.vocab[p] for p in phonemes if p in self.vocab), 0]


def weight_normed(name: str) -> bool:
    """Whether upstream wraps the conv `name` (a module path) in weight_norm: its file then holds
    `name.weight_g` and `name.weight_v`, which the loader folds into `name.weight`."""
    parts = name.split(".")
    last = parts[-1]
    if name.startswith("text_encoder.cnn."):
        return last == "0"
    if last in ("conv1", "conv2", "conv1x1", "pool"):
        return True
    if len(parts) >= 2 and parts[-2] in ("convs1", "convs2", "ups"):
        return True
    return name in ("decoder.F0_conv", "decoder.N_conv", "decoder.asr_res.0", "decoder.generator.conv_post")


# hexgrad/Kokoro-82M config.json without its vocab: the sizes of the published model
PUBLISHED_SIZES = {
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6], "gen_istft_hop_size": 5,
                 "gen_istft_n_fft": 20, "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                 "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512},
    "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 50, "multispeaker": True,
    "n_layer": 3, "n_mels": 80, "n_token": 178, "style_dim": 128, "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
               "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1},
    "vocab": {},
}

"""GPT-SoVITS SoVITS (s2, v2 / v2Pro) training on our SynthesizerTrn: upstream's forward, losses, optimizers.

Upstream (RVC-Boss/GPT-SoVITS 48b1a01, s2_train.py `train_and_evaluate`, module/models.py
`SynthesizerTrn.forward`, module/losses.py, module/mel_processing.py) runs one batch as:

- the generator forward in training mode: reference style `ge` from the masked MelStyleEncoder over the
  first 704 spectrogram bins (its dropouts 0.1, hard-coded upstream), v2Pro's `sv_emb` + PReLU; the HuBERT
  features through `ssl_proj` and the frozen quantizer (`freeze_quantizer`: eval mode, so no commitment
  loss, no straight-through gradient: `ssl_proj` gets none), x2 nearest upsample; the text encoder with
  masks and `p_dropout` (attention probabilities, after attention, inside and after the FFN); the posterior
  encoder `enc_q` over the spectrogram (`ge` detached, z = m + randn * exp(logs)); the flow forward; a
  random `segment_size` slice of z (torch.rand); the HiFi-GAN generator on the slice;
- the mel of the batch's spectrogram (slice) and of the generated audio; the real audio's slice;
- discriminator step: MultiPeriodDiscriminator on (real, generated.detach()), least-squares loss,
  AdamW step; generator step: the updated discriminator on (real, generated), loss = adversarial +
  feature matching + 45 x mel L1 + KL (+ the commitment loss, 0 when frozen), AdamW step;
- AdamW (betas 0.8 / 0.99, eps 1e-9, torch's default weight decay 0.01); the text embedding, phone
  encoder and MRTE at `text_low_lr_rate` (0.4) x the rate; ExponentialLR (0.999875) stepped once before
  the first epoch (so epoch 1 runs at rate x gamma) and after each epoch.

Upstream's GPU recipe runs fp16 autocast with a GradScaler (`fp16_run`); this is its float32 path
(fp16_run false), and a memory preset's autocast is named in the job's report. Weight-normed convolutions
train as `weight_g` / `weight_v` (what the checkpoints store), recomputed per forward with upstream's
`torch._weight_norm`. Dropout masks are drawn in upstream's order on tensors of upstream's shapes, so a
seeded step draws the same masks (tests/gpt_sovits/test_s2_train.py). Nothing here is imported at
inference: the discriminator, `enc_q` and the training forward live only in this module.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...training.memory import HostAdamW
from ..blocks.mel import mel_filters
from .sovits import (LRELU_SLOPE, STYLE_BINS, WEIGHT_NORMED, WN, Encoder, RelativeAttention, SoVITSConfig,
                     SynthesizerTrn, TextEncoder)

STYLE_DROPOUT = 0.1      # modules.MelStyleEncoder(dropout=0.1): SynthesizerTrn builds it with the default
ENC_Q_KERNEL, ENC_Q_LAYERS = 5, 16
MPD_PERIODS = (2, 3, 5, 7, 11)
MPD_PERIODS_V2PRO = (2, 3, 5, 7, 11, 17, 23)
ENC_Q_WEIGHT_NORMED = r"enc_q\.enc\.(in_layers\.\d+|res_skip_layers\.\d+|cond_layer)"


@dataclass(frozen=True)
class S2Hparams:
    """The `train` / `data` / `model` entries of s2.json the step reads (defaults: upstream's s2.json)."""

    learning_rate: float = 1e-4
    betas: tuple[float, float] = (0.8, 0.99)
    eps: float = 1e-9
    lr_decay: float = 0.999875
    segment_size: int = 20480
    c_mel: float = 45.0
    c_kl: float = 1.0
    text_low_lr_rate: float = 0.4
    p_dropout: float = 0.1
    n_mel_channels: int = 128
    mel_fmin: float = 0.0
    mel_fmax: float | None = None

    @classmethod
    def from_config(cls, hps: dict[str, Any], source: str = "s2 config") -> S2Hparams:
        train, data, model = (hps.get(k, {}) if isinstance(hps, dict) else {} for k in ("train", "data", "model"))
        d = cls()

        def num(section: dict, name: str, default: float, positive: bool = True) -> float:
            value = section.get(name, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
                    (value <= 0 if positive else value < 0):
                raise ValueError(f"{source}: {name} = {value!r}; expected a {'positive' if positive else 'non-negative'}"
                                 f" number")
            return value

        betas = train.get("betas", list(d.betas))
        if not (isinstance(betas, (list, tuple)) and len(betas) == 2 and all(
                isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)):
            raise ValueError(f"{source}: train.betas = {betas!r}; expected two numbers in [0, 1)")
        fmax = data.get("mel_fmax", d.mel_fmax)
        p = num(model, "p_dropout", d.p_dropout, positive=False)
        if p >= 1:
            raise ValueError(f"{source}: model.p_dropout = {p!r}; expected a number in [0, 1)")
        return cls(learning_rate=num(train, "learning_rate", d.learning_rate), betas=(float(betas[0]), float(betas[1])),
                   eps=num(train, "eps", d.eps), lr_decay=num(train, "lr_decay", d.lr_decay),
                   segment_size=int(num(train, "segment_size", d.segment_size)), c_mel=num(train, "c_mel", d.c_mel, False),
                   c_kl=num(train, "c_kl", d.c_kl, False),
                   text_low_lr_rate=num(train, "text_low_lr_rate", d.text_low_lr_rate), p_dropout=p,
                   n_mel_channels=int(num(data, "n_mel_channels", d.n_mel_channels)),
                   mel_fmin=num(data, "mel_fmin", d.mel_fmin, positive=False),
                   mel_fmax=None if fmax is None else num(data, "mel_fmax", fmax))


@dataclass(frozen=True)
class S2Batch:
    """TextAudioSpeakerCollate's output (sorted by spectrogram length, longest first; zero padding)."""

    ssl: Tensor            # [B, 768, T] HuBERT features
    ssl_lengths: Tensor    # [B]
    spec: Tensor           # [B, n_fft // 2 + 1, T] linear spectrogram
    spec_lengths: Tensor   # [B]
    wav: Tensor            # [B, 1, samples] 32 kHz audio
    wav_lengths: Tensor    # [B]
    text: Tensor           # [B, L] phone ids
    text_lengths: Tensor   # [B]
    sv_emb: Tensor | None = None   # [B, sv_dim] v2Pro speaker embeddings

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> S2Batch:
        def f(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)
        return S2Batch(f(self.ssl), self.ssl_lengths.to(device), f(self.spec), self.spec_lengths.to(device),
                       f(self.wav), self.wav_lengths.to(device), self.text.to(device), self.text_lengths.to(device),
                       f(self.sv_emb))


# ---- weight norm as torch.nn.utils.weight_norm keeps it (weight_g / weight_v, dim 0) ----------------------


def _recompute_weight(module: nn.Module, _inputs: Any) -> None:
    module.weight = torch._weight_norm(module.weight_v, module.weight_g, 0)


def weight_norm(module: nn.Module) -> nn.Module:
    """torch.nn.utils.weight_norm(module) (dim 0): `weight` becomes `weight_g` (norm) x `weight_v` / |v|,
    recomputed before every forward with the same call."""
    weight = module.weight
    del module._parameters["weight"]
    module.register_parameter("weight_g", nn.Parameter(torch.norm_except_dim(weight, 2, 0).data))
    module.register_parameter("weight_v", nn.Parameter(weight.data))
    module.weight = torch._weight_norm(module.weight_v, module.weight_g, 0)
    module.register_forward_pre_hook(_recompute_weight)
    return module


def _apply_weight_norm(root: nn.Module, pattern: str) -> None:
    rx = re.compile(pattern)
    for name, module in list(root.named_modules()):
        if rx.fullmatch(name):
            weight_norm(module)


# ---- training-only modules ---------------------------------------------------------------------------------


class PosteriorEncoder(nn.Module):
    """models.PosteriorEncoder: spectrogram -> z (+ its mean / log-std), conditioned on the detached style."""

    def __init__(self, cfg: SoVITSConfig) -> None:
        super().__init__()
        self.out_channels = cfg.inter_channels
        self.pre = nn.Conv1d(cfg.spec_channels, cfg.hidden_channels, 1)
        self.enc = WN(cfg.hidden_channels, ENC_Q_KERNEL, ENC_Q_LAYERS, cfg.gin_channels)
        self.proj = nn.Conv1d(cfg.hidden_channels, cfg.inter_channels * 2, 1)

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.pre(x) * x_mask
        x = wavenet(self.enc, x, x_mask, g.detach())
        stats = self.proj(x) * x_mask
        m, logs = torch.split(stats, self.out_channels, dim=1)
        z = (m + torch.randn_like(m) * torch.exp(logs)) * x_mask
        return z, m, logs


def _padding(kernel_size: int, dilation: int = 1) -> int:
    return int((kernel_size * dilation - dilation) / 2)


class DiscriminatorP(nn.Module):
    def __init__(self, period: int, kernel_size: int = 5, stride: int = 3, divisor: int = 1) -> None:
        super().__init__()
        self.period = period
        chans = (1, *(c // divisor for c in (32, 128, 512, 1024, 1024)))
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv2d(chans[i], chans[i + 1], (kernel_size, 1), (stride, 1) if i < 4 else 1,
                                  padding=(_padding(kernel_size, 1), 0))) for i in range(5))
        self.conv_post = weight_norm(nn.Conv2d(chans[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        fmap = []
        b, c, t = x.shape
        if t % self.period != 0:
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class DiscriminatorS(nn.Module):
    def __init__(self, divisor: int = 1) -> None:
        super().__init__()
        c = [max(1, n // divisor) for n in (16, 64, 256, 1024)]
        g = [max(1, n // divisor) for n in (4, 16, 64, 256)]
        self.convs = nn.ModuleList(weight_norm(conv) for conv in (
            nn.Conv1d(1, c[0], 15, 1, padding=7), nn.Conv1d(c[0], c[1], 41, 4, groups=g[0], padding=20),
            nn.Conv1d(c[1], c[2], 41, 4, groups=g[1], padding=20), nn.Conv1d(c[2], c[3], 41, 4, groups=g[2], padding=20),
            nn.Conv1d(c[3], c[3], 41, 4, groups=g[3], padding=20), nn.Conv1d(c[3], c[3], 5, 1, padding=2)))
        self.conv_post = weight_norm(nn.Conv1d(c[3], 1, 3, 1, padding=1))

    def forward(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        fmap = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    """models.MultiPeriodDiscriminator (use_spectral_norm false): one scale, five (v2Pro: seven) periods;
    parameter names as the s2D*.pth `weight` dict. `divisor` narrows every width (upstream's: 1) for the
    tests' tiny configs: the full-size one makes a CPU step take seconds."""

    def __init__(self, version: str = "v2", divisor: int = 1) -> None:
        super().__init__()
        if isinstance(divisor, bool) or not isinstance(divisor, int) or divisor < 1 or 1024 % divisor:
            raise ValueError(f"discriminator divisor = {divisor!r}; expected a power of two from 1 to 1024")
        periods = MPD_PERIODS_V2PRO if version in ("v2Pro", "v2ProPlus") else MPD_PERIODS
        self.discriminators = nn.ModuleList([DiscriminatorS(divisor),
                                             *(DiscriminatorP(p, divisor=divisor) for p in periods)])

    def forward(self, y: Tensor, y_hat: Tensor) -> tuple[list[Tensor], list[Tensor], list[list[Tensor]],
                                                          list[list[Tensor]]]:
        rs, gs, frs, fgs = [], [], [], []
        for d in self.discriminators:
            r, fr = d(y)
            g, fg = d(y_hat)
            rs.append(r)
            gs.append(g)
            frs.append(fr)
            fgs.append(fg)
        return rs, gs, frs, fgs


def training_generator(cfg: SoVITSConfig) -> SynthesizerTrn:
    """Our SynthesizerTrn with upstream's training layout: weight-normed convolutions as weight_g / weight_v and
    the posterior encoder `enc_q` (its state dict is upstream's s2G `weight` dict, enc_q included)."""
    model = SynthesizerTrn(cfg)
    model.enc_q = PosteriorEncoder(cfg)
    _apply_weight_norm(model, WEIGHT_NORMED.pattern.removeprefix("^").removesuffix(r"\.weight$"))
    _apply_weight_norm(model, ENC_Q_WEIGHT_NORMED)
    return model


# ---- the training forward (upstream's, with masks and dropout) -------------------------------------------


def length_mask(lengths: Tensor, length: int, dtype: torch.dtype) -> Tensor:
    """commons.sequence_mask(lengths, length).unsqueeze(1) in `dtype`: [B, 1, length]."""
    x = torch.arange(length, dtype=lengths.dtype, device=lengths.device)
    return (x.unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1).to(dtype)


def _relative_attention(attn: RelativeAttention, x: Tensor, c: Tensor, mask: Tensor, p: float, train: bool) -> Tensor:
    """attentions.MultiHeadAttention.forward with its dropout on the attention probabilities."""
    q, k, v = attn.conv_q(x), attn.conv_k(c), attn.conv_v(c)
    b, d, t_s, t_t = (*k.size(), q.size(2))
    heads, kc = attn.heads, attn.k_channels
    query = q.view(b, heads, kc, t_t).transpose(2, 3)
    key = k.view(b, heads, kc, t_s).transpose(2, 3)
    value = v.view(b, heads, kc, t_s).transpose(2, 3)
    scores = torch.matmul(query / math.sqrt(kc), key.transpose(-2, -1))
    if attn.window is not None:
        rel = torch.matmul(query / math.sqrt(kc), attn.relative(attn.emb_rel_k, t_s).unsqueeze(0).transpose(-2, -1))
        scores = scores + attn.rel_to_abs(rel)
    scores = scores.masked_fill(mask == 0, -1e4)
    p_attn = F.dropout(F.softmax(scores, dim=-1), p, train)
    out = torch.matmul(p_attn, value)
    if attn.window is not None:
        out = out + torch.matmul(attn.abs_to_rel(p_attn), attn.relative(attn.emb_rel_v, t_s).unsqueeze(0))
    return attn.conv_o(out.transpose(2, 3).contiguous().view(b, d, t_t))


def _encoder(enc: Encoder, x: Tensor, x_mask: Tensor, p: float, train: bool) -> Tensor:
    """attentions.Encoder.forward with its dropouts."""
    attn_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
    x = x * x_mask
    for attn, norm1, ffn, norm2 in zip(enc.attn_layers, enc.norm_layers_1, enc.ffn_layers, enc.norm_layers_2):
        y = F.dropout(_relative_attention(attn, x, x, attn_mask, p, train), p, train)
        x = norm1(x + y)
        h = F.dropout(torch.relu(ffn.conv_1(ffn.pad(x * x_mask))), p, train)
        y = F.dropout(ffn.conv_2(ffn.pad(h * x_mask)) * x_mask, p, train)
        x = norm2(x + y)
    return x * x_mask


def text_encoder(enc: TextEncoder, y: Tensor, y_lengths: Tensor, text: Tensor, text_lengths: Tensor, ge: Tensor,
                 p: float, train: bool) -> tuple[Tensor, Tensor, Tensor]:
    """models.TextEncoder.forward (speed 1): -> m_p, logs_p, y_mask."""
    y_mask = length_mask(y_lengths, y.size(2), y.dtype)
    y = enc.ssl_proj(y * y_mask) * y_mask
    y = _encoder(enc.encoder_ssl, y * y_mask, y_mask, p, train)
    text_mask = length_mask(text_lengths, text.size(1), y.dtype)
    t = enc.text_embedding(text).transpose(1, 2)
    t = _encoder(enc.encoder_text, t * text_mask, text_mask, p, train)
    y = enc.mrte(y, y_mask, t, text_mask, ge)
    y = _encoder(enc.encoder2, y * y_mask, y_mask, p, train)
    m, logs = torch.split(enc.proj(y) * y_mask, enc.out_channels, dim=1)
    return m, logs, y_mask


def style(model: SynthesizerTrn, spec: Tensor, mask: Tensor, train: bool) -> Tensor:
    """modules.MelStyleEncoder.forward(spec[:, :704] * mask, mask) with its dropouts -> ge [B, gin, 1]."""
    enc, p = model.ref_enc, STYLE_DROPOUT
    x = (spec[:, :STYLE_BINS] * mask).transpose(1, 2)
    pad = (mask.int() == 0).squeeze(1)                               # [B, T] True at padding
    t = x.shape[1]
    fc1, _, _, fc2, _, _ = enc.spectral
    x = F.dropout(enc.spectral[1](fc1(x)), p, train)
    x = F.dropout(enc.spectral[4](fc2(x)), p, train)
    x = x.transpose(1, 2)
    for glu in enc.temporal:
        x1, x2 = torch.split(glu.conv1(x), glu.channels, dim=1)
        x = x + F.dropout(x1 * torch.sigmoid(x2), p, train)
    x = x.transpose(1, 2).masked_fill(pad.unsqueeze(-1), 0)
    att = enc.slf_attn
    b, n, _ = x.size()
    q, k, v = (w(x).view(b, n, att.heads, att.d).permute(2, 0, 1, 3).contiguous().view(-1, n, att.d)
               for w in (att.w_qs, att.w_ks, att.w_vs))
    scores = torch.bmm(q, k.transpose(1, 2)) / att.temperature
    scores = scores.masked_fill(pad.unsqueeze(1).expand(-1, t, -1).repeat(att.heads, 1, 1), -math.inf)
    probs = F.dropout(torch.softmax(scores, dim=2), p, train)
    out = torch.bmm(probs, v).view(att.heads, b, n, att.d).permute(1, 2, 0, 3).contiguous().view(b, n, -1)
    x = F.dropout(att.fc(out), p, train) + x
    x = enc.fc(x)
    # temporal_avg_pool: in float32 at least (upstream's x.float(); a float64 model stays in float64)
    count = (~pad).sum(dim=1).unsqueeze(1)
    x = x.masked_fill(pad.unsqueeze(-1), 0)
    pooled = torch.div(x.to(torch.promote_types(x.dtype, torch.float32)), count.unsqueeze(1)).sum(dim=1).to(x.dtype)
    return pooled.unsqueeze(-1)


@torch.jit.script
def _fused_add_tanh_sigmoid_multiply(input_a: Tensor, input_b: Tensor, n_channels: Tensor) -> Tensor:
    """commons.fused_add_tanh_sigmoid_multiply, scripted as upstream scripts it: its backward is TorchScript's
    autodiff, whose rounding differs from eager autograd's (the WaveNet layers of enc_q and the flow)."""
    n_channels_int = n_channels[0]
    in_act = input_a + input_b
    t_act = torch.tanh(in_act[:, :n_channels_int, :])
    s_act = torch.sigmoid(in_act[:, n_channels_int:, :])
    return t_act * s_act


def settle_scripted_gate() -> None:
    """One throwaway differentiated call of the scripted gate. TorchScript's profiling executor runs a process's
    first call with eager autograd and every later one (any shape) with its autodiff, whose gradients round
    differently: after this call every step of a job takes the autodiff path, so a job resumed in a new process
    continues exactly as the uninterrupted one (upstream's own first step, in a fresh process, takes the eager
    path for its first WaveNet layer; the golden steps of test_s2_train do not settle)."""
    a = torch.zeros(1, 2, 1, requires_grad=True)
    _fused_add_tanh_sigmoid_multiply(a, torch.zeros(1, 2, 1), torch.IntTensor([1])).sum().backward()


def wavenet(wn: WN, x: Tensor, x_mask: Tensor, g: Tensor) -> Tensor:
    """modules.WN.forward (dropout 0) through upstream's scripted gate."""
    return wn(x, x_mask, g, gate=lambda a, b, h: _fused_add_tanh_sigmoid_multiply(a, b, torch.IntTensor([h])))


def flow_forward(model: SynthesizerTrn, x: Tensor, x_mask: Tensor, g: Tensor) -> Tensor:
    """ResidualCouplingBlock.forward(reverse=False): each mean-only coupling then a channel flip."""
    for layer in model.flow.flows:
        if not hasattr(layer, "enc"):                                   # Flip
            x = torch.flip(x, [1])
            continue
        x0, x1 = torch.split(x, [layer.half] * 2, 1)
        h = wavenet(layer.enc, layer.pre(x0) * x_mask, x_mask, g)
        m = layer.post(h) * x_mask
        x1 = m + x1 * torch.exp(torch.zeros_like(m)) * x_mask
        x = torch.cat([x0, x1], 1)
    return x


def slice_segments(x: Tensor, starts: Tensor, size: int) -> Tensor:
    ret = torch.zeros_like(x[:, :, :size])
    for i in range(x.size(0)):
        start = int(starts[i])
        ret[i] = x[i, :, start:start + size]
    return ret


@dataclass
class S2Forward:
    y_hat: Tensor
    ids_slice: Tensor
    z_mask: Tensor
    z_p: Tensor
    m_p: Tensor
    logs_p: Tensor
    logs_q: Tensor


def generator_forward(model: SynthesizerTrn, batch: S2Batch, segment_frames: int, p: float) -> S2Forward:
    """models.SynthesizerTrn.forward (training, freeze_quantizer)."""
    train = model.training
    y, y_lengths = batch.spec, batch.spec_lengths
    y_mask = length_mask(y_lengths, y.size(2), y.dtype)
    ge = style(model, y, y_mask, train)
    ge_text = ge
    if model.cfg.is_v2pro:
        if batch.sv_emb is None:
            raise ValueError("a v2Pro SoVITS model trains on speaker embeddings (S2Batch.sv_emb)")
        ge = model.prelu(ge + model.sv_emb(batch.sv_emb).unsqueeze(-1))
        ge_text = model.ge_to512(ge.transpose(2, 1)).transpose(2, 1)
    # frozen quantizer (outside autocast upstream): the codebook lookup carries no gradient
    with torch.no_grad(), torch.autocast(batch.ssl.device.type, enabled=False):
        quantized = model.quantizer(model.quantizer.encode(model.ssl_proj(batch.ssl)))
    quantized = F.interpolate(quantized, size=int(quantized.shape[-1] * 2), mode="nearest")
    m_p, logs_p, _ = text_encoder(model.enc_p, quantized, y_lengths, batch.text, batch.text_lengths, ge_text, p, train)
    z, _, logs_q = model.enc_q(y, y_mask, ge)
    z_p = flow_forward(model, z, y_mask, ge)
    starts = (torch.rand([z.size(0)]).to(device=z.device) * (y_lengths - segment_frames + 1)).to(dtype=torch.long)
    o = model.dec(slice_segments(z, starts, segment_frames), ge)
    return S2Forward(o, starts, y_mask, z_p, m_p, logs_p, logs_q)


# ---- mel, losses ------------------------------------------------------------------------------------------


def mel_basis(cfg: SoVITSConfig, hp: S2Hparams, dtype: torch.dtype, device: torch.device) -> Tensor:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) (float32, then the spectrogram's dtype, as upstream)."""
    return torch.from_numpy(mel_filters(cfg.sampling_rate, cfg.filter_length, hp.n_mel_channels, hp.mel_fmin,
                                        hp.mel_fmax)).to(dtype=dtype, device=device)


def spec_to_mel(spec: Tensor, basis: Tensor) -> Tensor:
    """mel_processing.spec_to_mel_torch: log(clamp(basis @ spec, 1e-5))."""
    return torch.log(torch.clamp(torch.matmul(basis, spec), min=1e-5))


def mel_spectrogram(wav: Tensor, basis: Tensor, cfg: SoVITSConfig) -> Tensor:
    """mel_processing.mel_spectrogram_torch (center False; the Hann window made in float32 then cast)."""
    n_fft, hop = cfg.filter_length, cfg.hop_length
    window = torch.hann_window(cfg.win_length).to(dtype=wav.dtype, device=wav.device)
    pad = int((n_fft - hop) / 2)
    y = F.pad(wav.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.view_as_real(torch.stft(y, n_fft, hop_length=hop, win_length=cfg.win_length, window=window,
                                         center=False, pad_mode="reflect", normalized=False, onesided=True,
                                         return_complex=True))
    spec = torch.sqrt(spec.pow(2).sum(-1) + 1e-8)
    return spec_to_mel(spec, basis.to(wav.dtype))


def _f32(x: Tensor) -> Tensor:
    """upstream's `.float()` in the losses: float32 at least (a float64 run stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def discriminator_loss(real: Sequence[Tensor], fake: Sequence[Tensor]) -> Tensor:
    loss: Tensor | float = 0
    for dr, dg in zip(real, fake):
        loss = loss + (torch.mean((1 - _f32(dr)) ** 2) + torch.mean(_f32(dg) ** 2))
    return loss


def generator_loss(fake: Sequence[Tensor]) -> Tensor:
    loss: Tensor | float = 0
    for dg in fake:
        loss = loss + torch.mean((1 - _f32(dg)) ** 2)
    return loss


def feature_loss(fmap_r: Sequence[Sequence[Tensor]], fmap_g: Sequence[Sequence[Tensor]]) -> Tensor:
    loss: Tensor | float = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            loss = loss + torch.mean(torch.abs(_f32(rl).detach() - _f32(gl)))
    return loss * 2


def kl_loss(z_p: Tensor, logs_q: Tensor, m_p: Tensor, logs_p: Tensor, z_mask: Tensor) -> Tensor:
    z_p, logs_q, m_p, logs_p, z_mask = (_f32(t) for t in (z_p, logs_q, m_p, logs_p, z_mask))
    kl = logs_p - logs_q - 0.5
    kl = kl + 0.5 * ((z_p - m_p) ** 2) * torch.exp(-2.0 * logs_p)
    return torch.sum(kl * z_mask) / torch.sum(z_mask)


# ---- optimizers and the step --------------------------------------------------------------------------------


def make_optimizers(net_g: SynthesizerTrn, net_d: MultiPeriodDiscriminator, hp: S2Hparams, host: bool = False,
                    host_context: Callable[[], AbstractContextManager[Any]] = nullcontext
                    ) -> tuple[torch.optim.AdamW | HostAdamW, torch.optim.AdamW | HostAdamW]:
    """s2_train.run: AdamW for G in four groups (the text embedding, phone encoder and MRTE at the low
    rate), AdamW for D, both with upstream's betas and eps (weight decay: torch's default); with `host`,
    the same groups in the host-side AdamW (preset lowest), its host work under `host_context`
    (`DeviceService.host`: not counted against a simulated device)."""
    low = [net_g.enc_p.text_embedding, net_g.enc_p.encoder_text, net_g.enc_p.mrte]
    low_ids = {id(p) for m in low for p in m.parameters()}
    base = [p for p in net_g.parameters() if id(p) not in low_ids and p.requires_grad]
    lr = hp.learning_rate
    groups = [{"params": base, "lr": lr}] + [{"params": list(m.parameters()), "lr": lr * hp.text_low_lr_rate}
                                              for m in low]
    d_params = [p for p in net_d.parameters() if p.requires_grad]
    if host:
        return (HostAdamW(groups, lr, betas=hp.betas, eps=hp.eps, host_context=host_context),
                HostAdamW(d_params, lr, betas=hp.betas, eps=hp.eps, host_context=host_context))
    return (torch.optim.AdamW(groups, lr, betas=hp.betas, eps=hp.eps),
            torch.optim.AdamW(d_params, lr, betas=hp.betas, eps=hp.eps))


def make_schedulers(optimizers: Iterable[torch.optim.Optimizer], hp: S2Hparams
                    ) -> list[torch.optim.lr_scheduler.ExponentialLR]:
    """ExponentialLR(gamma=lr_decay), stepped once before the first epoch as s2_train.run does at epoch 1."""
    out = []
    for opt in optimizers:
        inner = opt.optimizer if isinstance(opt, HostAdamW) else opt   # the host AdamW's rates live in its inner one
        sched = torch.optim.lr_scheduler.ExponentialLR(inner, gamma=hp.lr_decay, last_epoch=-1)
        sched.step()
        out.append(sched)
    return out


@dataclass
class S2Losses:
    disc: float
    gen: float
    fm: float
    mel: float
    kl_ssl: float
    kl: float

    def as_list(self) -> list[float]:
        return [self.disc, self.gen, self.fm, self.mel, self.kl_ssl, self.kl]


def train_step(net_g: SynthesizerTrn, net_d: MultiPeriodDiscriminator, optim_g: torch.optim.Optimizer,
               optim_d: torch.optim.Optimizer, batch: S2Batch, hp: S2Hparams,
               autocast_dtype: torch.dtype | None = None) -> S2Losses:
    """One batch of s2_train.train_and_evaluate: D step, then G step against the updated D."""
    cfg = net_g.cfg
    frames = hp.segment_size // cfg.hop_length
    device = batch.spec.device
    with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        out = generator_forward(net_g, batch, frames, hp.p_dropout)
        basis = mel_basis(cfg, hp, batch.spec.dtype, device)
        y_mel = slice_segments(spec_to_mel(batch.spec, basis), out.ids_slice, frames)
        y_hat_mel = mel_spectrogram(out.y_hat.squeeze(1), basis, cfg)
        y = slice_segments(batch.wav, out.ids_slice * cfg.hop_length, hp.segment_size)
        y_d_r, y_d_g, _, _ = net_d(y, out.y_hat.detach())
        with torch.autocast(device.type, enabled=False):
            loss_disc = discriminator_loss(y_d_r, y_d_g)
    optim_d.zero_grad()
    loss_disc.backward()
    optim_d.step()
    with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        y_d_r, y_d_g, fmap_r, fmap_g = net_d(y, out.y_hat)
        with torch.autocast(device.type, enabled=False):
            loss_mel = F.l1_loss(y_mel, y_hat_mel) * hp.c_mel
            loss_kl = kl_loss(out.z_p, out.logs_q, out.m_p, out.logs_p, out.z_mask) * hp.c_kl
            loss_fm = feature_loss(fmap_r, fmap_g)
            loss_gen = generator_loss(y_d_g)
            loss_gen_all = loss_gen + loss_fm + loss_mel + loss_kl     # + kl_ssl (0: the quantizer is frozen)
    optim_g.zero_grad()
    loss_gen_all.backward()
    optim_g.step()
    return S2Losses(float(loss_disc), float(loss_gen), float(loss_fm), float(loss_mel), 0.0, float(loss_kl))

"""Three model shapes the runtime must stream exactly: a KV-cached decoder (sequence), a DiT-like
block stack called several times (oneshot) and a conv vocoder with weight-norm (oneshot).
Every unit holds at least 1 MB so the default unit rule applies."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations, weight_norm


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cache=None, causal=False):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal and t > 1)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.RMSNorm(dim)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, cache):
        x = x + self.attn(self.norm1(x), cache, causal=True)
        return x + self.down(F.silu(self.up(self.norm2(x))))


class TinyDecoder(nn.Module):
    """Decoder-only LM with a tied head and a KV cache."""

    def __init__(self, vocab: int = 256, dim: int = 256, heads: int = 4, layers: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, ids, caches):
        x = self.embed(ids)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache)
        return self.head(self.norm(x))


@torch.no_grad()
def generate(model: TinyDecoder, prompt: torch.Tensor, steps: int, generator: torch.Generator | None = None):
    caches = [{} for _ in model.layers]
    ids, out = prompt, []
    for _ in range(steps):
        logits = model(ids, caches)[:, -1].float()
        if generator is None:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        out.append(nxt)
        ids = nxt
    return torch.cat(out, dim=1)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ada = nn.Linear(dim, 4 * dim)

    def forward(self, x, c):
        s1, b1, s2, b2 = self.ada(c).unsqueeze(1).chunk(4, dim=-1)
        x = x + self.attn(self.norm1(x) * (1 + s1) + b1)
        return x + self.mlp(self.norm2(x) * (1 + s2) + b2)


class TinyDiT(nn.Module):
    """A flow-matching style stack: called once per step with a time embedding."""

    def __init__(self, channels: int = 32, dim: int = 256, heads: int = 4, depth: int = 4) -> None:
        super().__init__()
        self.proj_in = nn.Linear(channels, dim)
        self.time = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, heads) for _ in range(depth))
        self.proj_out = nn.Linear(dim, channels)
        self.register_buffer("scale", torch.ones(channels))

    def forward(self, x, t):
        c = self.time(t.view(-1, 1))
        h = self.proj_in(x)
        for block in self.blocks:
            h = block(h, c)
        return self.proj_out(h) * self.scale


@torch.no_grad()
def sample(model: TinyDiT, noise: torch.Tensor, steps: int = 4):
    x = noise
    for i in range(steps):
        t = torch.full((x.shape[0],), i / steps, device=x.device, dtype=x.dtype)
        x = x + model(x, t) / steps
    return x


class ResBlock(nn.Module):
    def __init__(self, ch: int, legacy: bool) -> None:
        super().__init__()
        wn = weight_norm if legacy else parametrizations.weight_norm
        self.convs = nn.ModuleList(wn(nn.Conv1d(ch, ch, 7, padding=3 * d, dilation=d)) for d in (1, 3))

    def forward(self, x):
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, 0.1))
        return x


class UpStage(nn.Module):
    def __init__(self, cin: int, cout: int, legacy: bool) -> None:
        super().__init__()
        wn = weight_norm if legacy else parametrizations.weight_norm
        self.up = wn(nn.ConvTranspose1d(cin, cout, 8, stride=4, padding=2))
        self.res = ResBlock(cout, legacy)

    def forward(self, x):
        return self.res(self.up(F.leaky_relu(x, 0.1)))


class TinyVocoder(nn.Module):
    """HiFi-GAN shaped: conv in, upsampling stages with weight-norm resblocks, conv out."""

    def __init__(self, mels: int = 32, ch: int = 256, legacy: bool = False) -> None:
        super().__init__()
        wn = weight_norm if legacy else parametrizations.weight_norm
        self.conv_in = wn(nn.Conv1d(mels, ch, 7, padding=3))
        self.stages = nn.Sequential(UpStage(ch, ch, legacy), UpStage(ch, ch // 2, legacy),
                                    UpStage(ch // 2, ch // 2, legacy), UpStage(ch // 2, ch // 2, legacy))
        self.conv_out = nn.Conv1d(ch // 2, 1, 7, padding=3)

    def forward(self, mel):
        return torch.tanh(self.conv_out(self.stages(self.conv_in(mel))))


class TextEncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ff: int) -> None:
        super().__init__()
        self.attn = Attention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Conv1d(dim, ff, 1), nn.ReLU(), nn.Conv1d(ff, dim, 1))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ffn(x.transpose(1, 2)).transpose(1, 2))


class Coupling(nn.Module):
    """A VITS residual coupling layer: a WaveNet-style stack predicts a shift for half the channels."""

    def __init__(self, ch: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.pre = nn.Conv1d(ch // 2, hidden, 1)
        self.in_layers = nn.ModuleList(nn.Conv1d(hidden, 2 * hidden, 5, padding=2) for _ in range(layers))
        self.res_skip = nn.ModuleList(nn.Conv1d(hidden, hidden, 1) for _ in range(layers))
        self.post = nn.Conv1d(hidden, ch // 2, 1)

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        h = self.pre(a)
        for conv, res in zip(self.in_layers, self.res_skip):
            t, s = conv(h).chunk(2, dim=1)
            h = h + res(torch.tanh(t) * torch.sigmoid(s))
        return torch.cat([a, b - self.post(h)], dim=1).flip(1)  # inverse direction, then VITS' Flip


class HiFiResBlock(nn.Module):
    def __init__(self, ch: int, kernel: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(ch, ch, kernel, padding=d * (kernel - 1) // 2, dilation=d)
                                    for d in (1, 3, 5))
        self.convs2 = nn.ModuleList(nn.Conv1d(ch, ch, kernel, padding=(kernel - 1) // 2) for _ in range(3))

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, 0.1)), 0.1))
        return x


class HiFiGan(nn.Module):
    def __init__(self, ch: int, up: int) -> None:
        super().__init__()
        self.conv_pre = nn.Conv1d(ch, up, 7, padding=3)
        self.ups = nn.ModuleList([nn.ConvTranspose1d(up, up // 2, 8, stride=4, padding=2),
                                  nn.ConvTranspose1d(up // 2, up // 4, 8, stride=4, padding=2)])
        self.resblocks = nn.ModuleList(HiFiResBlock(up // 2 ** (i + 1), k) for i in range(2) for k in (3, 5))
        self.conv_post = nn.Conv1d(up // 4, 1, 7, padding=3)

    def forward(self, z):
        x = self.conv_pre(z)
        for i, upsample in enumerate(self.ups):
            x = upsample(F.leaky_relu(x, 0.1))
            x = (self.resblocks[2 * i](x) + self.resblocks[2 * i + 1](x)) / 2
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


class TinyVits(nn.Module):
    """VITS shaped (text encoder, flows, HiFi-GAN decoder with resblocks), at a size where most children
    of its outermost lists hold under 1 MB: the outermost-list rule leaves 60 % of the weights fixed
    (transformers' VitsModel at the mms-tts-eng config in bfloat16: 28.5 %, its WaveNet layers under 1 MB)."""

    def __init__(self, vocab: int = 64, dim: int = 128, ch: int = 64, up: int = 192) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.encoder = nn.ModuleList(TextEncoderLayer(dim, 2, 2 * dim) for _ in range(6))
        self.proj = nn.Conv1d(dim, 2 * ch, 1)
        self.flows = nn.ModuleList(Coupling(ch, 96, 3) for _ in range(2))
        self.decoder = HiFiGan(ch, up)

    def forward(self, ids, noise):
        x = self.embed(ids)
        for layer in self.encoder:
            x = layer(x)
        mean, logs = self.proj(x.transpose(1, 2)).repeat_interleave(4, dim=2).chunk(2, dim=1)
        z = mean + noise * torch.exp(logs) * 0.667
        for flow in reversed(self.flows):
            z = flow(z)
        return self.decoder(z)

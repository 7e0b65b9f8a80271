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

"""IndexTTS 2's GPT ("UnifiedVoice"): conformer + perceiver conditioners and a GPT-2 over [cond][text][mel].

    cond  = perceiver(conformer(w2v-bert features of the speaker))            (B, 32, D) speaker latents
    emo   = emo_layer(emovec_layer(emo_perceiver(emo_conformer(features))))   (B, D) emotion vector
    prompt = [cond + emo, speed_emb(1), speed_emb(0)] [text_emb + text_pos]    then start_mel, codes ...
    codes  = beam sampling over mel_head(final_norm(ln_f(gpt(prompt))))
    latent = the same GPT run once over [prompt][start, codes, stop]           (B, T, D) for s2mel

Upstream builds Hugging Face's GPT2Model with its position table replaced by zeros and `wte` unused;
here the GPT-2 blocks are plain modules (GPT-2's Conv1D layers: `addmm` with a (in, out) weight) and
positions are the two learned tables (`mel_pos_embedding`, `text_pos_embedding`), modules called
normally. The state-dict names are upstream's, so `gpt.pth` loads as it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache
from ..blocks.conformer import FeedForward, RelPositionAttention


@dataclass(frozen=True)
class ConformerConfig:
    output_size: int
    linear_units: int
    attention_heads: int
    num_blocks: int
    perceiver_mult: int
    input_layer: str = "conv2d2"


@dataclass(frozen=True)
class GPTConfig:
    model_dim: int
    heads: int
    layers: int
    max_mel_tokens: int
    max_text_tokens: int
    number_text_tokens: int
    number_mel_codes: int
    start_mel_token: int
    stop_mel_token: int
    start_text_token: int
    stop_text_token: int
    condition: ConformerConfig
    emo_condition: ConformerConfig
    cond_num: int = 32          # speaker latents (upstream's condition_num_latent default)
    semantic_dim: int = 1024    # w2v-bert-2.0 hidden size, fixed upstream


# ---------------------------------------------------------------------------------------------
# Conformer (WeNet, "rel_pos" without the relative shift, conv2d2 subsampling)

def sinusoid_table(length: int, dim: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """WeNet's PositionalEncoding table [1, length, dim] (sin on even, cos on odd channels), computed in
    `dtype` (float32 as upstream; float64 for a float64 run)."""
    pe = torch.zeros(length, dim, dtype=dtype)
    position = torch.arange(0, length).unsqueeze(1).to(dtype)
    div_term = torch.exp(torch.arange(0, dim, 2).to(dtype) * -(math.log(10000.0) / dim))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


class RelPositionalEncoding(nn.Module):
    """x * sqrt(d), and the first T rows of the sinusoid table as the position embedding."""

    def __init__(self, dim: int, max_len: int = 5000) -> None:
        super().__init__()
        self.xscale = math.sqrt(dim)
        self.register_buffer("pe", sinusoid_table(max_len, dim), persistent=False)
        self.pe64: Tensor | None = None     # the table computed in float64, made for a float64 run

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if x.size(1) >= self.pe.size(1):
            raise ValueError(f"conditioning audio too long: {x.size(1)} frames after subsampling, "
                             f"the position table holds {self.pe.size(1) - 1}")
        pe = self.pe
        if x.dtype == torch.float64:    # not float32's values: its sin/cos/exp differ in the last bit between CPUs
            if self.pe64 is None or self.pe64.device != x.device:
                self.pe64 = sinusoid_table(self.pe.size(1), self.pe.size(2), torch.float64).to(x.device)
            pe = self.pe64
        return x * self.xscale, pe[:, :x.size(1)].to(x.dtype)


class Conv2dSubsampling2(nn.Module):
    """Conv2d(1, d, 3, stride 2) + ReLU over (time, feature), then Linear: halves the frames."""

    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(odim * ((idim - 1) // 2), odim))
        self.pos_enc = RelPositionalEncoding(odim)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        x, pos = self.pos_enc(x)
        return x, pos, mask[:, :, 2::2]


class ConvolutionModule(nn.Module):
    """Pointwise conv + GLU, depthwise conv 15, LayerNorm + SiLU, pointwise conv; padding zeroed."""

    def __init__(self, dim: int, kernel: int = 15) -> None:
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise_conv = nn.Conv1d(dim, dim, kernel, padding=(kernel - 1) // 2, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pointwise_conv2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x: Tensor, mask_pad: Tensor) -> Tensor:
        x = x.transpose(1, 2).masked_fill(~mask_pad, 0.0)
        x = self.depthwise_conv(F.glu(self.pointwise_conv1(x), dim=1))
        x = F.silu(self.norm(x.transpose(1, 2))).transpose(1, 2)
        x = self.pointwise_conv2(x).masked_fill(~mask_pad, 0.0)
        return x.transpose(1, 2)


class ConformerLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(heads, dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.conv_module = ConvolutionModule(dim)
        self.norm_ff = nn.LayerNorm(dim, eps=1e-5)
        self.norm_mha = nn.LayerNorm(dim, eps=1e-5)
        self.norm_conv = nn.LayerNorm(dim, eps=1e-5)
        self.norm_final = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: Tensor, mask: Tensor, pos: Tensor) -> Tensor:
        x = x + self.self_attn(self.norm_mha(x), pos, mask)
        x = x + self.conv_module(self.norm_conv(x), mask)
        x = x + self.feed_forward(self.norm_ff(x))
        return self.norm_final(x)


class ConformerEncoder(nn.Module):
    def __init__(self, input_size: int, c: ConformerConfig) -> None:
        super().__init__()
        if c.input_layer != "conv2d2":
            raise ValueError(f"conformer input_layer {c.input_layer!r}: only 'conv2d2' is used by IndexTTS 2")
        self.embed = Conv2dSubsampling2(input_size, c.output_size)
        self.encoders = nn.ModuleList(ConformerLayer(c.output_size, c.attention_heads, c.linear_units)
                                      for _ in range(c.num_blocks))
        self.after_norm = nn.LayerNorm(c.output_size, eps=1e-5)

    def forward(self, xs: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """xs (B, T, input) -> (B, T', d) and the valid mask (B, 1, T')."""
        t = xs.size(1)
        masks = (torch.arange(t, device=xs.device)[None] < lengths[:, None]).unsqueeze(1)
        xs, pos, masks = self.embed(xs, masks)
        for layer in self.encoders:
            xs = layer(xs, masks, pos)
        return self.after_norm(xs), masks


# ---------------------------------------------------------------------------------------------
# Perceiver resampler (lucidrains style: latents attend to [latents; context])

class PerceiverAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int = 64) -> None:
        super().__init__()
        self.heads, self.scale = heads, dim_head ** -0.5
        self.to_q = nn.Linear(dim, dim_head * heads, bias=False)
        self.to_kv = nn.Linear(dim, dim_head * heads * 2, bias=False)
        self.to_out = nn.Linear(dim_head * heads, dim, bias=False)

    def forward(self, x: Tensor, context: Tensor, mask: Tensor) -> Tensor:
        context = torch.cat((x, context), dim=-2)
        q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1))
        b = x.size(0)
        q, k, v = (t.view(b, t.size(1), self.heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        sim = sim.masked_fill(~mask[:, None, None, :], -torch.finfo(sim.dtype).max)
        out = torch.einsum("b h i j, b h j d -> b h i d", sim.softmax(dim=-1), v)
        return self.to_out(out.permute(0, 2, 1, 3).reshape(b, x.size(1), -1))


class GEGLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        x, gate = x.chunk(2, dim=-1)
        return F.gelu(gate) * x


class ScaledL2Norm(nn.Module):
    """lucidrains' "RMSNorm": l2-normalise, times sqrt(d) and a learned gain."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class PerceiverResampler(nn.Module):
    def __init__(self, dim: int, dim_context: int, latents: int, heads: int, ff_mult: int, depth: int = 2) -> None:
        super().__init__()
        self.proj_context = nn.Linear(dim_context, dim) if dim_context != dim else nn.Identity()
        self.latents = nn.Parameter(torch.empty(latents, dim))
        inner = int(dim * ff_mult * 2 / 3)
        self.layers = nn.ModuleList(
            nn.ModuleList([PerceiverAttention(dim, heads),
                           nn.Sequential(nn.Linear(dim, inner * 2), GEGLU(), nn.Linear(inner, dim))])
            for _ in range(depth))
        self.norm = ScaledL2Norm(dim)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.proj_context(x)
        latents = self.latents.unsqueeze(0).expand(x.size(0), -1, -1)
        for attn, ff in self.layers:
            latents = attn(latents, x, mask) + latents
            latents = ff(latents) + latents
        return self.norm(latents)


# ---------------------------------------------------------------------------------------------
# GPT-2

class Conv1D(nn.Module):
    """GPT-2's transposed linear: y = bias + x @ weight, weight (in, out)."""

    STREAMABLE = True   # reads only its own weights, in its own forward: the runtime may stream them

    def __init__(self, nx: int, nf: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.empty(nf))

    def forward(self, x: Tensor) -> Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return out.view(*x.shape[:-1], self.weight.size(1))


class GPT2Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.c_attn = Conv1D(dim, 3 * dim)
        self.c_proj = Conv1D(dim, dim)

    def forward(self, x: Tensor, cache: KVCache | None, layer: int) -> Tensor:
        b, t, d = x.shape
        q, k, v = (s.view(b, t, self.heads, self.head_dim).transpose(1, 2) for s in self.c_attn(x).split(d, dim=2))
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if t > 1 and k.size(2) != t:
            mask = torch.ones(t, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - t)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d).contiguous())


class NewGELU(nn.Module):
    """GPT-2's tanh GELU, written as Hugging Face's NewGELUActivation (bit-identical to it)."""

    def forward(self, x: Tensor) -> Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(dim, 4 * dim)
        self.act = NewGELU()
        self.c_proj = Conv1D(4 * dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = GPT2Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = GPT2MLP(dim)

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        x = self.attn(self.ln_1(x), cache, layer) + x
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2's blocks and final norm over given embeddings (no token or position tables: upstream's
    `wpe` returns zeros and `wte` is not used on this path)."""

    def __init__(self, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.h = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        for i, block in enumerate(self.h):
            x = block(x, cache, i)
        return self.ln_f(x)


class LearnedPositionEmbeddings(nn.Module):
    def __init__(self, seq_len: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(seq_len, dim)

    def forward(self, positions: Tensor) -> Tensor:
        return self.emb(positions)


class UnifiedVoice(nn.Module):
    """Upstream's UnifiedVoice (IndexTTS 2, conformer_perceiver conditioning), inference parts."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.config = c
        d = c.model_dim
        self.conditioning_encoder = ConformerEncoder(c.semantic_dim, c.condition)
        self.perceiver_encoder = PerceiverResampler(d, c.condition.output_size, c.cond_num,
                                                    c.condition.attention_heads, c.condition.perceiver_mult)
        self.speed_emb = nn.Embedding(2, d)
        self.emo_conditioning_encoder = ConformerEncoder(c.semantic_dim, c.emo_condition)
        self.emo_perceiver_encoder = PerceiverResampler(c.semantic_dim, c.emo_condition.output_size, 1,
                                                        c.emo_condition.attention_heads,
                                                        c.emo_condition.perceiver_mult)
        self.text_embedding = nn.Embedding(c.number_text_tokens + 1, d)
        self.emo_layer = nn.Linear(d, d)
        self.emovec_layer = nn.Linear(c.semantic_dim, d)
        self.mel_embedding = nn.Embedding(c.number_mel_codes, d)
        self.gpt = GPT2(d, c.heads, c.layers)
        self.mel_pos_embedding = LearnedPositionEmbeddings(c.max_mel_tokens + 2 + 1, d)
        self.text_pos_embedding = LearnedPositionEmbeddings(c.max_text_tokens + 2, d)
        self.final_norm = nn.LayerNorm(d)
        self.text_head = nn.Linear(d, c.number_text_tokens + 1)
        self.mel_head = nn.Linear(d, c.number_mel_codes)

    # conditioning ----------------------------------------------------------------------------
    def speaker_latents(self, feats: Tensor, lengths: Tensor) -> Tensor:
        """w2v-bert features (B, T, 1024) -> (B, cond_num, D)."""
        x, mask = self.conditioning_encoder(feats, lengths)
        mask = F.pad(mask.squeeze(1), (self.config.cond_num, 0), value=True)
        return self.perceiver_encoder(x, mask)

    def emotion_vector(self, feats: Tensor, lengths: Tensor) -> Tensor:
        """w2v-bert features (B, T, 1024) -> (B, D) (upstream's get_emovec)."""
        x, mask = self.emo_conditioning_encoder(feats, lengths)
        mask = F.pad(mask.squeeze(1), (1, 0), value=True)
        return self.emo_layer(self.emovec_layer(self.emo_perceiver_encoder(x, mask).squeeze(1)))

    def merge_emotion(self, spk_feats: Tensor, spk_lengths: Tensor, emo_feats: Tensor, emo_lengths: Tensor,
                      alpha: float = 1.0) -> Tensor:
        """Upstream's merge_emovec: the speaker's own emotion moved `alpha` of the way to the reference's."""
        emo = self.emotion_vector(emo_feats, emo_lengths)
        base = self.emotion_vector(spk_feats, spk_lengths)
        return base + alpha * (emo - base)

    def conditioning(self, latents: Tensor, emovec: Tensor) -> Tensor:
        """[speaker latents + emotion, speed_emb(1), speed_emb(0)]: (B, cond_num + 2, D)."""
        b = latents.size(0)
        ids = torch.zeros(b, dtype=torch.long, device=latents.device)
        return torch.cat((latents + emovec.unsqueeze(1), self.speed_emb(ids + 1).unsqueeze(1),
                          self.speed_emb(ids).unsqueeze(1)), 1)

    # embeddings ------------------------------------------------------------------------------
    def text_embeds(self, text: Tensor) -> Tensor:
        """[start] text [stop] embedded with positions: (1, L + 2, D) for a 1-D id tensor."""
        c = self.config
        text = F.pad(F.pad(text, (1, 0), value=c.start_text_token), (0, 1), value=c.stop_text_token)
        pos = torch.arange(text.size(-1), device=text.device)
        return (self.text_embedding(text) + self.text_pos_embedding(pos)).unsqueeze(0)

    def mel_step_embeds(self, codes: Tensor, position: int) -> Tensor:
        """One mel id per row at a decode position: (rows, 1, D)."""
        pos = torch.full((1,), position, dtype=torch.long, device=codes.device)
        return (self.mel_embedding(codes) + self.mel_pos_embedding(pos)).unsqueeze(1)

    def prompt(self, conds: Tensor, text: Tensor) -> Tensor:
        """Upstream's prepare_gpt_inputs for one text: start/stop ids inside the text are dropped."""
        c = self.config
        text = text[(text != c.stop_text_token) & (text != c.start_text_token)]
        return torch.cat([conds, self.text_embeds(text)], dim=1)

    # decoding --------------------------------------------------------------------------------
    def logits(self, embeds: Tensor, cache: KVCache | None) -> Tensor:
        """Next-token logits of the last position: (rows, number_mel_codes)."""
        h = self.gpt(embeds, cache)[:, -1]
        return self.mel_head(self.final_norm(h))

    def latent(self, conds: Tensor, text: Tensor, codes: Tensor) -> Tensor:
        """Upstream's forward (return_latent) for 1-D codes: GPT states of the codes, (1, T, D)."""
        c = self.config
        text_emb = self.text_embeds(text)
        mel = F.pad(F.pad(codes, (1, 0), value=c.start_mel_token), (0, 1), value=c.stop_mel_token)
        pos = torch.arange(mel.size(-1), device=mel.device)
        mel_emb = (self.mel_embedding(mel) + self.mel_pos_embedding(pos)).unsqueeze(0)
        h = self.gpt(torch.cat([conds, text_emb, mel_emb], dim=1))
        enc = self.final_norm(h[:, conds.size(1):])
        return enc[:, -mel_emb.size(1):][:, :-2]

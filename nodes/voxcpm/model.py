"""VoxCPM 2 in plain torch: MiniCPM-4 base LM, residual LM, LocEnc, LocDiT, FSQ, stop head.

Parameter names follow the upstream `model.safetensors` exactly (`base_lm.layers.0.self_attn.q_proj.weight`,
`feat_decoder.estimator.time_mlp.linear_1.weight`, ...), so the file loads unchanged. The AudioVAE
(`audiovae.pth`) is its own module (audiovae.py).

    VoxCPM2
      base_lm              MiniCPM-4: text embedding, 28 GQA layers with LongRoPE, norm (text-semantic LM)
      residual_lm          MiniCPM-4 without embedding and (VoxCPM 2) without RoPE (residual acoustic LM)
      feat_encoder         LocEnc: a latent patch [P, D] -> one vector (bidirectional MiniCPM over CLS + patch)
      feat_decoder         UnifiedCFM holding `estimator`, the LocDiT velocity field of the flow-matching head
      fsq_layer            scalar quantisation bottleneck of the base LM's audio positions
      enc_to_lm_proj, lm_to_dit_proj, res_to_dit_proj, fusion_concat_proj, stop_proj, stop_head

Every weight is read inside the forward of the module that owns it (the runtime's hooks see it):
the decode loop calls the LMs as modules, one position at a time, with a KV cache from
`runtime.lm.cache` sized by the request instead of upstream's preallocated `forward_step` cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache
from ..blocks.transformer import Attention, RMSNorm, SwiGLU, apply_rotary, rotary_embedding

# ---- configuration ----------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """A config.json field is missing or has the wrong type (the message names the field)."""


def field_of(d: dict[str, Any], key: str, kind: type, where: str, default: Any = ...) -> Any:
    """d[key] as `kind`, or `default`; a clear error naming `where.key` otherwise."""
    if key not in d or d[key] is None:
        if default is ...:
            raise ConfigError(f"{where}.{key}: missing")
        return default
    value = d[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}.{key}: expected {kind.__name__}, got {value!r}")
    return value


@dataclass(frozen=True)
class LMConfig:
    """One MiniCPM-4 stack (base LM, residual LM, LocEnc or LocDiT: upstream copies lm_config and overrides)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    kv_channels: int | None
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    vocab_size: int
    use_mup: bool
    scale_emb: float
    scale_depth: float
    no_rope: bool = False

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "lm_config") -> LMConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected an object")
        rope = d.get("rope_scaling")
        if rope is not None and not isinstance(rope, dict):
            raise ConfigError(f"{where}.rope_scaling: expected an object")
        c = cls(field_of(d, "hidden_size", int, where), field_of(d, "intermediate_size", int, where),
                field_of(d, "num_hidden_layers", int, where), field_of(d, "num_attention_heads", int, where),
                field_of(d, "num_key_value_heads", int, where), field_of(d, "kv_channels", int, where, None),
                field_of(d, "rms_norm_eps", float, where), field_of(d, "rope_theta", float, where),
                rope, field_of(d, "max_position_embeddings", int, where), field_of(d, "vocab_size", int, where),
                field_of(d, "use_mup", bool, where, True), field_of(d, "scale_emb", float, where),
                field_of(d, "scale_depth", float, where), field_of(d, "no_rope", bool, where, False))
        try:    # refuse an unknown or malformed rope_scaling now, naming the field
            if not c.no_rope:
                rotary_embedding(rope, c.head_dim, c.rope_theta, c.max_position_embeddings)
        except ValueError as e:
            raise ConfigError(f"{where}.{e}") from None
        if c.num_attention_heads % c.num_key_value_heads:
            raise ConfigError(f"{where}.num_key_value_heads: {c.num_key_value_heads} does not divide "
                              f"num_attention_heads {c.num_attention_heads}")
        return c

    def local(self, d: dict[str, Any], where: str) -> LMConfig:
        """LocEnc / LocDiT: this config with hidden_dim, ffn_dim, num_heads, num_layers, kv_channels of `d`."""
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected an object")
        return replace(self, hidden_size=field_of(d, "hidden_dim", int, where, 1024),
                       intermediate_size=field_of(d, "ffn_dim", int, where, 4096),
                       num_attention_heads=field_of(d, "num_heads", int, where, 16),
                       num_hidden_layers=field_of(d, "num_layers", int, where, 4),
                       kv_channels=field_of(d, "kv_channels", int, where, None), vocab_size=0)


@dataclass(frozen=True)
class CFMConfig:
    sigma_min: float = 1e-6
    solver: str = "euler"
    inference_cfg_rate: float = 1.0
    mean_mode: bool = False


@dataclass(frozen=True)
class VoxCPMConfig:
    lm: LMConfig
    residual: LMConfig
    encoder: LMConfig
    dit: LMConfig
    cfm: CFMConfig
    patch_size: int = 4
    feat_dim: int = 64
    scalar_quantization_latent_dim: int = 512
    scalar_quantization_scale: int = 9
    max_length: int = 8192
    dtype: str = "bfloat16"
    audio_vae: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VoxCPMConfig:
        if not isinstance(d, dict):
            raise ConfigError("config: expected a JSON object")
        if "lm_config" not in d:
            raise ConfigError("lm_config: missing")
        lm = LMConfig.from_dict(d["lm_config"])
        residual = replace(lm, num_hidden_layers=field_of(d, "residual_lm_num_layers", int, "config", 8),
                           vocab_size=0, no_rope=field_of(d, "residual_lm_no_rope", bool, "config", False))
        for key in ("encoder_config", "dit_config"):
            if key not in d:
                raise ConfigError(f"{key}: missing")
        dit = d["dit_config"]
        cfm = field_of(dit, "cfm_config", dict, "dit_config")
        solver = field_of(cfm, "solver", str, "dit_config.cfm_config", "euler")
        if solver != "euler":
            raise ConfigError(f"dit_config.cfm_config.solver: only 'euler' is implemented upstream, got {solver!r}")
        vae = d.get("audio_vae_config")
        if vae is not None and not isinstance(vae, dict):
            raise ConfigError("audio_vae_config: expected an object")
        return cls(lm, residual, lm.local(d["encoder_config"], "encoder_config"), lm.local(dit, "dit_config"),
                   # upstream's field is `dit_mean_mode` (published configs write `mean_mode`, which it ignores)
                   CFMConfig(field_of(cfm, "sigma_min", float, "dit_config.cfm_config", 1e-6), solver,
                             field_of(cfm, "inference_cfg_rate", float, "dit_config.cfm_config", 1.0),
                             field_of(dit, "dit_mean_mode", bool, "dit_config", False)),
                   field_of(d, "patch_size", int, "config", 4), field_of(d, "feat_dim", int, "config", 64),
                   field_of(d, "scalar_quantization_latent_dim", int, "config", 512),
                   field_of(d, "scalar_quantization_scale", int, "config", 9),
                   field_of(d, "max_length", int, "config", 8192), field_of(d, "dtype", str, "config", "bfloat16"),
                   vae)


# ---- MiniCPM-4 ----------------------------------------------------------------------------------------------


class MiniCPMAttention(Attention):
    """GQA attention as MiniCPM-4 runs it: SDPA with `enable_gqa`, causal (LMs) or bidirectional
    (LocEnc, LocDiT), optional RoPE (the residual LM has none), an optional growing KV cache."""

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None, cache: KVCache | None = None,
                layer: int = 0, causal: bool = True, past: int = 0) -> Tensor:
        """`past`: positions the cache held before this call (the caller reads it once for all layers)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            # rotated in float32 with cos/sin rounded to the model's dtype, as upstream's cast table
            dtype = q.dtype
            cos, sin = rope
            q, k = apply_rotary(q.float(), k.float(), cos.float(), sin.float())
            q, k = q.to(dtype), k.to(dtype)
        if cache is not None:
            k_all, v_all = cache.update(layer, k, v)
        if past == 0:       # the whole sequence (a prefill, or a bidirectional block)
            y = F.scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(), is_causal=causal,
                                               enable_gqa=True)
        else:               # one new position against everything cached
            if t != 1:
                raise ValueError("MiniCPMAttention: after a prefill, positions are added one at a time")
            mask = cache.mask(layer) if getattr(cache, "whole", False) else None
            y = F.scaled_dot_product_attention(q.contiguous(), k_all.contiguous(), v_all.contiguous(),
                                               attn_mask=mask, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MiniCPMLayer(nn.Module):
    def __init__(self, c: LMConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = MiniCPMAttention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = SwiGLU(c.hidden_size, c.intermediate_size)
        # muP: residual branches scaled by scale_depth / sqrt(layers)
        self.branch_scale = c.scale_depth / math.sqrt(c.num_hidden_layers) if c.use_mup else None

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None, cache: KVCache | None, layer: int,
                causal: bool, past: int) -> Tensor:
        h = self.self_attn(self.input_layernorm(x), rope, cache, layer, causal, past)
        x = x + (h if self.branch_scale is None else h * self.branch_scale)
        h = self.mlp(self.post_attention_layernorm(x))
        return x + (h if self.branch_scale is None else h * self.branch_scale)


class MiniCPM(nn.Module):
    """A MiniCPM-4 stack over input embeddings: layers, final norm (and the token embedding if it has a vocabulary)."""

    def __init__(self, c: LMConfig) -> None:
        super().__init__()
        self.config = c
        if c.vocab_size > 0:
            self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(MiniCPMLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rope = None if c.no_rope else rotary_embedding(c.rope_scaling, c.head_dim, c.rope_theta,
                                                             c.max_position_embeddings)

    def forward(self, x: Tensor, cache: KVCache | None = None, causal: bool = True) -> Tensor:
        """x [B, T, H] -> hidden [B, T, H]; with a cache, positions continue after what it holds."""
        start = cache.seq_len if cache is not None else 0
        rope = None
        if self.rope is not None:
            rope = self.rope(torch.arange(start, start + x.shape[1], device=x.device), x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, cache, i, causal, start)
        return self.norm(x)


# ---- local encoder, LocDiT, FSQ -----------------------------------------------------------------------------


class StridedLinear(nn.Linear):
    """nn.Linear with torch's CPU path for each input layout spelled out: addmm (the bias fused into the
    GEMM) for a 2-D or any contiguous input, else one GEMM over the flattened input plus the bias. The
    prompt's patches are contiguous 4-D: torch's `linear` fuses their bias too, and a separate add
    rounds differently in bf16 (up to 4.2 on the first latent).

    Upstream feeds three projections strided views (LocEnc's input patch, its CLS outputs, LocDiT's output
    positions). For a strided input, `linear` decomposes through `matmul`, which folds the batch into one
    GEMM here but into a batched GEMM under a TorchDispatchMode (the simulated device installs one): other
    rounding. These explicit ops give upstream's numbers with or without a mode."""

    def forward(self, x: Tensor) -> Tensor:
        out = self.weight.shape[0]
        if x.dim() == 2:
            return torch.addmm(self.bias, x, self.weight.t())
        if x.is_contiguous():
            return torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight.t()).view(*x.shape[:-1], out)
        return torch.mm(x.reshape(-1, x.shape[-1]), self.weight.t()).view(*x.shape[:-1], out) + self.bias


class LocEnc(nn.Module):
    """Latent patches [B, T, P, D] -> one vector per patch [B, T, H] (the CLS output of a bidirectional stack)."""

    def __init__(self, c: LMConfig, feat_dim: int) -> None:
        super().__init__()
        self.special_token = nn.Parameter(torch.zeros(1, 1, 1, c.hidden_size))
        self.in_proj = StridedLinear(feat_dim, c.hidden_size)
        self.encoder = MiniCPM(c)

    def forward(self, x: Tensor) -> Tensor:
        b, t, p, _ = x.shape
        x = self.in_proj(x)
        x = torch.cat([self.special_token.expand(b, t, 1, -1), x], dim=2).reshape(b * t, p + 1, -1)
        return self.encoder(x, causal=False)[:, 0, :].reshape(b, t, -1)


def timestep_embedding(t: Tensor, dim: int, scale: float = 1000.0) -> Tensor:
    """Sinusoidal embedding [N, dim] of t [N] (sin half, then cos half), in t's dtype."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=t.dtype, device=t.device) * -(math.log(10000) / (half - 1)))
    emb = scale * t.unsqueeze(1) * freq.unsqueeze(0)
    return torch.cat((emb.sin(), emb.cos()), dim=-1)


class TimestepMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(dim, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class LocDiT(nn.Module):
    """The flow head's velocity field (LocDiT v2): a bidirectional MiniCPM over
    [mu (2 tokens: base-LM and residual-LM conditions), time, previous patch (P), noisy patch (P)]."""

    def __init__(self, c: LMConfig, feat_dim: int) -> None:
        super().__init__()
        h = c.hidden_size
        self.in_proj = nn.Linear(feat_dim, h)
        self.cond_proj = nn.Linear(feat_dim, h)
        self.out_proj = StridedLinear(h, feat_dim)
        self.time_mlp = TimestepMLP(h)
        self.delta_time_mlp = TimestepMLP(h)
        self.decoder = MiniCPM(c)

    def forward(self, x: Tensor, mu: Tensor, t: Tensor, cond: Tensor, dt: Tensor) -> Tensor:
        """x [N, D, P] noisy patch, mu [N, 2H], t/dt [N], cond [N, D, P'] previous patch -> velocity [N, D, P]."""
        x = self.in_proj(x.transpose(1, 2).contiguous())
        cond = self.cond_proj(cond.transpose(1, 2).contiguous())
        h = x.shape[-1]
        temb = self.time_mlp(timestep_embedding(t, h).to(x.dtype))
        temb = temb + self.delta_time_mlp(timestep_embedding(dt, h).to(x.dtype))
        mu = mu.view(x.shape[0], -1, h)
        hidden = self.decoder(torch.cat([mu, temb.unsqueeze(1), cond, x], dim=1), causal=False)
        hidden = self.out_proj(hidden[:, cond.shape[1] + mu.shape[1] + 1:, :])
        return hidden.transpose(1, 2).contiguous()


class FlowHead(nn.Module):
    """Upstream's UnifiedCFM: holds the LocDiT (`estimator`); sampling lives in generate.py."""

    def __init__(self, c: LMConfig, feat_dim: int, cfm: CFMConfig) -> None:
        super().__init__()
        self.cfm = cfm
        self.estimator = LocDiT(c, feat_dim)

    def forward(self, x: Tensor, mu: Tensor, t: Tensor, cond: Tensor, dt: Tensor) -> Tensor:
        return self.estimator(x, mu, t, cond, dt)


class ScalarQuantization(nn.Module):
    """FSQ bottleneck: tanh, rounded to 1/scale steps (inference), projected back."""

    def __init__(self, dim: int, latent: int, scale: int) -> None:
        super().__init__()
        self.scale = scale
        self.in_proj = nn.Linear(dim, latent)
        self.out_proj = nn.Linear(latent, dim)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.tanh(self.in_proj(x))
        return self.out_proj(torch.round(h * self.scale) / self.scale)


class VoxCPM2(nn.Module):
    def __init__(self, c: VoxCPMConfig) -> None:
        super().__init__()
        self.config = c
        h = c.lm.hidden_size
        self.base_lm = MiniCPM(c.lm)
        self.residual_lm = MiniCPM(c.residual)
        self.feat_encoder = LocEnc(c.encoder, c.feat_dim)
        self.feat_decoder = FlowHead(c.dit, c.feat_dim, c.cfm)
        self.fsq_layer = ScalarQuantization(h, c.scalar_quantization_latent_dim, c.scalar_quantization_scale)
        self.enc_to_lm_proj = StridedLinear(c.encoder.hidden_size, h)
        self.lm_to_dit_proj = nn.Linear(h, c.dit.hidden_size)
        self.res_to_dit_proj = nn.Linear(h, c.dit.hidden_size)
        self.fusion_concat_proj = nn.Linear(2 * h, h)
        self.stop_proj = nn.Linear(h, h)
        self.stop_head = nn.Linear(h, 2, bias=False)

    def stop_logits(self, lm_hidden: Tensor) -> Tensor:
        return self.stop_head(F.silu(self.stop_proj(lm_hidden)))

    def embed_text(self, ids: Tensor) -> Tensor:
        emb = self.base_lm.embed_tokens(ids)
        return emb * self.config.lm.scale_emb if self.config.lm.use_mup else emb

    def encode_patches(self, feats: Tensor) -> Tensor:
        """Latent patches [B, T, P, D] -> base-LM inputs [B, T, H]."""
        return self.enc_to_lm_proj(self.feat_encoder(feats))

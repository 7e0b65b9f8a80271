"""Qwen3-TTS (12 Hz) talker, code predictor and speaker encoder in plain torch.

Parameter names follow the upstream `model.safetensors` exactly (`talker.model.layers.0.self_attn.q_proj.weight`,
`speaker_encoder.blocks.1.res2net_block.blocks.0.conv.weight`, ...), so the file loads unchanged.

    Qwen3TTS
      talker                      Talker
        model                     decoder: text_embedding [V_text, D_text], codec_embedding [V, D],
                                  layers (Qwen3 blocks: GQA, q/k RMSNorm, SwiGLU, RoPE), norm
        text_projection           D_text -> D_text -> D (SiLU MLP with biases)
        codec_head                D -> V (logits of codebook 0 plus the codec control tokens)
        code_predictor            5-layer decoder predicting codebooks 1..15 of a frame from the talker's
                                  last hidden state; its own codec_embedding (15 tables) and lm_head (15)
      speaker_encoder             ECAPA-TDNN x-vector from a 128-bin log-mel (Base models only)

The talker's RoPE is "multimodal" upstream, but text-only: the three sections get the same positions,
which is exactly 1-D RoPE (see nodes/blocks/transformer.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.qwen3 import DecoderStack, LMConfig

# ---- configuration ----------------------------------------------------------------------------------


@dataclass
class TalkerConfig(LMConfig):
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    num_code_groups: int = 16
    codec_eos_token_id: int = 4198
    codec_think_id: int = 4202
    codec_nothink_id: int = 4203
    codec_think_bos_id: int = 4204
    codec_think_eos_id: int = 4205
    codec_pad_id: int = 4196
    codec_bos_id: int = 4197
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, Any] = field(default_factory=dict)
    codec_language_id: dict[str, int] = field(default_factory=dict)
    code_predictor: LMConfig | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TalkerConfig:
        base = LMConfig.from_dict(d)
        cp = dict(d.get("code_predictor_config") or {})
        cp.setdefault("hidden_size", 1024)
        cp.setdefault("intermediate_size", 3072)
        cp.setdefault("num_hidden_layers", 5)
        cp.setdefault("num_key_value_heads", 8)
        cp.setdefault("head_dim", 128)
        return cls(**base.__dict__, text_vocab_size=int(d.get("text_vocab_size", 151936)),
                   text_hidden_size=int(d.get("text_hidden_size", 2048)),
                   num_code_groups=int(d.get("num_code_groups", 16)),
                   **{k: int(d[k]) for k in ("codec_eos_token_id", "codec_think_id", "codec_nothink_id",
                                             "codec_think_bos_id", "codec_think_eos_id", "codec_pad_id",
                                             "codec_bos_id") if k in d},
                   spk_id={k.lower(): v for k, v in (d.get("spk_id") or {}).items()},
                   spk_is_dialect={k.lower(): v for k, v in (d.get("spk_is_dialect") or {}).items()},
                   codec_language_id={k.lower(): int(v) for k, v in (d.get("codec_language_id") or {}).items()},
                   code_predictor=LMConfig.from_dict(cp))


@dataclass
class SpeakerEncoderConfig:
    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeakerEncoderConfig:
        known = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Qwen3TTSConfig:
    talker: TalkerConfig
    speaker_encoder: SpeakerEncoderConfig | None
    model_type: str                  # "base" | "custom_voice" | "voice_design"
    model_size: str | None = None    # "0b6" | "1b7"
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Qwen3TTSConfig:
        kind = d.get("tts_model_type")
        if kind not in ("base", "custom_voice", "voice_design"):
            raise ValueError(f"tts_model_type {kind!r}: expected 'base', 'custom_voice' or 'voice_design'")
        if d.get("tokenizer_type") not in (None, "qwen3_tts_tokenizer_12hz"):
            raise ValueError(f"tokenizer_type {d.get('tokenizer_type')!r}: only the 12 Hz speech tokenizer "
                             "(qwen3_tts_tokenizer_12hz) is supported")
        spk = SpeakerEncoderConfig.from_dict(d.get("speaker_encoder_config") or {}) if kind == "base" else None
        return cls(TalkerConfig.from_dict(d["talker_config"]), spk, kind, d.get("tts_model_size"),
                   **{k: int(d[k]) for k in ("im_start_token_id", "im_end_token_id", "tts_pad_token_id",
                                             "tts_bos_token_id", "tts_eos_token_id") if k in d})

    @property
    def languages(self) -> list[str]:
        """Languages a request may name ("auto" plus every non-dialect language id), lower case."""
        return ["auto"] + [k for k in self.talker.codec_language_id if "dialect" not in k]


# ---- talker -----------------------------------------------------------------------------------------


class TalkerModel(DecoderStack):
    def __init__(self, c: TalkerConfig) -> None:
        super().__init__(c)
        self.codec_embedding = nn.Embedding(c.vocab_size, c.hidden_size)
        self.text_embedding = nn.Embedding(c.text_vocab_size, c.text_hidden_size)


class ResizeMLP(nn.Module):
    def __init__(self, dim_in: int, hidden: int, dim_out: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(dim_in, hidden, bias=True)
        self.linear_fc2 = nn.Linear(hidden, dim_out, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class CodePredictorModel(DecoderStack):
    def __init__(self, c: LMConfig, groups: int, embedding_dim: int) -> None:
        super().__init__(c)
        self.codec_embedding = nn.ModuleList(nn.Embedding(c.vocab_size, embedding_dim) for _ in range(groups - 1))


class CodePredictor(nn.Module):
    """Codebooks 1..G-1 of one frame, one per step, from [talker hidden, embed(code 0), embed(code 1), ...]."""

    def __init__(self, c: LMConfig, groups: int, talker_hidden: int) -> None:
        super().__init__()
        self.model = CodePredictorModel(c, groups, talker_hidden)
        self.lm_head = nn.ModuleList(nn.Linear(c.hidden_size, c.vocab_size, bias=False) for _ in range(groups - 1))
        self.small_to_mtp_projection = (nn.Linear(talker_hidden, c.hidden_size, bias=True)
                                        if c.hidden_size != talker_hidden else nn.Identity())


class Talker(nn.Module):
    def __init__(self, c: TalkerConfig) -> None:
        super().__init__()
        self.config = c
        self.model = TalkerModel(c)
        self.text_projection = ResizeMLP(c.text_hidden_size, c.text_hidden_size, c.hidden_size)
        self.codec_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.code_predictor = CodePredictor(c.code_predictor, c.num_code_groups, c.hidden_size)

    def memory_units(self) -> list[nn.Module]:
        """Units in run order: the talker's layers, its head, the projection into the code predictor,
        the predictor's layers and its 15 heads; the text projection (used on the prompt) last.
        Embeddings (text, codec, predictor codebooks) and norms are the fixed part; the text embedding
        table is pinned to the CPU by the engine (only a few rows are read per request)."""
        cp = self.code_predictor
        units: list[nn.Module] = [*self.model.layers, self.codec_head]
        if isinstance(cp.small_to_mtp_projection, nn.Linear):
            units.append(cp.small_to_mtp_projection)
        return units + [*cp.model.layers, *cp.lm_head, self.text_projection]

    def embed_text(self, ids: Tensor, device: torch.device) -> Tensor:
        """Text token ids [1, L] -> projected text embeddings [1, L, D] on `device`.

        The table is read where it lives (the CPU when pinned there); only the looked-up rows move.
        """
        table = self.model.text_embedding
        rows = table(ids.to(table.weight.device)).to(device)
        return self.text_projection(rows)


# ---- speaker encoder (ECAPA-TDNN) ----------------------------------------------------------------------


def _conv(cin: int, cout: int, k: int, d: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, k, dilation=d, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, d: int) -> None:
        super().__init__()
        self.conv = _conv(cin, cout, k, d)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.conv(x))


class Res2Net(nn.Module):
    def __init__(self, channels: int, scale: int, k: int, d: int) -> None:
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(TDNN(channels // scale, channels // scale, k, d) for _ in range(scale - 1))

    def forward(self, x: Tensor) -> Tensor:
        out, y = [], None
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                y = part
            elif i == 1:
                y = self.blocks[0](part)
            else:
                y = self.blocks[i - 1](part + y)
            out.append(y)
        return torch.cat(out, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se: int) -> None:
        super().__init__()
        self.conv1 = _conv(channels, se, 1)
        self.conv2 = _conv(se, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * s


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se: int, k: int, d: int) -> None:
        super().__init__()
        self.tdnn1 = TDNN(cin, cout, 1, 1)
        self.res2net_block = Res2Net(cout, scale, k, d)
        self.tdnn2 = TDNN(cout, cout, 1, 1)
        self.se_block = SqueezeExcitation(cout, se)

    def forward(self, x: Tensor) -> Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


class AttentiveStatsPool(nn.Module):
    """Attention-weighted mean and standard deviation over time (one unpadded utterance)."""

    eps = 1e-12

    def __init__(self, channels: int, attention: int) -> None:
        super().__init__()
        self.tdnn = TDNN(channels * 3, attention, 1, 1)
        self.conv = _conv(attention, channels, 1)

    def _stats(self, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        mean = (w * x).sum(2)
        std = torch.sqrt((w * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(self.eps))
        return mean, std

    def forward(self, x: Tensor) -> Tensor:
        t = x.shape[-1]
        uniform = torch.ones(x.shape[0], 1, t, dtype=x.dtype, device=x.device)
        uniform = uniform / uniform.sum(dim=2, keepdim=True)
        mean, std = self._stats(x, uniform)
        ctx = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, t), std.unsqueeze(2).repeat(1, 1, t)], dim=1)
        w = F.softmax(self.conv(torch.tanh(self.tdnn(ctx))), dim=2)
        mean, std = self._stats(x, w)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    def __init__(self, c: SpeakerEncoderConfig) -> None:
        super().__init__()
        ch, ks, ds = c.enc_channels, c.enc_kernel_sizes, c.enc_dilations
        if not len(ch) == len(ks) == len(ds):
            raise ValueError("speaker encoder: enc_channels, enc_kernel_sizes and enc_dilations differ in length")
        self.blocks = nn.ModuleList([TDNN(c.mel_dim, ch[0], ks[0], ds[0])] + [
            SERes2NetBlock(ch[i - 1], ch[i], c.enc_res2net_scale, c.enc_se_channels, ks[i], ds[i])
            for i in range(1, len(ch) - 1)])
        self.mfa = TDNN(ch[-1], ch[-1], ks[-1], ds[-1])
        self.asp = AttentiveStatsPool(ch[-1], c.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, c.enc_dim, 1)

    def forward(self, mels: Tensor) -> Tensor:
        """Log-mel [B, T, mel_dim] -> x-vector [B, enc_dim]."""
        x = mels.transpose(1, 2)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)


class Qwen3TTS(nn.Module):
    """The root of `model.safetensors`: `talker.*` and, for Base models, `speaker_encoder.*`."""

    def __init__(self, c: Qwen3TTSConfig) -> None:
        super().__init__()
        self.config = c
        self.talker = Talker(c.talker)
        self.speaker_encoder = SpeakerEncoder(c.speaker_encoder) if c.speaker_encoder is not None else None

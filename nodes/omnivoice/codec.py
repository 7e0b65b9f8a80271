"""The Higgs Audio V2 tokenizer (24 kHz audio <-> 8 codebooks at 25 Hz) in plain torch, loading
`audio_tokenizer/model.safetensors` unchanged.

    HiggsAudioTokenizer
      acoustic_encoder   DAC encoder: waveform -> 256 channels at 25 Hz (strides 8, 5, 4, 2, 3)
      semantic_model     HuBERT base on the 16 kHz waveform; the mean of its 13 hidden states, every 2nd frame
      encoder_semantic   a small conv stack over those features (768 channels)
      fc                 [acoustic | semantic] (1024) -> 1024, quantized by
      quantizer          8 residual Euclidean codebooks (1024 x 64, projections 1024 <-> 64)
      fc2                1024 -> 256 for the
      acoustic_decoder   DAC decoder: 256 channels at 25 Hz -> waveform (no final tanh)
      decoder_semantic, fc1   training-only (semantic reconstruction); loaded, never run

Encoding (a voice reference) uses acoustic_encoder, semantic_model, encoder_semantic, fc and the
quantizer; decoding uses the quantizer, fc2 and acoustic_decoder. The arithmetic follows
transformers' HiggsAudioV2TokenizerModel (>= 5.3) operation by operation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..formats.checkpoint import MAX_COUNT
from ..blocks.dac import DacDecoder, DacEncoder, EuclideanRVQ
from ..blocks.hubert import Hubert, HubertConfig


@dataclass
class AcousticConfig:
    encoder_hidden_size: int = 64
    decoder_hidden_size: int = 1024
    hidden_size: int = 256
    downsampling_ratios: tuple[int, ...] = (8, 5, 4, 2)     # transformers' defaults; the published file says (8, 5, 4, 2, 3)
    upsampling_ratios: tuple[int, ...] = (8, 5, 4, 2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AcousticConfig:
        if d.get("model_type", "dac") != "dac":
            raise ValueError(f"acoustic_model_config.model_type: expected dac, got {d.get('model_type')!r}")
        return cls(**{k: (tuple(v) if isinstance(v, list) else int(v)) for k, v in d.items()
                      if k in cls.__dataclass_fields__})


@dataclass
class CodecConfig:
    acoustic: AcousticConfig = field(default_factory=AcousticConfig)
    semantic: HubertConfig = field(default_factory=HubertConfig)
    sample_rate: int = 24000
    semantic_sample_rate: int = 16000
    downsample_factor: int = 320
    codebook_size: int = 1024
    codebook_dim: int | None = 64                            # None: hidden_size, as upstream
    kernel_size: int = 3
    unit_kernel_size: int = 3
    strides: tuple[int, ...] = (1, 1)
    channel_ratios: tuple[float, ...] = (1, 1)
    block_dilations: tuple[int, ...] = (1, 1)
    target_bandwidths: tuple[float, ...] = (0.5, 1, 1.5, 2, 4)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodecConfig:
        if d.get("model_type", "higgs_audio_v2_tokenizer") != "higgs_audio_v2_tokenizer":
            raise ValueError(f"model_type: expected higgs_audio_v2_tokenizer, got {d.get('model_type')!r}")
        scalars = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()
                   if k in cls.__dataclass_fields__ and k not in ("acoustic", "semantic")}
        c = cls(AcousticConfig.from_dict(d.get("acoustic_model_config") or {}),
                HubertConfig.from_dict(d.get("semantic_model_config") or {}, "semantic_model_config"), **scalars)
        if c.codebook_dim is None:
            c.codebook_dim = c.hidden_size
        if len(c.strides) != len(c.channel_ratios):
            raise ValueError("strides and channel_ratios differ in length")
        if not 1 <= c.num_quantizers <= MAX_COUNT:    # 10^12 kbps would build 10^10 quantizers
            raise ValueError(f"target_bandwidths: {c.target_bandwidths} give {c.num_quantizers} quantizers at "
                             f"{c.frame_rate} Hz; expected 1 to {MAX_COUNT}")
        return c

    # Derived exactly as transformers' HiggsAudioV2TokenizerConfig does.
    @property
    def hop_length(self) -> int:
        return math.prod(self.acoustic.downsampling_ratios)

    @property
    def frame_rate(self) -> int:
        return math.ceil(self.sample_rate / self.hop_length)

    @property
    def hidden_size(self) -> int:
        return self.acoustic.hidden_size + self.semantic.hidden_size

    @property
    def num_quantizers(self) -> int:
        return int(1000 * self.target_bandwidths[-1] // (self.frame_rate * math.ceil(math.log2(self.codebook_size))))

    @property
    def semantic_downsample_factor(self) -> int:
        return int(self.hop_length / (self.sample_rate / self.semantic_sample_rate) / self.downsample_factor)


# ---- the semantic conv stacks ------------------------------------------------------------------------------


class ResidualUnit(nn.Module):
    """x + conv2(elu(conv1(elu(x)))) with a dilated 'same' conv1 and a 1x1 conv2 (no biases)."""

    def __init__(self, c: CodecConfig, cin: int, cout: int, dilation: int) -> None:
        super().__init__()
        pad = ((c.unit_kernel_size - 1) // 2) * dilation
        self.conv1 = nn.Conv1d(cin, cout, c.unit_kernel_size, padding=pad, dilation=dilation, bias=False)
        self.conv2 = nn.Conv1d(cout, cout, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(F.elu(self.conv1(F.elu(x))))


class SemanticEncoderBlock(nn.Module):
    def __init__(self, c: CodecConfig, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.res_units = nn.ModuleList(ResidualUnit(c, cin, cin, d) for d in c.block_dilations)
        kernel = 3 if stride == 1 else 2 * stride
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        for unit in self.res_units:
            x = unit(x)
        return self.conv(x)


class SemanticEncoder(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        d = c.semantic.hidden_size
        self.conv = nn.Conv1d(d, d, c.kernel_size, 1, c.kernel_size // 2, bias=False)
        blocks, cin = [], d
        for stride, ratio in zip(c.strides, c.channel_ratios):
            blocks.append(SemanticEncoderBlock(c, cin, int(d * ratio), stride))
            cin = int(d * ratio)
        self.conv_blocks = nn.ModuleList(blocks)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        for block in self.conv_blocks:
            x = block(x)
        return x


class SemanticDecoderBlock(nn.Module):
    def __init__(self, c: CodecConfig, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        if stride == 1:
            self.conv = nn.Conv1d(cin, cout, 3, stride=1, padding=1, bias=True)
        else:
            self.conv = nn.ConvTranspose1d(cin, cout, 2 * stride, stride, (stride + 1) // 2, stride % 2, bias=False)
        self.res_units = nn.ModuleList(ResidualUnit(c, cout, cout, d) for d in c.block_dilations)


class SemanticDecoder(nn.Module):
    """Training-only (reconstructs the semantic features); present so the checkpoint loads strictly."""

    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        d, ratios = c.semantic.hidden_size, c.channel_ratios
        self.conv1 = nn.Conv1d(d, int(d * ratios[0]), c.kernel_size, 1, c.kernel_size // 2, bias=False)
        self.conv_blocks = nn.ModuleList(
            SemanticDecoderBlock(c, int(d * ratios[i]), int(d * ratios[i + 1]) if i < len(ratios) - 1 else d, s)
            for i, s in enumerate(c.strides))
        self.conv2 = nn.Conv1d(d, d, c.kernel_size, 1, c.kernel_size // 2, bias=False)


# ---- the tokenizer ------------------------------------------------------------------------------------------


class HiggsAudioTokenizer(nn.Module):
    def __init__(self, config: CodecConfig, masked_spec_embed: bool = False) -> None:
        super().__init__()
        self.config = c = config
        a = c.acoustic
        self.acoustic_encoder = DacEncoder(a.encoder_hidden_size, a.downsampling_ratios, a.hidden_size)
        # Higgs' DAC decoder: output padding (stride % 2) on every transposed conv, no final tanh.
        self.acoustic_decoder = DacDecoder(a.hidden_size, a.decoder_hidden_size, a.upsampling_ratios,
                                           odd_output_padding=True, tanh=False)
        self.encoder_semantic = SemanticEncoder(c)
        self.decoder_semantic = SemanticDecoder(c)
        self.semantic_model = Hubert(c.semantic, masked_spec_embed)
        self.fc = nn.Linear(c.hidden_size, c.hidden_size)
        self.fc1 = nn.Linear(c.hidden_size, c.semantic.hidden_size)
        self.fc2 = nn.Linear(c.hidden_size, a.hidden_size)
        self.quantizer = EuclideanRVQ(c.num_quantizers, c.hidden_size, c.codebook_size, c.codebook_dim)

    def semantic_features(self, wav16k: Tensor) -> Tensor:
        """[B, T16] -> mean of HuBERT's hidden states, every `semantic_downsample_factor`-th frame [B, F, 768]."""
        states = self.semantic_model(F.pad(wav16k, (160, 160)))
        features = torch.stack(states, dim=1).mean(dim=1)
        step = self.config.semantic_downsample_factor
        return features[:, ::step, :] if step > 1 else features

    def acoustic_frames(self, samples: int) -> int:
        """Frames the acoustic encoder gives for `samples` unpadded samples (its convs' output lengths)."""
        n = samples
        for conv in (m for m in self.acoustic_encoder.modules() if isinstance(m, nn.Conv1d)):
            n = (n + 2 * conv.padding[0] - conv.dilation[0] * (conv.kernel_size[0] - 1) - 1) // conv.stride[0] + 1
        return n

    def encode(self, wav: Tensor, wav16k: Tensor) -> Tensor:
        """wav [B, 1, T] at 24 kHz and the same audio at 16 kHz [B, T16] -> codes [B, n_q, frames]."""
        semantic = self.encoder_semantic(self.semantic_features(wav16k).transpose(1, 2))
        if self.acoustic_frames(wav.shape[2]) != semantic.shape[2]:
            pad = self.config.hop_length // 2
            wav = F.pad(wav, (pad, pad))
        acoustic = self.acoustic_encoder(wav)
        embeddings = torch.cat([acoustic, semantic], dim=1)
        embeddings = self.fc(embeddings.transpose(1, 2)).transpose(1, 2)
        return self.quantizer.encode(embeddings).transpose(0, 1)

    def decode(self, codes: Tensor) -> Tensor:
        """codes [B, n_q, frames] -> waveform [B, 1, frames * hop_length]."""
        quantized = self.quantizer.decode(codes.transpose(0, 1))
        return self.acoustic_decoder(self.fc2(quantized.transpose(1, 2)).transpose(1, 2))

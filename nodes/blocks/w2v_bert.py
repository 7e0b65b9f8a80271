"""facebook/w2v-bert-2.0 (Wav2Vec2-BERT) in plain torch, with its SeamlessM4T feature extractor.

    feats, mask = seamless_features(wav16k)                 # numpy, as transformers' SeamlessM4TFeatureExtractor
    model = W2VBert(W2VBertConfig.from_dict(config), layers=17)
    hidden = model(feats, mask)                             # hidden_states[17] of Wav2Vec2BertModel

Only the first `layers` conformer layers are built: IndexTTS 2 (and MaskGCT) read hidden state 17, the
input of layer 17, so layers 17-23, the adapter and the masked-spec embedding are never run; the loader
leaves their tensors out. Module names are transformers' (`encoder.layers.N...`, `feature_projection...`).
The feature extractor is transformers' numpy code path, operation for operation (float64 frames, complex64
spectrum, Kaldi mel banks triangular in mel space, per-bin normalisation, stride-2 stacking).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import Tensor, nn

from ...runtime.loading import CheckpointError, SizeSource, load_module_from_state, read_safetensors_header
from ..formats.checkpoint import ModelFolderError, read_json


# ---------------------------------------------------------------------------------------------
# SeamlessM4T feature extractor (numpy)

def _kaldi_mel(freq: np.ndarray | float) -> np.ndarray | float:
    return 1127.0 * np.log(1.0 + (freq / 700.0))


def seamless_mel_filters(sampling_rate: int = 16000, num_mel_bins: int = 80) -> np.ndarray:
    """transformers' mel_filter_bank(257, 80, 20, sr // 2, sr, None, "kaldi", triangularize_in_mel_space=True)."""
    mel_freqs = np.linspace(_kaldi_mel(20), _kaldi_mel(sampling_rate // 2), num_mel_bins + 2)
    fft_freqs = _kaldi_mel((sampling_rate / ((257 - 1) * 2)) * np.arange(257))
    filter_diff = np.diff(mel_freqs)
    slopes = np.expand_dims(mel_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down = -slopes[:, :-2] / filter_diff[:-1]
    up = slopes[:, 2:] / filter_diff[1:]
    return np.maximum(np.zeros(1), np.minimum(down, up))


def seamless_fbank(wav: np.ndarray, mel_filters: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """Log-mel (frames, 80) float32 (or `dtype`): 25 ms povey frames every 10 ms, DC removed, pre-emphasis 0.97."""
    waveform = (np.squeeze(wav) * (2 ** 15)).astype(np.float64)
    window = np.power(np.hanning(400), 0.85).astype(np.float64)
    frames = int(1 + np.floor((waveform.size - 400) / 160))
    if frames < 1:
        raise ValueError(f"reference audio too short for w2v-bert features: {waveform.size} samples at 16 kHz")
    spec = np.empty((frames, 257), dtype=np.complex64)
    buffer = np.zeros(512)
    for i in range(frames):
        buffer[:400] = waveform[i * 160:i * 160 + 400]
        buffer[:400] = buffer[:400] - buffer[:400].mean()
        buffer[1:400] -= 0.97 * buffer[:399]
        buffer[0] *= 1 - 0.97
        buffer[:400] *= window
        spec[i] = np.fft.rfft(buffer)
    power = (np.abs(spec, dtype=np.float64) ** 2.0).T
    mel = np.maximum(1.192092955078125e-07, np.dot(mel_filters.T, power))
    return np.asarray(np.log(mel), dtype).T


def seamless_features(wav: Tensor | np.ndarray, sampling_rate: int = 16000,
                      dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """Mono 16 kHz audio -> input_features (1, frames // 2, 160) and attention_mask (1, frames // 2), as
    `SeamlessM4TFeatureExtractor()(wav, sampling_rate=16000, return_tensors="pt")` returns them (float32;
    dtype=torch.float64 keeps the audio, the log-mel and the normalisation in float64: parity runs)."""
    real = np.float64 if dtype == torch.float64 else np.float32
    x = np.asarray(wav.detach().cpu().numpy() if isinstance(wav, Tensor) else wav, dtype=real)
    feats = seamless_fbank(x, seamless_mel_filters(sampling_rate), real)
    feats = (feats - np.expand_dims(feats.mean(0), 0)) / np.sqrt(np.expand_dims(feats.var(0, ddof=1), 0) + 1e-7)
    n = feats.shape[0]
    mask = np.ones(n + n % 2, dtype=np.int32)
    if n % 2:       # padded to a multiple of the stride with a zero frame, masked out
        feats = np.concatenate([feats, np.zeros((1, feats.shape[1]), dtype=feats.dtype)], axis=0)
        mask[-1] = 0
    stacked = feats.reshape(1, feats.shape[0] // 2, feats.shape[1] * 2)
    mask = mask[np.arange(mask.size) % 2 == 1][None]
    return torch.from_numpy(np.ascontiguousarray(stacked)), torch.from_numpy(mask.astype(np.int64))


# ---------------------------------------------------------------------------------------------
# Model

@dataclass(frozen=True)
class W2VBertConfig:
    hidden_size: int = 1024
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    num_hidden_layers: int = 24
    feature_projection_input_dim: int = 160
    conv_depthwise_kernel_size: int = 31
    left_max_position_embeddings: int = 64
    right_max_position_embeddings: int = 8
    layer_norm_eps: float = 1e-5
    add_adapter: bool = False          # transformers' defaults; read only for the random numbers it draws
    num_adapter_layers: int = 1

    @property
    def layerdrop_draws(self) -> int:
        """The `torch.rand([])` LayerDrop numbers transformers' Wav2Vec2BertModel draws per forward, in eval
        mode too: one per encoder layer of the whole model and one per adapter layer."""
        return self.num_hidden_layers + (self.num_adapter_layers if self.add_adapter else 0)

    @classmethod
    def from_dict(cls, h: dict[str, Any]) -> "W2VBertConfig":
        """From transformers' config.json; a ValueError names a missing or unsupported field."""
        if h.get("position_embeddings_type", "relative_key") != "relative_key":
            raise ValueError(f"field position_embeddings_type = {h['position_embeddings_type']!r}: only "
                             f"'relative_key' (w2v-bert-2.0) is supported")
        if h.get("hidden_act", "swish") not in ("swish", "silu"):
            raise ValueError(f"field hidden_act = {h['hidden_act']!r}: expected 'swish'")
        try:
            return cls(**{k: type(getattr(cls, k))(h[k]) for k in cls.__dataclass_fields__ if k in h})
        except (TypeError, ValueError) as e:
            raise ValueError(f"a field has the wrong type ({e})") from None


class FeatureProjection(nn.Module):
    def __init__(self, c: W2VBertConfig) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(c.feature_projection_input_dim, eps=c.layer_norm_eps)
        self.projection = nn.Linear(c.feature_projection_input_dim, c.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(self.layer_norm(x))


class FeedForward(nn.Module):
    def __init__(self, c: W2VBertConfig) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.output_dense = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.output_dense(F.silu(self.intermediate_dense(x)))


class ConvolutionModule(nn.Module):
    """LayerNorm, pointwise conv + GLU, causal depthwise conv, LayerNorm, SiLU, pointwise conv."""

    def __init__(self, c: W2VBertConfig) -> None:
        super().__init__()
        d = c.hidden_size
        self.layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.pointwise_conv1 = nn.Conv1d(d, 2 * d, 1, bias=False)
        self.depthwise_conv = nn.Conv1d(d, d, c.conv_depthwise_kernel_size, groups=d, bias=False)
        self.depthwise_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.pointwise_conv2 = nn.Conv1d(d, d, 1, bias=False)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.layer_norm(x).masked_fill(~mask.bool().unsqueeze(-1), 0.0).transpose(1, 2)
        x = F.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(F.pad(x, (self.depthwise_conv.kernel_size[0] - 1, 0)))
        x = F.silu(self.depthwise_layer_norm(x.transpose(1, 2)).transpose(1, 2))
        return self.pointwise_conv2(x).transpose(1, 2)


class SelfAttention(nn.Module):
    """Attention with "relative_key" positions: q . k + q . E[clamp(j - i)], both over sqrt(d)."""

    def __init__(self, c: W2VBertConfig) -> None:
        super().__init__()
        d = c.hidden_size
        self.heads, self.head_size = c.num_attention_heads, d // c.num_attention_heads
        self.left, self.right = c.left_max_position_embeddings, c.right_max_position_embeddings
        self.linear_q = nn.Linear(d, d)
        self.linear_k = nn.Linear(d, d)
        self.linear_v = nn.Linear(d, d)
        self.linear_out = nn.Linear(d, d)
        self.distance_embedding = nn.Embedding(self.left + self.right + 1, self.head_size)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, -1, self.heads, self.head_size).transpose(1, 2)
        k = self.linear_k(x).view(b, -1, self.heads, self.head_size).transpose(1, 2)
        v = self.linear_v(x).view(b, -1, self.heads, self.head_size).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_size)
        pos = torch.arange(t, dtype=torch.long, device=x.device)
        distance = torch.clamp(pos.view(1, -1) - pos.view(-1, 1), -self.left, self.right)
        rel = self.distance_embedding(distance + self.left).to(dtype=q.dtype)
        scores = scores + (torch.einsum("bhld,lrd->bhlr", q, rel) / math.sqrt(self.head_size))
        probs = torch.softmax(scores + bias, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, -1, self.heads * self.head_size)
        return self.linear_out(out)


class EncoderLayer(nn.Module):
    def __init__(self, c: W2VBertConfig) -> None:
        super().__init__()
        d = c.hidden_size
        self.ffn1_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.ffn1 = FeedForward(c)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.self_attn = SelfAttention(c)
        self.conv_module = ConvolutionModule(c)
        self.ffn2_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.ffn2 = FeedForward(c)
        self.final_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)

    def forward(self, x: Tensor, bias: Tensor, mask: Tensor) -> Tensor:
        x = self.ffn1(self.ffn1_layer_norm(x)) * 0.5 + x
        x = self.self_attn(self.self_attn_layer_norm(x), bias) + x
        x = x + self.conv_module(x, mask)
        x = self.ffn2(self.ffn2_layer_norm(x)) * 0.5 + x
        return self.final_layer_norm(x)


class Encoder(nn.Module):
    def __init__(self, c: W2VBertConfig, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(layers))


class W2VBert(nn.Module):
    """The first `layers` layers of Wav2Vec2BertModel: returns hidden_states[layers]."""

    def __init__(self, c: W2VBertConfig, layers: int) -> None:
        super().__init__()
        if not 0 < layers <= c.num_hidden_layers:
            raise ValueError(f"layers: expected 1..{c.num_hidden_layers}, got {layers}")
        self.config = c
        self.feature_projection = FeatureProjection(c)
        self.encoder = Encoder(c, layers)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        x = self.feature_projection(features)
        x = x.masked_fill(~mask.bool().unsqueeze(-1), 0.0)
        bias = (1.0 - mask[:, None, None, :].to(dtype=x.dtype)) * torch.finfo(x.dtype).min
        bias = bias.expand(bias.shape[0], 1, bias.shape[-1], bias.shape[-1])
        for layer in self.encoder.layers:
            x = layer(x, bias, mask)
        return x


def load_w2v_bert(folder: str | os.PathLike, layers: int, dtype: torch.dtype = torch.float32) -> W2VBert:
    """A w2v-bert-2.0 folder (config.json, model.safetensors) for the first `layers` layers. The tensors
    of later layers, the adapter, the intermediate FFN and the masked-spec embedding are left out; every
    other tensor is checked strictly. Errors name the file."""
    folder = Path(folder)
    config_path, weights = folder / "config.json", folder / "model.safetensors"
    for path in (config_path, weights):
        if not path.is_file():
            raise ModelFolderError(f"w2v-bert-2.0: {path} not found")
    raw = read_json(config_path, "w2v-bert-2.0")
    try:
        config = W2VBertConfig.from_dict(raw)
    except ValueError as e:
        raise CheckpointError(f"w2v-bert-2.0: {config_path}: {e}") from None

    def used(key: str) -> bool:
        if key.startswith("encoder.layers."):
            return int(key.split(".")[2]) < layers
        return key.startswith(("feature_projection.", "encoder.embed_positions."))

    header = read_safetensors_header(weights)
    try:
        with safe_open(str(weights), framework="pt") as f:
            state = {k: f.get_tensor(k) for k in header if used(k)}
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise CheckpointError(f"w2v-bert-2.0: {weights}: not readable ({type(e).__name__}: {e})") from None
    return load_module_from_state(lambda: W2VBert(config, layers), state, dtype, source=weights,
                                  config=SizeSource(config_path, raw)).eval()

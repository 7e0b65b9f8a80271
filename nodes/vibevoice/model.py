"""VibeVoice-Realtime (upstream `VibeVoiceStreamingForConditionalGenerationInference`) in plain torch, parameter
names kept, so the published model.safetensors loads unchanged:

    model.language_model        Qwen2.5 lower layers: embed_tokens, layers (no final norm: upstream's Identity)
    model.tts_language_model    Qwen2.5 upper layers + norm (its embed_tokens is unused upstream; not built)
    model.tts_input_types       2 rows added to every TTS LM input: 1 = text, 0 = speech
    model.acoustic_connector    latent (vae_dim) -> LM width: fc1, RMSNorm, fc2
    model.prediction_head       the diffusion head (diffusion_head.py)
    model.acoustic_tokenizer    the σ-VAE decoder (acoustic.py)
    model.speech_scaling_factor, model.speech_bias_factor   latents -> decoder input scalars
    tts_eos_classifier          fc1, ReLU, fc2 on the TTS LM's last hidden state

`forward_lm` / `forward_tts_lm` are upstream's methods of those names: one step of each LM through a KV cache,
at the positions after what the cache holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache
from ..blocks.transformer import Qwen2Config, RMSNorm, RotaryEmbedding, qwen2_layer, run_layers
from .acoustic import AcousticConfig, AcousticTokenizer, float_field as _float, int_field as _int
from .diffusion_head import DiffusionHead, HeadConfig, scheduler_for

# Keys of a published checkpoint the Realtime model never reads: the TTS LM's own (unused) embedding table and
# the acoustic encoder (the voices come as prefilled presets).
UNUSED_PREFIXES = ("model.tts_language_model.embed_tokens.", "model.acoustic_tokenizer.encoder.")


@dataclass(frozen=True)
class RealtimeConfig:
    qwen: Qwen2Config
    tts_layers: int          # upper layers forming the TTS LM (tts_backbone_num_hidden_layers)
    head: HeadConfig
    acoustic: AcousticConfig

    @property
    def lm_layers(self) -> int:
        return self.qwen.num_hidden_layers - self.tts_layers

    @property
    def vae_dim(self) -> int:
        return self.acoustic.vae_dim

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RealtimeConfig:
        """A VibeVoice-Realtime config.json; errors name the field."""
        if d.get("model_type") != "vibevoice_streaming":
            raise ValueError(f"model_type {d.get('model_type')!r}, expected 'vibevoice_streaming'")
        for part in ("decoder_config", "diffusion_head_config", "acoustic_tokenizer_config"):
            if not isinstance(d.get(part), dict):
                raise ValueError(f"{part} missing or not an object")
        qwen = qwen_config(d)
        tts = _int(d, "tts_backbone_num_hidden_layers", "", 20)
        if not tts < qwen.num_hidden_layers:
            raise ValueError(f"tts_backbone_num_hidden_layers {tts}: expected 1..{qwen.num_hidden_layers - 1} "
                             "(fewer than decoder_config.num_hidden_layers)")
        acoustic = AcousticConfig.from_dict(d["acoustic_tokenizer_config"])
        head = head_config(d, qwen, acoustic)
        return cls(qwen, tts, head, acoustic)


def qwen_config(d: dict[str, Any]) -> Qwen2Config:
    """`decoder_config` of a VibeVoice config.json (a Qwen2.5 LM); errors name the field."""
    q = d["decoder_config"]
    if q.get("model_type", "qwen2") != "qwen2":
        raise ValueError(f"decoder_config.model_type {q.get('model_type')!r}: only 'qwen2' is supported")
    if q.get("use_sliding_window"):
        raise ValueError("decoder_config.use_sliding_window: sliding-window attention is not supported")
    if q.get("rope_scaling") is not None:
        raise ValueError("decoder_config.rope_scaling: only the default RoPE is supported")
    return Qwen2Config.from_dict(q, "decoder_config")


def head_config(d: dict[str, Any], qwen: Qwen2Config, acoustic: AcousticConfig) -> HeadConfig:
    """`diffusion_head_config` of a VibeVoice config.json, checked against the LM width and the latent size."""
    h, where = d["diffusion_head_config"], "diffusion_head_config"
    head = HeadConfig(_int(h, "hidden_size", where, qwen.hidden_size), _int(h, "head_layers", where, 4),
                      _float(h, "head_ffn_ratio", where, 3.0), _float(h, "rms_norm_eps", where, 1e-5),
                      _int(h, "latent_size", where, 64), str(h.get("prediction_type", "v_prediction")),
                      _int(h, "ddpm_num_steps", where, 1000), _int(h, "ddpm_num_inference_steps", where, 20),
                      str(h.get("ddpm_beta_schedule", "cosine")))
    try:
        scheduler_for(head)
    except ValueError as e:
        raise ValueError(f"diffusion_head_config: {e}") from None
    if head.hidden_size != qwen.hidden_size or head.latent_size != acoustic.vae_dim:
        raise ValueError(f"diffusion_head_config: hidden_size {head.hidden_size} / latent_size {head.latent_size} "
                         f"must equal the LM width {qwen.hidden_size} / acoustic vae_dim {acoustic.vae_dim}")
    return head


class Qwen2Stack(nn.Module):
    """A run of Qwen2 decoder layers (HF `Qwen2Model` names), optionally with the token embedding and a final norm."""

    def __init__(self, c: Qwen2Config, layers: int, *, embed: bool, norm: bool) -> None:
        super().__init__()
        if embed:
            self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(qwen2_layer(c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                                                c.head_dim, c.intermediate_size, eps=c.rms_norm_eps)
                                    for _ in range(layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps) if norm else nn.Identity()
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, cache: KVCache | None, start: int) -> Tensor:
        return run_layers(self.layers, self.norm, self.rotary, x, cache, start)


class SpeechConnector(nn.Module):
    def __init__(self, input_dim: int, output_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(input_dim, output_dim)
        self.norm = RMSNorm(output_dim, eps=1e-6)
        self.fc2 = nn.Linear(output_dim, output_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.norm(self.fc1(x)))


class BinaryClassifier(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class RealtimeModel(nn.Module):
    """Upstream's `VibeVoiceStreamingModel` (the `model.*` level)."""

    def __init__(self, c: RealtimeConfig) -> None:
        super().__init__()
        self.language_model = Qwen2Stack(c.qwen, c.lm_layers, embed=True, norm=False)
        self.tts_language_model = Qwen2Stack(c.qwen, c.tts_layers, embed=False, norm=True)
        self.tts_input_types = nn.Embedding(2, c.qwen.hidden_size)
        self.acoustic_tokenizer = AcousticTokenizer(c.acoustic)
        self.acoustic_connector = SpeechConnector(c.vae_dim, c.qwen.hidden_size)
        self.register_buffer("speech_scaling_factor", torch.tensor(float("nan")))
        self.register_buffer("speech_bias_factor", torch.tensor(float("nan")))
        self.prediction_head = DiffusionHead(c.head)

    def forward(self, latents: Tensor) -> Tensor:
        """Sampled latents -> the acoustic decoder's input (upstream: / scaling - bias). The two scalars are this
        module's own buffers, read in its forward (the runtime's hooks see every weight where it is used)."""
        return latents / self.speech_scaling_factor.to(latents.device) - self.speech_bias_factor.to(latents.device)


class VibeVoiceRealtime(nn.Module):
    """The whole Realtime model (`model.*` and `tts_eos_classifier.*`)."""

    def __init__(self, c: RealtimeConfig) -> None:
        super().__init__()
        self.config = c
        self.model = RealtimeModel(c)
        self.tts_eos_classifier = BinaryClassifier(c.qwen.hidden_size)

    def forward_lm(self, input_ids: Tensor, cache: KVCache, start: int) -> Tensor:
        """The base LM over text ids (1, T) at positions start..: last hidden states (1, T, hidden)."""
        x = self.model.language_model.embed_tokens(input_ids)
        return self.model.language_model(x, cache, start)

    def forward_tts_lm(self, embeds: Tensor, text: bool, cache: KVCache, start: int) -> tuple[Tensor, Tensor]:
        """The TTS LM over `embeds` (1, T, hidden) — the base LM's hidden states for text, the connector's output
        for a speech frame — marked text or speech: (last hidden states (1, T, hidden), EOS logit (1, 1))."""
        kind = torch.full((1, 1), int(text), dtype=torch.long, device=embeds.device)
        x = embeds + self.model.tts_input_types(kind)
        h = self.model.tts_language_model(x, cache, start)
        return h, self.tts_eos_classifier(h[:, -1, :])

    def latents_to_decoder(self, latents: Tensor) -> Tensor:
        """Sampled latents -> the acoustic decoder's input (RealtimeModel.forward)."""
        return self.model(latents)

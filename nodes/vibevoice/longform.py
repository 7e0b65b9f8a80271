"""VibeVoice 1.5B / Large, the long-form multi-speaker model (upstream `VibeVoiceForConditionalGeneration`; in
transformers >= 5.3 the class of that name) in plain torch, under the published checkpoint's names, so
microsoft/VibeVoice-1.5B's shards load unchanged:

    model.language_model        Qwen2.5: embed_tokens, layers, norm
    lm_head                     the LM head (tied to embed_tokens when tie_word_embeddings, as in the 1.5B)
    model.acoustic_tokenizer    σ-VAE encoder (voice prompts) and decoder (acoustic.py)
    model.semantic_tokenizer    the semantic encoder (fed each generated frame's audio)
    model.acoustic_connector    latent (vae_dim) -> LM width: fc1, RMSNorm, fc2
    model.semantic_connector    semantic features -> LM width, the same layout
    model.prediction_head       the diffusion head (diffusion_head.py)
    model.speech_scaling_factor, model.speech_bias_factor   encoder latents -> LM latents: (x + bias) * scale
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ...runtime.lm.cache import KVCache
from ..blocks.transformer import Qwen2Config
from .acoustic import AcousticConfig, AcousticTokenizer, SemanticTokenizer
from .diffusion_head import DiffusionHead, HeadConfig
from .model import Qwen2Stack, SpeechConnector, head_config, qwen_config

__all__ = ["LongformConfig", "VibeVoiceLongform"]


@dataclass(frozen=True)
class LongformConfig:
    qwen: Qwen2Config
    tie_word_embeddings: bool
    head: HeadConfig
    acoustic: AcousticConfig            # the decoder side
    acoustic_encoder: AcousticConfig
    semantic: AcousticConfig            # the semantic tokenizer's encoder

    @property
    def vae_dim(self) -> int:
        return self.acoustic.vae_dim

    @property
    def hop_length(self) -> int:
        return self.acoustic_encoder.hop_length

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LongformConfig:
        """A VibeVoice 1.5B / Large config.json (model_type "vibevoice"); errors name the field."""
        if d.get("model_type") != "vibevoice":
            raise ValueError(f"model_type {d.get('model_type')!r}, expected 'vibevoice' (VibeVoice 1.5B / Large)")
        for part in ("decoder_config", "diffusion_head_config", "acoustic_tokenizer_config",
                     "semantic_tokenizer_config"):
            if not isinstance(d.get(part), dict):
                raise ValueError(f"{part} missing or not an object")
        qwen = qwen_config(d)
        a = d["acoustic_tokenizer_config"]
        acoustic = AcousticConfig.from_dict(a)
        encoder = AcousticConfig.from_dict(a, "encoder")
        semantic = AcousticConfig.from_dict(d["semantic_tokenizer_config"], "encoder", "semantic_tokenizer_config")
        if encoder.std_dist_type != "gaussian":
            raise ValueError("acoustic_tokenizer_config.std_dist_type: the acoustic encoder of a long-form model "
                             f"samples ('gaussian'), got {encoder.std_dist_type!r}")
        if semantic.std_dist_type != "none":
            raise ValueError("semantic_tokenizer_config.std_dist_type: the semantic encoder is used as is ('none'), "
                             f"got {semantic.std_dist_type!r}")
        if semantic.hop_length != encoder.hop_length or semantic.channels != encoder.channels:
            raise ValueError(f"semantic_tokenizer_config: hop {semantic.hop_length} / channels {semantic.channels} "
                             f"must equal the acoustic tokenizer's {encoder.hop_length} / {encoder.channels}")
        if acoustic.hop_length != encoder.hop_length:
            raise ValueError(f"acoustic_tokenizer_config: decoder hop {acoustic.hop_length} differs from the "
                             f"encoder's {encoder.hop_length}")
        tie = d.get("tie_word_embeddings", d["decoder_config"].get("tie_word_embeddings", False))
        if not isinstance(tie, bool):
            raise ValueError(f"tie_word_embeddings {tie!r}: expected true or false")
        return cls(qwen, tie, head_config(d, qwen, acoustic), acoustic, encoder, semantic)


class LongformModel(nn.Module):
    """Upstream's `VibeVoiceModel` (the `model.*` level)."""

    def __init__(self, c: LongformConfig) -> None:
        super().__init__()
        self.language_model = Qwen2Stack(c.qwen, c.qwen.num_hidden_layers, embed=True, norm=True)
        self.acoustic_tokenizer = AcousticTokenizer(c.acoustic, c.acoustic_encoder)
        self.semantic_tokenizer = SemanticTokenizer(c.semantic)
        self.acoustic_connector = SpeechConnector(c.vae_dim, c.qwen.hidden_size)
        self.semantic_connector = SpeechConnector(c.semantic.vae_dim, c.qwen.hidden_size)
        self.prediction_head = DiffusionHead(c.head)
        self.register_buffer("speech_scaling_factor", torch.tensor(float("nan")))
        self.register_buffer("speech_bias_factor", torch.tensor(float("nan")))

    def forward(self, latents: Tensor) -> Tensor:
        """Sampled latents -> the acoustic decoder's input (upstream: / scaling - bias), the scalars read in this
        module's own forward (the runtime's hooks see every weight where it is used)."""
        return latents / self.speech_scaling_factor.to(latents.device) - self.speech_bias_factor.to(latents.device)

    def encoder_to_lm(self, latents: Tensor) -> Tensor:
        """The acoustic encoder's latents -> the LM's latent space (upstream: (x + bias) * scaling)."""
        return (latents + self.speech_bias_factor.to(latents.device)) * self.speech_scaling_factor.to(latents.device)


class VibeVoiceLongform(nn.Module):
    """The whole long-form model (`model.*` and `lm_head`)."""

    def __init__(self, c: LongformConfig) -> None:
        super().__init__()
        self.config = c
        self.model = LongformModel(c)
        self.lm_head = nn.Linear(c.qwen.hidden_size, c.qwen.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight

    def embed(self, ids: Tensor) -> Tensor:
        return self.model.language_model.embed_tokens(ids)

    def forward_lm(self, embeds: Tensor, cache: KVCache, start: int) -> Tensor:
        """The LM over `embeds` (1, T, hidden) at positions start..: the final-norm hidden states (1, T, hidden)."""
        return self.model.language_model(embeds, cache, start)

    def logits(self, hidden: Tensor) -> Tensor:
        """The LM head on the last position of `hidden` (1, T, hidden): float32 logits (1, vocab)."""
        return self.lm_head(hidden[:, -1:, :])[:, -1, :].float()

    def voice_embeds(self, audio: Tensor, frames: list[int], generator: torch.Generator | None) -> Tensor:
        """The LM inputs for the voice prompts (upstream `get_audio_features`): `audio` (clips, 1, samples), the
        clips padded to one length (a multiple of the hop), `frames` each clip's own frame count. The batch is
        encoded at once (the σ-VAE noise is drawn for it, a std per clip, then noise shaped as its latents),
        scaled into the LM's latent space, projected by the acoustic connector, and each clip's frames kept in
        order: (sum(frames), hidden)."""
        m = self.model
        latents = m.encoder_to_lm(m.acoustic_tokenizer.encode(audio, generator))
        if len(frames) != latents.shape[0] or not all(0 < f <= latents.shape[1] for f in frames):
            raise ValueError(f"frames {frames}: expected one count in 1..{latents.shape[1]} per clip "
                             f"({latents.shape[0]} clips)")
        keep = torch.arange(latents.shape[1])[None, :] < torch.tensor(frames)[:, None]
        return m.acoustic_connector(latents)[keep.to(latents.device)]

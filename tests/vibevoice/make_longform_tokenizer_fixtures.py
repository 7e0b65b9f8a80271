"""Record the long-form VibeVoice tokenizers' golden fixture from transformers' own implementation (run in the
reference venv, never in the project's: transformers >= 5.3 with `VibeVoiceAcousticTokenizerModel`):

- a tiny random `VibeVoiceAcousticTokenizerModel` (encoder + decoder) and the semantic tokenizer encoder
  (`VibeVoiceAcousticTokenizerEncoderModel` at its own width, as `VibeVoiceModel.semantic_tokenizer_encoder`);
- their weights saved under the names of the published microsoft/VibeVoice-1.5B checkpoint
  (`model.acoustic_tokenizer.encoder.downsample_layers.0.0.conv.conv.weight`, ...), the configs in its
  config.json layout (`acoustic_tokenizer_config` / `semantic_tokenizer_config`);
- outputs for two clips (one batch, as upstream's processor pads them): the acoustic encoder's mean
  (`encode(sample=False)`), its σ-VAE sample after `torch.manual_seed(SEED)` (`encode(sample=True)`), the
  semantic encoder's features, and the decoder's audio for the mean, whole and frame by frame through
  transformers' padding cache.

    $VIBEVOICE_HF_VENV/bin/python tests/vibevoice/make_longform_tokenizer_fixtures.py [OUT]

OUT defaults to tests/vibevoice/fixtures/longform_tokenizers.safetensors.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import (VibeVoiceAcousticTokenizerConfig, VibeVoiceAcousticTokenizerEncoderConfig,
                          VibeVoiceAcousticTokenizerEncoderModel, VibeVoiceAcousticTokenizerModel)
from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
    VibeVoiceAcousticTokenizerConv1dPaddingCache)

SEED = 1234
RATIOS = [2, 3]              # published: [8, 5, 5, 4, 2, 2] (3200 samples a frame); here 6
DEPTHS = [1, 1, 2]           # published: 3-3-3-3-3-3-8
COMMON = {"channels": 1, "causal": True, "mixer_layer": "depthwise_conv", "conv_norm": "none",
          "pad_mode": "constant", "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_eps": 1e-5,
          "layernorm_elementwise_affine": True, "conv_bias": True, "layer_scale_init_value": 1e-6,
          "weight_init_value": 1e-2, "encoder_n_filters": 4, "encoder_ratios": list(reversed(RATIOS)),
          "encoder_depths": "-".join(map(str, DEPTHS))}
# the published config.json's two tokenizer configs (upstream lists encoder_ratios in decoder order)
ACOUSTIC = {"model_type": "vibevoice_acoustic_tokenizer", "vae_dim": 8, "fix_std": 0.5, "std_dist_type": "gaussian",
            **COMMON, "decoder_n_filters": 4, "decoder_ratios": list(reversed(RATIOS)), "decoder_depths": None}
SEMANTIC = {"model_type": "vibevoice_semantic_tokenizer", "vae_dim": 16, "fix_std": 0, "std_dist_type": "none",
            **COMMON}


def block_name(rest: str) -> str:
    """A ConvNeXt block's parameter: transformers' `mixer.conv.*` is upstream's `mixer.conv.conv.conv.*`."""
    return "mixer.conv.conv.conv." + rest[len("mixer.conv."):] if rest.startswith("mixer.conv.") else rest


def upstream_name(name: str, side: str) -> str:
    """transformers' encoder / decoder parameter name -> the published checkpoint's (under `side.`)."""
    layers = "downsample_layers" if side == "encoder" else "upsample_layers"
    parts = name.split(".")
    if parts[0] == "stem" and parts[1] == "conv":
        return f"{side}.{layers}.0.0.conv.conv.{parts[-1]}"
    if parts[0] == "stem" and parts[1] == "stage":
        return f"{side}.stages.0.{parts[2]}." + block_name(".".join(parts[3:]))
    if parts[0] == "conv_layers":
        i = int(parts[1]) + 1
        if parts[2] == "conv":
            return f"{side}.{layers}.{i}.0.conv.conv.{parts[-1]}"
        if parts[2] == "convtr":
            return f"{side}.{layers}.{i}.0.convtr.convtr.{parts[-1]}"
        if parts[2] == "stage":
            return f"{side}.stages.{i}.{parts[3]}." + block_name(".".join(parts[4:]))
    if parts[0] == "head":
        return f"{side}.head.conv.conv.{parts[-1]}"
    raise KeyError(name)


def randomize(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Every parameter random (the layer scales too, else each block is near identity and proves little)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            scale = 0.5 if name.endswith(("gamma", "norm.weight")) else 0.3
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if name.endswith("norm.weight") else 0.0))


def main(out: Path) -> None:
    gen = torch.Generator().manual_seed(7)
    common = dict(channels=1, kernel_size=7, num_filters=4, downsampling_ratios=RATIOS, depths=DEPTHS,
                  rms_norm_eps=1e-5, layer_scale_init_value=1e-6)
    acoustic = VibeVoiceAcousticTokenizerModel(
        VibeVoiceAcousticTokenizerConfig(hidden_size=ACOUSTIC["vae_dim"], vae_std=0.625, **common)).eval()
    semantic = VibeVoiceAcousticTokenizerEncoderModel(
        VibeVoiceAcousticTokenizerEncoderConfig(hidden_size=SEMANTIC["vae_dim"], **common)).eval()
    randomize(acoustic, gen)
    randomize(semantic, gen)

    tensors: dict[str, torch.Tensor] = {}
    for side in ("encoder", "decoder"):
        for name, p in getattr(acoustic, side).state_dict().items():
            tensors["weight.model.acoustic_tokenizer." + upstream_name(name, side)] = p.detach().clone()
    for name, p in semantic.state_dict().items():
        tensors["weight.model.semantic_tokenizer." + upstream_name(name, "encoder")] = p.detach().clone()

    hop = 6
    audio = torch.randn(2, 1, 12 * hop, generator=gen) * 0.3
    audio[1, :, 8 * hop:] = 0.0        # the shorter clip, padded with zeros as the feature extractor pads
    with torch.no_grad():
        mean = acoustic.encode(audio, sample=False).latents
        torch.manual_seed(SEED)
        sampled = acoustic.encode(audio, sample=True).latents
        sem = semantic(audio).latents
        whole = acoustic.decode(mean).audio
        cache = VibeVoiceAcousticTokenizerConv1dPaddingCache()
        streamed = torch.cat([acoustic.decode(mean[:, i:i + 1], padding_cache=cache, use_cache=True).audio
                              for i in range(mean.shape[1])], -1)
    tensors.update({"audio": audio, "acoustic.mean": mean.contiguous(), "acoustic.sampled": sampled.contiguous(),
                    "semantic.features": sem.contiguous(), "decoder.whole": whole, "decoder.streamed": streamed})
    meta = {"acoustic_tokenizer_config": json.dumps(ACOUSTIC), "semantic_tokenizer_config": json.dumps(SEMANTIC),
            "seed": str(SEED), "transformers": transformers.__version__, "torch": torch.__version__}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out), metadata=meta)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else
         Path(__file__).parent / "fixtures" / "longform_tokenizers.safetensors")

"""Record the parameter names and shapes of upstream's VibeVoice-Realtime at the published 0.5B size, built on
`meta` (nothing allocated), from the repository's classes (run in the reference venv):

    VIBEVOICE_SRC=/path/to/VibeVoice $VIBEVOICE_VENV/bin/python tests/vibevoice/make_realtime_structure.py [OUT]

The sizes are Qwen2.5-0.5B's (896 wide, 14 heads, 2 KV heads, 151936 tokens, 24 layers) split 4 + 20 as the
published voice presets' caches show (4 base-LM layers, 20 TTS-LM layers of (1, 2, T, 64)), the diffusion head
and σ-VAE decoder of the repository's defaults (vibevoice/configs/*.json: 64-dim latents, ratios 8-5-5-4-2-2).
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

from accelerate import init_empty_weights

sys.path.insert(0, os.environ["VIBEVOICE_SRC"])
from vibevoice.modular.configuration_vibevoice_streaming import VibeVoiceStreamingConfig  # noqa: E402
from vibevoice.modular.modeling_vibevoice_streaming_inference import (  # noqa: E402
    VibeVoiceStreamingForConditionalGenerationInference as Inference)

CONFIG = {
    "model_type": "vibevoice_streaming",
    "tts_backbone_num_hidden_layers": 20,
    "acoustic_vae_dim": 64,
    "decoder_config": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                       "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                       "max_position_embeddings": 8192, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                       "tie_word_embeddings": True, "use_sliding_window": False},
    "diffusion_head_config": {"model_type": "vibevoice_diffusion_head", "hidden_size": 896, "head_layers": 4,
                              "head_ffn_ratio": 3.0, "rms_norm_eps": 1e-5, "latent_size": 64,
                              "prediction_type": "v_prediction", "ddpm_num_steps": 1000,
                              "ddpm_num_inference_steps": 20, "ddpm_beta_schedule": "cosine",
                              "diffusion_type": "ddpm", "speech_vae_dim": 64},
    "acoustic_tokenizer_config": {"model_type": "vibevoice_acoustic_tokenizer", "channels": 1, "causal": True,
                                  "vae_dim": 64, "fix_std": 0.5, "std_dist_type": "gaussian",
                                  "mixer_layer": "depthwise_conv", "conv_norm": "none", "pad_mode": "constant",
                                  "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_eps": 1e-5,
                                  "layernorm_elementwise_affine": True, "conv_bias": True,
                                  "layer_scale_init_value": 1e-6, "weight_init_value": 1e-2,
                                  "encoder_n_filters": 32, "encoder_ratios": [8, 5, 5, 4, 2, 2],
                                  "encoder_depths": "3-3-3-3-3-3-8", "decoder_n_filters": 32,
                                  "decoder_ratios": [8, 5, 5, 4, 2, 2], "decoder_depths": None},
}


def main(out: Path) -> None:
    with init_empty_weights():     # parameters on meta; the few buffers are small
        model = Inference(VibeVoiceStreamingConfig(**copy.deepcopy(CONFIG)))
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    out.write_text(json.dumps({"config": CONFIG, "shapes": shapes}, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "fixtures" / "realtime_0.5b_structure.json")

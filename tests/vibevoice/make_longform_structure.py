"""Record the parameter names (mapped to the published checkpoint's, as make_longform_fixtures.py maps them) and
shapes of transformers' `VibeVoiceForConditionalGeneration` at the 1.5B and Large (7B) sizes, built on `meta`
(nothing allocated); run in the reference venv:

    $VIBEVOICE_HF_VENV/bin/python tests/vibevoice/make_longform_structure.py [OUT]

The LM sizes are Qwen2.5-1.5B's (1536 wide, 28 layers, 12 heads, 2 KV heads, 151936 tokens, tied head) and
Qwen2.5-7B's (3584 wide, 28 layers, 28 heads, 4 KV heads, 152064 tokens, untied), the tokenizers transformers'
defaults (64-dim acoustic latents, 128-dim semantic features, ratios 2-2-4-5-5-8, depths 3-3-3-3-3-3-8), the
diffusion head 4 layers of 3x the width. OUT defaults to tests/vibevoice/fixtures/longform_structure.json, which
also holds each size's config.json in the published layout for our side.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import VibeVoiceConfig, VibeVoiceForConditionalGeneration

sys.path.insert(0, str(Path(__file__).parent))
import make_longform_fixtures as fx  # noqa: E402

SIZES = {
    "1.5B": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "7B": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False},
}
TOKENIZER = {"causal": True, "mixer_layer": "depthwise_conv", "conv_norm": "none", "pad_mode": "constant",
             "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_eps": 1e-5,
             "layernorm_elementwise_affine": True, "conv_bias": True, "layer_scale_init_value": 1e-6,
             "weight_init_value": 1e-2, "channels": 1, "encoder_n_filters": 32, "encoder_ratios": [8, 5, 5, 4, 2, 2],
             "encoder_depths": "3-3-3-3-3-3-8"}


def published_config(q: dict) -> dict:
    return {
        "model_type": "vibevoice", "acoustic_vae_dim": 64, "semantic_vae_dim": 128,
        "tie_word_embeddings": q["tie_word_embeddings"],
        "decoder_config": {"model_type": "qwen2", **q, "max_position_embeddings": 65536, "rope_theta": 1000000.0,
                           "rms_norm_eps": 1e-6, "use_sliding_window": False, "hidden_act": "silu"},
        "diffusion_head_config": {"model_type": "vibevoice_diffusion_head", "hidden_size": q["hidden_size"],
                                  "head_layers": 4, "head_ffn_ratio": 3.0, "rms_norm_eps": 1e-5, "latent_size": 64,
                                  "prediction_type": "v_prediction", "ddpm_num_steps": 1000,
                                  "ddpm_num_inference_steps": 20, "ddpm_beta_schedule": "cosine"},
        "acoustic_tokenizer_config": {"model_type": "vibevoice_acoustic_tokenizer", "vae_dim": 64, "fix_std": 0.5,
                                      "std_dist_type": "gaussian", **TOKENIZER, "decoder_n_filters": 32,
                                      "decoder_ratios": [8, 5, 5, 4, 2, 2], "decoder_depths": None},
        "semantic_tokenizer_config": {"model_type": "vibevoice_semantic_tokenizer", "vae_dim": 128, "fix_std": 0,
                                      "std_dist_type": "none", **TOKENIZER},
    }


def main(out: Path) -> None:
    record = {}
    for size, q in SIZES.items():
        text = {"model_type": "qwen2", **q, "max_position_embeddings": 65536, "rope_theta": 1000000.0,
                "rms_norm_eps": 1e-6}
        config = VibeVoiceConfig(text_config=text, diffusion_head_config={"num_hidden_layers": 4,
                                                                          "intermediate_size": 3 * q["hidden_size"]},
                                 tie_word_embeddings=q["tie_word_embeddings"])
        with torch.device("meta"):
            model = VibeVoiceForConditionalGeneration(config)
        fx.CONFIG["tie_word_embeddings"] = q["tie_word_embeddings"]      # checkpoint_name drops a tied head
        shapes = {}
        for name, p in model.state_dict().items():
            key = fx.checkpoint_name(name)
            if key is not None:
                shapes[key] = list(p.shape)
        record[size] = {"config": published_config(q), "shapes": shapes,
                        "parameters": sum(p.numel() for p in model.parameters())}
        print(size, len(shapes), record[size]["parameters"])
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "fixtures" / "longform_structure.json")

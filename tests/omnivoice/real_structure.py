"""Write real_omnivoice.json: the published configs of k2-fsa/OmniVoice and every tensor name and shape of
upstream's classes (omnivoice 0.2.1, transformers' HiggsAudioV2TokenizerModel) built on `meta` from them.
Runs only in the parity venv (see README.md); test_structure.py checks our model against the file.

The configs: the fields of `config.json` and `audio_tokenizer/config.json` of the published model as
quoted by three independent public sources (an OmniVoice GGUF converter's validation and tests, a
ComfyUI pack's verbatim copy of the tokenizer config, a porting guide quoting config.json); they agree.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from qwen3_tts.torchaudio_shim import install  # noqa: E402

CONFIG = {
    "model_type": "omnivoice", "architectures": ["OmniVoice"], "audio_vocab_size": 1025, "audio_mask_id": 1024,
    "num_audio_codebook": 8, "audio_codebook_weights": [8, 8, 6, 6, 4, 4, 2, 2],
    "llm_config": {
        "model_type": "qwen3", "vocab_size": 151676, "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default",
        "rope_theta": 1000000}, "attention_bias": False, "hidden_act": "silu", "tie_word_embeddings": True,
    },
}
AUDIO_TOKENIZER_CONFIG = {
    "architectures": ["HiggsAudioV2TokenizerModel"], "model_type": "higgs_audio_v2_tokenizer", "sample_rate": 24000,
    "downsample_factor": 320, "codebook_dim": 64, "codebook_size": 1024, "kernel_size": 3, "block_dilations": [1, 1],
    "channel_ratios": [1, 1], "strides": [1, 1], "unit_kernel_size": 3, "initializer_range": 0.02, "dtype": "float32",
    "semantic_sample_rate": 16000, "target_bandwidths": [0.5, 1, 1.5, 2],
    "acoustic_model_config": {
        "model_type": "dac", "sampling_rate": 16000, "hop_length": 960, "encoder_hidden_size": 64,
        "decoder_hidden_size": 1024, "hidden_size": 256, "downsampling_ratios": [8, 5, 4, 2, 3],
        "upsampling_ratios": [8, 5, 4, 2, 3], "n_codebooks": 9, "codebook_size": 1024, "codebook_dim": 8,
        "codebook_loss_weight": 1.0, "commitment_loss_weight": 0.25, "quantizer_dropout": 0,
    },
    "semantic_model_config": {
        "model_type": "hubert", "activation_dropout": 0.1, "apply_spec_augment": True, "attention_dropout": 0.1,
        "bos_token_id": 1, "classifier_proj_size": 256, "conv_bias": False, "conv_dim": [512] * 7,
        "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_pos_batch_norm": False, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
        "ctc_loss_reduction": "sum", "ctc_zero_infinity": False, "do_stable_layer_norm": False, "eos_token_id": 2,
        "feat_extract_activation": "gelu", "feat_extract_norm": "group", "feat_proj_dropout": 0.0,
        "feat_proj_layer_norm": True, "final_dropout": 0.1, "hidden_act": "gelu", "hidden_dropout": 0.1,
        "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
        "layerdrop": 0.1, "mask_feature_length": 10, "mask_feature_min_masks": 0, "mask_feature_prob": 0.0,
        "mask_time_length": 10, "mask_time_min_masks": 2, "mask_time_prob": 0.0, "num_attention_heads": 12,
        "num_conv_pos_embedding_groups": 16, "num_conv_pos_embeddings": 128, "num_feat_extract_layers": 7,
        "num_hidden_layers": 12, "pad_token_id": 0, "use_weighted_layer_sum": False, "vocab_size": 32,
    },
}


def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def main() -> None:
    install()
    from omnivoice.models.omnivoice import OmniVoice, OmniVoiceConfig
    from transformers import HiggsAudioV2TokenizerConfig, HiggsAudioV2TokenizerModel
    with torch.device("meta"):
        model = OmniVoice(OmniVoiceConfig(**json.loads(json.dumps(CONFIG))))
        codec = HiggsAudioV2TokenizerModel(HiggsAudioV2TokenizerConfig(**json.loads(json.dumps(AUDIO_TOKENIZER_CONFIG))))
    out = {"config": CONFIG, "audio_tokenizer_config": AUDIO_TOKENIZER_CONFIG,
           "model": shapes(model), "audio_tokenizer": shapes(codec)}
    path = Path(__file__).with_name("real_omnivoice.json")
    path.write_text(json.dumps(out, indent=0, sort_keys=False) + "\n")
    print(f"{path}: {len(out['model'])} + {len(out['audio_tokenizer'])} tensors")


if __name__ == "__main__":
    main()

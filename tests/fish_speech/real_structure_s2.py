"""Record the tensor names and shapes of fish-speech head's real-size S2-Pro modules (reference venv).

    FISH_SPEECH_HEAD=<unpacked head> "$REF_VENV"/bin/python tests/fish_speech/real_structure_s2.py

writes real_s2_pro.json here. LM: the head's DualARTransformer on `meta` from S2_CONFIG through the head's
own `_from_fish_qwen3_omni`; codec: the head's DAC on `meta` from its `configs/modded_dac_vq.yaml` (the
file S2 ships its codec.pth for), read as plain data. The hub file fishaudio/s2-pro/config.json cannot be
reached from this machine; S2_CONFIG is its published content as quoted by two independent ports:
- walkerfirmin/mlx-audio (a fork of Blaizzy/mlx-audio), mlx_audio/tts/models/fish_qwen3_omni/config.py
  at 854faba64987cac8567320eb0021169d05c29123: FishTextConfig / FishAudioDecoderConfig / ModelConfig
  defaults (every value below, including the semantic token range 151678..155773);
- sgl-project/sglang-omni pull request #103 ("S2-Pro ... ~4.5B params, dim=2560, 36 slow layers ...
  fish_qwen3_omni ... sharded safetensors ... tokenizer.json").
Fields the head's loader does not read (initializer_range, use_gradient_checkpointing, dtype) are left out.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from functools import partial
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent

S2_CONFIG = {
    "model_type": "fish_qwen3_omni", "semantic_start_token_id": 151678, "semantic_end_token_id": 155773,
    "text_config": {"model_type": "fish_qwen3", "vocab_size": 155776, "n_layer": 36, "n_head": 32, "dim": 2560,
                    "intermediate_size": 9728, "n_local_heads": 8, "head_dim": 128, "rope_base": 1000000.0,
                    "norm_eps": 1e-6, "max_seq_len": 32768, "dropout": 0.0, "tie_word_embeddings": True,
                    "attention_qkv_bias": False, "attention_o_bias": False, "attention_qk_norm": True},
    "audio_decoder_config": {"model_type": "fish_qwen3_audio_decoder", "vocab_size": 4096, "n_layer": 4,
                             "n_head": 32, "dim": 2560, "intermediate_size": 9728, "n_local_heads": 8,
                             "head_dim": 128, "rope_base": 1000000.0, "norm_eps": 1e-6, "max_seq_len": 11,
                             "dropout": 0.0, "tie_word_embeddings": False, "attention_qkv_bias": False,
                             "attention_o_bias": False, "attention_qk_norm": False, "text_dim": 2560,
                             "num_codebooks": 10},
}


def main() -> None:
    if not os.environ.get("FISH_SPEECH_HEAD"):
        raise SystemExit("set $FISH_SPEECH_HEAD to fish-speech's head unpacked with an __init__.py "
                         "(recipe: tests/fish_speech/README.md)")
    head = Path(os.environ["FISH_SPEECH_HEAD"])
    spec = importlib.util.spec_from_file_location("fish_stubs", HERE / "upstream_stubs.py")
    stubs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stubs)
    sys.path.insert(0, str(head))
    stubs.install_stubs(head / "fish_speech", keep_transformers=True)
    from fish_speech.models.dac import modded_dac, rvq
    from fish_speech.models.text2semantic.llama import BaseModelArgs, DualARTransformer

    cfg = yaml.safe_load((head / "fish_speech" / "configs" / "modded_dac_vq.yaml").read_text())
    general = {k: v for k, v in cfg["transformer_general_config"].items() if not k.startswith("_")}
    q = cfg["quantizer"]

    def transformer(spec):
        c = {k: v for k, v in spec["config"].items() if not k.startswith("_")}
        return modded_dac.WindowLimitedTransformer(causal=spec["causal"], window_size=spec["window_size"],
                                                   input_dim=spec["input_dim"], config=modded_dac.ModelArgs(**c))

    with torch.device("meta"):
        lm = DualARTransformer(BaseModelArgs._from_fish_qwen3_omni(S2_CONFIG))
        quantizer = rvq.DownsampleResidualVectorQuantize(
            input_dim=q["input_dim"], n_codebooks=q["n_codebooks"], codebook_size=q["codebook_size"],
            codebook_dim=q["codebook_dim"], quantizer_dropout=q["quantizer_dropout"],
            downsample_factor=q["downsample_factor"], semantic_codebook_size=q["semantic_codebook_size"],
            pre_module=transformer(q["pre_module"]), post_module=transformer(q["post_module"]))
        keys = ("sample_rate", "encoder_dim", "encoder_rates", "decoder_dim", "decoder_rates",
                "encoder_transformer_layers", "decoder_transformer_layers")
        codec = modded_dac.DAC(quantizer=quantizer, transformer_general_config=partial(modded_dac.ModelArgs, **general),
                               **{k: cfg[k] for k in keys})
    lm_shapes = {k: list(v.shape) for k, v in lm.state_dict().items()}
    out = {"lm_config": S2_CONFIG, "lm": lm_shapes,
           "lm_parameters": sum(v.numel() for v in lm.parameters()),
           "codec": {k: list(v.shape) for k, v in codec.state_dict().items()}}
    (HERE / "real_s2_pro.json").write_text(json.dumps(out, indent=0) + "\n", encoding="utf-8")
    print(f"{len(lm_shapes)} LM tensors ({out['lm_parameters'] / 1e9:.2f} B parameters), "
          f"{len(out['codec'])} codec tensors -> real_s2_pro.json")


if __name__ == "__main__":
    main()

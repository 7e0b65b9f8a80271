"""Record the tensor names and shapes of upstream's real-size modules (parity venv; fish-speech 0.1.0).

    "$REF_VENV"/bin/python tests/fish_speech/real_structure.py     # writes real_s1_mini.json here

Codec: built on `meta` from the published `configs/modded_dac_vq.yaml` of the installed package (read as
plain data), weight norm applied as upstream does, so the names are those of `codec.pth`.
LM: upstream's DualARTransformer on `meta` from LM_CONFIG below. The hub file
fishaudio/openaudio-s1-mini/config.json is gated and not reachable from this machine; LM_CONFIG is its
content as fish-speech's own loader printed it when loading the published checkpoint
("Loading model from /app/checkpoints/s1-mini, config: DualARModelArgs(model_type='dual_ar',
vocab_size=155776, n_layer=28, n_head=16, dim=1024, intermediate_size=3072, n_local_heads=8, head_dim=128,
rope_base=1000000, norm_eps=1e-06, max_seq_len=8192, ..., tie_word_embeddings=False, ...,
attention_qk_norm=True, codebook_size=4096, num_codebooks=10, ..., scale_codebook_embeddings=True, ...,
n_fast_layer=4, fast_dim=1024, fast_n_head=16, fast_n_local_heads=8, fast_head_dim=64,
fast_intermediate_size=3072, ...)" followed by "Model weights loaded - Status: <All keys matched
successfully>"), a docker log of the repository head's server kept in a public GitHub repository (found
through a code search that did not name the repository, so it cannot be linked). sgl-project/sglang-omni pull
request #103 agrees independently ("S1-Mini (~500M params, dim=1024, 28 slow layers)", a 4-layer fast
transformer); the slow LM is Qwen3-0.6B's shape (fishaudio/fish-speech issue #1081: "OpenAudio S1
leverages the Qwen3 architecture"). Fields that change nothing at inference (dropout, init scale,
gradient checkpointing) are left out; the head-only fields of that print (semantic ids, audio_embed_dim,
norm_fastlayer_input=False) are not in 0.1.0's DualARModelArgs and are their defaults.
"""
from __future__ import annotations

import json
import sys
from functools import partial
from importlib.metadata import distribution
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
UPSTREAM = Path(str(distribution("fish-speech").locate_file("fish_speech")))

from fish_speech.upstream_stubs import install_stubs  # noqa: E402

install_stubs(UPSTREAM)

from fish_speech.models.dac import modded_dac, rvq  # noqa: E402
from fish_speech.models.text2semantic.llama import DualARModelArgs, DualARTransformer  # noqa: E402
from fish_speech.tiny import write_tokenizer  # noqa: E402
from fish_speech.tokenizer import FishTokenizer  # noqa: E402

LM_CONFIG = {"model_type": "dual_ar", "vocab_size": 155776, "n_layer": 28, "n_head": 16, "dim": 1024,
             "intermediate_size": 3072, "n_local_heads": 8, "head_dim": 128, "rope_base": 1000000,
             "norm_eps": 1e-6, "max_seq_len": 8192, "tie_word_embeddings": False, "attention_qkv_bias": False,
             "attention_o_bias": False, "attention_qk_norm": True, "codebook_size": 4096, "num_codebooks": 10,
             "scale_codebook_embeddings": True, "n_fast_layer": 4, "fast_dim": 1024, "fast_n_head": 16,
             "fast_n_local_heads": 8, "fast_head_dim": 64, "fast_intermediate_size": 3072,
             "fast_attention_qkv_bias": False, "fast_attention_qk_norm": False, "fast_attention_o_bias": False}


def codec_from_yaml() -> torch.nn.Module:
    cfg = yaml.safe_load((UPSTREAM / "configs" / "modded_dac_vq.yaml").read_text())
    general = {k: v for k, v in cfg["transformer_general_config"].items() if not k.startswith("_")}
    q = cfg["quantizer"]

    def transformer(spec):
        c = {k: v for k, v in spec["config"].items() if not k.startswith("_")}
        return modded_dac.WindowLimitedTransformer(causal=spec["causal"], window_size=spec["window_size"],
                                                   input_dim=spec["input_dim"], config=modded_dac.ModelArgs(**c))

    quantizer = rvq.DownsampleResidualVectorQuantize(
        input_dim=q["input_dim"], n_codebooks=q["n_codebooks"], codebook_size=q["codebook_size"],
        codebook_dim=q["codebook_dim"], quantizer_dropout=q["quantizer_dropout"],
        downsample_factor=q["downsample_factor"], semantic_codebook_size=q["semantic_codebook_size"],
        pre_module=transformer(q["pre_module"]), post_module=transformer(q["post_module"]))
    keys = ("sample_rate", "encoder_dim", "encoder_rates", "decoder_dim", "decoder_rates",
            "encoder_transformer_layers", "decoder_transformer_layers")
    return modded_dac.DAC(quantizer=quantizer, transformer_general_config=partial(modded_dac.ModelArgs, **general),
                          **{k: cfg[k] for k in keys})


def main() -> None:
    tmp = HERE / ".tokenizer-tmp"
    tmp.mkdir(exist_ok=True)
    write_tokenizer(tmp)
    with torch.device("meta"):
        lm = DualARTransformer(DualARModelArgs(**{k: v for k, v in LM_CONFIG.items() if k != "model_type"}),
                               tokenizer=FishTokenizer.from_pretrained(tmp))
        codec = codec_from_yaml()
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    out = {"lm_config": LM_CONFIG,
           "lm": {k: list(v.shape) for k, v in lm.state_dict().items()},
           "codec": {k: list(v.shape) for k, v in codec.state_dict().items()}}
    (HERE / "real_s1_mini.json").write_text(json.dumps(out, indent=0) + "\n", encoding="utf-8")
    print(f"{len(out['lm'])} LM tensors, {len(out['codec'])} codec tensors -> real_s1_mini.json")


if __name__ == "__main__":
    main()

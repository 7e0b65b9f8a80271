"""OmniVoice (k2-fsa/OmniVoice, Apache-2.0 code) as a native torch engine: a bidirectional Qwen3 diffusion
language model unmasking 8 codebooks in 32 steps, and the Higgs Audio V2 tokenizer (DAC + HuBERT, 25 Hz,
24 kHz), loading the upstream files unchanged; see phases.py."""
from ..common.registry import Download, EngineSpec
from .loader import is_model_folder
from .phases import build_engine

FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "audio_tokenizer/config.json",
         "audio_tokenizer/model.safetensors", "audio_tokenizer/preprocessor_config.json", "*LICENSE*", "README.md")

ENGINE = EngineSpec(
    engine_id="omnivoice", display_name="OmniVoice", loader_node="MizuotoLoadOmniVoice",
    build=build_engine, is_model_folder=is_model_folder,
    models={"OmniVoice": (Download("k2-fsa/OmniVoice", include=FILES),)},
    precisions=("bf16", "fp16", "fp32"),
    description="OmniVoice: zero-shot speech in hundreds of languages; voice cloning (reference + transcript) "
                "or voice design (e.g. 'female, low pitch, british accent'). The audio tokenizer always runs "
                "in float32.",
    license="model Apache-2.0; audio tokenizer (Higgs Audio V2) under Boson AI's Higgs Audio 2 Community License")

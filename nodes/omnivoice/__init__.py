"""OmniVoice (k2-fsa/OmniVoice, Apache-2.0 code) as a native torch engine: a bidirectional Qwen3 diffusion
language model unmasking 8 codebooks in 32 steps, and the Higgs Audio V2 tokenizer (DAC + HuBERT, 25 Hz,
24 kHz), loading the upstream files unchanged; see phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .languages import LANGUAGE_IDS
from .loader import missing_files

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import OmniVoiceEngine

FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "audio_tokenizer/config.json",
         "audio_tokenizer/model.safetensors", "audio_tokenizer/preprocessor_config.json", "*LICENSE*", "README.md")


def build(request: LoadRequest, manager: ModelManager) -> OmniVoiceEngine:
    """The diffusion LM in the loader's precision; the audio tokenizer stays float32, as upstream runs it."""
    from .loader import load_omnivoice
    from .phases import OmniVoiceEngine
    return OmniVoiceEngine(load_omnivoice(request.folder, request.dtype), manager, device=request.device,
                           name=request.model)


ENGINE = EngineSpec(
    engine_id="omnivoice", display_name="OmniVoice", loader_node="MizuotoLoadOmniVoice", build=build,
    missing_files=missing_files, models={"OmniVoice": (Download("k2-fsa/OmniVoice", include=FILES),)},
    languages=("auto", *sorted(LANGUAGE_IDS)), precisions=("bf16", "fp16", "fp32"),
    description="OmniVoice from models/TTS/omnivoice/ (a known one downloads with its files checked): speech in "
                "646 languages; clones a reference voice (with its transcript) or designs one from an "
                "instruction such as 'female, low pitch, british accent'. The audio tokenizer runs in float32.",
    license="model Apache-2.0; audio tokenizer (Higgs Audio V2): Boson AI Higgs Audio 2 Community License")

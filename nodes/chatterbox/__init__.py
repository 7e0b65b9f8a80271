"""Chatterbox (Resemble AI, code and weights MIT) as a native torch engine: T3 (Llama speech-token LM with
CFG and the exaggeration scalar), S3Gen (CosyVoice 2's conformer flow and HiFT from nodes/blocks), the S3
speech tokenizer and the voice encoder; the published files load unchanged. A folder with the multilingual
files (t3_mtl23ls_v2.safetensors ...) is Chatterbox Multilingual: 23 languages, upstream's per-language text
preprocessing and its alignment guard on T3. Outputs are not watermarked
(upstream applies resemble-perth's watermark). See phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .loader import FILES, MTL_FILES, missing_files
from .text import LANGUAGES

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import ChatterboxEngine


def build_engine(request: LoadRequest, manager: ModelManager) -> ChatterboxEngine:
    from .loader import load_chatterbox
    from .phases import ChatterboxEngine
    if request.folder is None:
        raise ValueError("Chatterbox needs a model folder")
    return ChatterboxEngine(load_chatterbox(request.folder, request.dtype), manager, request.device)


ENGINE = EngineSpec(
    engine_id="chatterbox", display_name="Chatterbox", loader_node="MizuotoLoadChatterbox", build=build_engine,
    missing_files=missing_files, languages=("auto",) + LANGUAGES,
    models={"chatterbox": (Download("ResembleAI/chatterbox", FILES),),
            "chatterbox_multilingual": (Download("ResembleAI/chatterbox", MTL_FILES),)},
    precisions=("fp32", "bf16", "fp16"),
    description="Chatterbox (0.5B, English) and Chatterbox Multilingual (23 languages: pick the language on "
                "Speak; Japanese needs pykakasi, Chinese spacy-pkuseg and its spacy_ontonotes/ model folder): "
                "zero-shot voice cloning from a few seconds of reference audio or the built-in voice, exaggeration "
                "(expressiveness) and CFG weight; 24 kHz. Outputs are not watermarked (upstream embeds a Perth "
                "watermark).",
    license="MIT (code and weights)",
)

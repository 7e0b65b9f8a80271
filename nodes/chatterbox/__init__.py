"""Chatterbox (Resemble AI, code and weights MIT) as a native torch engine: T3 (Llama speech-token LM with
CFG and the exaggeration scalar), S3Gen (CosyVoice 2's conformer flow and HiFT from nodes/blocks), the S3
speech tokenizer and the voice encoder; the published files load unchanged. Outputs are not watermarked
(upstream applies resemble-perth's watermark). See phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .loader import FILES, missing_files

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
    missing_files=missing_files, languages=("auto", "en"),
    models={"chatterbox": (Download("ResembleAI/chatterbox", FILES),)},
    precisions=("fp32", "bf16", "fp16"),
    description="Chatterbox (0.5B, English): zero-shot voice cloning from a few seconds of reference audio or "
                "the built-in voice, exaggeration (expressiveness) and CFG weight; 24 kHz. Outputs are not "
                "watermarked (upstream embeds a Perth watermark).",
    license="MIT (code and weights)",
)

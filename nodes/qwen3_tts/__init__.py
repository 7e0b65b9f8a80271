"""Qwen3-TTS 12 Hz (Qwen/Qwen3-TTS-12Hz-*, Apache-2.0) as a native torch engine: talker + code predictor,
speaker encoder and the 12 Hz speech tokenizer, loading the upstream files unchanged; see phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .loader import missing_files

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import Qwen3TTSEngine

MODELS = ("Qwen3-TTS-12Hz-0.6B-Base", "Qwen3-TTS-12Hz-0.6B-CustomVoice", "Qwen3-TTS-12Hz-1.7B-Base",
          "Qwen3-TTS-12Hz-1.7B-CustomVoice", "Qwen3-TTS-12Hz-1.7B-VoiceDesign")


def build(request: LoadRequest, manager: ModelManager) -> Qwen3TTSEngine:
    from .loader import load_qwen3_tts
    from .phases import Qwen3TTSEngine
    return Qwen3TTSEngine(load_qwen3_tts(request.folder, request.dtype), manager, device=request.device,
                          name=request.model)


ENGINE = EngineSpec(
    engine_id="qwen3_tts", display_name="Qwen3-TTS", loader_node="MizuotoLoadQwen3TTS", build=build,
    missing_files=missing_files, models={name: (Download(f"Qwen/{name}"),) for name in MODELS},
    languages=("auto", "en", "zh", "ja", "ko", "de", "fr", "ru", "pt", "es", "it"), precisions=("bf16", "fp16", "fp32"),
    description="A Qwen3-TTS 12 Hz model from models/TTS/qwen3_tts/ (a known one downloads with its files "
                "checked): CustomVoice speaks named voices, VoiceDesign follows an instruction, Base clones "
                "a reference voice.",
    license="Apache-2.0")

"""Fish Speech / OpenAudio S1-mini (fishaudio/openaudio-s1-mini) as a native torch engine: the dual-AR
LM and the 44.1 kHz modded-DAC codec, loading the upstream files unchanged; see phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.registry import Download, EngineSpec, LoadRequest
from .loader import REQUIRED, is_model_folder
from .phases import LANGUAGES

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import FishSpeechEngine


def build(request: LoadRequest, manager: ModelManager) -> FishSpeechEngine:
    from .loader import load_fish_speech
    from .phases import FishSpeechEngine
    return FishSpeechEngine(load_fish_speech(request.folder, request.dtype), manager, device=request.device,
                            name=request.model)


ENGINE = EngineSpec(
    engine_id="fish_speech", display_name="Fish Speech", loader_node="MizuotoLoadFishSpeech", build=build,
    is_model_folder=is_model_folder,
    models={"openaudio-s1-mini": (Download("fishaudio/openaudio-s1-mini", include=REQUIRED),)},
    languages=LANGUAGES, precisions=("bf16", "fp16", "fp32"), loader_display="Load Fish Speech (OpenAudio S1-mini)",
    description="OpenAudio S1-mini from models/TTS/fish_speech/ (a gated Hugging Face repository: accept its "
                "terms and log in to download): dual-AR LM + 44.1 kHz codec; clones a voice from reference "
                "audio and its transcript; emotion and tone markers such as (excited) or (whispering) in the "
                "text. Weights CC-BY-NC-SA-4.0: non-commercial use only.",
    license="CC-BY-NC-SA-4.0 (non-commercial)")

"""Fish Speech as a native torch engine: OpenAudio S1-mini (fishaudio/openaudio-s1-mini) and Fish Audio
S2-Pro (fishaudio/s2-pro, a config variant of the same dual-AR LM + 44.1 kHz modded-DAC codec), loading
the upstream files unchanged; see phases.py and loader.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .loader import REQUIRED, S2_FILES, missing_files
from .phases import LANGUAGES

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import FishSpeechEngine


def build(request: LoadRequest, manager: ModelManager) -> FishSpeechEngine:
    from .loader import load_fish_speech
    from .phases import FishS2Engine, FishSpeechEngine
    bundle = load_fish_speech(request.folder, request.dtype)
    engine = FishS2Engine if bundle.is_s2 else FishSpeechEngine
    return engine(bundle, manager, device=request.device, name=request.model)


ENGINE = EngineSpec(
    engine_id="fish_speech", display_name="Fish Speech", loader_node="MizuotoLoadFishSpeech", build=build,
    missing_files=missing_files,
    models={"openaudio-s1-mini": (Download("fishaudio/openaudio-s1-mini", include=REQUIRED),),
            "s2-pro": (Download("fishaudio/s2-pro", include=S2_FILES),)},
    languages=LANGUAGES, precisions=("bf16", "fp16", "fp32"),
    loader_display="Load Fish Speech (OpenAudio S1-mini / S2-Pro)",
    description="OpenAudio S1-mini from models/TTS/fish_speech/ (a gated Hugging Face repository: accept its "
                "terms and log in to download): dual-AR LM + 44.1 kHz codec; clones a voice from reference "
                "audio and its transcript; emotion and tone markers such as (excited) or (whispering) in the "
                "text. Weights CC-BY-NC-SA-4.0: non-commercial use only. Also S2-Pro (fishaudio/s2-pro, 4.5B, "
                "sharded safetensors): the same dual-AR + codec with a chat prompt and constrained sampling; "
                "its weights are under the Fish Audio Research License (research / non-commercial only).",
    license="OpenAudio S1-mini: CC-BY-NC-SA-4.0 (non-commercial); S2-Pro: Fish Audio Research License "
            "(non-commercial)")

"""Fish Speech / OpenAudio S1-mini (fishaudio/openaudio-s1-mini) as a native torch engine: the dual-AR
LM and the 44.1 kHz modded-DAC codec, loading the upstream files unchanged; see phases.py."""
from ..common.registry import Download, EngineSpec
from .loader import is_model_folder
from .phases import build_engine

ENGINE = EngineSpec(
    engine_id="fish_speech", display_name="Fish Speech", loader_node="MizuotoLoadFishSpeech",
    build=build_engine, is_model_folder=is_model_folder,
    models={"openaudio-s1-mini": (Download("fishaudio/openaudio-s1-mini", include=(
        "config.json", "model.pth", "codec.pth", "tokenizer.tiktoken", "special_tokens.json")),)},
    precisions=("bf16", "fp16", "fp32"), loader_display="Load Fish Speech (OpenAudio S1-mini)",
    description="OpenAudio S1-mini (Fish Audio): dual-AR LM + 44.1 kHz codec; voice cloning from reference "
                "audio and its transcript; emotion markers such as (excited) in the text. Weights: CC-BY-NC-SA-4.0 "
                "(non-commercial); code Apache-2.0.",
    license="CC-BY-NC-SA-4.0")

"""Kokoro-82M (hexgrad, Apache-2.0): ALBERT + prosody predictor + iSTFTNet, its named voices with their
language, voice blends (`af_bella:0.7,af_sky:0.3`) and speed; see phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..formats.download import Download
from ..pack.registry import EngineSpec, LoadRequest
from .loader import CONFIG, WEIGHTS, missing_files

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import KokoroEngine


def build(request: LoadRequest, manager: ModelManager) -> KokoroEngine:
    from .loader import load_model, load_voice, voice_files
    from .phases import KokoroEngine
    model = load_model(request.folder, dtype=request.dtype)
    voices = {name: load_voice(path) for name, path in voice_files(request.folder).items()}
    return KokoroEngine(model, voices, manager, device=request.device)


ENGINE = EngineSpec(
    engine_id="kokoro", display_name="Kokoro-82M", loader_node="MizuotoLoadKokoro", build=build,
    missing_files=missing_files, languages=("auto", "en", "es", "fr", "hi", "it", "ja", "pt", "zh"),
    # the .pth's sha256 as hexgrad/Kokoro-82M's model card publishes it (the hub's LFS hash is checked too)
    models={"Kokoro-82M": (Download("hexgrad/Kokoro-82M", (WEIGHTS, CONFIG, "voices/*.pt"), sha256={
        WEIGHTS: "496dba118d1a58f5f3db2efc88dbdc216e0483fc89fe6e47ee1f2c53f18ad1e4"}),)},
    precisions=("fp32", "bf16", "fp16"),
    description="Kokoro-82M: 82 M parameters, about 50 named voices (American and British English natively; "
                "other languages through misaki when installed), voice blends such as "
                "af_bella:0.7,af_sky:0.3, speed; 24 kHz.",
    license="Apache-2.0")

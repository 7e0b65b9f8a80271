"""The VibeVoice-Realtime declaration, ready but not yet exported as the package's ENGINE (the registry lists
only `nodes.vibevoice.ENGINE`): registering is `from .spec import SPEC as ENGINE` in __init__.py once the voice
presets have a hub source for the download and the example workflow (with its thumbnail) exists. With it
exported, tests/engines_native/test_conformance.py -k vibevoice passes (tests/vibevoice/tiny.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..formats.download import Download
from ..pack.registry import EngineSpec, LoadRequest

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import VibeVoiceEngine

FILES = ("config.json", "model.safetensors")


def missing_files(folder: Path) -> list[str]:
    missing = [f for f in (*FILES, "tokenizer.json") if not (Path(folder) / f).is_file()]
    if not any((Path(folder) / "voices").glob("*.pt")):
        missing.append("voices/*.pt")
    return missing


def build(request: LoadRequest, manager: ModelManager) -> VibeVoiceEngine:
    from .loader import load_realtime
    from .phases import VibeVoiceEngine
    from .text import TextTokenizer
    from .voices import load_voice_preset, voice_names
    folder = Path(request.folder)
    voices = {name: load_voice_preset(folder / "voices" / f"{name}.pt") for name in voice_names(folder / "voices")}
    return VibeVoiceEngine(load_realtime(folder, dtype=request.dtype), voices, TextTokenizer(folder / "tokenizer.json"),
                           manager, device=request.device)


SPEC = EngineSpec(
    engine_id="vibevoice", display_name="VibeVoice-Realtime", loader_node="MizuotoLoadVibeVoice", build=build,
    missing_files=missing_files, languages=("auto", "en"),
    models={"VibeVoice-Realtime-0.5B": (Download("microsoft/VibeVoice-Realtime-0.5B", FILES),
                                        Download("Qwen/Qwen2.5-0.5B", ("tokenizer.json",)))},
    precisions=("fp32", "bf16"),
    description="VibeVoice-Realtime-0.5B (Microsoft): streaming English TTS from voice presets (voices/*.pt, from the "
                "VibeVoice repository's demo/voices/streaming_model/), steps and cfg_scale options; 24 kHz.",
    license="MIT (with Microsoft's responsible-use terms: no voice impersonation without consent)")

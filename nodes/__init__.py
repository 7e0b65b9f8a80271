"""ComfyUI nodes: one loader per registered engine (each `nodes/<engine>/` declares an `ENGINE`), the
Speak, Voice, Script, SRT and Runtime Settings nodes; model folders and the panel's route.

The mappings are built when first read (ComfyUI reads them right after importing the pack): importing
`nodes.pack` or one engine, as the command line does, does not import every engine.
"""
from __future__ import annotations

import functools
import pkgutil
from typing import Any

# The folders every engine builds on (docs/architecture.md); every other subpackage is an engine.
SHARED = frozenset({"blocks", "formats", "pack", "script", "common"})


def engine_folders() -> list[str]:
    """The subpackages that may declare an engine, found without importing them (or torch)."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg and info.name not in SHARED)


@functools.cache
def comfy_entry() -> dict[str, Any]:
    """Register the model folders and the route, and build the node mappings (once per process)."""
    from .formats import folders
    from .pack import routes
    from .pack.loader_node import loader_node
    from .pack.registry import discover
    from .pack.speak import MizuotoRuntimeSettings, MizuotoSpeak
    from .pack.train_nodes import MizuotoTrainingClips, MizuotoTrainingDataset, MizuotoTrainVoice
    from .pack.voice import MizuotoVoice
    from .script.nodes import MizuotoScript, MizuotoSrt

    folders.register()
    routes.register_routes()
    engines = discover()
    return {
        "ENGINES": engines,
        "NODE_CLASS_MAPPINGS": {spec.loader_node: loader_node(spec) for spec in engines} | {
            "MizuotoSpeak": MizuotoSpeak,
            "MizuotoRuntimeSettings": MizuotoRuntimeSettings,
            "MizuotoVoice": MizuotoVoice,
            "MizuotoScript": MizuotoScript,
            "MizuotoSrt": MizuotoSrt,
            "MizuotoTrainingDataset": MizuotoTrainingDataset,
            "MizuotoTrainingClips": MizuotoTrainingClips,
            "MizuotoTrainVoice": MizuotoTrainVoice,
        },
        "NODE_DISPLAY_NAME_MAPPINGS": {spec.loader_node: spec.loader_title for spec in engines} | {
            "MizuotoSpeak": "Speak (Mizuoto)",
            "MizuotoRuntimeSettings": "Runtime Settings (Mizuoto)",
            "MizuotoVoice": "Voice (Mizuoto)",
            "MizuotoScript": "Script (Mizuoto)",
            "MizuotoSrt": "Speak Subtitles (SRT) (Mizuoto)",
            "MizuotoTrainingDataset": "Training Dataset (Mizuoto)",
            "MizuotoTrainingClips": "Training Clips (Mizuoto)",
            "MizuotoTrainVoice": "Train Voice (Mizuoto)",
        },
    }


def __getattr__(name: str) -> Any:
    if name in ("ENGINES", "NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"):
        return comfy_entry()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The engine registry: each engine folder declares one `EngineSpec` (as `ENGINE` in its package
`__init__.py`); the node mappings, model folders, loader nodes and the Speak node's choices come from it.

    # nodes/f5_tts/__init__.py
    ENGINE = EngineSpec(
        engine_id="f5_tts", display_name="F5-TTS", loader_node="MizuotoLoadF5TTS",
        build=build_engine,                      # (LoadRequest, ModelManager) -> Engine
        missing_files=missing_files,             # what a local model folder lacks ([]: complete)
        models={"F5TTS_v1_Base": (Download("SWivid/F5-TTS", ("F5TTS_v1_Base/model_1250000.safetensors", ...)),
                                  Download("charactr/vocos-mel-24khz", into="vocos"))},
        precisions=("fp32", "bf16", "fp16"), license="weights CC-BY-NC-4.0")

Discovery imports every subpackage of `nodes/` and collects its `ENGINE`: adding an engine is adding
a folder. Node ids and input names never change once shipped (saved workflows).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..formats.download import Download

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .engine import Engine

PRECISIONS: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class LoadRequest:
    """What a loader node asks for: the model folder (None for engines without files), dtype, device."""

    model: str
    folder: Path | None
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class Trainer:
    """How an engine fine-tunes a voice (the Train Voice node and `python -m mizuoto train` call these).

    make_job(base=Path, list_file=Path, audio_dir=Path | None, save_name=str, epochs=int, batch_size=int,
             seed=int, preset=str, device=str[, sovits_epochs=int, discriminator=Path: GPT-SoVITS's second
             stage]) -> a picklable job, its options checked (ValueError naming one)
    run(job, progress=None, interrupted=None) -> a result with .voice (the new folder), .losses, .steps,
             .updates, .seconds_per_step, .estimate_mb, .numerics; module level (the job process imports it);
             progress(stage, done, total, loss | None); raises training.job.Interrupted when interrupted()
    """

    make_job: Callable[..., Any]
    run: Callable[..., Any]
    presets: tuple[str, ...]


@dataclass(frozen=True)
class EngineSpec:
    engine_id: str                                      # also the folder under models/TTS
    display_name: str                                   # "Qwen3-TTS"
    loader_node: str                                    # node id, never renamed: "MizuotoLoadQwen3TTS"
    build: Callable[[LoadRequest, ModelManager], Engine]
    # what a local folder lacks to be a complete model ([]: complete); None: no model folder (embedded)
    missing_files: Callable[[Path], list[str]] | None = None
    models: dict[str, tuple[Download, ...]] = field(default_factory=dict)   # known upstream models
    # earlier names of known models -> today's: a saved workflow's widget value is kept like a node id
    renamed: dict[str, str] = field(default_factory=dict)
    languages: tuple[str, ...] = ("auto",)              # every language its models may speak (Speak's choices)
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")  # first is the loader's default
    loader_display: str = ""                            # "Load Qwen3-TTS" by default
    description: str = ""                               # the loader's tooltip: what it loads, licence
    license: str = ""                                   # of the weights, shown in the tooltip and README
    trainer: Trainer | None = None                      # fine-tuning (Train Voice); None: not trainable

    def __post_init__(self) -> None:
        unknown = [p for p in self.precisions if p not in PRECISIONS]
        if unknown:
            raise ValueError(f"{self.engine_id}: unknown precisions {unknown}; expected some of {list(PRECISIONS)}")
        stale = {old: new for old, new in self.renamed.items() if new not in self.models}
        if stale:
            raise ValueError(f"{self.engine_id}: renamed models point at unknown names {stale}; expected some of "
                             f"{list(self.models)}")

    @property
    def embedded(self) -> bool:
        return self.missing_files is None

    def is_model_folder(self, folder: Path) -> bool:
        return self.missing_files is not None and not self.missing_files(Path(folder))

    @property
    def loader_title(self) -> str:
        return self.loader_display or f"Load {self.display_name}"


def _nodes_package(package: str | None) -> str:
    return package or __name__.rsplit(".", 2)[0]          # the `nodes` package, whatever the pack is called


def engine_folders(package: str | None = None) -> list[str]:
    """The subpackages of `nodes/` that may declare an engine (`nodes.engine_folders`: no import)."""
    return importlib.import_module(_nodes_package(package)).engine_folders()


def engine(engine_id: str, package: str | None = None) -> EngineSpec:
    """The `ENGINE` of one engine folder, importing only that engine (the command line's path)."""
    if engine_id not in engine_folders(package):
        raise ValueError(f"engine {engine_id!r}: not an engine of this pack; expected one of "
                         f"{', '.join(engine_folders(package))}")
    spec = getattr(importlib.import_module(f"{_nodes_package(package)}.{engine_id}"), "ENGINE", None)
    if not isinstance(spec, EngineSpec) or spec.engine_id != engine_id:
        raise ValueError(f"engine {engine_id!r}: its folder declares no EngineSpec with that id")
    return spec


def discover(package: str | None = None) -> list[EngineSpec]:
    """Every `ENGINE` declared by a subpackage of `nodes/` (the embedded voice first, then by name).

    A folder without `ENGINE` is not an engine (yet); two engines claiming one id or node id is an error.
    """
    package = _nodes_package(package)
    specs = []
    for name in engine_folders(package):
        spec = getattr(importlib.import_module(f"{package}.{name}"), "ENGINE", None)
        if isinstance(spec, EngineSpec):
            specs.append(spec)
    for attr in ("engine_id", "loader_node"):
        seen: dict[str, str] = {}
        for spec in specs:
            value = getattr(spec, attr)
            if value in seen:
                raise ValueError(f"engines {seen[value]!r} and {spec.engine_id!r} both declare {attr} {value!r}")
            seen[value] = spec.engine_id
    return sorted(specs, key=lambda s: (not s.embedded, s.display_name.lower()))


def languages(package: str | None = None) -> list[str]:
    """"auto" and every language a registered engine declares (the Speak and Voice nodes' choices)."""
    codes = {code for spec in discover(package) for code in spec.languages}
    return ["auto"] + sorted(codes - {"auto"})

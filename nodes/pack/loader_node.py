"""One loader node per registered engine, made from its EngineSpec (no per-engine copies).

Inputs: `model` (engines with model folders: local folders under models/TTS/<engine>/ that hold a
complete model, then known upstream models not yet downloaded), `precision`, `device`. A known model
that is missing downloads into the first TTS folder, each file checked against its published sha256.
The output is a `LoadedModel`: a name and how to load, the weights living in the runtime service.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..formats import folders
from ..formats.download import DownloadError, Hubs, LocalSource, download_model, download_plan, layout
from .pack_runtime import get_runtime
from .pipeline import LoadedModel
from .registry import PRECISIONS, EngineSpec, LoadRequest
from .speak import CATEGORY, progress_bar

DEVICES = ["auto", "cpu"]


def hub_source():
    """The hubs the downloads name, or a local mirror folder named by $MIZUOTO_HUB_MIRROR (tests, offline)."""
    mirror = os.environ.get("MIZUOTO_HUB_MIRROR")
    return LocalSource(mirror) if mirror else Hubs()


def local_models(spec: EngineSpec) -> list[str]:
    """Names of complete model folders of the engine in every registered TTS folder."""
    return [n for n in folders.list_models(spec.engine_id)
            if any(spec.is_model_folder(r / spec.engine_id / n) for r in folders.roots())]


def model_choices(spec: EngineSpec) -> list[str]:
    local = local_models(spec)
    return local + [n for n in spec.models if n not in local]


def model_folder(spec: EngineSpec, name: str, progress: Callable[[int, int], None] | None = None) -> Path:
    """The folder of model `name`, downloading a known upstream model into the first TTS folder if absent."""
    try:
        return folders.resolve(spec.engine_id, name)
    except folders.ModelNotFound:
        if name not in spec.models:
            raise
    dest = folders.roots()[0] / spec.engine_id / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = hub_source()
    try:
        return download_model(download_plan(spec.models[name], source), dest, source, progress, what=name)
    except DownloadError as e:
        # the layout, not just the repositories: several models need subfolders (vocos/, campplus/, ...)
        raise DownloadError(f"model {name!r} is not in {dest} and could not be downloaded: {e}. To install it "
                            f"by hand, download these hub files (repository: path; * matches any name) into "
                            f"this layout:\n{layout(spec.models[name], f'{dest}/')}") from None


def current_name(spec: EngineSpec, name: str) -> str:
    """A model's name as the loader lists it today: an earlier name of a known model maps to its new one,
    unless a local folder still has the old name."""
    if name in spec.renamed and name not in local_models(spec):
        return spec.renamed[name]
    return name


def check_choice(name: str, value: object, choices: list[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


def load(spec: EngineSpec, model: str | None, precision: str, device: str,
         progress: Callable[[int, int], None] | None = None) -> LoadedModel:
    """A LoadedModel for the loader inputs (validated; a missing known model is downloaded first)."""
    check_choice("precision", precision, list(spec.precisions))
    check_choice("device", device, DEVICES)
    runtime = get_runtime()
    target = runtime.device if device == "auto" else torch.device("cpu")
    folder = None
    if not spec.embedded:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model: expected a model name from models/TTS/{spec.engine_id}/, got {model!r}")
        model = current_name(spec, model)
        folder = model_folder(spec, model, progress)
        missing = spec.missing_files(folder)
        if missing:
            raise ValueError(f"model: {folder} is not a complete {spec.display_name} model folder; missing "
                             f"{', '.join(missing)} (docs/models.md has each model's layout)")
    name = model if not spec.embedded else spec.display_name
    return LoadedModel(spec, LoadRequest(name, folder, PRECISIONS[precision], target), runtime)


def loader_node(spec: EngineSpec) -> type:
    """The ComfyUI loader node class of an engine (its id is `spec.loader_node`)."""
    def input_types(cls) -> dict[str, Any]:
        required: dict[str, Any] = {}
        if not spec.embedded:
            required["model"] = (model_choices(spec), {"tooltip": f"a folder in models/TTS/{spec.engine_id}/ "
                                                                 "or a known model to download"})
        required["precision"] = (list(spec.precisions), {"default": spec.precisions[0]})
        required["device"] = (DEVICES, {"default": "auto"})
        return {"required": required, "hidden": {"unique_id": "UNIQUE_ID"}}

    if spec.embedded:
        def load_node(self, precision: str, device: str, unique_id=None) -> tuple[LoadedModel]:
            return (load(spec, None, precision, device, progress_bar(unique_id)),)
    else:
        def load_node(self, model: str, precision: str, device: str, unique_id=None) -> tuple[LoadedModel]:
            return (load(spec, model, precision, device, progress_bar(unique_id)),)

    def validate_inputs(cls, model: str) -> bool | str:
        """ComfyUI's list check for `model`, plus the earlier names saved workflows still hold (ComfyUI
        skips its own check for an input named here)."""
        choices = model_choices(spec)
        return model in choices or model in spec.renamed or f"expected one of {choices}, got {model!r}"

    description = " ".join(p for p in (spec.description, f"Weights: {spec.license}." if spec.license else "") if p)
    extra = {"VALIDATE_INPUTS": classmethod(validate_inputs)} if not spec.embedded else {}
    return type(spec.loader_node, (), {
        "__doc__": f"{spec.loader_title}: {description}",
        "CATEGORY": CATEGORY, "RETURN_TYPES": ("MIZUOTO_TTS",), "RETURN_NAMES": ("model",),
        "FUNCTION": "load", "DESCRIPTION": description or spec.loader_title,
        "INPUT_TYPES": classmethod(input_types), "load": load_node, **extra,
    })

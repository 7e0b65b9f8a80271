"""Qwen3-TTS in ComfyUI: the loader node (local folders under models/TTS/qwen3_tts, or a download
from the upstream Hugging Face repository) and the adapter the Speak node talks to."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ..common import folders
from ..common.download import HuggingFaceSource, LocalSource, download
from ..common.pack_runtime import get_runtime
from ..common.speak import CATEGORY, progress_bar
from ..common.text import split_sentences
from .loader import is_model_folder, load_qwen3_tts
from .phases import Qwen3TTSEngine

ENGINE = "qwen3_tts"
REPOS = {name: f"Qwen/{name}" for name in (
    "Qwen3-TTS-12Hz-0.6B-Base", "Qwen3-TTS-12Hz-0.6B-CustomVoice", "Qwen3-TTS-12Hz-1.7B-Base",
    "Qwen3-TTS-12Hz-1.7B-CustomVoice", "Qwen3-TTS-12Hz-1.7B-VoiceDesign")}
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEVICES = ["auto", "cpu"]
LANGUAGE_NAMES = {"en": "english", "zh": "chinese", "ja": "japanese", "ko": "korean", "de": "german",
                  "fr": "french", "ru": "russian", "pt": "portuguese", "es": "spanish", "it": "italian"}
_loaded: dict[tuple[str, str, str], Qwen3TTSModel] = {}


class Qwen3TTSModel:
    """What the Speak node needs: long text read sentence by sentence, seed + i for chunk i."""

    PHASED = True  # the engine places its components phase by phase
    sample_rate = 24000

    def __init__(self, engine: Qwen3TTSEngine, name: str) -> None:
        self.engine = engine
        self.manager = engine.manager
        self.name = name

    def speak(self, ctx, text: str, *, seed: int = 0, speed: float = 1.0, language: str = "auto",
              voice: str | None = None, reference: tuple[torch.Tensor, int] | None = None,
              reference_text: str | None = None, instruction: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
        if speed != 1.0:
            raise ValueError(f"speed: Qwen3-TTS has no speaking-rate control; expected 1.0 (describe the pace "
                             f"in the instruction instead), got {speed}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text: empty or only whitespace; expected something to read")
        chunks = split_sentences(text)
        out = []
        for i, chunk in enumerate(chunks):
            ctx.check_cancelled()
            ctx.generator.manual_seed(seed + i)
            out.append(self.engine.speak(
                ctx, chunk, language=LANGUAGE_NAMES.get(language, language), speaker=voice,
                instruct=instruction or None, ref_audio=reference, ref_text=reference_text,
                x_vector_only=reference is not None and not reference_text))
            if progress is not None:
                progress(i + 1, len(chunks))
        return torch.cat(out)


def hub_source():
    """The Hugging Face hub, or a local mirror folder named by $MIZUOTO_HUB_MIRROR (tests, offline)."""
    mirror = os.environ.get("MIZUOTO_HUB_MIRROR")
    return LocalSource(mirror) if mirror else HuggingFaceSource()


def model_choices() -> list[str]:
    local = [n for n in folders.list_models(ENGINE) if any(is_model_folder(r / ENGINE / n) for r in folders.roots())]
    return local + [n for n in REPOS if n not in local]


def model_folder(name: str, progress: Callable[[int, int], None] | None = None):
    """The folder of `name`, downloading a known upstream model into the first TTS folder if absent."""
    try:
        return folders.resolve(ENGINE, name)
    except folders.ModelNotFound:
        if name not in REPOS:
            raise
    dest = folders.roots()[0] / ENGINE / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    return download(REPOS[name], dest, hub_source(), progress=progress)


class MizuotoLoadQwen3TTS:
    """Load a Qwen3-TTS model from models/TTS/qwen3_tts (downloading a known one if missing)."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_TTS",)
    RETURN_NAMES = ("model",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"model": (model_choices(),),
                             "precision": (list(PRECISIONS), {"default": "bf16"}),
                             "device": (DEVICES, {"default": "auto"})},
                "hidden": {"unique_id": "UNIQUE_ID"}}

    def load(self, model: str, precision: str, device: str, unique_id=None) -> tuple[Qwen3TTSModel]:
        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {list(PRECISIONS)}, got {precision!r}")
        if device not in DEVICES:
            raise ValueError(f"device: expected one of {DEVICES}, got {device!r}")
        key = (model, precision, device)
        if key not in _loaded:
            bar = progress_bar(unique_id)
            folder = model_folder(model, bar)
            runtime = get_runtime()
            target = runtime.device if device == "auto" else torch.device("cpu")
            engine = Qwen3TTSEngine(load_qwen3_tts(folder, PRECISIONS[precision]), runtime.manager, device=target)
            runtime.service.add(f"{ENGINE}:{model}:{precision}:{device}", engine.handles,
                                on_evict=lambda: _loaded.pop(key, None))
            _loaded[key] = Qwen3TTSModel(engine, model)
        return (_loaded[key],)

"""The embedded voice's loader node: no file to choose, it ships inside the hibari-tts wheel."""
from __future__ import annotations

import torch

from ..common.pack_runtime import get_runtime
from ..common.speak import CATEGORY
from .engine import HibariVoice
from .phases import HibariEngine

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEVICES = ["auto", "cpu"]
_loaded: dict[tuple[str, str], HibariEngine] = {}  # strong references: ComfyUI only keeps weak ones


class MizuotoLoadHibari:
    """Load the embedded default voice (hibari "heart", English, 24 kHz)."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_TTS",)
    RETURN_NAMES = ("model",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"precision": (list(PRECISIONS), {"default": "fp32"}),
                             "device": (DEVICES, {"default": "auto"})}}

    def load(self, precision: str, device: str) -> tuple[HibariEngine]:
        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {list(PRECISIONS)}, got {precision!r}")
        if device not in DEVICES:
            raise ValueError(f"device: expected one of {DEVICES}, got {device!r}")
        key = (precision, device)
        if key not in _loaded:
            runtime = get_runtime()
            target = runtime.device if device == "auto" else torch.device("cpu")
            engine = HibariEngine(HibariVoice.load(dtype=PRECISIONS[precision]), runtime.manager, device=target)
            runtime.service.add(f"hibari:{precision}:{device}", [engine.handle],
                                on_evict=lambda: _loaded.pop(key, None))
            _loaded[key] = engine
        return (_loaded[key],)

"""hibari "heart": the embedded default voice (hibari-tts 0.2.1, Apache-2.0, distilled from Kokoro-82M
af_heart), run as our own torch module from the ONNX file inside the installed wheel; see engine.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import EngineSpec, LoadRequest

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import HibariEngine


def build(request: LoadRequest, manager: ModelManager) -> HibariEngine:
    from .engine import HibariVoice
    from .phases import HibariEngine
    return HibariEngine(HibariVoice.load(dtype=request.dtype), manager, device=request.device)


ENGINE = EngineSpec(
    engine_id="hibari", display_name="hibari heart", loader_node="MizuotoLoadHibari", build=build,
    loader_display="Load Embedded Voice (hibari heart)", languages=("auto", "en"), precisions=("fp32", "bf16", "fp16"),
    description="The embedded default voice (English, 24 kHz); its weights ship inside the hibari-tts "
                "package, nothing to download.",
    license="Apache-2.0")

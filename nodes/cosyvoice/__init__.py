"""CosyVoice 2 and 3 (FunAudioLLM, code Apache-2.0) as a native torch engine: Qwen2 speech-token LM, flow
matching (conformer + UNet for v2, DiT for v3), HiFT vocoder, and the S3 speech tokenizer and CAM++
speaker model run from their ONNX files; upstream checkpoints load unchanged. See phases.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .loader import missing_files

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import CosyVoiceEngine

_BLANK_EN = tuple(f"CosyVoice-BlankEN/{f}" for f in ("config.json", "vocab.json", "merges.txt", "tokenizer_config.json"))


def build_engine(request: LoadRequest, manager: ModelManager) -> CosyVoiceEngine:
    from .loader import load_cosyvoice
    from .phases import CosyVoiceEngine
    if request.folder is None:
        raise ValueError("CosyVoice needs a model folder")
    return CosyVoiceEngine(load_cosyvoice(request.folder, request.dtype), manager, request.device)


ENGINE = EngineSpec(
    engine_id="cosyvoice", display_name="CosyVoice", loader_node="MizuotoLoadCosyVoice", build=build_engine,
    missing_files=missing_files,
    models={
        "CosyVoice2-0.5B": (Download("FunAudioLLM/CosyVoice2-0.5B", (
            "cosyvoice2.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v2.onnx",
            "spk2info.pt", *_BLANK_EN)),),
        "Fun-CosyVoice3-0.5B-2512": (Download("FunAudioLLM/Fun-CosyVoice3-0.5B-2512", (
            "cosyvoice3.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v3.onnx",
            "spk2info.pt", *_BLANK_EN)),),
    },
    precisions=("fp32", "bf16", "fp16"),
    description="CosyVoice 2 / 3 (0.5B): zero-shot voice cloning from a reference (with or without its "
                "transcript), instructions, built-in speakers of spk2info.pt; 24 kHz.",
    license="code Apache-2.0; weights under the FunAudioLLM model cards' terms",
)

"""VoxCPM 2 (openbmb/VoxCPM2, Apache-2.0 code and weights) as a native torch engine: a tokenizer-free 2B
model (MiniCPM-4 base LM + residual LM, LocEnc, LocDiT flow head, FSQ, AudioVAE V2: 16 kHz in, 48 kHz
out), loading the upstream files unchanged; see phases.py."""
from __future__ import annotations

from ..pack.registry import Download, EngineSpec, LoadRequest
from .text import LANGUAGES


def build_engine(request: LoadRequest, manager):
    from .loader import load_voxcpm
    from .phases import VoxCPMEngine
    return VoxCPMEngine(load_voxcpm(request.folder, request.dtype), manager, device=request.device,
                        name=request.model)


def _missing_files(folder):
    from .loader import missing_files
    return missing_files(folder)


ENGINE = EngineSpec(
    engine_id="voxcpm",
    display_name="VoxCPM 2",
    loader_node="MizuotoLoadVoxCPM",
    build=build_engine,
    missing_files=_missing_files,
    models={"VoxCPM2": (Download("openbmb/VoxCPM2", include=("config.json", "model.safetensors", "audiovae.pth",
                                                              "tokenizer.json", "tokenizer_config.json",
                                                              "special_tokens_map.json")),)},
    languages=LANGUAGES,
    precisions=("bf16", "fp32", "fp16"),
    description="VoxCPM 2 (OpenBMB): 2B tokenizer-free TTS, 48 kHz, 30 languages, voice design from an "
                "instruction, cloning from reference audio (with its transcript for continuation cloning).",
    license="Apache-2.0 (code and weights)",
)

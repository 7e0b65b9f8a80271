"""F5-TTS v1 (PyPI f5-tts 1.1.22, code MIT; F5TTS_v1_Base weights CC-BY-NC-4.0) as a native torch
engine: the DiT flow-matching model on the shared solver (nodes/blocks/flow.py) and Vocos
(nodes/blocks/vocoder.py), loading the upstream files unchanged; see phases.py."""
from __future__ import annotations

from pathlib import Path

from ..pack.registry import Download, EngineSpec, LoadRequest, Trainer


def build_engine(request: LoadRequest, manager):
    from .loader import load_f5_tts
    from .phases import F5TTSEngine
    return F5TTSEngine(load_f5_tts(request.folder, request.dtype), manager, request.device, name=request.model)


def missing_files(folder: Path) -> list[str]:
    from .loader import missing_files as check
    return check(folder)


def make_train_job(**options):
    from .train import make_job
    return make_job(**options)


def run_train_job(job, progress=None, interrupted=None):
    """The training process's entry (module level: the spawned process imports it by name)."""
    from .train import train_voice
    return train_voice(job, progress=progress, interrupted=interrupted or (lambda: False))


ENGINE = EngineSpec(
    engine_id="f5_tts", display_name="F5-TTS", loader_node="MizuotoLoadF5TTS",
    build=build_engine, missing_files=missing_files, languages=("auto", "en", "zh"),
    models={"F5TTS_v1_Base": (
        Download("SWivid/F5-TTS", include=("F5TTS_v1_Base/model_1250000.safetensors", "F5TTS_v1_Base/vocab.txt"),
                 strip="F5TTS_v1_Base"),
        Download("charactr/vocos-mel-24khz", include=("config.yaml", "pytorch_model.bin"), into="vocos"))},
    precisions=("fp16", "fp32", "bf16"),   # upstream runs fp16 on GPUs
    description="F5-TTS v1 voice cloning (reference audio + its transcript; English and Chinese). Model folders "
                "in models/TTS/f5_tts/<model>/: model_*.safetensors + vocab.txt from SWivid/F5-TTS, vocos/ from "
                "charactr/vocos-mel-24khz. Weights: CC-BY-NC-4.0 (non-commercial); code: MIT.",
    license="F5TTS_v1_Base weights CC-BY-NC-4.0 (non-commercial); Vocos MIT",
    # finetune_cli's recipe; every preset applies (AdamW, so the host-side optimizer too)
    trainer=Trainer(make_job=make_train_job, run=run_train_job, presets=("fast", "balanced", "low", "lowest")))

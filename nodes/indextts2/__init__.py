"""IndexTTS 2 (bilibili Index team) as a native torch engine: GPT-2 "UnifiedVoice" with conformer + perceiver
speaker and emotion conditioners, s2mel (length regulator + DiT flow matching with a WaveNet head), BigVGAN v2,
plus w2v-bert-2.0 features, the MaskGCT semantic codec and CAM++; upstream checkpoints load unchanged.
See phases.py for what runs and which modes are offered."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..pack.registry import Download, EngineSpec, LoadRequest
from .loader import missing_files

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .phases import IndexTTS2Engine

LICENSE = ("weights: bilibili Model Use License (IndexTeam/IndexTTS-2); external models under their own terms "
           "(w2v-bert-2.0 MIT, MaskGCT semantic codec CC-BY-NC-4.0, CAM++ Apache-2.0, BigVGAN MIT)")


def build_engine(request: LoadRequest, manager: ModelManager) -> IndexTTS2Engine:
    from .loader import load_indextts2
    from .phases import IndexTTS2Engine
    if request.folder is None:
        raise ValueError("IndexTTS 2 needs a model folder")
    return IndexTTS2Engine(load_indextts2(request.folder, request.dtype), manager, request.device)


ENGINE = EngineSpec(
    engine_id="indextts2", display_name="IndexTTS 2", loader_node="MizuotoLoadIndexTTS2", build=build_engine,
    missing_files=missing_files, languages=("auto", "en", "zh"),
    models={
        "IndexTTS-2": (
            Download("IndexTeam/IndexTTS-2", ("config.yaml", "gpt.pth", "s2mel.pth", "bpe.model",
                                              "wav2vec2bert_stats.pt", "feat1.pt", "feat2.pt",
                                              "qwen0.6bemo4-merge/*")),
            Download("funasr/campplus", ("campplus_cn_common.bin",), into="campplus"),
            Download("nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt"), into="bigvgan"),
            Download("amphion/MaskGCT", ("semantic_codec/model.safetensors",)),
            Download("facebook/w2v-bert-2.0", ("config.json", "model.safetensors"), into="w2v-bert-2.0"),
        ),
    },
    precisions=("fp32", "fp16", "bf16"),
    description="IndexTTS 2: zero-shot voice cloning from a speaker reference, with emotion from a second "
                "reference (option emotion_reference), eight weights (options happy ... calm) or text (option "
                "emotion_text, the Qwen3 emotion model), blended by emotion_alpha; 22.05 kHz. Licence: " + LICENSE,
    license=LICENSE,
)

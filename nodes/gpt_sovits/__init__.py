"""GPT-SoVITS v2 / v2Pro / v2ProPlus (github.com/RVC-Boss/GPT-SoVITS, MIT) as a native torch engine:
the T2S transformer, the SoVITS decoder, chinese-hubert and the ERes2NetV2 speaker model in plain torch,
loading upstream's files unchanged (loader.py); English text (english.py); see phases.py."""
from __future__ import annotations

from pathlib import Path

from ..common.registry import EngineSpec, LoadRequest


def build_engine(request: LoadRequest, manager):
    from .loader import load_gpt_sovits
    from .phases import GPTSoVITSEngine
    return GPTSoVITSEngine(load_gpt_sovits(request.folder, request.dtype), manager, request.device, name=request.model)


def is_model_folder(folder: Path) -> bool:
    from .loader import is_model_folder as check
    return check(folder)


ENGINE = EngineSpec(
    engine_id="gpt_sovits", display_name="GPT-SoVITS", loader_node="MizuotoLoadGPTSoVITS",
    build=build_engine, is_model_folder=is_model_folder, languages=("en",),
    precisions=("fp32", "fp16", "bf16"),
    description="GPT-SoVITS v2 / v2Pro / v2ProPlus voice cloning (3-10 s reference audio + its transcript; English "
                "text). A model folder models/TTS/gpt_sovits/<voice>/ holds one GPT *.ckpt and one SoVITS *.pth "
                "(pretrained or your own fine-tuned pair); models/TTS/gpt_sovits/pretrained_models/ holds "
                "chinese-hubert-base/, sv/ (v2Pro) and text/ (cmudict.rep, cmudict-fast.rep, engdict-hot.rep from "
                "GPT_SoVITS/text/). Code: MIT.",
    license="GPT-SoVITS pretrained weights MIT (lj1995/GPT-SoVITS); fine-tuned voices: their authors' terms")

"""GPT-SoVITS v2 / v2Pro / v2ProPlus (github.com/RVC-Boss/GPT-SoVITS, MIT) as a native torch engine:
the T2S transformer, the SoVITS decoder, chinese-hubert and the ERes2NetV2 speaker model in plain torch,
loading upstream's files unchanged (loader.py); English (english.py) and Chinese with English words
(frontend.py: chinese.py, zh_normalize.py, tone_sandhi.py, g2pw.py); see phases.py."""
from __future__ import annotations

from pathlib import Path

from ..pack.registry import Download, EngineSpec, LoadRequest, Trainer


def build_engine(request: LoadRequest, manager):
    from .loader import load_gpt_sovits
    from .phases import GPTSoVITSEngine
    return GPTSoVITSEngine(load_gpt_sovits(request.folder, request.dtype), manager, request.device, name=request.model)


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


SHARED = ("chinese-hubert-base/*", "chinese-roberta-wwm-ext-large/*")
SV = "sv/pretrained_eres2netv2w24s4ep4.ckpt"

ENGINE = EngineSpec(
    engine_id="gpt_sovits", display_name="GPT-SoVITS", loader_node="MizuotoLoadGPTSoVITS",
    build=build_engine, missing_files=missing_files, languages=("en", "zh"),
    # lj1995/GPT-SoVITS's pretrained pairs with the shared models inside the voice folder (loader.shared_path);
    # English also needs text/ (cmudict*.rep, engdict-hot.rep), which only the GitHub repository has.
    models={name: (Download("lj1995/GPT-SoVITS", include=files, strip=files[1].rpartition("/")[0]),)
            for name, files in (
                ("GPT-SoVITS-v2Pro", ("s1v3.ckpt", "v2Pro/s2Gv2Pro.pth", *SHARED, SV)),
                ("GPT-SoVITS-v2ProPlus", ("s1v3.ckpt", "v2Pro/s2Gv2ProPlus.pth", *SHARED, SV)),
                ("GPT-SoVITS-v2", ("gsv-v2final-pretrained/s1bert25hz-5kh-longer-epoch=12-step=369668.ckpt",
                                   "gsv-v2final-pretrained/s2G2333k.pth", *SHARED)))},
    renamed={"v2Pro": "GPT-SoVITS-v2Pro", "v2ProPlus": "GPT-SoVITS-v2ProPlus", "v2": "GPT-SoVITS-v2"},
    precisions=("fp32", "fp16", "bf16"),
    description="GPT-SoVITS v2 / v2Pro / v2ProPlus voice cloning (3-10 s reference audio + its transcript; Chinese "
                "with English words, or English). A model folder models/TTS/gpt_sovits/<voice>/ holds one GPT "
                "*.ckpt and one SoVITS *.pth (pretrained or your own fine-tuned pair); "
                "models/TTS/gpt_sovits/pretrained_models/ holds chinese-hubert-base/, chinese-roberta-wwm-ext-large/ "
                "(Chinese), sv/ (v2Pro), optionally G2PWModel/ (Chinese polyphones, as upstream) and text/ (files "
                "of GPT_SoVITS/text/: cmudict.rep, cmudict-fast.rep, engdict-hot.rep for English; g2pw/polyphonic"
                ".rep and polyphonic-fix.rep with G2PW). Code: MIT.",
    license="GPT-SoVITS pretrained weights MIT (lj1995/GPT-SoVITS); fine-tuned voices: their authors' terms",
    trainer=Trainer(make_job=make_train_job, run=run_train_job, presets=("fast", "balanced", "low")))

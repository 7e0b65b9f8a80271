"""The upstream GPT-SoVITS repository on sys.path, with stubs for what its model files import and inference
never runs (Lightning, torchmetrics, the v3 DiT, librosa). Shared by make_fixtures.py and real_structure.py."""
from __future__ import annotations

import os
import sys
import types
from pathlib import Path

from torch import nn
import transformers  # noqa: F401  (imported before the librosa stub: it probes librosa's spec)

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ["GPT_SOVITS_REPO"]) if os.environ.get("GPT_SOVITS_REPO") else None
if REPO is None or not (REPO / "GPT_SoVITS" / "AR" / "models" / "t2s_model.py").is_file():
    sys.exit("set $GPT_SOVITS_REPO to RVC-Boss/GPT-SoVITS at commit 48b1a0169a28582a8984402f82cf438d3bfa6aca "
             f"unpacked outside this repository (tests/gpt_sovits/README.md); it is {str(REPO) if REPO else 'unset'}")
sys.path[:0] = [str(HERE.parent), str(REPO / "GPT_SoVITS"), str(REPO), str(REPO / "GPT_SoVITS" / "eres2net")]


def stub(name: str, **attrs) -> None:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod


class _Metric(nn.Module):
    def __init__(self, *a, **k):
        super().__init__()


# Only what the model files import and inference never runs.
stub("pytorch_lightning", LightningModule=nn.Module)
stub("torchmetrics")
stub("torchmetrics.classification", MulticlassAccuracy=_Metric)
stub("f5_tts")
stub("f5_tts.model", DiT=None)
stub("librosa")
stub("librosa.filters", mel=None)


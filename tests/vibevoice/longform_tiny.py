"""The tiny random long-form model recorded by make_longform_fixtures.py, read back for the tests."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from mizuoto.nodes.vibevoice.longform import LongformConfig, VibeVoiceLongform

HERE = Path(__file__).parent
GOLDEN = HERE / "fixtures" / "longform.safetensors"
TOKENIZER = HERE / "fixtures" / "tokenizer.json"
# Generation against the golden recording: within 1e-4 of each tensor's largest magnitude. Each op is float32 and
# another CPU kernel sums in another order (~1e-6 relative per op, test_longform_tokenizers.py), but generation is
# autoregressive: every frame's latent and audio feed the next LM step, so the difference grows with the frames.
# Measured on this machine under the kernels of others (tests/test_golden_travel.py's perturbations: scalar ATen
# with MKL's compatible path and oneDNN off; AVX2 with two threads): at most 2.3e-5 over the 40-frame run, 8.6e-6
# over the 10-frame one, the picked tokens unchanged. Within one machine the live tests demand torch.equal.
GENERATION_BOUND = 1e-4


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The file's tensors, each copied into a fresh allocation (a CPU kernel may sum in another order for a
    buffer at an odd offset in the file)."""
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).clone() for k in f.keys()}, f.metadata()


def model_from(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> VibeVoiceLongform:
    model = VibeVoiceLongform(LongformConfig.from_dict(json.loads(meta["config"]))).eval()
    model.load_state_dict({k[len("weight."):]: v for k, v in tensors.items() if k.startswith("weight.")}, strict=True)
    return model

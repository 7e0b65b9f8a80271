"""Record torchaudio's two resamplers on a fixed input (tests/resample_golden.json), for
tests/test_shared_blocks.py::test_torchaudio_resamplers_golden. Run where torchaudio imports, e.g. the
ComfyUI environment of tests/comfyui_e2e/README.md:

    $COMFY_VENV/bin/python tests/make_resample_golden.py     # torchaudio 2.11.1 was used
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torchaudio

PAIRS = [(44100, 24000), (24000, 16000), (22050, 16000)]


def signal(n: int, seed: int) -> torch.Tensor:
    """Drawn in float64 and rounded: float32 randn differs between CPU kernels."""
    return (0.3 * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))).float()


def main() -> None:
    out = {"torchaudio": torchaudio.__version__, "pairs": []}
    for orig, target in PAIRS:
        x = signal(800, orig + target)
        out["pairs"].append({
            "orig": orig, "target": target, "seed": orig + target, "n": 800,
            "transforms": torchaudio.transforms.Resample(orig, target)(x[None])[0].tolist(),
            "functional": torchaudio.functional.resample(x[None], orig, target)[0].tolist(),
        })
    path = Path(__file__).with_name("resample_golden.json")
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""VibeVoice 1.5B and Large (7B) at their real sizes, built on `meta`, against transformers' classes
(fixtures/longform_structure.json, recorded by make_longform_structure.py: transformers' names mapped to the
published checkpoint's): every name and shape equal, the same parameter count (2.70 B and 9.34 B)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.vibevoice.longform import LongformConfig, VibeVoiceLongform

RECORD = json.loads((Path(__file__).parent / "fixtures" / "longform_structure.json").read_text())


@pytest.mark.parametrize("size", ["1.5B", "7B"])
def test_structure_at_published_size(size: str) -> None:
    entry = RECORD[size]
    with torch.device("meta"):
        model = VibeVoiceLongform(LongformConfig.from_dict(entry["config"]))
    ours = {k: list(v.shape) for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        ours.pop("lm_head.weight")          # the tied head is the embedding (the published 1.5B stores it once)
    assert ours == entry["shapes"]
    # the two speech scalars are parameters in transformers, buffers upstream (and here)
    scalars = sum(b.numel() for b in model.buffers() if b.dim() == 0)
    assert scalars == 2
    assert sum(p.numel() for p in model.parameters()) + scalars == entry["parameters"]

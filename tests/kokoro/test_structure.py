"""Real-size structure: upstream's KModel built on meta from the published config (real_structure.py
recorded its names and shapes) against ours built on meta from the same config, through the loader."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.kokoro.loader import PARTS, UNUSED, fold_state, read_config
from mizuoto.nodes.kokoro.model import PUBLISHED_SIZES, KModel

HERE = Path(__file__).parent
REAL = json.loads((HERE / "real_kmodel.json").read_text(encoding="utf-8"))


def test_published_sizes_are_the_published_config():
    assert {**REAL["config"], "vocab": {}} == PUBLISHED_SIZES
    assert len(REAL["config"]["vocab"]) == 114 and max(REAL["config"]["vocab"].values()) == 177


def test_published_config_passes_the_config_checks(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(REAL["config"], ensure_ascii=False), encoding="utf-8")
    assert read_config(tmp_path) == REAL["config"]


def test_real_size_model_has_the_published_names_and_shapes():
    with torch.device("meta"):
        ours = KModel(REAL["config"])
        file = {part: {name: torch.empty(shape) for name, shape in REAL["parts"][part].items()} for part in PARTS}
    folded = fold_state(file, Path("kokoro-v1_0.pth"))
    expected = {k: list(v.shape) for k, v in ours.state_dict().items()}
    assert {k: list(v.shape) for k, v in folded.items()} == expected
    # every tensor of the file is read (g/v pairs as one weight) or is one of the named unused ones
    names = {f"{part}.{k.removeprefix('module.')}" for part in PARTS for k in REAL["parts"][part]}
    read = {n.removesuffix("_g").removesuffix("_v") if n.endswith((".weight_g", ".weight_v")) else n for n in names}
    assert read - set(expected) == {"bert.pooler.weight", "bert.pooler.bias"} <= set(UNUSED)
    assert len(names) == 688
    values = sum(torch.Size(s).numel() for s in expected.values())
    assert 81_000_000 < values < 82_500_000, values


def test_a_file_without_the_adain_norm_pairs_loads_them_as_identity(tmp_path):
    """Upstream's KModel loads non-strictly: a missing InstanceNorm affine pair stays (1, 0). Ours too,
    and only for those: any other missing tensor is still refused, naming it."""
    from kokoro.tiny import write_tiny

    from mizuoto.nodes.formats.checkpoint import CheckpointError
    from mizuoto.nodes.kokoro.loader import load_model
    folder = write_tiny(tmp_path / "tiny")
    parts = torch.load(folder / "kokoro-v1_0.pth", weights_only=True)
    dropped = [(p, k) for p, state in parts.items() for k in state if k.endswith((".norm.weight", ".norm.bias"))]
    assert len(dropped) > 20
    for p, k in dropped:
        del parts[p][k]
    torch.save(parts, folder / "kokoro-v1_0.pth")
    model = load_model(folder)
    for p, k in dropped:
        value = model.state_dict()[f"{p}.{k.removeprefix('module.')}"]
        assert torch.equal(value, torch.ones_like(value) if k.endswith("weight") else torch.zeros_like(value))
    del parts["decoder"]["module.encode.conv1.bias"]
    torch.save(parts, folder / "kokoro-v1_0.pth")
    with pytest.raises(CheckpointError, match="encode.conv1.bias"):
        load_model(folder)

"""A VibeVoice-Realtime folder in the published layout loads unchanged (the unused parts of the file unread), equal
to the recorded model; bad folders are refused naming the file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from vibevoice.realtime_tiny import GOLDEN, model_from, read, write_folder

from mizuoto.nodes.formats.checkpoint import ModelFolderError
from mizuoto.nodes.vibevoice.loader import load_realtime
from mizuoto.runtime.loading import CheckpointError


def test_published_layout_loads_equal(tmp_path: Path) -> None:
    tensors, meta = read(GOLDEN)
    folder = write_folder(tensors, meta, tmp_path / "rt")
    model = load_realtime(folder)
    ref = model_from(tensors, meta)
    mine = dict(model.named_parameters()) | dict(model.named_buffers())
    theirs = dict(ref.named_parameters()) | dict(ref.named_buffers())
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    half = load_realtime(folder, torch.bfloat16)
    assert half.model.tts_input_types.weight.dtype == torch.bfloat16


def test_missing_config_and_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelFolderError, match="not found"):
        load_realtime(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFolderError, match="config.json"):
        load_realtime(tmp_path / "empty")


def test_bad_config_names_the_file(tmp_path: Path) -> None:
    tensors, meta = read(GOLDEN)
    folder = write_folder(tensors, meta, tmp_path / "rt")
    cfg = json.loads(meta["config"])
    cfg["tts_backbone_num_hidden_layers"] = 9
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config.json: tts_backbone_num_hidden_layers"):
        load_realtime(folder)


def test_a_foreign_tensor_is_refused(tmp_path: Path) -> None:
    tensors, meta = read(GOLDEN)
    folder = write_folder(tensors, meta, tmp_path / "rt")
    state = load_file(str(folder / "model.safetensors"))
    state["model.language_model.norm.weight"] = torch.ones(32)    # upstream's base LM has no final norm
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"unexpected keys \(1\) model\.language_model\.norm\.weight"):
        load_realtime(folder)


def test_a_wrong_size_names_the_config_field(tmp_path: Path) -> None:
    tensors, meta = read(GOLDEN)
    folder = write_folder(tensors, meta, tmp_path / "rt")
    cfg = json.loads(meta["config"])
    cfg["decoder_config"]["intermediate_size"] = 48
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="intermediate_size"):
        load_realtime(folder)

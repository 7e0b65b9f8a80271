"""Real-size structure: our modules, built on meta from the published configs, have exactly upstream's tensor
names and shapes (real_*.json, recorded from upstream's classes by real_structure.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.gpt_sovits.bert import BertConfig, BertFeatures
from mizuoto.nodes.blocks.hubert import Hubert, HubertConfig
from mizuoto.nodes.gpt_sovits.sovits import SoVITSConfig
from mizuoto.nodes.gpt_sovits.speaker import ERes2NetV2
from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic

from gpt_sovits.tiny import sovits_upstream_shapes

HERE = Path(__file__).parent


def real(name: str) -> tuple[dict, dict[str, list[int]]]:
    data = json.loads((HERE / f"real_{name}.json").read_text())
    return data["config"], data["tensors"]


def ours(module: torch.nn.Module, prefix: str = "") -> dict[str, list[int]]:
    return {prefix + k: list(v.shape) for k, v in module.state_dict().items()}


def test_t2s():
    config, tensors = real("t2s_v2")
    with torch.device("meta"):
        model = Text2Semantic(T2SConfig.from_dict(config, "s1longer-v2.yaml"))
    assert ours(model, "model.") == tensors


@pytest.mark.parametrize("version", ["v2", "v2Pro", "v2ProPlus"])
def test_sovits(version):
    config, tensors = real(f"sovits_{version}")
    cfg = SoVITSConfig.from_hparams(config, version, 732, f"s2 {version}")
    assert {k: list(s) for k, (s, _) in sovits_upstream_shapes(cfg).items()} == tensors


def test_speaker_model():
    _, tensors = real("sv_eres2netv2w24s4ep4")
    with torch.device("meta"):
        model = ERes2NetV2()
    assert ours(model) == tensors and model.out_dim == 20480


def test_hubert():
    config, tensors = real("chinese_hubert_base")
    with torch.device("meta"):
        model = Hubert(HubertConfig.from_dict(config, "config.json"), masked_spec_embed=True)
    assert ours(model) == tensors


def test_roberta_large():
    config, tensors = real("chinese_roberta_wwm_ext_large")
    cfg = BertConfig.from_dict(config, "config.json")
    with torch.device("meta"):
        model = BertFeatures(cfg)
    mine = ours(model)
    unused = {k for k in tensors if k.startswith(("cls.", "bert.encoder.layer.22.", "bert.encoder.layer.23."))}
    assert {k: v for k, v in tensors.items() if k not in unused} == mine
    assert cfg.used_layers == 22

"""Real-size structure: our modules built on meta from the published config.yaml have exactly the tensor
names and shapes of upstream's (recorded by make_fixtures.py into real_indextts2.json, weight-norm pairs
folded to the weight they stand for). Parts upstream never runs at inference are compared as left out:
the codec's decoder, w2v-bert layers 17-23, its adapter and masked-spec embedding."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

# real_indextts2.json is recorded from upstream (integers only: names and shapes travel as they are)
pytestmark = pytest.mark.golden

from mizuoto.nodes.blocks.campplus import CAMPPlus
from mizuoto.nodes.blocks.w2v_bert import W2VBert, W2VBertConfig
from mizuoto.nodes.indextts2.codec import SemanticCodec
from mizuoto.nodes.indextts2.gpt import UnifiedVoice
from mizuoto.nodes.indextts2.loader import SEMANTIC_LAYER, codec_config, gpt_config, s2mel_config
from mizuoto.nodes.indextts2.s2mel import S2Mel

REAL = json.loads((Path(__file__).parent / "real_indextts2.json").read_text())
PATH = Path("config.yaml")


def shapes(module: torch.nn.Module, state: bool = False) -> dict[str, list[int]]:
    items = module.state_dict().items() if state else module.named_parameters()
    return {k: list(v.shape) for k, v in items}


@pytest.fixture(scope="module")
def ours() -> dict[str, torch.nn.Module]:
    c = REAL["config"]
    with torch.device("meta"):
        g = gpt_config(c, PATH)
        return {"gpt": UnifiedVoice(g), "s2mel": S2Mel(s2mel_config(c, PATH, g.model_dim)),
                "codec": SemanticCodec(codec_config(c, PATH)), "campplus": CAMPPlus(),
                "w2v_bert": W2VBert(W2VBertConfig.from_dict(REAL["w2v_bert"]), SEMANTIC_LAYER)}


def test_gpt_matches_upstream(ours):
    assert shapes(ours["gpt"]) == REAL["gpt"]


def test_s2mel_matches_upstream(ours):
    for name, expected in REAL["s2mel"].items():
        assert shapes(getattr(ours["s2mel"], name)) == expected, name


def test_codec_matches_upstream_without_its_decoder(ours):
    assert shapes(ours["codec"]) == {k: v for k, v in REAL["codec"].items() if not k.startswith("decoder.")}


def test_campplus_matches_upstream(ours):
    assert shapes(ours["campplus"], state=True) == REAL["campplus"]


def test_w2v_bert_matches_the_layers_run(ours):
    def used(k: str) -> bool:
        return k.startswith("feature_projection.") or (k.startswith("encoder.layers.")
                                                       and int(k.split(".")[2]) < SEMANTIC_LAYER)
    assert shapes(ours["w2v_bert"]) == {k: v for k, v in REAL["w2v_bert_params"].items() if used(k)}


def test_real_sizes(ours):
    """The sub-models' parameter counts at real scale (the numbers in the engine's note)."""
    count = {name: sum(v.numel() for v in m.parameters()) for name, m in ours.items()}
    assert count == {"gpt": 865_980_639, "s2mel": 103_643_600, "codec": 22_185_864, "campplus": 6_848_544,
                     "w2v_bert": 411_230_080}
    assert sum(v.numel() for k, v in ours["gpt"].named_parameters() if k.startswith("gpt.")) == 472_261_120

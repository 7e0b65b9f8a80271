"""Real-size structure: our LM, flow and HiFT built on meta from the published configs have exactly the
tensors (names and shapes) of upstream's classes built from the same configs (real_v{2,3}.json, recorded
by make_fixtures.py), after the loader's documented key handling (the tied text lm_head dropped, weight
norm folded into `weight`, HiFT's optional `generator.` prefix)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.blocks.s3gen_flow import Flow, FlowConfig
from mizuoto.nodes.blocks.hift import HiFT, HiFTConfig
from mizuoto.nodes.cosyvoice.lm import CosyVoiceLM, LMConfig, Qwen2Config
from mizuoto.nodes.cosyvoice.loader import UNUSED_LM_KEYS

HERE = Path(__file__).parent


def _folded(shapes: dict[str, list[int]]) -> dict[str, list[int]]:
    out = {}
    for key, shape in shapes.items():
        if key.endswith(".parametrizations.weight.original0"):
            continue
        if key.endswith(".parametrizations.weight.original1"):
            key = key.replace(".parametrizations.weight.original1", ".weight")
        out[key] = shape
    return out


def _ours(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


@pytest.mark.parametrize("version", [2, 3])
def test_real_size_tensors_equal_upstream(version):
    real = json.loads((HERE / f"real_v{version}.json").read_text())
    lm = real["lm"]
    lm_config = LMConfig(version=version, speech_token_size=lm["speech_token_size"], qwen=Qwen2Config.from_dict(real["qwen"]),
                         top_p=lm["top_p"], top_k=lm["top_k"], win_size=lm["win_size"], tau_r=lm["tau_r"])
    flow = real["flow"]
    flow_config = FlowConfig(**{**flow, "channels": tuple(flow["channels"])})
    hift = real["hift"]
    hift_config = HiFTConfig(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                                for k, v in hift.items()})
    with torch.device("meta"):
        ours = {"llm": CosyVoiceLM(lm_config), "flow": Flow(flow_config), "hift": HiFT(hift_config)}
    theirs = real["tensors"]
    expected_llm = {k: v for k, v in theirs["llm"].items() if k not in UNUSED_LM_KEYS}
    assert _ours(ours["llm"]) == expected_llm
    assert _ours(ours["flow"]) == theirs["flow"]
    assert _ours(ours["hift"]) == _folded(theirs["hift"])
    total = sum(torch.Size(s).numel() for s in expected_llm.values())
    assert 490e6 < total < 520e6            # the 0.5B LM

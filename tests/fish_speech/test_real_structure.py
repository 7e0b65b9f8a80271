"""Real-size structure: our modules built on meta have exactly the tensor names and shapes of upstream's
(recorded by real_structure.py / real_structure_s2.py in the reference venv), after the loader's own key
handling (weight norm folded, the codec's stored RoPE tables and masks skipped). The codec's sizes read
from those shapes are the published modded_dac_vq.yaml, i.e. CodecConfig's defaults. S2-Pro's LM comes
from its published config (sources in real_structure_s2.py) through fish-speech head's own classes."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.nodes.fish_speech.codec import CodecConfig, FishCodec
from mizuoto.nodes.fish_speech.loader import codec_state, lm_state
from mizuoto.nodes.fish_speech.model import DualARTransformer, FishConfig

REAL = json.loads((Path(__file__).parent / "real_s1_mini.json").read_text(encoding="utf-8"))
REAL_S2 = json.loads((Path(__file__).parent / "real_s2_pro.json").read_text(encoding="utf-8"))


def _meta(shapes: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    return {k: torch.empty(v, device="meta") for k, v in shapes.items()}


def _shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def test_lm_matches_upstream():
    config = FishConfig.from_dict(REAL["lm_config"])
    with torch.device("meta"):
        model = DualARTransformer(config, 151678, 155773)
    expected = {k: list(v.shape) for k, v in lm_state(_meta(REAL["lm"]), config.tie_word_embeddings).items()}
    assert _shapes(model) == expected


def test_codec_matches_upstream_and_its_sizes_are_the_published_yaml():
    state = codec_state(_meta(REAL["codec"]))
    config = CodecConfig.from_shapes({k: tuple(v.shape) for k, v in state.items()})
    assert config == CodecConfig()
    with torch.device("meta"):
        codec = FishCodec(config)
    assert _shapes(codec) == {k: list(v.shape) for k, v in state.items()}
    assert config.frame_length == 2048 and config.num_codebooks == 10


def test_s2_pro_lm_matches_upstream():
    config = FishConfig.from_omni(REAL_S2["lm_config"])
    with torch.device("meta"):
        model = DualARTransformer(config, 151678, 155773)
    assert _shapes(model) == REAL_S2["lm"]
    assert sum(p.numel() for p in model.parameters()) == REAL_S2["lm_parameters"]     # 4.56e9
    assert isinstance(model.fast_project_in, torch.nn.Identity) and config.norm_fastlayer_input


def test_s2_pro_codec_is_s1s_codec():
    """The head's modded_dac_vq.yaml (S2's codec) gives S1's codec: same tensors, same CodecConfig."""
    state = codec_state(_meta(REAL_S2["codec"]))
    assert {k: list(v.shape) for k, v in state.items()} == \
        {k: list(v.shape) for k, v in codec_state(_meta(REAL["codec"])).items()}
    assert CodecConfig.from_shapes({k: tuple(v.shape) for k, v in state.items()}) == CodecConfig()

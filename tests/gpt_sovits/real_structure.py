"""Record upstream's tensor names and shapes at real size (run in the reference venv; writes real_*.json).

    "$REF_VENV"/bin/python tests/gpt_sovits/real_structure.py

Upstream's classes are built on `meta` from the repository's published configs: s1longer-v2.yaml (the v2 /
v2Pro GPT), s2.json / s2v2Pro.json / s2v2ProPlus.json (SoVITS; `enc_q` left out, as upstream's saved
weights leave it out), ERes2NetV2(baseWidth=24, scale=4, expansion=4) (sv.py), and Hugging Face's
HubertModel / BertForMaskedLM at the chinese-hubert-base (hubert-base defaults) and
chinese-roberta-wwm-ext-large (BERT-large, 21128 tokens) sizes. test_structure.py builds ours from the same
configs and asserts exactly these names and shapes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures_env  # noqa: E402,F401  (the upstream import stubs; exits when the repository is absent)
from make_fixtures_env import REPO  # noqa: E402
from AR.models.t2s_model import Text2SemanticDecoder  # noqa: E402
from module.models import SynthesizerTrn  # noqa: E402
from ERes2NetV2 import ERes2NetV2  # noqa: E402
from transformers import BertConfig, BertForMaskedLM, HubertConfig, HubertModel  # noqa: E402

BERT_LARGE = {"vocab_size": 21128, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
              "intermediate_size": 4096, "max_position_embeddings": 512, "type_vocab_size": 2,
              "layer_norm_eps": 1e-12, "hidden_act": "gelu", "position_embedding_type": "absolute"}


def shapes(module: torch.nn.Module, skip: str = "") -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items() if not (skip and k.startswith(skip))}


def dump(name: str, config: dict, tensors: dict) -> None:
    (HERE / f"real_{name}.json").write_text(json.dumps({"config": config, "tensors": tensors}, indent=0))
    print(name, len(tensors), "tensors")


configs = REPO / "GPT_SoVITS" / "configs"
with torch.device("meta"):
    s1 = yaml.safe_load((configs / "s1longer-v2.yaml").read_text())
    dump("t2s_v2", s1, {f"model.{k}": v for k, v in shapes(Text2SemanticDecoder(config=s1)).items()})
    for version, file in (("v2", "s2.json"), ("v2Pro", "s2v2Pro.json"), ("v2ProPlus", "s2v2ProPlus.json")):
        hps = json.loads((configs / file).read_text())
        model = SynthesizerTrn(hps["data"]["filter_length"] // 2 + 1,
                               hps["train"]["segment_size"] // hps["data"]["hop_length"],
                               n_speakers=hps["data"]["n_speakers"], **dict(hps["model"], version=version))
        dump(f"sovits_{version}", hps, shapes(model, skip="enc_q."))
    dump("sv_eres2netv2w24s4ep4", {"baseWidth": 24, "scale": 4, "expansion": 4},
         shapes(ERes2NetV2(baseWidth=24, scale=4, expansion=4)))
    hub = HubertConfig()
    dump("chinese_hubert_base", hub.to_dict(), shapes(HubertModel(hub)))
    dump("chinese_roberta_wwm_ext_large", BERT_LARGE, shapes(BertForMaskedLM(BertConfig(**BERT_LARGE))))

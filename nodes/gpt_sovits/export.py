"""Writing a trained voice into the models folder, atomically, in the layout our loader (and upstream) reads.

    <models>/TTS/gpt_sovits/<name>/
        <name>-e<epochs>.ckpt     s1_train.py's my_model_ckpt: {"weight": fp16 state dict under `model.`,
                                  "config": the training config, "info": "GPT-e<epochs>"}
        <sovits>.pth              the SoVITS weights: the trained ones (`sovits_checkpoint`, as
                                  process_ckpt.savee writes them: <name>_e<epochs>_s<steps>.pth) when the
                                  SoVITS (s2) stage ran, else the base voice's file byte for byte
                                  (upstream pairs a fine-tuned GPT with the pretrained SoVITS the same way)

The voice goes beside the base voice (same `pretrained_models/`); pieces the base folder holds inside
itself (chinese-hubert-base/, text/, ...) are linked (or copied) in. Everything is written into a hidden
`.<name>.partial-*` folder beside the target and renamed into place at the end, so the loader never sees
a half-written voice and a failure leaves nothing behind; an existing voice of that name is refused.
"""
from __future__ import annotations

import io
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from ...training.export import link_file, new_folder
from .loader import BERT_DIR, G2PW_DIR, HEADERS, HUBERT_DIR, TEXT_DIR, pair
from .t2s import Text2Semantic

INSIDE = (HUBERT_DIR, BERT_DIR, "sv", TEXT_DIR, G2PW_DIR)


def gpt_checkpoint(model: Text2Semantic, config: dict[str, Any], epochs: int) -> dict[str, Any]:
    weight = OrderedDict((f"model.{k}", v.detach().to("cpu").half()) for k, v in model.state_dict().items())
    return {"weight": weight, "config": config, "info": f"GPT-e{epochs}"}


def sovits_checkpoint(weights: dict[str, Any], config: dict[str, Any], info: str, version: str) -> bytes:
    """The SoVITS file process_ckpt.savee writes: fp16 weights without `enc_q` (training only), the config,
    an info string; v2Pro / v2ProPlus with my_save2's two-byte version header ("05" / "06") in place of the
    zip's first two bytes, which is how upstream's loaders (and ours) tell them from v2. The config is a
    plain dict (upstream pickles its utils.HParams; its loaders and ours read either)."""
    weight = OrderedDict((k, v.detach().to("cpu").half()) for k, v in weights.items() if "enc_q" not in k)
    buffer = io.BytesIO()
    torch.save({"weight": weight, "config": config, "info": info}, buffer)
    data = buffer.getvalue()
    header = {v: k for k, v in HEADERS.items()}.get(version)
    return data if header is None else header + data[2:]


def export_voice(base_folder: Path, name: str, model: Text2Semantic, config: dict[str, Any], epochs: int,
                 parent: Path | None = None, sovits: tuple[str, bytes] | None = None) -> Path:
    """The new voice folder `parent/name` (default: beside the base voice), written atomically; `sovits`
    (file name, sovits_checkpoint's bytes) replaces the base voice's SoVITS file."""
    base_folder = Path(base_folder)
    _, sovits_path = pair(base_folder)
    parent = Path(parent) if parent is not None else base_folder.parent
    with new_folder(parent, name, base_folder, INSIDE) as tmp:
        torch.save(gpt_checkpoint(model, config, epochs), tmp / f"{name}-e{epochs}.ckpt")
        if sovits is None:
            link_file(sovits_path, tmp / sovits_path.name)
        else:
            (tmp / sovits[0]).write_bytes(sovits[1])
    return parent / name

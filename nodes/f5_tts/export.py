"""Writing a fine-tuned F5-TTS model folder, atomically, in the published layout our loader (and upstream's) reads.

    <models>/TTS/f5_tts/<name>/
        model_<updates>.safetensors   the EMA weights as upstream's checkpoints hold them (`ema_model_state_dict`:
                                      ema_model.transformer.* + ema_pytorch's `step` / `initted`), float32
        vocab.txt, config.yaml        the base model's (the same tokenizer and architecture)
        vocos/                        the base model's vocoder (linked, or copied)

Everything is written into a hidden `.<name>.partial-*` folder beside the target and renamed into place at
the end: the loader never sees a half-written model, a failure leaves nothing behind, an existing model of
that name is refused.
"""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from ...training.export import new_folder
from .train_step import EMA

COPIED = ("vocab.txt", "config.yaml", "vocos")


def ema_state(ema: EMA) -> dict[str, torch.Tensor]:
    """The EMA's DiT weights under `ema_model.transformer.` (the DiT's persistent state only) + step, initted."""
    keys = ema.model.state_dict().keys()
    state = {f"ema_model.transformer.{k}": ema.shadow[k].detach().to("cpu", torch.float32).contiguous() for k in keys}
    state["step"] = ema.step.detach().clone()
    state["initted"] = ema.initted.detach().clone()
    return state


def export_model(base_folder: Path, name: str, ema: EMA, updates: int, parent: Path | None = None) -> Path:
    """The new model folder `parent/name` (default: beside the base model), written atomically."""
    if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
        raise ValueError(f"updates = {updates!r}; expected a count >= 0")
    base_folder = Path(base_folder)
    parent = Path(parent) if parent is not None else base_folder.parent
    with new_folder(parent, name, base_folder, COPIED) as tmp:
        save_file(ema_state(ema), str(tmp / f"model_{updates}.safetensors"))
    return parent / name

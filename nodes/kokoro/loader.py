"""Reading the published hexgrad/Kokoro-82M folder unchanged:

    config.json           KModel's config (vocab, plbert, istftnet, widths)
    kokoro-v1_0.pth       {"bert", "bert_encoder", "predictor", "text_encoder", "decoder"}: one state dict
                          each, keys prefixed `module.`, weight-normed convs as `weight_g`/`weight_v`
    voices/<name>.pt      a style pack [510, 1, 256] per voice: row len(phonemes) - 1 is the style

Pickles go through the weights-only loader; weight-norm pairs are folded with `torch._weight_norm(v, g, 0)`
(what upstream's hook computes in every forward); the bert's unused pooler is left out; an AdaIN
InstanceNorm's affine pair that the file lacks is its identity, as upstream's non-strict load leaves it.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from ...runtime.loading import SizeSource, load_module_from_state
from ..formats.checkpoint import CheckpointError, check_ids, check_sizes, load_pickle, read_json
from .model import KModel, weight_normed

ENGINE = "kokoro"
CONFIG = "config.json"
WEIGHTS = "kokoro-v1_0.pth"
VOICES = "voices"
PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
UNUSED = ("bert.pooler.weight", "bert.pooler.bias", "bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
STYLE_WIDTH = 256
MAX_VOICE_ROWS = 4096
_VOICE_NAME = re.compile(r"^[a-z]{2}_[a-z0-9_]+$")
# Kokoro's voice prefix letter -> our language code (kokoro.pipeline.LANG_CODES)
LANGUAGE_OF_PREFIX = {"a": "en", "b": "en", "e": "es", "f": "fr", "h": "hi", "i": "it", "j": "ja", "p": "pt",
                      "z": "zh"}


def missing_files(folder: str | Path) -> list[str]:
    folder = Path(folder)
    out = [name for name in (CONFIG, WEIGHTS) if not (folder / name).is_file()]
    if not voice_files(folder):
        out.append(f"{VOICES}/<name>.pt (at least one voice)")
    return out


def voice_files(folder: Path) -> dict[str, Path]:
    d = Path(folder) / VOICES
    if not d.is_dir():
        return {}
    return {p.stem: p for p in sorted(d.glob("*.pt")) if _VOICE_NAME.match(p.stem)}


def read_config(folder: Path) -> dict:
    path = Path(folder) / CONFIG
    config = read_json(path, ENGINE)
    for key in ("vocab", "plbert", "istftnet", "n_token", "hidden_dim", "style_dim", "n_layer", "max_dur",
                "text_encoder_kernel_size"):
        if key not in config:
            raise CheckpointError(f"{path}: no {key!r}; expected Kokoro's config.json")
    check_sizes(config, path, ENGINE)
    for key in ("max_dur", "n_layer", "text_encoder_kernel_size"):
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise CheckpointError(f"{path}: {key} = {value!r}; expected an integer from 1 to 4096")
    if config["style_dim"] != 128:
        raise CheckpointError(f"{path}: style_dim = {config['style_dim']!r}; Kokoro's voice packs hold two "
                              "128-wide halves, expected 128")
    if config["hidden_dim"] != 512:
        raise CheckpointError(f"{path}: hidden_dim = {config['hidden_dim']!r}; Kokoro's decoder reads 512 "
                              "text channels, expected 512")
    vocab = config["vocab"]
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and len(k) == 1 for k in vocab):
        raise CheckpointError(f"{path}: vocab; expected a map of single phoneme symbols to ids")
    check_ids(vocab, config["n_token"], "n_token", path, ENGINE)
    return config


def fold_state(raw: object, path: Path) -> dict[str, torch.Tensor]:
    """The file's parts as one flat state dict under our module names (weight norm folded)."""
    if not isinstance(raw, dict) or set(raw) != set(PARTS):
        found = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise CheckpointError(f"{path}: expected the parts {', '.join(PARTS)}; found {found}")
    flat: dict[str, torch.Tensor] = {}
    for part in PARTS:
        state = raw[part]
        if not isinstance(state, dict):
            raise CheckpointError(f"{path}: {part} is not a state dict")
        for key, value in state.items():
            name = f"{part}.{key.removeprefix('module.')}"
            if name not in UNUSED:
                flat[name] = value
    out: dict[str, torch.Tensor] = {}
    for name, value in flat.items():
        if name.endswith(".weight_v"):
            base = name[: -len(".weight_v")]
            g = flat.get(base + ".weight_g")
            if g is None or not weight_normed(base):
                raise CheckpointError(f"{path}: {name} without a weight-norm partner in a conv that has one")
            if not isinstance(g, torch.Tensor) or not isinstance(value, torch.Tensor) \
                    or g.shape != (value.shape[0],) + (1,) * (value.dim() - 1):
                raise CheckpointError(f"{path}: {base}.weight_g does not fit {name}")
            out[base + ".weight"] = torch._weight_norm(value, g, 0)
        elif not name.endswith(".weight_g"):
            out[name] = value
    return out


def identity_norms(state: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """The AdaIN InstanceNorms' affine pair (`*.norm.weight` / `*.norm.bias`) where the file has none:
    upstream's comment says affine is on only for an old ONNX-export bug and "should be False", and its
    KModel loads non-strictly, leaving a missing pair at InstanceNorm's identity (1, 0); so does this.
    Every other missing tensor is still an error (the strict load names it)."""
    with torch.device("meta"):
        expected = {k: v.shape for k, v in KModel(config).state_dict().items()}
    out = dict(state)
    for name, shape in expected.items():
        if name not in out and name.endswith((".norm.weight", ".norm.bias")):
            out[name] = (torch.ones if name.endswith("weight") else torch.zeros)(shape)
    return out


def load_model(folder: str | Path, dtype: torch.dtype = torch.float32) -> KModel:
    folder = Path(folder)
    missing = missing_files(folder)
    if missing:
        raise FileNotFoundError(f"{folder}: not a complete Kokoro folder; missing {', '.join(missing)}")
    config = read_config(folder)
    path = folder / WEIGHTS
    state = identity_norms(fold_state(load_pickle(path), path), config)
    model = load_module_from_state(lambda: KModel(config), state, dtype, source=path,
                                   config=SizeSource(folder / CONFIG, config))
    return model.eval()


def load_voice(path: Path) -> torch.Tensor:
    pack = load_pickle(path)
    if not isinstance(pack, torch.Tensor) or pack.dim() != 3 or pack.shape[1:] != (1, STYLE_WIDTH) \
            or not 1 <= pack.shape[0] <= MAX_VOICE_ROWS or not pack.is_floating_point():
        shape = list(pack.shape) if isinstance(pack, torch.Tensor) else type(pack).__name__
        raise CheckpointError(f"{path}: expected a float style pack [rows, 1, {STYLE_WIDTH}], got {shape}")
    if not torch.isfinite(pack).all():
        raise CheckpointError(f"{path}: the style pack holds NaN or infinite values")
    return pack.float()


def voice_language(name: str) -> str:
    return LANGUAGE_OF_PREFIX.get(name[:1], "auto")

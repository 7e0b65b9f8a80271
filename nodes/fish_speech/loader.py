"""Find and load OpenAudio S1 / Fish Speech checkpoints in the upstream layout, unchanged:

    models/TTS/fish_speech/<model>/
        config.json  model.pth  codec.pth  tokenizer.tiktoken  special_tokens.json

Pickles are read with `torch.load(weights_only=True, mmap=True)` only. As upstream's loaders do, a
`state_dict` wrapper and the "model." / "generator." prefixes are unwrapped, "audio_" tensors
(training-only) dropped, separate wq/wk/wv fused into wqkv, weight norm folded (nodes/common/dac.py)
and the codec's stored RoPE tables and causal masks (recomputed here) skipped; everything else must
match the modules exactly (missing, unexpected or mis-shaped keys are a CheckpointError naming the file).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...runtime.loading import CheckpointError, SizeSource, load_module_from_state
from ..common import checkpoint
from ..common.checkpoint import load_pickle, state_dict
from ..common.dac import fold_weight_norm
from .codec import CodecConfig, FishCodec
from .model import DualARTransformer, FishConfig
from .tokenizer import FishTokenizer

ENGINE = "fish_speech"
REQUIRED = ("config.json", "model.pth", "codec.pth", "tokenizer.tiktoken", "special_tokens.json")


class ModelFolderError(FileNotFoundError):
    """A folder that is not a complete Fish Speech model."""


def is_model_folder(folder: Path) -> bool:
    return all((folder / f).is_file() for f in REQUIRED)


def read_json(path: Path) -> dict[str, Any]:
    return checkpoint.read_json(path, "Fish Speech")


def read_state(path: Path) -> dict[str, Tensor]:
    """The tensors of a torch pickle (weights_only, memory-mapped), unwrapped from `state_dict` if wrapped."""
    obj = load_pickle(path)
    return state_dict(obj, path, "state_dict" if isinstance(obj, dict) and "state_dict" in obj else None)


def lm_state(raw: dict[str, Tensor], tied: bool) -> dict[str, Tensor]:
    """upstream's from_pretrained clean-up of model.pth, plus its wq/wk/wv load hook."""
    if next(iter(raw), "").startswith("model."):
        raw = {k.replace("model.", ""): v for k, v in raw.items()}
    state = {k: v for k, v in raw.items() if "audio_" not in k}
    for key in [k for k in state if k.endswith("attention.wq.weight")]:
        prefix = key[: -len("wq.weight")]
        state[prefix + "wqkv.weight"] = torch.cat([state.pop(prefix + n + ".weight") for n in ("wq", "wk", "wv")])
    if tied:
        state.pop("output.weight", None)    # upstream ignores it (strict=False) when the head is tied
    return state


def codec_state(raw: dict[str, Tensor]) -> dict[str, Tensor]:
    if any("generator" in k for k in raw):
        raw = {k.replace("generator.", ""): v for k, v in raw.items() if "generator." in k}
    raw = {k: v for k, v in raw.items() if not k.endswith((".freqs_cis", ".causal_mask"))}
    return fold_weight_norm(raw)


@dataclass
class FishBundle:
    folder: Path
    config: FishConfig
    model: DualARTransformer
    codec: FishCodec
    tokenizer: FishTokenizer

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embeddings.weight.dtype

    @property
    def im_end_id(self) -> int:
        return self.tokenizer.token_id("<|im_end|>")


def load_fish_speech(folder: str | Path, dtype: torch.dtype = torch.bfloat16,
                     codec_dtype: torch.dtype = torch.float32) -> FishBundle:
    """The LM in `dtype` and the codec in `codec_dtype` (upstream runs it in float32 too), eval, on the CPU."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"Fish Speech: model folder {folder} not found")
    missing = [f for f in REQUIRED if not (folder / f).is_file()]
    if missing:
        raise ModelFolderError(f"Fish Speech: {folder} is missing {', '.join(missing)} (expected the upstream "
                               "layout of fishaudio/openaudio-s1-mini)")
    raw = read_json(folder / "config.json")
    try:
        config = FishConfig.from_dict(raw)
    except (TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"Fish Speech: {folder / 'config.json'}: {e}") from None
    try:
        tokenizer = FishTokenizer.from_folder(folder)
    except ValueError as e:
        raise CheckpointError(f"Fish Speech: {e}") from None
    if "<|im_end|>" not in tokenizer.special:
        raise CheckpointError(f"Fish Speech: {folder / 'special_tokens.json'} has no <|im_end|> token")
    vocab = len(tokenizer.ranks) + len(tokenizer.special)
    if vocab > config.vocab_size:
        raise CheckpointError(f"Fish Speech: {folder / 'config.json'}: vocab_size {config.vocab_size} is smaller "
                              f"than the tokenizer's {vocab} tokens")
    path = folder / "model.pth"
    model = load_module_from_state(
        lambda: DualARTransformer(config, tokenizer.semantic_begin_id, tokenizer.semantic_end_id),
        lm_state(read_state(path), config.tie_word_embeddings), dtype, path,
        SizeSource(folder / "config.json", raw)).eval()
    path = folder / "codec.pth"
    state = codec_state(read_state(path))
    try:
        codec_config = CodecConfig.from_shapes({k: tuple(v.shape) for k, v in state.items()})
    except (KeyError, IndexError) as e:
        raise CheckpointError(f"{path}: not a modded-DAC codec (no tensor {e})") from None
    codec = load_module_from_state(lambda: FishCodec(codec_config), state, codec_dtype, path).eval()
    return FishBundle(folder, config, model, codec, tokenizer)

"""Find and load OpenAudio S1 / Fish Speech checkpoints in the upstream layout, unchanged:

    models/TTS/fish_speech/<model>/
        config.json  model.pth  codec.pth  tokenizer.tiktoken  special_tokens.json          (S1-mini)
        config.json  model.safetensors[.index.json] + shards  codec.pth  tokenizer.json     (S2-Pro)

S2 (fish-speech's repository head, config model_type "fish_qwen3_omni") is the same dual-AR model under
other names: its tensors `text_model.model.<name>` are the slow LM's `<name>`, `audio_decoder.<name>` the
fast LM's `fast_<name>` (`audio_decoder.codebook_embeddings` stays `codebook_embeddings`), as upstream's
`_remap_fish_qwen3_omni_keys` maps them; they are read straight from the safetensors shards into place.

Pickles are read with `torch.load(weights_only=True, mmap=True)` only. As upstream's loaders do, a
`state_dict` wrapper and the "model." / "generator." prefixes are unwrapped, "audio_" tensors
(training-only) dropped, separate wq/wk/wv fused into wqkv, weight norm folded (nodes/blocks/dac.py)
and the codec's stored RoPE tables and causal masks (recomputed here) skipped; everything else must
match the modules exactly (missing, unexpected or mis-shaped keys are a CheckpointError naming the file).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...runtime.loading import CheckpointError, SizeSource, checkpoint_path, load_module, load_module_from_state
from ..formats import checkpoint
from ..formats.checkpoint import load_pickle, state_dict
from ..blocks.dac import fold_weight_norm
from .codec import CodecConfig, FishCodec
from .model import DualARTransformer, FishConfig
from .tokenizer import FishTokenizer, HFTokenizer

ENGINE = "fish_speech"
REQUIRED = ("config.json", "model.pth", "codec.pth", "tokenizer.tiktoken", "special_tokens.json")
REQUIRED_S2 = ("config.json", "codec.pth", "tokenizer.json")
S2_FILES = (*REQUIRED_S2, "model.safetensors", "model.safetensors.index.json", "model-*.safetensors")


class ModelFolderError(FileNotFoundError):
    """A folder that is not a complete Fish Speech model."""


def is_s2_folder(folder: Path) -> bool:
    return all((folder / f).is_file() for f in REQUIRED_S2) and checkpoint_path(folder).is_file()


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks to be a Fish Speech model ([] when complete): of the layout it is closer to,
    S1 (model.pth) or S2 (tokenizer.json and model.safetensors)."""
    s1 = [f for f in REQUIRED if not (folder / f).is_file()]
    s2 = [f for f in REQUIRED_S2 if not (folder / f).is_file()]
    if not checkpoint_path(folder).is_file():
        s2.append(checkpoint_path(folder).name)
    return [] if not s1 or not s2 else min(s1, s2, key=len)


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


def s2_name(key: str) -> str:
    """An S2 checkpoint tensor name -> the module's (upstream's `_remap_fish_qwen3_omni_keys`)."""
    if key.startswith("text_model.model."):
        return key[len("text_model.model."):]
    if key.startswith("audio_decoder."):
        rest = key[len("audio_decoder."):]
        return rest if rest.startswith("codebook_embeddings.") else "fast_" + rest
    return key


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
    tokenizer: FishTokenizer | HFTokenizer

    @property
    def is_s2(self) -> bool:
        return isinstance(self.tokenizer, HFTokenizer)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embeddings.weight.dtype

    @property
    def im_end_id(self) -> int:
        return self.tokenizer.token_id("<|im_end|>")


def read_config(path: Path, s2: bool) -> tuple[FishConfig, SizeSource]:
    """The config and, for errors naming its fields when the weights disagree, the file's data."""
    data = read_json(path)
    try:
        return (FishConfig.from_omni(data) if s2 else FishConfig.from_dict(data)), SizeSource(path, data)
    except (TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"Fish Speech: {path}: {e}") from None


def load_codec(path: Path, dtype: torch.dtype) -> FishCodec:
    state = codec_state(read_state(path))
    try:
        codec_config = CodecConfig.from_shapes({k: tuple(v.shape) for k, v in state.items()})
    except (KeyError, IndexError) as e:
        raise CheckpointError(f"{path}: not a modded-DAC codec (no tensor {e})") from None
    return load_module_from_state(lambda: FishCodec(codec_config), state, dtype, path).eval()


def load_fish_speech(folder: str | Path, dtype: torch.dtype = torch.bfloat16,
                     codec_dtype: torch.dtype = torch.float32) -> FishBundle:
    """The LM in `dtype` and the codec in `codec_dtype` (upstream runs it in float32 too), eval, on the CPU.
    An S1 folder (model.pth) or an S2 one (safetensors shards, tokenizer.json)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"Fish Speech: model folder {folder} not found")
    s2 = not (folder / "model.pth").is_file() and checkpoint_path(folder).is_file()
    if s2:
        missing = [f for f in REQUIRED_S2 if not (folder / f).is_file()]
    else:
        missing = [f for f in REQUIRED if not (folder / f).is_file()]
    if missing:
        raise ModelFolderError(f"Fish Speech: {folder} is missing {', '.join(missing)} (expected the upstream "
                               "layout of fishaudio/openaudio-s1-mini or fishaudio/s2-pro)")
    config, sizes = read_config(folder / "config.json", s2)
    try:
        tokenizer = HFTokenizer.from_folder(folder) if s2 else FishTokenizer.from_folder(folder)
    except CheckpointError:
        raise                                   # already names the file
    except ValueError as e:
        raise CheckpointError(f"Fish Speech: {e}") from None
    names = "tokenizer.json" if s2 else "special_tokens.json"
    if "<|im_end|>" not in tokenizer.special:
        raise CheckpointError(f"Fish Speech: {folder / names} has no <|im_end|> token")
    vocab = tokenizer.vocab_size if s2 else len(tokenizer.ranks) + len(tokenizer.special)
    if vocab > config.vocab_size:
        raise CheckpointError(f"Fish Speech: {folder / 'config.json'}: vocab_size {config.vocab_size} is smaller "
                              f"than the tokenizer's {vocab} tokens")

    def build() -> DualARTransformer:
        return DualARTransformer(config, tokenizer.semantic_begin_id, tokenizer.semantic_end_id)
    if s2:
        model = load_module(build, checkpoint_path(folder), dtype, sizes, rename=s2_name).eval()
    else:
        path = folder / "model.pth"
        model = load_module_from_state(build, lm_state(read_state(path), config.tie_word_embeddings), dtype,
                                       path, sizes).eval()
    codec = load_codec(folder / "codec.pth", codec_dtype)
    return FishBundle(folder, config, model, codec, tokenizer)

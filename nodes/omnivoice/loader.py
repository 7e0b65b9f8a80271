"""Find and load OmniVoice checkpoints in the upstream layout (k2-fsa/OmniVoice), unchanged:

    models/TTS/omnivoice/<model>/
        config.json  model.safetensors  tokenizer.json
        audio_tokenizer/config.json  audio_tokenizer/model.safetensors  (preprocessor_config.json: not needed)

Modules are built on the meta device and each tensor is read straight into the target dtype
(runtime.loading.load_module). Errors name the file (and field) at fault.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...runtime.loading import CheckpointError, SizeSource, checkpoint_path, load_module, read_safetensors_header
from ..formats import checkpoint
from ..formats.checkpoint import ModelFolderError
from .codec import CodecConfig, HiggsAudioTokenizer
from .model import OmniVoiceConfig, OmniVoiceLM

REQUIRED = ("config.json", "tokenizer.json", "audio_tokenizer/config.json")
WEIGHTS = ("", "audio_tokenizer")          # folders holding model.safetensors (or a sharded index)
MASKED_SPEC_EMBED = "semantic_model.masked_spec_embed"


def read_json(path: Path) -> dict[str, Any]:
    return checkpoint.read_json(path, "OmniVoice")


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks ([] when complete): its configs and each part's model.safetensors (or index)."""
    return checkpoint.missing_hub_files(folder, REQUIRED, WEIGHTS)


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


@dataclass
class OmniVoiceBundle:
    folder: Path
    config: OmniVoiceConfig
    model: OmniVoiceLM
    codec: HiggsAudioTokenizer
    _tokenizer: Any = None

    @property
    def tokenizer(self):
        """The Qwen BPE tokenizer (built on first use: it needs the `tokenizers` package)."""
        if self._tokenizer is None:
            from .text import TextTokenizer
            self._tokenizer = TextTokenizer(self.folder)
        return self._tokenizer

    @property
    def dtype(self) -> torch.dtype:
        return self.model.audio_heads.weight.dtype


def parse(path: Path, parse_fn, what: str):
    try:
        return parse_fn(read_json(path))
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        field = f"field {e.args[0]!r} missing" if isinstance(e, KeyError) else str(e)
        raise CheckpointError(f"OmniVoice: {path} is not {what}: {field}") from None


def load_omnivoice(folder: str | Path, dtype: torch.dtype = torch.bfloat16,
                   codec_dtype: torch.dtype = torch.float32) -> OmniVoiceBundle:
    """Load the model folder: the diffusion LM in `dtype` and the audio tokenizer in `codec_dtype`
    (float32 by default, as upstream runs it), in eval mode on the CPU."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"OmniVoice: model folder {folder} not found")
    missing = missing_files(folder)
    if missing:
        raise ModelFolderError(f"OmniVoice: {folder} is missing {', '.join(missing)} (expected the upstream layout of "
                               "the k2-fsa/OmniVoice repository)")
    config = parse(folder / "config.json", OmniVoiceConfig.from_dict, "an OmniVoice config")
    codec_file = folder / "audio_tokenizer" / "config.json"
    codec_config = parse(codec_file, CodecConfig.from_dict, "a Higgs Audio V2 tokenizer config")
    codec_weights = checkpoint_path(folder / "audio_tokenizer")
    extra = MASKED_SPEC_EMBED in _keys(codec_weights)
    model = load_module(lambda: OmniVoiceLM(config), checkpoint_path(folder), dtype,
                        SizeSource(folder / "config.json", read_json(folder / "config.json"))).eval()
    codec = load_module(lambda: HiggsAudioTokenizer(codec_config, extra), codec_weights, codec_dtype,
                        SizeSource(codec_file, read_json(codec_file))).eval()
    return OmniVoiceBundle(folder, config, model, codec)


def _keys(path: Path) -> set[str]:
    """Tensor names of a safetensors file or of the shards its index names."""
    if path.name.endswith(".index.json"):
        return set(read_json(path).get("weight_map", {}))
    try:
        return set(read_safetensors_header(path))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"OmniVoice: {path} is not a readable safetensors file ({e})") from None

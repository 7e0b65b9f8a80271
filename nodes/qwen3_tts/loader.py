"""Find and load Qwen3-TTS 12 Hz checkpoints in the upstream layout, unchanged:

    models/TTS/qwen3_tts/<model>/
        config.json  model.safetensors (or sharded: model.safetensors.index.json + shards)  generation_config.json (optional)
        vocab.json  merges.txt  tokenizer_config.json   (or tokenizer.json)
        speech_tokenizer/config.json  speech_tokenizer/model.safetensors

Modules are built on the meta device and each tensor is read straight into the target dtype
(runtime.loading.load_module): no float32 copy of a bf16 model in RAM. Errors name the file at fault.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...runtime.loading import CheckpointError, SizeSource, checkpoint_path, load_module
from ..formats import checkpoint
from ..formats.checkpoint import ModelFolderError
from .codec import CodecConfig, SpeechTokenizer
from .model import Qwen3TTS, Qwen3TTSConfig

ENGINE = "qwen3_tts"
REQUIRED = ("config.json", "speech_tokenizer/config.json")
WEIGHTS = ("", "speech_tokenizer")  # folders holding model.safetensors or its sharded index


def read_json(path: Path) -> dict[str, Any]:
    return checkpoint.read_json(path, "Qwen3-TTS")


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks ([] when complete): its configs and each part's model.safetensors (or index)."""
    return checkpoint.missing_hub_files(folder, REQUIRED, WEIGHTS)


CODEC_IDS = ("codec_eos_token_id", "codec_think_id", "codec_nothink_id", "codec_think_bos_id", "codec_think_eos_id",
             "codec_pad_id", "codec_bos_id")
TEXT_IDS = ("im_start_token_id", "im_end_token_id", "tts_pad_token_id", "tts_bos_token_id", "tts_eos_token_id")


def check_token_ids(config: Qwen3TTSConfig, raw: dict[str, Any], path: Path) -> None:
    """The talker's codec ids, speaker and language ids index its codec embedding (talker_config.vocab_size
    rows); the chat-template ids index the text embedding (text_vocab_size rows)."""
    tc, raw_tc = config.talker, raw.get("talker_config") or {}
    codec = {f"talker_config.{k}": getattr(tc, k) for k in CODEC_IDS}
    for table in ("spk_id", "codec_language_id"):
        codec |= {f"talker_config.{table}.{k}": v for k, v in (raw_tc.get(table) or {}).items()}
    checkpoint.check_ids(codec, tc.vocab_size, "talker_config.vocab_size", path, "Qwen3-TTS")
    checkpoint.check_ids({k: getattr(config, k) for k in TEXT_IDS}, tc.text_vocab_size,
                         "talker_config.text_vocab_size", path, "Qwen3-TTS")


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


def find_models(root: str | Path) -> list[str]:
    """Names of the model folders directly under `root` (e.g. models/TTS/qwen3_tts)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and is_model_folder(p))


@dataclass
class Qwen3TTSBundle:
    folder: Path
    config: Qwen3TTSConfig
    model: Qwen3TTS
    codec: SpeechTokenizer
    generate_defaults: dict[str, Any] = field(default_factory=dict)
    _tokenizer: Any = None

    @property
    def tokenizer(self):
        """The BPE text tokenizer (built on first use: it needs the `tokenizers` package)."""
        if self._tokenizer is None:
            from .text import TextTokenizer
            self._tokenizer = TextTokenizer(self.folder)
        return self._tokenizer

    @property
    def dtype(self) -> torch.dtype:
        return self.model.talker.codec_head.weight.dtype


def load_qwen3_tts(folder: str | Path, dtype: torch.dtype = torch.bfloat16,
                   codec_dtype: torch.dtype | None = None) -> Qwen3TTSBundle:
    """Load the model folder: talker (+ speaker encoder) and speech tokenizer, in `dtype` (codec: `codec_dtype`,
    default the same), in eval mode on the CPU."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"Qwen3-TTS: model folder {folder} not found")
    missing = missing_files(folder)
    if missing:
        raise ModelFolderError(f"Qwen3-TTS: {folder} is missing {', '.join(missing)} (expected the upstream layout of "
                               "a Qwen/Qwen3-TTS-12Hz-* repository)")
    raw, codec_raw = read_json(folder / "config.json"), read_json(folder / "speech_tokenizer" / "config.json")
    try:
        config = Qwen3TTSConfig.from_dict(raw)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"Qwen3-TTS: {folder / 'config.json'} is not a Qwen3-TTS config: {e}") from None
    check_token_ids(config, raw, folder / "config.json")
    try:
        codec_config = CodecConfig.from_dict(codec_raw)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"Qwen3-TTS: {folder / 'speech_tokenizer' / 'config.json'} is not a 12 Hz speech "
                              f"tokenizer config: {e}") from None
    generate_defaults = {}
    if (folder / "generation_config.json").is_file():
        generate_defaults = read_json(folder / "generation_config.json")
    model = load_module(lambda: Qwen3TTS(config), checkpoint_path(folder), dtype,
                        SizeSource(folder / "config.json", raw)).eval()
    codec = load_module(lambda: SpeechTokenizer(codec_config), checkpoint_path(folder / "speech_tokenizer"),
                        codec_dtype or dtype, SizeSource(folder / "speech_tokenizer" / "config.json", codec_raw)).eval()
    return Qwen3TTSBundle(folder, config, model, codec, generate_defaults)

"""Chatterbox's published folder (`ResembleAI/chatterbox`), read unchanged:

    t3_cfg.safetensors   T3 (names as nodes/chatterbox/t3.py)
    s3gen.safetensors    S3Gen: S3 tokenizer, CAM++, flow, HiFT (weight norm folded at load)
    ve.safetensors       the voice encoder
    tokenizer.json       the English BPE text tokenizer
    conds.pt             the built-in voice (optional upstream; without it every request needs a reference)

Chatterbox publishes no config file: upstream hard-codes its sizes. The sizes are read from the tensor
shapes (heads from the published head width of 64), so a tiny folder in the same layout loads too, and
the strict load then checks every other shape. conds.pt is read with the weights-only unpickler and
rebuilt as plain data (tensors checked for shape, dtype and range), never as upstream's classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ...runtime.loading import CheckpointError, load_module, load_module_from_state, read_safetensors_header
from ..blocks.dac import fold_weight_norm
from ..formats.checkpoint import ModelFolderError, load_pickle
from .s3gen import S3Gen, S3GenReference, s3gen_config
from .t3 import T3, T3Config
from .text import EnTokenizer
from .voice_encoder import VoiceEncoder

T3_FILE, S3GEN_FILE, VE_FILE, TOKENIZER_FILE, CONDS_FILE = ("t3_cfg.safetensors", "s3gen.safetensors",
                                                           "ve.safetensors", "tokenizer.json", "conds.pt")
REQUIRED = (T3_FILE, S3GEN_FILE, VE_FILE, TOKENIZER_FILE)
FILES = REQUIRED + (CONDS_FILE,)
# Chatterbox Multilingual (upstream ChatterboxMultilingualTTS.from_local): its own T3, S3Gen and voice encoder
# as torch pickles, the grapheme tokenizer; Cangjie5_TC.json maps Chinese characters to Cangjie codes (zh only)
MTL_T3_FILE, MTL_S3GEN_FILE, MTL_VE_FILE, MTL_TOKENIZER_FILE, CANGJIE_FILE = (
    "t3_mtl23ls_v2.safetensors", "s3gen.pt", "ve.pt", "grapheme_mtl_merged_expanded_v1.json", "Cangjie5_TC.json")
MTL_REQUIRED = (MTL_T3_FILE, MTL_S3GEN_FILE, MTL_VE_FILE, MTL_TOKENIZER_FILE)
MTL_FILES = MTL_REQUIRED + (CONDS_FILE, CANGJIE_FILE)
HEAD_DIM = 64               # Llama_520M's head width
SPEECH_VOCAB = 6561         # S3 speech tokens; the flow embeds exactly these


def is_multilingual(folder: str | Path) -> bool:
    """A folder holding the multilingual T3 is read as Chatterbox Multilingual."""
    return (Path(folder) / MTL_T3_FILE).is_file()


def missing_files(folder: str | Path) -> list[str]:
    """What `folder` lacks to be a Chatterbox (or, with t3_mtl23ls_v2.safetensors, a Chatterbox Multilingual)
    model ([] when complete; conds.pt and Cangjie5_TC.json are optional)."""
    folder = Path(folder)
    required = MTL_REQUIRED if is_multilingual(folder) else REQUIRED
    return [name for name in required if not (folder / name).is_file()]


@dataclass
class BuiltinVoice:
    """conds.pt as plain data: T3's speaker embedding [1, 256] and prompt tokens [1, N], S3Gen's reference."""
    speaker_emb: Tensor
    prompt_tokens: Tensor | None
    exaggeration: float
    gen: S3GenReference


@dataclass
class ChatterboxBundle:
    folder: Path
    t3: T3
    s3gen: S3Gen
    ve: VoiceEncoder
    tokenizer: EnTokenizer
    voice: BuiltinVoice | None
    multilingual: bool = False
    cangjie: Path | None = None         # Cangjie5_TC.json when the folder has it (multilingual, for zh)


def t3_config(path: Path) -> T3Config:
    """T3's sizes from the tensor shapes of t3_cfg.safetensors (the published defaults for the rest)."""
    shapes = {k: v.shape for k, v in read_safetensors_header(path).items()}

    def dim(key: str, axis: int) -> int:
        if key not in shapes or len(shapes[key]) <= axis:
            raise CheckpointError(f"Chatterbox: {path} has no tensor {key!r} (not a T3 checkpoint?)")
        return int(shapes[key][axis])

    layers = 0
    while f"tfmr.layers.{layers}.self_attn.q_proj.weight" in shapes:
        layers += 1
    if layers == 0:
        raise CheckpointError(f"Chatterbox: {path} has no tfmr.layers (not a T3 checkpoint?)")
    hidden = dim("text_emb.weight", 1)
    return T3Config(hidden_size=hidden, intermediate_size=dim("tfmr.layers.0.mlp.gate_proj.weight", 0),
                    num_hidden_layers=layers,
                    num_attention_heads=max(1, dim("tfmr.layers.0.self_attn.q_proj.weight", 0) // HEAD_DIM),
                    num_key_value_heads=max(1, dim("tfmr.layers.0.self_attn.k_proj.weight", 0) // HEAD_DIM),
                    head_dim=HEAD_DIM, backbone_vocab_size=dim("tfmr.embed_tokens.weight", 0),
                    text_tokens_dict_size=dim("text_emb.weight", 0), speech_tokens_dict_size=dim("speech_emb.weight", 0),
                    max_text_tokens=dim("text_pos_emb.emb.weight", 0) - 2,
                    max_speech_tokens=dim("speech_pos_emb.emb.weight", 0) - 4,
                    speaker_embed_size=dim("cond_enc.spkr_enc.weight", 1),
                    perceiver_queries=dim("cond_enc.perceiver.pre_attention_query", 1))


def read_state(path: Path) -> dict[str, Tensor]:
    """A safetensors file's tensors (each cloned), or a torch pickle's state dict (weights-only)."""
    if path.suffix == ".pt":
        state = load_pickle(path)
        if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, Tensor)
                                                  for k, v in state.items()):
            raise CheckpointError(f"Chatterbox: {path}: expected a state dict (names -> tensors)")
        return {k: v.clone() for k, v in state.items()}
    from safetensors import safe_open
    try:
        with safe_open(str(path), framework="pt") as f:
            # cloned: safe_open's tensors can sit at any byte offset, and a misaligned weight takes other SIMD
            # paths (other summation orders) than the aligned copy upstream's load_state_dict makes
            return {k: f.get_tensor(k).clone() for k in f.keys()}
    except FileNotFoundError:
        raise
    except Exception as e:      # safetensors raises its own error types for a damaged file
        raise CheckpointError(f"Chatterbox: {path}: not a readable safetensors file ({e})") from None


def load_s3gen(path: Path, dtype: torch.dtype) -> S3Gen:
    state = read_state(path)
    state = fold_weight_norm(state)
    for key in ("tokenizer._mel_filters", "tokenizer.window"):    # upstream's buffers, when a file has them
        state.pop(key, None)
    try:
        config = s3gen_config({k: tuple(v.shape) for k, v in state.items()}, str(path))
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    if config.flow.vocab_size != SPEECH_VOCAB:
        raise CheckpointError(f"Chatterbox: {path}: flow.input_embedding has {config.flow.vocab_size} rows, "
                              f"expected {SPEECH_VOCAB} speech tokens")
    return load_module_from_state(lambda: S3Gen(config), state, dtype, source=path).eval()


def _tensor(value: object, what: str, path: Path, shape: tuple[int | None, ...], integer: bool = False) -> Tensor:
    if not isinstance(value, Tensor) or value.dim() != len(shape) or any(
            s is not None and value.shape[i] != s for i, s in enumerate(shape)):
        got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise CheckpointError(f"Chatterbox: {path}: {what} must be a tensor of shape {shape} (None: any), got {got}")
    if integer:
        if value.dtype.is_floating_point and not bool((value == value.round()).all()):
            raise CheckpointError(f"Chatterbox: {path}: {what} must hold integer token ids")
        value = value.long()
        if value.numel() and (int(value.min()) < 0 or int(value.max()) >= SPEECH_VOCAB):
            raise CheckpointError(f"Chatterbox: {path}: {what} holds ids outside [0, {SPEECH_VOCAB})")
        return value
    value = value.float()
    if not bool(torch.isfinite(value).all()):
        raise CheckpointError(f"Chatterbox: {path}: {what} holds non-finite values")
    return value


def load_voice(path: Path, speaker_size: int = 256, embedding_size: int = 192) -> BuiltinVoice:
    """conds.pt ({"t3": {...}, "gen": {...}}, upstream `Conditionals.save`) as plain data."""
    data = load_pickle(path)
    if not isinstance(data, dict) or not isinstance(data.get("t3"), dict) or not isinstance(data.get("gen"), dict):
        raise CheckpointError(f"Chatterbox: {path}: expected upstream's conditionals (a dict with 't3' and 'gen')")
    t3, gen = data["t3"], data["gen"]
    speaker = _tensor(t3.get("speaker_emb"), "t3.speaker_emb", path, (1, speaker_size))
    prompt = t3.get("cond_prompt_speech_tokens")
    prompt = None if prompt is None else _tensor(prompt, "t3.cond_prompt_speech_tokens", path, (1, None), integer=True)
    emotion = _tensor(t3.get("emotion_adv", torch.full((1, 1, 1), 0.5)), "t3.emotion_adv", path, (1, 1, 1))
    token = _tensor(gen.get("prompt_token"), "gen.prompt_token", path, (1, None), integer=True)
    feat = _tensor(gen.get("prompt_feat"), "gen.prompt_feat", path, (1, None, 80))
    embedding = _tensor(gen.get("embedding"), "gen.embedding", path, (1, embedding_size))
    return BuiltinVoice(speaker, prompt, float(emotion.reshape(-1)[0]), S3GenReference(token, feat, embedding))


def load_chatterbox(folder: str | Path, dtype: torch.dtype = torch.float32) -> ChatterboxBundle:
    folder = Path(folder)
    missing = missing_files(folder)
    multilingual = is_multilingual(folder)
    if missing:
        what = "Chatterbox Multilingual" if multilingual else "Chatterbox"
        raise ModelFolderError(f"{what}: {folder} lacks {', '.join(missing)} (download ResembleAI/chatterbox)")
    t3_file, s3gen_file, ve_file, tokenizer_file = MTL_REQUIRED if multilingual else REQUIRED
    t3_cfg = t3_config(folder / t3_file)
    if t3_cfg.is_multilingual != multilingual:
        raise CheckpointError(f"Chatterbox: {folder / t3_file} has {t3_cfg.text_tokens_dict_size} text tokens; "
                              f"expected {2454 if multilingual else 704} for the file name")
    try:
        t3 = load_module(lambda: T3(t3_cfg), folder / t3_file, dtype).eval()
    except CheckpointError:
        raise
    except ValueError as e:      # too few layers or heads for the alignment guard
        raise CheckpointError(f"{folder / t3_file}: {e}") from None
    s3gen = load_s3gen(folder / s3gen_file, dtype)
    if multilingual:
        ve = load_module_from_state(VoiceEncoder, read_state(folder / ve_file), dtype, source=folder / ve_file).eval()
    else:
        ve = load_module(VoiceEncoder, folder / ve_file, dtype).eval()
    tokenizer = EnTokenizer(folder / tokenizer_file)
    voice = None
    if (folder / CONDS_FILE).is_file():
        voice = load_voice(folder / CONDS_FILE, t3_cfg.speaker_embed_size, s3gen.config.campplus.embedding_size)
    cangjie = folder / CANGJIE_FILE if multilingual and (folder / CANGJIE_FILE).is_file() else None
    return ChatterboxBundle(folder, t3, s3gen, ve, tokenizer, voice, multilingual, cangjie)

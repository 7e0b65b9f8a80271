"""Reads an IndexTTS 2 model folder in the published layout (IndexTeam/IndexTTS-2), unchanged.

    config.yaml   plain YAML (read with yaml.safe_load): gpt, s2mel, semantic_codec sections
    gpt.pth       UnifiedVoice state dict (torch pickle, read weights-only)
    s2mel.pth     {"net": {"cfm": ..., "length_regulator": ..., "gpt_layer": ...}} (weights-only)

Loading is strict: a missing, unexpected or mis-shaped tensor is a CheckpointError naming the file.
Upstream's only tolerance is kept: computed tables that upstream also recomputes (the conformers'
sinusoid `pos_enc.pe`, the DiT's `input_pos` and timestep `freqs`) may be in the file or not.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import safe_open

from ...runtime.loading import CheckpointError, load_module_from_state, read_safetensors_header
from ..common.campplus import CAMPPlus
from ..common.checkpoint import ModelFolderError, check_sizes, load_pickle
from ..common.dac import fold_weight_norm
from .codec import CodecConfig, SemanticCodec
from .gpt import ConformerConfig, GPTConfig, UnifiedVoice
from .s2mel import S2Mel, S2MelConfig

ENGINE = "IndexTTS 2"
COMPUTED = ("pos_enc.pe", "input_pos", "t_embedder.freqs", "t_embedder2.freqs")


def read_config(path: str | Path) -> dict[str, Any]:
    """config.yaml as plain data (no objects constructed); sizes checked; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise ModelFolderError(f"{ENGINE}: {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{ENGINE}: {path} is not valid YAML ({type(e).__name__}: {str(e)[:160]})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{ENGINE}: {path} does not hold a YAML mapping")
    check_sizes(data, path, ENGINE)
    return data


def field(data: dict[str, Any], dotted: str, kind: type, path: Path) -> Any:
    """data["a"]["b"] for "a.b", of type `kind`; a CheckpointError names the file and the field."""
    value: Any = data
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise CheckpointError(f"{ENGINE}: {path}: field {dotted} is missing")
        value = value[part]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckpointError(f"{ENGINE}: {path}: field {dotted} = {value!r}; expected {kind.__name__}")
    return value


def _conformer(data: dict[str, Any], section: str, path: Path) -> ConformerConfig:
    f = lambda name, kind=int: field(data, f"gpt.{section}.{name}", kind, path)  # noqa: E731
    c = ConformerConfig(output_size=f("output_size"), linear_units=f("linear_units"),
                        attention_heads=f("attention_heads"), num_blocks=f("num_blocks"),
                        perceiver_mult=f("perceiver_mult"), input_layer=f("input_layer", str))
    if c.input_layer != "conv2d2":
        raise CheckpointError(f"{ENGINE}: {path}: field gpt.{section}.input_layer = {c.input_layer!r}; "
                              f"expected 'conv2d2'")
    if c.output_size % c.attention_heads:
        raise CheckpointError(f"{ENGINE}: {path}: gpt.{section}.output_size {c.output_size} is not a multiple "
                              f"of attention_heads {c.attention_heads}")
    return c


def gpt_config(data: dict[str, Any], path: Path) -> GPTConfig:
    f = lambda name: field(data, f"gpt.{name}", int, path)  # noqa: E731
    ctype = field(data, "gpt.condition_type", str, path)
    if ctype != "conformer_perceiver":
        raise CheckpointError(f"{ENGINE}: {path}: field gpt.condition_type = {ctype!r}; expected "
                              f"'conformer_perceiver' (IndexTTS 2)")
    c = GPTConfig(model_dim=f("model_dim"), heads=f("heads"), layers=f("layers"),
                  max_mel_tokens=f("max_mel_tokens"), max_text_tokens=f("max_text_tokens"),
                  number_text_tokens=f("number_text_tokens"), number_mel_codes=f("number_mel_codes"),
                  start_mel_token=f("start_mel_token"), stop_mel_token=f("stop_mel_token"),
                  start_text_token=f("start_text_token"), stop_text_token=f("stop_text_token"),
                  condition=_conformer(data, "condition_module", path),
                  emo_condition=_conformer(data, "emo_condition_module", path))
    if c.model_dim % c.heads:
        raise CheckpointError(f"{ENGINE}: {path}: gpt.model_dim {c.model_dim} is not a multiple of gpt.heads "
                              f"{c.heads}")
    for name in ("start_mel_token", "stop_mel_token"):
        if not 0 <= getattr(c, name) < c.number_mel_codes:
            raise CheckpointError(f"{ENGINE}: {path}: field gpt.{name} = {getattr(c, name)} is outside "
                                  f"number_mel_codes {c.number_mel_codes}")
    return c


def without_computed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if not k.endswith(COMPUTED)}


def tensors(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{ENGINE}: {path}: expected a state dict of tensors")
    return obj


def load_gpt(path: str | Path, config: GPTConfig, dtype: torch.dtype = torch.float32) -> UnifiedVoice:
    path = Path(path)
    obj = load_pickle(path)
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        obj = obj["model"]      # upstream's load_checkpoint accepts a training checkpoint too
    state = without_computed(tensors(obj, path))
    return load_module_from_state(lambda: UnifiedVoice(config), state, dtype, source=path).eval()


def s2mel_config(data: dict[str, Any], path: Path, latent_dim: int) -> S2MelConfig:
    f = lambda name, kind=int: field(data, f"s2mel.{name}", kind, path)  # noqa: E731
    for flag, want in (("DiT.is_causal", False), ("DiT.time_as_token", False), ("DiT.style_as_token", False),
                       ("DiT.style_condition", True), ("wavenet.style_condition", True),
                       ("length_regulator.is_discrete", False), ("length_regulator.f0_condition", False),
                       ("length_regulator.vector_quantize", False)):
        if f(flag, bool) is not want:
            raise CheckpointError(f"{ENGINE}: {path}: field s2mel.{flag} = {not want}; IndexTTS 2 uses {want}")
    for name, want in (("dit_type", "DiT"), ("DiT.final_layer_type", "wavenet")):
        if f(name, str) != want:
            raise CheckpointError(f"{ENGINE}: {path}: field s2mel.{name} = {f(name, str)!r}; expected {want!r}")
    if f("length_regulator.n_codebooks") != 1:
        raise CheckpointError(f"{ENGINE}: {path}: field s2mel.length_regulator.n_codebooks must be 1")
    ratios = f("length_regulator.sampling_ratios", list)
    c = S2MelConfig(
        in_channels=f("DiT.in_channels"), hidden_dim=f("DiT.hidden_dim"), num_heads=f("DiT.num_heads"),
        depth=f("DiT.depth"), content_dim=f("DiT.content_dim"), content_codebook_size=f("DiT.content_codebook_size"),
        style_dim=f("style_encoder.dim"), wavenet_hidden=f("wavenet.hidden_dim"), wavenet_layers=f("wavenet.num_layers"),
        wavenet_kernel=f("wavenet.kernel_size"), wavenet_dilation=f("wavenet.dilation_rate"),
        regulator_channels=f("length_regulator.channels"), regulator_in=f("length_regulator.in_channels"),
        regulator_codebook=f("length_regulator.content_codebook_size"),
        sampling_ratios=tuple(int(r) for r in ratios), latent_dim=latent_dim,
        uvit_skip_connection=f("DiT.uvit_skip_connection", bool),
        long_skip_connection=f("DiT.long_skip_connection", bool))
    if c.hidden_dim % c.num_heads:
        raise CheckpointError(f"{ENGINE}: {path}: s2mel.DiT.hidden_dim {c.hidden_dim} is not a multiple of "
                              f"num_heads {c.num_heads}")
    if c.wavenet_hidden != c.hidden_dim or c.content_dim != c.regulator_channels or c.wavenet_kernel % 2 == 0:
        raise CheckpointError(f"{ENGINE}: {path}: s2mel sizes disagree (wavenet.hidden_dim must equal "
                              f"DiT.hidden_dim, DiT.content_dim must equal length_regulator.channels, "
                              f"wavenet.kernel_size must be odd)")
    return c


def load_s2mel(path: str | Path, config: S2MelConfig, dtype: torch.dtype = torch.float32) -> S2Mel:
    """s2mel.pth: {"net": {name: state}} as upstream's load_checkpoint2 reads it ("module." prefixes
    dropped, weight norm folded)."""
    path = Path(path)
    obj = load_pickle(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("net"), dict):
        raise CheckpointError(f"{ENGINE}: {path}: expected a dict with a 'net' entry (upstream's s2mel layout)")
    state: dict[str, torch.Tensor] = {}
    for name in ("cfm", "length_regulator", "gpt_layer"):
        part = obj["net"].get(name)
        if not isinstance(part, dict):
            raise CheckpointError(f"{ENGINE}: {path}: net.{name} is missing")
        part = {k.removeprefix("module."): v for k, v in tensors(part, path).items()}
        state.update({f"{name}.{k}": v for k, v in fold_weight_norm(without_computed(part)).items()})
    return load_module_from_state(lambda: S2Mel(config), state, dtype, source=path).eval()


def codec_config(data: dict[str, Any], path: Path) -> CodecConfig:
    f = lambda name: field(data, f"semantic_codec.{name}", int, path)  # noqa: E731
    return CodecConfig(codebook_size=f("codebook_size"), hidden_size=f("hidden_size"),
                       codebook_dim=f("codebook_dim"), vocos_dim=f("vocos_dim"),
                       vocos_intermediate_dim=f("vocos_intermediate_dim"), vocos_num_layers=f("vocos_num_layers"))


def load_codec(path: str | Path, config: CodecConfig, dtype: torch.dtype = torch.float32) -> SemanticCodec:
    """MaskGCT's semantic_codec/model.safetensors; the decoder (never run at inference) is left out."""
    path = Path(path)
    if not path.is_file():
        raise ModelFolderError(f"{ENGINE}: semantic codec {path} not found")
    header = read_safetensors_header(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            state = {k: f.get_tensor(k) for k in header if not k.startswith("decoder.")}
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise CheckpointError(f"{ENGINE}: {path}: not readable ({type(e).__name__}: {e})") from None
    return load_module_from_state(lambda: SemanticCodec(config), fold_weight_norm(state), dtype, source=path).eval()


def load_campplus(path: str | Path, dtype: torch.dtype = torch.float32, **widths: int) -> CAMPPlus:
    """campplus_cn_common.bin: a torch state dict (weights-only), strict."""
    path = Path(path)
    state = tensors(load_pickle(path), path)
    return load_module_from_state(lambda: CAMPPlus(feat_dim=80, embedding_size=192, **widths), state, dtype,
                                  source=path).eval()

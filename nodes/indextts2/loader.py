"""Reads an IndexTTS 2 model folder in the published layout (IndexTeam/IndexTTS-2), unchanged.

    config.yaml   plain YAML (read with yaml.SafeLoader, bounded: checkpoint.load_yaml): gpt, s2mel, semantic_codec sections
    gpt.pth       UnifiedVoice state dict (torch pickle, read weights-only)
    s2mel.pth     {"net": {"cfm": ..., "length_regulator": ..., "gpt_layer": ...}} (weights-only)

Loading is strict: a missing, unexpected or mis-shaped tensor is a CheckpointError naming the file.
Upstream's only tolerance is kept: computed tables that upstream also recomputes (the conformers'
sinusoid `pos_enc.pe`, the DiT's `input_pos` and timestep `freqs`) may be in the file or not.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ...runtime.loading import CheckpointError, SizeSource, load_module_from_state, read_safetensors_header
from ..blocks.bigvgan import BigVGAN, load_bigvgan
from ..blocks.campplus import CAMPPlus
from ..formats.checkpoint import ModelFolderError, check_sizes, load_pickle, load_yaml
from ..blocks.dac import fold_weight_norm
from ..blocks.w2v_bert import W2VBert, load_w2v_bert
from .codec import CodecConfig, SemanticCodec
from .emotion import EmotionModel, load_emotion_model
from .gpt import ConformerConfig, GPTConfig, UnifiedVoice
from .s2mel import S2Mel, S2MelConfig

ENGINE = "IndexTTS 2"
COMPUTED = ("pos_enc.pe", "input_pos", "t_embedder.freqs", "t_embedder2.freqs")


def read_config(path: str | Path) -> dict[str, Any]:
    """config.yaml as plain data (no objects constructed); sizes checked; errors name the file."""
    path = Path(path)
    data = load_yaml(path, ENGINE)
    if not isinstance(data, dict):
        raise CheckpointError(f"{ENGINE}: {path} does not hold a YAML mapping")
    dit = data.get("s2mel", {}).get("DiT") if isinstance(data.get("s2mel"), dict) else None
    if isinstance(dit, dict) and "block_size" in dit:
        # s2mel.DiT.block_size (8192 published) is a position count upstream never reads (it hard-codes
        # 16384), not a block count: left out of the size checks
        data = {**data, "s2mel": {**data["s2mel"], "DiT": {k: v for k, v in dit.items() if k != "block_size"}}}
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


def load_gpt(path: str | Path, config: GPTConfig, dtype: torch.dtype = torch.float32,
             sizes: SizeSource | None = None) -> UnifiedVoice:
    path = Path(path)
    obj = load_pickle(path)
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        obj = obj["model"]      # upstream's load_checkpoint accepts a training checkpoint too
    state = without_computed(tensors(obj, path))
    return load_module_from_state(lambda: UnifiedVoice(config), state, dtype, source=path, config=sizes).eval()


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
        style_dim=f("style_encoder.dim"), wavenet_hidden=f("wavenet.hidden_dim"),
        wavenet_layers=f("wavenet.num_layers"),
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


def fold(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Weight norm folded in the checkpoint's dtype, as upstream computes it on every forward; in float64 for a
    float64 load (upstream's modules `.double()` compute it in float64)."""
    if dtype == torch.float64:
        state = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
    return fold_weight_norm(state)


def load_s2mel(path: str | Path, config: S2MelConfig, dtype: torch.dtype = torch.float32,
               sizes: SizeSource | None = None) -> S2Mel:
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
        state.update({f"{name}.{k}": v for k, v in fold(without_computed(part), dtype).items()})
    return load_module_from_state(lambda: S2Mel(config), state, dtype, source=path, config=sizes).eval()


def codec_config(data: dict[str, Any], path: Path) -> CodecConfig:
    f = lambda name: field(data, f"semantic_codec.{name}", int, path)  # noqa: E731
    return CodecConfig(codebook_size=f("codebook_size"), hidden_size=f("hidden_size"),
                       codebook_dim=f("codebook_dim"), vocos_dim=f("vocos_dim"),
                       vocos_intermediate_dim=f("vocos_intermediate_dim"), vocos_num_layers=f("vocos_num_layers"))


def load_codec(path: str | Path, config: CodecConfig, dtype: torch.dtype = torch.float32,
               sizes: SizeSource | None = None) -> SemanticCodec:
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
    return load_module_from_state(lambda: SemanticCodec(config), fold(state, dtype), dtype, source=path,
                                  config=sizes).eval()


def load_campplus(path: str | Path, dtype: torch.dtype = torch.float32, **widths: int) -> CAMPPlus:
    """campplus_cn_common.bin: a torch state dict (weights-only), strict. The widths are read from the
    file's shapes (the published model: growth 32, bottleneck 4 x 32, 128 initial channels)."""
    path = Path(path)
    state = tensors(load_pickle(path), path)
    probe = ("xvector.tdnn.linear.weight", "xvector.block1.tdnnd1.linear1.weight",
             "xvector.block1.tdnnd1.cam_layer.linear_local.weight")
    if not widths and all(k in state for k in probe):
        init = state["xvector.tdnn.linear.weight"].shape[0]
        bn = state["xvector.block1.tdnnd1.linear1.weight"].shape[0]
        growth = state["xvector.block1.tdnnd1.cam_layer.linear_local.weight"].shape[0]
        widths = {"init_channels": init, "growth_rate": growth, "bn_size": bn // growth}
    return load_module_from_state(lambda: CAMPPlus(feat_dim=80, embedding_size=192, **widths), state, dtype,
                                  source=path).eval()


# ---- the model folder -------------------------------------------------------------------------------------

REQUIRED = ("config.yaml", "gpt.pth", "s2mel.pth", "bpe.model", "wav2vec2bert_stats.pt",
            "campplus/campplus_cn_common.bin", "bigvgan/config.json", "bigvgan/bigvgan_generator.pt",
            "semantic_codec/model.safetensors", "w2v-bert-2.0/config.json", "w2v-bert-2.0/model.safetensors")
EMOTION_FILES = ("feat1.pt", "feat2.pt")     # speaker / emotion matrices of the emotion-vector mode
SEMANTIC_LAYER = 17                          # upstream reads w2v-bert's hidden_states[17]
EMOTION_MODEL = "qwen0.6bemo4-merge"         # config.yaml's qwen_emo_path: the emotion-from-text model


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks to be an IndexTTS 2 model ([] when complete)."""
    return [name for name in REQUIRED if not (Path(folder) / name).is_file()]


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


@dataclass
class IndexTTS2Bundle:
    folder: Path
    gpt: UnifiedVoice
    s2mel: S2Mel
    codec: SemanticCodec
    w2v_bert: W2VBert
    semantic_mean: torch.Tensor
    semantic_std: torch.Tensor
    campplus: CAMPPlus
    bigvgan: BigVGAN
    mel: dict[str, Any]                       # 22.05 kHz reference mel (s2mel.preprocess_params)
    emo_matrix: list[torch.Tensor] | None    # feat2.pt split by emo_num (8 emotions)
    spk_matrix: list[torch.Tensor] | None    # feat1.pt split the same way
    emotion_model: EmotionModel | None       # qwen0.6bemo4-merge/ (emotion from text), when present


def _stats(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    obj = load_pickle(path)
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), torch.Tensor) for k in ("mean", "var")):
        raise CheckpointError(f"{ENGINE}: {path}: expected {{'mean': tensor, 'var': tensor}}")
    return obj["mean"].float(), torch.sqrt(obj["var"].float())


def _matrices(folder: Path, data: dict[str, Any], path: Path) -> tuple[list | None, list | None]:
    if not all((folder / f).is_file() for f in EMOTION_FILES):
        return None, None
    num = field(data, "emo_num", list, path)
    out = []
    for name in ("feat2.pt", "feat1.pt"):
        m = load_pickle(folder / name)
        if not isinstance(m, torch.Tensor) or m.dim() != 2 or m.shape[0] != sum(num):
            raise CheckpointError(f"{ENGINE}: {folder / name}: expected a [{sum(num)}, width] tensor: {path}: "
                                  f"emo_num = {num} does not fit the matrix ({list(getattr(m, 'shape', []))})")
        out.append(list(torch.split(m.float(), [int(n) for n in num])))
    return out[0], out[1]


def load_indextts2(folder: str | Path, dtype: torch.dtype = torch.float32) -> IndexTTS2Bundle:
    """The published IndexTTS-2 folder plus its four external models in subfolders (see REQUIRED).
    The GPT and w2v-bert run in `dtype`; s2mel, the codec, CAM++ and BigVGAN in float32, as upstream."""
    folder = Path(folder)
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise ModelFolderError(f"{ENGINE}: {folder / name} not found")
    path = folder / "config.yaml"
    data = read_config(path)
    w2v = load_w2v_bert(folder / "w2v-bert-2.0", SEMANTIC_LAYER, dtype)
    width = w2v.config.hidden_size
    gpt_c = replace(gpt_config(data, path), semantic_dim=width)
    codec_c = codec_config(data, path)
    s2mel_c = s2mel_config(data, path, gpt_c.model_dim)
    if codec_c.hidden_size != width or s2mel_c.regulator_in != width:
        raise CheckpointError(f"{ENGINE}: {path}: semantic_codec.hidden_size ({codec_c.hidden_size}) and "
                              f"s2mel.length_regulator.in_channels ({s2mel_c.regulator_in}) must equal the "
                              f"w2v-bert width ({width})")
    mean, std = _stats(folder / "wav2vec2bert_stats.pt")
    if mean.shape != (width,) or std.shape != (width,):
        raise CheckpointError(f"{ENGINE}: {folder / 'wav2vec2bert_stats.pt'}: mean/var must have {width} values")
    emo, spk = _matrices(folder, data, path)
    spect = field(data, "s2mel.preprocess_params.spect_params", dict, path)
    fmax = spect.get("fmax", "None")
    mel = {"sampling_rate": field(data, "s2mel.preprocess_params.sr", int, path),
           "n_fft": field(data, "s2mel.preprocess_params.spect_params.n_fft", int, path),
           "hop_size": field(data, "s2mel.preprocess_params.spect_params.hop_length", int, path),
           "win_size": field(data, "s2mel.preprocess_params.spect_params.win_length", int, path),
           "num_mels": field(data, "s2mel.preprocess_params.spect_params.n_mels", int, path),
           "fmin": float(spect.get("fmin", 0)), "fmax": None if fmax in ("None", None) else 8000.0}
    bigvgan = load_bigvgan(folder / "bigvgan")
    if bigvgan.config.num_mels != s2mel_c.in_channels or mel["num_mels"] != s2mel_c.in_channels:
        raise CheckpointError(f"{ENGINE}: {folder / 'bigvgan' / 'config.json'}: num_mels must equal "
                              f"s2mel.DiT.in_channels ({s2mel_c.in_channels})")
    sizes = SizeSource(path, data)
    return IndexTTS2Bundle(
        folder=folder, gpt=load_gpt(folder / "gpt.pth", gpt_c, dtype, sizes),
        s2mel=load_s2mel(folder / "s2mel.pth", s2mel_c, sizes=sizes),
        codec=load_codec(folder / "semantic_codec" / "model.safetensors", codec_c, sizes=sizes), w2v_bert=w2v,
        semantic_mean=mean, semantic_std=std, campplus=load_campplus(folder / "campplus" / "campplus_cn_common.bin"),
        bigvgan=bigvgan, mel=mel, emo_matrix=emo, spk_matrix=spk,
        emotion_model=load_emotion_model(folder / EMOTION_MODEL, dtype) if (folder / EMOTION_MODEL).is_dir() else None)

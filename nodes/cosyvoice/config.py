"""Read upstream `cosyvoice2.yaml` / `cosyvoice3.yaml` (HyperPyYAML) as plain data, never executing it.

HyperPyYAML's `!new:` / `!name:` / `!apply:` tags construct objects; here a tagged mapping becomes a
dict with its tag under `"!"`, a tagged scalar or sequence its plain value, and `!ref <name>` is
replaced by the top-level value it names; a product of such names and integers (`!ref <chunk_size> *
<token_mel_ratio>`, the estimators' static_chunk_size) is computed; other `!ref` expressions stay as their text.
Only the values the engine needs are read from the result, each checked, errors naming file and field.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import MAX_NODES, check_sizes, load_yaml
from ..blocks.s3gen_flow import FlowConfig
from ..blocks.hift import HiFTConfig

_REF = re.compile(r"^<([A-Za-z_][\w.]*)>$")


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps HyperPyYAML's tags as data."""


def _tagged(loader: _Loader, suffix: str, node: yaml.Node) -> Any:
    tag = node.tag
    if isinstance(node, yaml.MappingNode):
        data = loader.construct_mapping(node, deep=True)
        return {"!": tag, **data}
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    value = loader.construct_scalar(node)
    if tag == "!ref":
        return ("!ref", value)
    return {"!": tag, "value": value}


_Loader.add_multi_constructor("!", _tagged)


class _Resolver:
    """Replaces `!ref <name>` by a copy of the top-level value it names, counting the values it makes: chains
    of references expand like aliases (each level multiplies), so past MAX_NODES the file is refused."""

    def __init__(self, top: dict[str, Any], path: Path) -> None:
        self.top, self.path, self.made = top, path, 0

    def __call__(self, value: Any, depth: int = 0) -> Any:
        self.made += 1
        if self.made > MAX_NODES:
            raise CheckpointError(f"CosyVoice: {self.path}: its !ref references expand to more than {MAX_NODES} "
                                  "values; expected a model config")
        if depth > 32:
            raise CheckpointError(f"CosyVoice: {self.path}: a !ref chain more than 32 deep")
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "!ref":
            m = _REF.match(str(value[1]).strip())
            if not m or m.group(1) not in self.top:
                return self.product(str(value[1]), depth)
            return self(self.top[m.group(1)], depth + 1)
        if isinstance(value, dict):
            return {k: self(v, depth) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, depth) for v in value]
        return value

    def product(self, text: str, depth: int) -> Any:
        """`<a> * <b> * 3`: the product when every factor is an integer (a name of an integer value or an
        integer literal); otherwise the text as it is."""
        total = 1
        for part in text.split("*"):
            part = part.strip()
            m = _REF.match(part)
            factor = self(self.top[m.group(1)], depth + 1) if m and m.group(1) in self.top else \
                int(part) if part.isdigit() else None
            if not isinstance(factor, int) or isinstance(factor, bool):
                return text
            total *= factor
            if abs(total) > 1 << 31:        # no config size is this large: the field's check then names it
                return text
        return total


def read_hyperpyyaml(path: Path) -> dict[str, Any]:
    raw = load_yaml(path, "CosyVoice", _Loader)
    if not isinstance(raw, dict):
        raise CheckpointError(f"CosyVoice: {path} does not hold a YAML mapping")
    data = _Resolver(raw, path)(raw)
    check_sizes(data, path, "CosyVoice")
    return data


class _Fields:
    """Typed reads of one mapping of the YAML, errors naming the file and the dotted field."""

    def __init__(self, path: Path, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise CheckpointError(f"CosyVoice: {path}: field {where!r} is missing or not a mapping")
        self.path, self.data, self.where = path, data, where

    def sub(self, key: str) -> _Fields:
        return _Fields(self.path, self.data.get(key), f"{self.where}.{key}")

    def tag(self) -> str:
        return str(self.data.get("!", ""))

    def get(self, key: str, kind: type, default: Any = None, low: int | None = None) -> Any:
        """`low`: a tighter lower bound than NUMBER_RULES' for the field's name (RAS sampling needs top_k >= 1)."""
        if key not in self.data:
            if default is None:
                raise CheckpointError(f"CosyVoice: {self.path}: field {self.where}.{key} is missing")
            return default
        value = self.data[key]
        if low is not None and isinstance(value, (int, float)) and value < low:
            raise CheckpointError(f"CosyVoice: {self.path}: field {self.where}.{key} = {value!r}; expected at least "
                                  f"{low}")
        try:
            if kind is tuple:
                return tuple(tuple(v) if isinstance(v, list) else int(v) for v in value)
            if kind is bool:
                return bool(value)
            if isinstance(value, (dict, list)) or value is None:
                raise TypeError(type(value).__name__)
            return kind(value)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"CosyVoice: {self.path}: field {self.where}.{key} = {value!r} is not "
                                  f"{kind.__name__} ({e})") from None


def version_of(path: Path, data: dict[str, Any]) -> int:
    tag = _Fields(path, data.get("llm"), "llm").tag()
    if tag.endswith("CosyVoice3LM"):
        return 3
    if tag.endswith("Qwen2LM"):
        return 2
    raise CheckpointError(f"CosyVoice: {path}: field llm is {tag or 'untagged'}, expected Qwen2LM (CosyVoice 2) "
                          "or CosyVoice3LM (CosyVoice 3); CosyVoice 1 is not supported")


def lm_fields(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    llm = _Fields(path, data.get("llm"), "llm")
    sampling = llm.sub("sampling")
    return {"speech_token_size": llm.get("speech_token_size", int),
            "top_p": sampling.get("top_p", float, 0.8), "top_k": sampling.get("top_k", int, 25, low=1),
            "win_size": sampling.get("win_size", int, 10), "tau_r": sampling.get("tau_r", float, 0.1),
            "llm_input_size": llm.get("llm_input_size", int), "llm_output_size": llm.get("llm_output_size", int)}


def flow_config(path: Path, data: dict[str, Any], version: int) -> FlowConfig:
    flow = _Fields(path, data.get("flow"), "flow")
    dec = flow.sub("decoder")
    cfm = dec.sub("cfm_params")
    cfm = cfm.sub("content") if "content" in cfm.data else cfm
    est = dec.sub("estimator")
    common = dict(version=version, vocab_size=flow.get("vocab_size", int), input_size=flow.get("input_size", int),
                  output_size=flow.get("output_size", int), spk_embed_dim=flow.get("spk_embed_dim", int),
                  token_mel_ratio=flow.get("token_mel_ratio", int), pre_lookahead_len=flow.get("pre_lookahead_len", int),
                  inference_cfg_rate=cfm.get("inference_cfg_rate", float), t_scheduler=cfm.get("t_scheduler", str))
    if common["t_scheduler"] != "cosine":
        raise CheckpointError(f"CosyVoice: {path}: field flow.decoder.cfm_params.t_scheduler is "
                              f"{common['t_scheduler']!r}; only 'cosine' is supported")
    if version == 2:
        enc = flow.sub("encoder")
        return FlowConfig(**common, encoder_size=enc.get("output_size", int), encoder_heads=enc.get("attention_heads", int),
                          encoder_units=enc.get("linear_units", int), encoder_blocks=enc.get("num_blocks", int),
                          in_channels=est.get("in_channels", int), channels=est.get("channels", tuple),
                          attention_head_dim=est.get("attention_head_dim", int), n_blocks=est.get("n_blocks", int),
                          num_mid_blocks=est.get("num_mid_blocks", int), num_heads=est.get("num_heads", int),
                          mel_dim=est.get("out_channels", int),
                          # upstream's class defaults when the YAML leaves them out (UpsampleConformerEncoder 0)
                          encoder_chunk_size=enc.get("static_chunk_size", int, 0),
                          decoder_chunk_size=est.get("static_chunk_size", int, 50))
    pre = flow.sub("pre_lookahead_layer")
    return FlowConfig(**common, pre_lookahead_channels=pre.get("channels", int), dit_dim=est.get("dim", int),
                      dit_depth=est.get("depth", int), dit_heads=est.get("heads", int),
                      dit_dim_head=est.get("dim_head", int), dit_ff_mult=est.get("ff_mult", int),
                      mel_dim=est.get("mel_dim", int), mu_dim=est.get("mu_dim", int), spk_dim=est.get("spk_dim", int),
                      decoder_chunk_size=est.get("static_chunk_size", int, 50))


def hift_config(path: Path, data: dict[str, Any]) -> HiFTConfig:
    h = _Fields(path, data.get("hift"), "hift")
    causal = h.tag().endswith("CausalHiFTGenerator")
    istft = h.sub("istft_params")
    f0 = h.sub("f0_predictor")
    return HiFTConfig(
        causal=causal, in_channels=h.get("in_channels", int), base_channels=h.get("base_channels", int),
        nb_harmonics=h.get("nb_harmonics", int), sampling_rate=h.get("sampling_rate", int),
        nsf_alpha=h.get("nsf_alpha", float), nsf_sigma=h.get("nsf_sigma", float),
        nsf_voiced_threshold=h.get("nsf_voiced_threshold", float),
        upsample_rates=h.get("upsample_rates", tuple), upsample_kernel_sizes=h.get("upsample_kernel_sizes", tuple),
        n_fft=istft.get("n_fft", int), hop_len=istft.get("hop_len", int),
        resblock_kernel_sizes=h.get("resblock_kernel_sizes", tuple),
        resblock_dilation_sizes=h.get("resblock_dilation_sizes", tuple),
        source_resblock_kernel_sizes=h.get("source_resblock_kernel_sizes", tuple),
        source_resblock_dilation_sizes=h.get("source_resblock_dilation_sizes", tuple),
        lrelu_slope=h.get("lrelu_slope", float), audio_limit=h.get("audio_limit", float),
        conv_pre_look_right=h.get("conv_pre_look_right", int, 4) if causal else 4,
        f0_cond_channels=f0.get("cond_channels", int))


def feat_params(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The flow prompt's mel (`feat_extractor: !name:matcha.utils.audio.mel_spectrogram`)."""
    f = _Fields(path, data.get("feat_extractor"), "feat_extractor")
    fmax = f.data.get("fmax")
    return {"n_fft": f.get("n_fft", int), "num_mels": f.get("num_mels", int), "sampling_rate": f.get("sampling_rate", int),
            "hop_size": f.get("hop_size", int), "win_size": f.get("win_size", int), "fmin": f.get("fmin", float, 0.0),
            "fmax": None if fmax in (None, "null") else f.get("fmax", float)}

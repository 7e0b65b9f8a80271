"""Find and load CosyVoice 2 / 3 model folders in the upstream layout, unchanged:

    models/TTS/cosyvoice/<model>/
        cosyvoice2.yaml | cosyvoice3.yaml    HyperPyYAML, read as plain data (config.py)
        llm.pt  flow.pt  hift.pt             pickled state dicts: torch.load(weights_only=True, mmap=True)
        campplus.onnx                        CAM++ speaker embedding (read by our ONNX reader)
        speech_tokenizer_v2.onnx | speech_tokenizer_v3.onnx
        spk2info.pt                          built-in speakers (optional)
        CosyVoice-BlankEN/config.json vocab.json merges.txt   the Qwen2 config and BPE

Modules are built with parameters on `meta` and the file's tensors assigned strictly: a missing,
unexpected or mis-shaped key is a CheckpointError naming the file.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...runtime.loading import CheckpointError, SizeSource, load_module_from_state
from ..formats.checkpoint import ModelFolderError, load_pickle, read_json, state_dict
from ..formats.onnx_graph import OnnxModule, OnnxRuntimeError
from ..formats.onnx_reader import OnnxFormatError, read_model
from .config import feat_params, flow_config, hift_config, lm_fields, read_hyperpyyaml, version_of
from ..blocks.s3gen_flow import NOISE_FRAMES, Flow, FlowConfig
from ..blocks.hift import HiFT, HiFTConfig
from .lm import CosyVoiceLM, LMConfig, Qwen2Config

QWEN_DIR = "CosyVoice-BlankEN"
# The text lm_head of upstream's Qwen2ForCausalLM (tied to embed_tokens); TTS never uses it.
UNUSED_LM_KEYS = ("llm.model.lm_head.weight",)


def yaml_path(folder: Path) -> Path | None:
    for name in ("cosyvoice3.yaml", "cosyvoice2.yaml"):
        if (folder / name).is_file():
            return folder / name
    return None


def required_files(folder: Path, version: int) -> list[str]:
    return ["llm.pt", "flow.pt", "hift.pt", "campplus.onnx", f"speech_tokenizer_v{version}.onnx",
            f"{QWEN_DIR}/config.json", f"{QWEN_DIR}/vocab.json", f"{QWEN_DIR}/merges.txt"]


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks to be a CosyVoice model ([] when complete)."""
    y = yaml_path(folder)
    if y is None:
        return ["cosyvoice2.yaml or cosyvoice3.yaml"]
    version = 3 if y.name == "cosyvoice3.yaml" else 2
    return [f for f in required_files(folder, version) if not (folder / f).is_file()]


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """A pickled state dict, through torch.load(weights_only=True) only (nodes/formats/checkpoint.py)."""
    if not path.is_file():
        raise ModelFolderError(f"CosyVoice: {path} not found")
    return state_dict(load_pickle(path), path)


def fold_weight_norm(state: dict[str, torch.Tensor], path: Path,
                     wide: Callable[[str], bool] = lambda key: False) -> dict[str, torch.Tensor]:
    """Replace weight-norm pairs by the weight upstream computes from them (`torch._weight_norm(v, g, 0)`).

    Both key styles: `X.parametrizations.weight.original0/1` (g, v) and the old `X.weight_g/_v`. Keys for
    which `wide(key)` holds are folded in float64 (v3's f0 predictor runs in float64 upstream)."""
    out: dict[str, torch.Tensor] = {}
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        for g_suffix, v_suffix in ((".parametrizations.weight.original0", ".parametrizations.weight.original1"),
                                   (".weight_g", ".weight_v")):
            if key.endswith(g_suffix):
                pairs.setdefault(key[: -len(g_suffix)], {})["g"] = value
                break
            if key.endswith(v_suffix):
                pairs.setdefault(key[: -len(v_suffix)], {})["v"] = value
                break
        else:
            out[key] = value
    for base, gv in pairs.items():
        if set(gv) != {"g", "v"}:
            raise CheckpointError(f"CosyVoice: {path}: weight norm of {base!r} has only {sorted(gv)}")
        g, v = gv["g"], gv["v"]
        if wide(base):
            g, v = g.double(), v.double()
        out[f"{base}.weight"] = torch._weight_norm(v, g, 0)
    return out


def keep_dtype(module: nn.Module, prefix: str, state: dict[str, torch.Tensor]) -> None:
    """Put back, in the file's own dtype, the tensors under `prefix` that upstream never casts (v3's float64
    f0 predictor, the DiT's float32 RoPE frequencies), after the rest was loaded in the requested dtype."""
    sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    module.get_submodule(prefix.rstrip(".")).load_state_dict(sub, strict=True, assign=True)


def qwen2_config(folder: Path) -> Qwen2Config:
    path = folder / QWEN_DIR / "config.json"
    try:
        return Qwen2Config.from_dict(read_json(path, "CosyVoice"))
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"CosyVoice: {path} is not a Qwen2 config: {e}") from None


class SpeechTokenizer(nn.Module):
    """speech_tokenizer_v2/v3.onnx run as a torch module: Whisper log-mel [1, 128, T] -> S3 tokens [1, T/4]."""

    def __init__(self, graph: OnnxModule) -> None:
        super().__init__()
        self.graph = graph
        convs = [graph.weights[graph._keys[n.inputs[1]]] for n in graph.nodes
                 if n.op_type == "Conv" and n.inputs[1] in graph._keys and graph._keys[n.inputs[1]] in graph.weights]
        self.width = int(convs[0].shape[0]) if convs else 1280
        self.heads = max(1, self.width // 64)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        length = torch.tensor([mel.shape[2]], dtype=torch.int32, device=mel.device)
        return self.graph(mel.float(), length)[0].long()


class CampPlus(nn.Module):
    """campplus.onnx run as a torch module: mean-normalised Kaldi fbank [1, T, 80] -> x-vector [1, 192]."""

    def __init__(self, graph: OnnxModule) -> None:
        super().__init__()
        self.graph = graph

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        return self.graph(fbank.float())[0]


def read_onnx(path: Path) -> OnnxModule:
    if not path.is_file():
        raise ModelFolderError(f"CosyVoice: {path} not found")
    try:
        return OnnxModule(read_model(path), what=str(path)).eval()
    except (OnnxFormatError, OnnxRuntimeError) as e:
        raise CheckpointError(f"CosyVoice: {path} cannot be used: {e}") from None


@dataclass
class CosyVoiceBundle:
    folder: Path
    version: int
    lm_config: LMConfig
    flow_config: FlowConfig
    hift_config: HiFTConfig
    llm: CosyVoiceLM
    flow: Flow
    hift: HiFT
    speech_tokenizer: SpeechTokenizer | None = None
    campplus: CampPlus | None = None
    feat_params: dict[str, Any] = field(default_factory=dict)
    speakers: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    # v3: the RNG state HiFT's noise buffers are drawn from in upstream (causal_hift_noise_state); None for v2
    hift_noise_state: torch.Tensor | None = None


def causal_hift_noise_state(flow: Flow, hift: HiFT) -> torch.Tensor:
    """The torch RNG state from which upstream's CosyVoice 3 draws its HiFT noise buffers.

    Upstream's CausalHiFTGenerator takes its initial phases and sine noise from buffers drawn with the
    global RNG while the model is built (SineGen2: `rand_ini = torch.rand(1, 9)`, then `sine_waves =
    torch.rand(1, 300 * 24000, 9)`), not per request. The state then is fixed: CausalConditionalCFM seeds 0
    and draws its noise buffer, then the default initialisation of every module built before SineGen2 draws
    from it: the flow's input_embedding (normal_) and spk_embed_affine_layer, and the f0 predictor's five
    convolutions and classifier (uniform_ weight and bias). Those draws depend only on the element counts,
    so they are replayed here from the loaded shapes (uniform draws are sequential: a shorter
    `rand(1, L, 9)` from this state is the prefix upstream's forward slices, so nothing of 7.2 M rows is kept)."""
    g = torch.Generator().manual_seed(0)
    torch.randn((1, 80, NOISE_FRAMES), generator=g)                     # CausalConditionalCFM.rand_noise
    torch.empty(flow.input_embedding.weight.numel()).normal_(generator=g)
    f0 = hift.f0_predictor
    layers = [flow.spk_embed_affine_layer, *(m for m in f0.condnet if hasattr(m, "weight")), f0.classifier]
    for layer in layers:                                                # kaiming_uniform_ weight, uniform_ bias
        torch.empty(layer.weight.numel()).uniform_(generator=g)
        torch.empty(layer.bias.numel()).uniform_(generator=g)
    return g.get_state()


def read_configs(folder: Path) -> tuple[int, LMConfig, FlowConfig, HiFTConfig, dict[str, Any]]:
    y = yaml_path(folder)
    if y is None:
        raise ModelFolderError(f"CosyVoice: {folder} has no cosyvoice2.yaml or cosyvoice3.yaml")
    data = read_hyperpyyaml(y)
    version = version_of(y, data)
    lm = lm_fields(y, data)
    qwen = qwen2_config(folder)
    if lm["llm_input_size"] != qwen.hidden_size:
        raise CheckpointError(f"CosyVoice: {y}: field llm.llm_input_size = {lm['llm_input_size']} but "
                              f"{folder / QWEN_DIR / 'config.json'} has hidden_size {qwen.hidden_size}")
    lm_config = LMConfig(version=version, speech_token_size=lm["speech_token_size"], qwen=qwen, top_p=lm["top_p"],
                         top_k=lm["top_k"], win_size=lm["win_size"], tau_r=lm["tau_r"])
    return version, lm_config, flow_config(y, data, version), hift_config(y, data), feat_params(y, data)


def read_speakers(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    if not path.is_file():
        return {}
    data = load_pickle(path)        # the project's weights-only loader: its errors name the file
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise CheckpointError(f"CosyVoice: {path} does not hold speaker -> feature dicts")
    return {str(k): v for k, v in data.items()}


def load_cosyvoice(folder: str | Path, dtype: torch.dtype = torch.float32) -> CosyVoiceBundle:
    """The LM, flow and vocoder of a model folder in `dtype` (the v3 f0 predictor stays float64)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"CosyVoice: model folder {folder} not found")
    version, lm_config, fc, hc, feats = read_configs(folder)
    missing = [f for f in required_files(folder, version) if not (folder / f).is_file()]
    if missing:
        raise ModelFolderError(f"CosyVoice: {folder} is missing {', '.join(missing)} (expected the upstream layout "
                               f"of a CosyVoice {version} repository)")
    lm_path = folder / "llm.pt"
    lm_state = {k: v for k, v in read_state(lm_path).items() if k not in UNUSED_LM_KEYS}
    qwen_path = folder / QWEN_DIR / "config.json"
    llm = load_module_from_state(lambda: CosyVoiceLM(lm_config), lm_state, dtype, lm_path,
                                 SizeSource(qwen_path, read_json(qwen_path, "CosyVoice"))).eval()
    sizes = SizeSource(yaml_path(folder), read_hyperpyyaml(yaml_path(folder)))
    flow_path = folder / "flow.pt"
    flow_state = read_state(flow_path)
    flow = load_module_from_state(lambda: Flow(fc), flow_state, dtype, flow_path, sizes).eval()
    if version == 3 and dtype != torch.float64:   # a float64 load casts them up, as upstream's .double() does
        keep_dtype(flow, "decoder.estimator.rotary_embed.", flow_state)
    hift_path = folder / "hift.pt"
    hift_state = {k.replace("generator.", ""): v for k, v in read_state(hift_path).items()}
    # folded in float64 where upstream computes the weight in float64 (its modules .double()'d: all of them)
    hift_state = fold_weight_norm(hift_state, hift_path, wide=lambda k: dtype == torch.float64
                                  or (hc.causal and k.startswith("f0_predictor.")))
    if hc.causal:   # upstream moves the causal f0 predictor to float64 before use
        hift_state = {k: v.double() if k.startswith("f0_predictor.") else v for k, v in hift_state.items()}
    hift = load_module_from_state(lambda: HiFT(hc), hift_state, dtype, hift_path, sizes).eval()
    if hc.causal:
        keep_dtype(hift, "f0_predictor.", hift_state)
    tokenizer = SpeechTokenizer(read_onnx(folder / f"speech_tokenizer_v{version}.onnx"))
    campplus = CampPlus(read_onnx(folder / "campplus.onnx"))
    return CosyVoiceBundle(folder, version, lm_config, fc, hc, llm, flow, hift, tokenizer, campplus, feats,
                           read_speakers(folder / "spk2info.pt"),
                           causal_hift_noise_state(flow, hift) if hc.causal else None)

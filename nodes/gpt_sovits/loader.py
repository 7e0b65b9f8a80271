"""Find and load GPT-SoVITS model folders (v2, v2Pro, v2ProPlus), upstream files unchanged:

    models/TTS/gpt_sovits/
        <model>/                          one voice: any GPT (T2S) `*.ckpt` and SoVITS `*.pth` pair, e.g.
            s1v3.ckpt  s2Gv2Pro.pth       the pretrained pair, or a fine-tuned `name-e15.ckpt` + `name_e8_s200.pth`
        pretrained_models/                shared by every voice (upstream's GPT_SoVITS/pretrained_models names):
            chinese-hubert-base/          config.json + pytorch_model.bin (or model.safetensors)
            chinese-roberta-wwm-ext-large/  config.json + weights + tokenizer.json: Chinese text (BERT features;
                                          English reads zeros, so a folder without it speaks English only)
            sv/pretrained_eres2netv2w24s4ep4.ckpt   (v2Pro / v2ProPlus only)
            text/                         files of upstream's GPT_SoVITS/text/: cmudict.rep cmudict-fast.rep
                                          engdict-hot.rep (English), g2pw/polyphonic.rep polyphonic-fix.rep
                                          (Chinese with G2PW)
            G2PWModel/                    optional, upstream's G2PW folder unchanged (g2pW.onnx, ...): Chinese
                                          polyphones read by G2PW as upstream does by default; without it
                                          upstream's pypinyin path

A shared folder placed inside the model folder itself is used first. Pickles are read with
`torch.load(weights_only=True)` only; the SoVITS file's first two bytes (a version code) and its
`utils.HParams` config go through `checkpoint.load_pickle_with_records` (a stand-in class, nothing
upstream imported). Modules are built on `meta` and the tensors assigned strictly: a missing, unexpected
or mis-shaped key is a CheckpointError naming the file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from ...runtime.loading import CheckpointError, SizeSource, load_module_from_state
from ..formats.checkpoint import (ModelFolderError, check_sizes, load_pickle, load_pickle_with_records, load_tokenizer,
                                 read_json, state_dict)
from ..blocks.dac import fold_weight_norm
from .bert import BertConfig, BertFeatures
from ..blocks.hubert import Hubert, HubertConfig
from .sovits import WEIGHT_NORMED, SoVITSConfig, SynthesizerTrn
from .speaker import ERes2NetV2
from .t2s import T2SConfig, Text2Semantic

ENGINE = "GPT-SoVITS"
SHARED = "pretrained_models"
HUBERT_DIR = "chinese-hubert-base"
BERT_DIR = "chinese-roberta-wwm-ext-large"
SV_FILE = "sv/pretrained_eres2netv2w24s4ep4.ckpt"
TEXT_DIR = "text"
G2PW_DIR = "G2PWModel"
V2_SYMBOLS = 732

# process_ckpt.py: the first two bytes of a SoVITS file name its version ("PK": a plain torch zip, v1/v2).
HEADERS = {b"05": "v2Pro", b"06": "v2ProPlus"}
UNSUPPORTED = {b"00": "v1", b"02": "v3", b"03": "v3 LoRA", b"04": "v4 LoRA"}
# ... except upstream's pretrained files, recognised by the MD5 of their first 8192 bytes (process_ckpt.py).
PRETRAINED = {"dc3c97e17592963677a4a1681f30c653": "v2", "6642b37f3dbb1f76882b69937c95a5f3": "v2",
              "c7e9fce2223f3db685cdfa1e6368728a": "v2Pro", "66b313e39455b57ab1b0bc0b239c9d0a": "v2ProPlus",
              "43797be674a37c1c83ee81081941ed0f": "v3", "4f26b9476d0c5033e04162c486074374": "v4"}


@dataclass
class GPTSoVITS:
    t2s: Text2Semantic
    sovits: SynthesizerTrn
    hubert: Hubert
    speaker: ERes2NetV2 | None          # v2Pro / v2ProPlus only
    bert: BertFeatures | None           # chinese-roberta-wwm-ext-large: Chinese text only (English reads zeros)
    tokenizer: Tokenizer | None         # its tokenizer.json (BERT input ids; G2PW's too)
    version: str
    dtype: torch.dtype
    text_dir: Path                      # upstream's GPT_SoVITS/text files, read on first use
    g2pw_dir: Path | None               # upstream's G2PWModel folder; None: upstream's pypinyin path


def pair(folder: Path) -> tuple[Path, Path]:
    """The voice's GPT `.ckpt` and SoVITS `.pth` (exactly one of each)."""
    ckpts = sorted(p for p in folder.glob("*.ckpt") if p.is_file())
    pths = sorted(p for p in folder.glob("*.pth") if p.is_file())
    if len(ckpts) != 1 or len(pths) != 1:
        raise ModelFolderError(f"{ENGINE}: {folder} must hold exactly one GPT weights file (*.ckpt) and one SoVITS "
                               f"weights file (*.pth); found {[p.name for p in ckpts]} and {[p.name for p in pths]}")
    return ckpts[0], pths[0]


def shared_path(folder: Path, name: str) -> Path:
    """`name` inside the model folder if there, else in the shared `pretrained_models` beside it."""
    own = folder / name
    return own if own.exists() else folder.parent / SHARED / name


def weights_file(folder: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    raise ModelFolderError(f"{ENGINE}: {folder} has neither model.safetensors nor pytorch_model.bin")


def missing_files(folder: Path) -> list[str]:
    """What the folder lacks to be a GPT-SoVITS voice ([] when complete)."""
    missing = [f"one {pattern} ({what})" for pattern, what in (("*.ckpt", "the GPT weights"), ("*.pth", "the SoVITS weights"))
               if len([p for p in folder.glob(pattern) if p.is_file()]) != 1]
    hubert = shared_path(folder, HUBERT_DIR)
    if not (hubert / "config.json").is_file():
        missing.append(f"{HUBERT_DIR}/config.json (in the folder or in ../{SHARED}/)")
    if not any((hubert / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
        missing.append(f"{HUBERT_DIR}/model.safetensors or pytorch_model.bin (in the folder or in ../{SHARED}/)")
    return missing


def is_model_folder(folder: Path) -> bool:
    return not missing_files(folder)


def sovits_version(path: Path) -> str:
    """v2 / v2Pro / v2ProPlus as upstream's get_sovits_version_from_path_fast decides; others refused."""
    with open(path, "rb") as f:
        head = f.read(8192)
    version = PRETRAINED.get(hashlib.md5(head).hexdigest())
    if version is None:
        code = head[:2]
        if code in UNSUPPORTED:
            version = UNSUPPORTED[code]
        elif code == b"PK":
            version = "v2"
        elif code in HEADERS:
            version = HEADERS[code]
        else:
            raise CheckpointError(f"{path}: not a GPT-SoVITS SoVITS checkpoint (starts with {code!r})")
    if version not in ("v2", "v2Pro", "v2ProPlus"):
        raise CheckpointError(f"{path}: a GPT-SoVITS {version} SoVITS model; this engine runs v2, v2Pro and v2ProPlus")
    return version


def load_t2s(path: Path, dtype: torch.dtype) -> Text2Semantic:
    obj = load_pickle(path)
    if not isinstance(obj, dict) or "config" not in obj:
        raise CheckpointError(f"{path}: expected a GPT-SoVITS GPT checkpoint (a dict with 'weight' and 'config')")
    check_sizes(obj["config"], path, ENGINE, prefix="config")    # the training config pickled with the weights
    cfg = T2SConfig.from_dict(obj["config"], str(path))
    state = state_dict(obj, path, key="weight", strip="model.")
    return load_module_from_state(lambda: Text2Semantic(cfg), state, dtype, source=path,
                                  config=SizeSource(f"{path} (config)", obj["config"])).eval()


def sovits_state(state: dict[str, Tensor], path: Path, dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
    """Inference weights: `enc_q.*` (training only) dropped, weight-norm pairs folded in float32 (in float64
    for a float64 model, as upstream's per-forward norm runs in the model's dtype)."""
    fold = torch.float64 if dtype == torch.float64 else torch.float32
    state = {k: v.to(fold) if k.endswith(("weight_g", "weight_v")) else v
             for k, v in state.items() if not k.startswith("enc_q.")}
    folded = fold_weight_norm(state)
    unfolded = sorted(k for k in folded if k.endswith(("weight_g", "weight_v")))
    plain = sorted(k for k in folded if WEIGHT_NORMED.match(k) and not any(
        g in state for g in (k + "_g", k[: -len("weight")] + "parametrizations.weight.original0")))
    if unfolded or plain:
        raise CheckpointError(f"{path}: weight-normed convolutions without their pair: {(unfolded + plain)[:6]}")
    return folded


def load_sovits(path: Path, dtype: torch.dtype) -> SynthesizerTrn:
    version = sovits_version(path)
    obj = load_pickle_with_records(path, ("utils.HParams",))
    if not isinstance(obj, dict) or "weight" not in obj or "config" not in obj:
        raise CheckpointError(f"{path}: expected a GPT-SoVITS SoVITS checkpoint (a dict with 'weight' and 'config')")
    state = state_dict(obj, path, key="weight")
    emb = state.get("enc_p.text_embedding.weight")
    if emb is None or emb.shape[0] != V2_SYMBOLS:
        found = None if emb is None else emb.shape[0]
        raise CheckpointError(f"{path}: enc_p.text_embedding has {found} symbols; v2 models have {V2_SYMBOLS} "
                              f"(322: a v1 model, not supported)")
    check_sizes(obj["config"], path, ENGINE, prefix="config")
    cfg = SoVITSConfig.from_hparams(obj["config"], version, V2_SYMBOLS, str(path))
    if cfg.is_v2pro and "sv_emb.weight" in state and state["sv_emb.weight"].dim() == 2:
        cfg = dataclasses.replace(cfg, sv_dim=int(state["sv_emb.weight"].shape[1]))
    state = sovits_state(state, path, dtype)
    return load_module_from_state(lambda: SynthesizerTrn(cfg), state, dtype, source=path,
                                  config=SizeSource(f"{path} (config)", obj["config"])).eval()


def hf_state(folder: Path) -> tuple[dict | None, Path]:
    path = weights_file(folder)
    return (None if path.suffix == ".safetensors" else state_dict(load_pickle(path), path)), path


def load_hubert(folder: Path, dtype: torch.dtype) -> Hubert:
    data = read_json(folder / "config.json", ENGINE)
    try:
        cfg = HubertConfig.from_dict(data, "config")
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{ENGINE}: {folder / 'config.json'}: {e}") from None
    state, path = hf_state(folder)
    if state is None:
        from safetensors.torch import load_file
        state = load_file(str(path))
    # transformers before 4.44 saved the positional conv's weight norm as weight_g / weight_v
    legacy = {".weight_g": ".parametrizations.weight.original0", ".weight_v": ".parametrizations.weight.original1"}
    state = {_renamed(k[len("hubert."):] if k.startswith("hubert.") else k, legacy): v for k, v in state.items()}
    return load_module_from_state(lambda: Hubert(cfg, "masked_spec_embed" in state), state, dtype, source=path,
                                  config=SizeSource(folder / "config.json", data)).eval()


def _renamed(key: str, suffixes: dict[str, str]) -> str:
    return next((key[:-len(old)] + new for old, new in suffixes.items() if key.endswith(old)), key)


def load_bert(folder: Path, dtype: torch.dtype) -> tuple[BertFeatures, Tokenizer]:
    """RoBERTa features + its tokenizer, for Chinese text."""
    data = read_json(folder / "config.json", ENGINE)
    cfg = BertConfig.from_dict(data, str(folder / "config.json"))
    if not (folder / "tokenizer.json").is_file():
        raise ModelFolderError(f"{ENGINE}: {folder / 'tokenizer.json'} not found")
    state, path = hf_state(folder)
    if state is None:
        from safetensors.torch import load_file
        state = load_file(str(path))
    unused = tuple(f"bert.encoder.layer.{i}." for i in range(cfg.used_layers, cfg.num_hidden_layers))
    state = {k: v for k, v in state.items()
             if not k.startswith(("cls.", "bert.pooler.") + unused) and k != "bert.embeddings.position_ids"}
    model = load_module_from_state(lambda: BertFeatures(cfg), state, dtype, source=path,
                                   config=SizeSource(folder / "config.json", data)).eval()
    return model, load_tokenizer(folder / "tokenizer.json", ENGINE)


def speaker_sizes(state: dict[str, Tensor], path: Path) -> dict:
    """ERes2NetV2's constructor arguments from the shapes in its state dict (the published file is
    baseWidth 24, scale 4, expansion 4, 64 channels, blocks 3/4/6/3)."""
    try:
        m = state["conv1.weight"].shape[0]
        expansion = state["layer1.0.conv3.weight"].shape[0] // m
        scale = len({k for k in state if re.match(r"layer1\.0\.convs\.\d+\.weight$", k)})
        widths = [state[f"layer{i}.0.convs.0.weight"].shape[0] for i in range(1, 5)]
        blocks = tuple(len({k.split(".")[1] for k in state if k.startswith(f"layer{i}.")}) for i in range(1, 5))
    except (KeyError, IndexError) as e:
        raise CheckpointError(f"{path}: not an ERes2NetV2 state dict (missing {e})") from None
    base = next((b for b in range(1, 257) if all(int(math.floor(m * 2 ** i * (b / 64.0))) == w
                                                 for i, w in enumerate(widths))), None)
    if base is None or not scale or not all(blocks):
        raise CheckpointError(f"{path}: ERes2NetV2 layer shapes not understood (widths {widths}, scale {scale})")
    return {"base_width": base, "scale": scale, "expansion": expansion, "m_channels": m, "num_blocks": blocks}


def load_speaker(path: Path, dtype: torch.dtype) -> ERes2NetV2:
    if not path.is_file():
        raise ModelFolderError(f"{ENGINE}: {path} not found (v2Pro models need the speaker-verification model)")
    state = state_dict(load_pickle(path), path)
    sizes = speaker_sizes(state, path)
    if not any(k.endswith("num_batches_tracked") for k in state):   # as BatchNorm's own loader fills them
        with torch.device("meta"):
            names = [n for n, mod in ERes2NetV2(**sizes).named_modules() if isinstance(mod, nn.BatchNorm2d)]
        state.update({f"{n}.num_batches_tracked": torch.tensor(0) for n in names})
    return load_module_from_state(lambda: ERes2NetV2(**sizes), state, dtype, source=path).eval()


def load_gpt_sovits(folder: Path | str, dtype: torch.dtype = torch.float32) -> GPTSoVITS:
    folder = Path(folder)
    ckpt, pth = pair(folder)
    for shared in (HUBERT_DIR, BERT_DIR):   # their numbers are checked before any weight is read
        if (shared_path(folder, shared) / "config.json").is_file():
            read_json(shared_path(folder, shared) / "config.json", ENGINE)
    sovits = load_sovits(pth, dtype)
    t2s = load_t2s(ckpt, dtype)
    hubert = load_hubert(shared_path(folder, HUBERT_DIR), dtype)
    speaker = load_speaker(shared_path(folder, SV_FILE), dtype) if sovits.cfg.is_v2pro else None
    if speaker is not None and speaker.out_dim != sovits.cfg.sv_dim:
        raise CheckpointError(f"{shared_path(folder, SV_FILE)}: the speaker model gives {speaker.out_dim}-d "
                              f"embeddings; {pth} expects {sovits.cfg.sv_dim}")
    bert, tokenizer = None, None
    if (shared_path(folder, BERT_DIR) / "config.json").is_file():
        bert, tokenizer = load_bert(shared_path(folder, BERT_DIR), dtype)
    g2pw = shared_path(folder, G2PW_DIR)
    return GPTSoVITS(t2s=t2s, sovits=sovits, hubert=hubert, speaker=speaker, bert=bert, tokenizer=tokenizer,
                     version=sovits.cfg.version, dtype=dtype, text_dir=shared_path(folder, TEXT_DIR),
                     g2pw_dir=g2pw if g2pw.is_dir() else None)

"""Tiny GPT-SoVITS model folders in the exact upstream file layout, from seeds (no upstream code needed).

    write_folder(root, "v2Pro")  ->  root/pretrained_models/{chinese-hubert-base, chinese-roberta-wwm-ext-large, sv}
                                     root/tiny-v2Pro/{s1tiny.ckpt, s2Gtiny.pth}

Every tensor is drawn by `random_state` from a seed and its name, so `make_fixtures.py` (upstream's classes,
upstream's names) and this file (our classes, the same names) produce identical weights. The SoVITS file is
written as upstream's `process_ckpt.savee` writes it: fp16 weights without `enc_q`, `utils.HParams` config
pickled under that name, and for v2Pro / v2ProPlus the first two bytes replaced by "05" / "06".
Sizes that upstream hard-codes stay real (HuBERT width 768, BERT width 1024, MRTE 512, 192 hidden SoVITS
channels); layer counts and the other widths are tiny.
"""
from __future__ import annotations

import io
import json
import math
import sys
import types
import zlib
from collections import OrderedDict
from pathlib import Path

import torch

from mizuoto.nodes.gpt_sovits.bert import BertConfig, BertFeatures
from mizuoto.nodes.blocks.hubert import Hubert, HubertConfig
from mizuoto.nodes.gpt_sovits.sovits import WEIGHT_NORMED, SoVITSConfig, SynthesizerTrn
from mizuoto.nodes.gpt_sovits.speaker import ERes2NetV2

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 1234

T2S_CONFIG = {"train": {"seed": 1234}, "data": {"max_sec": 1, "pad_val": 1024},
              "model": {"vocab_size": 1025, "phoneme_vocab_size": 732, "embedding_dim": 32, "hidden_dim": 32,
                        "head": 2, "linear_units": 128, "n_layer": 2, "dropout": 0, "EOS": 1024, "random_bert": 0}}


def s2_config(version: str) -> dict:
    """A tiny s2.json (v2: gin 512, as MRTE adds `ge` to its 512 channels; v2Pro: any gin)."""
    return {"train": {"segment_size": 20480, "fp16_run": True},
            "data": {"max_wav_value": 32768.0, "sampling_rate": 32000, "filter_length": 2048, "hop_length": 640,
                     "win_length": 2048, "n_mel_channels": 128, "mel_fmin": 0.0, "mel_fmax": None, "add_blank": True,
                     "n_speakers": 300, "cleaned_text": True},
            "model": {"inter_channels": 8, "hidden_channels": 192, "filter_channels": 32, "n_heads": 2, "n_layers": 2,
                      "kernel_size": 3, "p_dropout": 0.0, "resblock": "1", "resblock_kernel_sizes": [3, 5],
                      "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]], "upsample_rates": [10, 8, 2, 2, 2],
                      "upsample_initial_channel": 32, "upsample_kernel_sizes": [16, 16, 4, 4, 4],
                      "n_layers_q": 3, "use_spectral_norm": False,
                      "gin_channels": 512 if version == "v2" else 16,
                      "semantic_frame_rate": "25hz", "freeze_quantizer": True},
            "s2_ckpt_dir": "logs/s2/tiny", "content_module": "cnhubert"}


HUBERT_CONFIG = {"architectures": ["HubertModel"], "model_type": "hubert", "hidden_size": 768, "num_hidden_layers": 1,
                 "num_attention_heads": 12, "intermediate_size": 64, "conv_dim": [16] * 7,
                 "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2], "conv_bias": False,
                 "feat_extract_norm": "group", "feat_extract_activation": "gelu", "do_stable_layer_norm": False,
                 "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 16, "layer_norm_eps": 1e-5,
                 "hidden_act": "gelu", "feat_proj_layer_norm": True, "mask_time_prob": 0.05,
                 "hidden_dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0, "feat_proj_dropout": 0.0,
                 "layerdrop": 0.0, "vocab_size": 32}
BERT_CONFIG = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 40, "hidden_size": 1024,
               "num_hidden_layers": 3, "num_attention_heads": 16, "intermediate_size": 64,
               "max_position_embeddings": 64, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "pad_token_id": 0,
               "position_embedding_type": "absolute"}
BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "，", "。", "你", "好", "我", "是", "的", "一", "二", "三",
              "a", "b", "c", "d", "e"]
SV_KWARGS = {"base_width": 32, "scale": 2, "expansion": 2, "m_channels": 8, "num_blocks": (1, 1, 1, 1)}


def randn(*shape: int, generator: torch.Generator) -> torch.Tensor:
    """Standard normal float32 numbers that are the same on every machine: drawn in float64 and rounded.
    torch's float32 randn takes a vectorised Box-Muller under AVX2 / AVX-512 and a scalar one elsewhere
    (ATEN_CPU_CAPABILITY=default: 39% of the numbers differ, by up to 2e-6); its float64 randn is one
    scalar path, so the fixtures' weights and inputs do not move with the CPU."""
    return torch.randn(shape, generator=generator, dtype=torch.float64).float()


def random_state(shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], seed: int = SEED) -> dict[str, torch.Tensor]:
    """One tensor per name, drawn from `seed` and the name alone (any order, any superset gives the same
    tensor for a name); sized so activations stay finite through every block."""
    out = {}
    for name, (shape, dtype) in shapes.items():
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        if not dtype.is_floating_point:
            out[name] = torch.zeros(shape, dtype=dtype)
            continue
        leaf = name.rsplit(".", 1)[-1]
        r = randn(*shape, generator=g)
        if leaf in ("inited",):
            t = torch.ones(shape)
        elif leaf == "running_var" or leaf == "cluster_size":
            t = 1 + 0.1 * r.abs()
        elif leaf in ("running_mean", "bias", "beta"):
            t = 0.05 * r
        elif leaf in ("gamma", "alpha", "weight_g", "original0") or (leaf == "weight" and len(shape) == 1):
            t = 1 + 0.1 * r
        elif leaf in ("embed", "embed_avg"):
            t = r
        elif leaf.startswith("emb_rel"):
            t = r * shape[-1] ** -0.5
        else:
            fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
            t = r / math.sqrt(max(fan_in, 1))
        out[name] = t.to(dtype)
    return out


def shapes_of(module: torch.nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}


def sovits_upstream_shapes(cfg: SoVITSConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Upstream's names for our SynthesizerTrn: weight-normed convolutions as weight_g [out, 1, 1] + weight_v."""
    with torch.device("meta"):
        model = SynthesizerTrn(cfg)
    out = {}
    for k, (shape, dtype) in shapes_of(model).items():
        if WEIGHT_NORMED.match(k):
            out[k + "_g"] = ((shape[0],) + (1,) * (len(shape) - 1), dtype)
            out[k + "_v"] = (shape, dtype)
        else:
            out[k] = (shape, dtype)
    return out


def sovits_config(version: str) -> SoVITSConfig:
    return SoVITSConfig.from_hparams(s2_config(version), version, 732, "tiny")


def hparams_module() -> types.ModuleType:
    """A module named `utils` holding an `HParams` shaped like upstream's (GPT_SoVITS/utils.py), so a pickle
    of it names the global `utils.HParams` exactly as upstream's files do."""
    mod = types.ModuleType("utils")

    class HParams:
        def __init__(self, **kwargs):
            for k, v in kwargs.items():
                setattr(self, k, HParams(**v) if type(v) == dict else v)

    HParams.__module__ = "utils"
    HParams.__qualname__ = "HParams"
    mod.HParams = HParams
    return mod


def save_sovits(path: Path, weights: dict[str, torch.Tensor], hps: dict, version: str,
                hparams: type | None = None) -> None:
    """process_ckpt.savee: {"weight": fp16 tensors (no enc_q), "config": HParams, "info": ...}; my_save2's
    header for v2Pro / v2ProPlus, my_save (plain torch.save) for v2."""
    opt = OrderedDict()
    opt["weight"] = {k: v.half() for k, v in weights.items() if "enc_q" not in k}
    saved = sys.modules.get("utils")
    mod = None
    if hparams is None:
        mod = hparams_module()
        sys.modules["utils"] = mod
        hparams = mod.HParams
    try:
        opt["config"] = hparams(**hps)
        opt["info"] = "8epoch_200iteration"
        bio = io.BytesIO()
        torch.save(opt, bio)
    finally:
        if mod is not None:
            if saved is None:
                sys.modules.pop("utils", None)
            else:
                sys.modules["utils"] = saved
    data = bio.getvalue()
    if version in ("v2Pro", "v2ProPlus"):
        data = {"v2Pro": b"05", "v2ProPlus": b"06"}[version] + data[2:]
    path.write_bytes(data)


def t2s_weights(seed: int = SEED) -> dict[str, torch.Tensor]:
    from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic
    cfg = T2SConfig.from_dict(T2S_CONFIG, "tiny")
    with torch.device("meta"):
        model = Text2Semantic(cfg)
    return random_state({"model." + k: s for k, s in shapes_of(model).items()}, seed)


def save_t2s(path: Path, weights: dict[str, torch.Tensor], config: dict = T2S_CONFIG) -> None:
    """s1_train.py's my_model_ckpt: {"weight": fp16 state dict (prefix model.), "config", "info"}."""
    torch.save({"weight": OrderedDict((k, v.half()) for k, v in weights.items()), "config": config,
                "info": "GPT-e15"}, path)


def hubert_weights(seed: int = SEED) -> dict[str, torch.Tensor]:
    cfg = HubertConfig.from_dict(HUBERT_CONFIG, "tiny")
    with torch.device("meta"):
        model = Hubert(cfg, masked_spec_embed=True)
    return random_state(shapes_of(model), seed)


def bert_weights(seed: int = SEED) -> dict[str, torch.Tensor]:
    cfg = BertConfig.from_dict(BERT_CONFIG, "tiny")
    full = BertConfig(**{**cfg.__dict__, "num_hidden_layers": cfg.num_hidden_layers + 2})
    with torch.device("meta"):
        model = BertFeatures(full)      # the used layers plus the two GPT-SoVITS never reads
    shapes = shapes_of(model)
    shapes["cls.predictions.bias"] = ((cfg.vocab_size,), torch.float32)
    shapes["cls.predictions.transform.dense.weight"] = ((cfg.hidden_size, cfg.hidden_size), torch.float32)
    return random_state(shapes, seed)


def bert_tokenizer_json() -> str:
    """A BERT WordPiece tokenizer.json (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]) over BERT_VOCAB."""
    vocab = {t: i for i, t in enumerate(BERT_VOCAB)}
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}},
                                    {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                           "special_tokens": {t: {"id": t, "ids": [vocab[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}})


def sv_weights(seed: int = SEED) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = ERes2NetV2(**SV_KWARGS)
    return random_state(shapes_of(model), seed)


def sv_dim() -> int:
    k = SV_KWARGS
    return k["m_channels"] * 8 * k["expansion"] * 10


def eos_likely(weight: torch.Tensor, direction: torch.Tensor, scale: float = 2.5) -> None:
    """Point the EOS row (the last) of a T2S output layer along `direction` (in place), so that a random
    tiny model stops: the fixtures' EOS case."""
    weight[-1] = scale * direction / direction.norm()


# T2S logits kept in the fixture (teacher-forced along the recorded tokens): the prompt's, the next, the first
# step EOS may end, the last.
T2S_LOGIT_ROWS = [0, 1, 11, -1]


def t2s_forced_logits(t2s, phones: torch.Tensor, bert: torch.Tensor, prompt: torch.Tensor,
                      tokens: torch.Tensor) -> torch.Tensor:
    """Our T2S's logits [len(tokens), vocab] along `tokens`, as `generate` computes them (prefill, then one
    step per token), with no draw: the float comparison of the T2S, whatever sampling would pick."""
    from mizuoto.runtime.lm.cache import DynamicCache
    cache = DynamicCache()
    rows = [t2s.prefill(phones[None], bert[None], prompt, cache)]
    for i, token in enumerate(tokens[:-1].tolist()):
        rows.append(t2s.step(torch.tensor([[token]]), prompt.shape[1] + i, cache))
    return torch.cat(rows)


def prior_noise(cfg: SoVITSConfig, n_codes: int, speed: float, seed: int = 5) -> torch.Tensor:
    """The prior noise SynthesizerTrn.forward draws (float32, torch's randn) from `seed`: shape [1,
    inter_channels, frames], frames as its text encoder resamples for `speed`. make_fixtures.py records it
    (`sovits.noise.<speed>`), so the float64 run takes the float32 run's numbers on any machine."""
    frames = 2 * n_codes if speed == 1 else int(2 * n_codes / speed) + 1
    return torch.randn((1, cfg.inter_channels, frames), generator=torch.Generator().manual_seed(seed))


def f64_reference(recorded: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """upstream's float64 output for `name`: the float32 output plus its recorded float32 correction
    (`name.f64-f32` = f64 - f32; their sum is the float64 value to ~1e-13 of its scale)."""
    return recorded[name].double() + recorded[name + ".f64-f32"].double()


def fixture_inputs(seed: int = 11) -> dict[str, torch.Tensor]:
    """The inputs make_fixtures.py ran upstream on (regenerated here instead of stored)."""
    g = torch.Generator().manual_seed(seed)
    return {"t2s.phones": torch.randint(0, 732, (9,), generator=g), "t2s.bert": randn(1024, 9, generator=g),
            "t2s.prompt": torch.randint(0, 64, (1, 7), generator=g),
            "hubert.wav": torch.cat([0.1 * randn(16000, generator=g), torch.zeros(9600)]),
            "bert.ids": torch.tensor([[2, 7, 8, 5, 9, 10, 12, 6, 3]]),
            "sv.wav": 0.2 * randn(1, 16000, generator=g),
            "sovits.ref32k": (0.3 * randn(1, 32000, generator=g)).clamp(-1, 1),
            "sovits.codes": torch.randint(0, 1024, (1, 1, 12), generator=g),
            "sovits.text": torch.randint(0, 732, (1, 10), generator=g)}


# A few CMU entries in upstream's lexicon formats (cmudict.rep: 56 header lines, "WORD  PH PH"; the fast and
# hot files: "WORD PH PH").
LEXICON = {"HELLO": "HH AH0 L OW1", "GOOD": "G UH1 D", "DAY": "D EY1", "WORLD": "W ER1 L D",
           "THE": "DH AH0", "QUICK": "K W IH1 K", "FOX": "F AA1 K S", "TWENTY": "T W EH1 N T IY0",
           "ONE": "W AH1 N", "NINETEEN": "N AY1 N T IY1 N", "EIGHTY": "EY1 T IY0", "FOUR": "F AO1 R",
           "CAT": "K AE1 T", "DOG": "D AO1 G", "TOO": "T UW1", "YOU": "Y UW1"}
LETTERS = {"A": "AH0", "B": "B IY1", "C": "S IY1", "D": "D IY1", "E": "IY1", "F": "EH1 F", "G": "JH IY1",
           "H": "EY1 CH", "I": "AY1", "J": "JH EY1", "K": "K EY1", "L": "EH1 L", "M": "EH1 M", "N": "EH1 N",
           "O": "OW1", "P": "P IY1", "Q": "K Y UW1", "R": "AA1 R", "S": "EH1 S", "T": "T IY1", "U": "Y UW1",
           "V": "V IY1", "W": "D AH1 B AH0 L Y UW0", "X": "EH1 K S", "Y": "W AY1", "Z": "Z IY1"}


def write_lexicon(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    header = "".join(f";;; header line {i}\n" for i in range(1, 57))
    (folder / "cmudict.rep").write_text(header + "".join(f"{w}  {p}\n" for w, p in {**LETTERS, **LEXICON}.items()))
    (folder / "cmudict-fast.rep").write_text("WORLD W ER1 L D Z\nMIZUOTO M IH0 Z UW1 OW0 T OW0\n")
    (folder / "engdict-hot.rep").write_text("DAY D EY2\n")


def write_shared(root: Path, seed: int = SEED, bert: bool = True, inside: bool = False) -> Path:
    """The shared pretrained_models beside the voices (or, `inside`, the same files in one voice folder)."""
    shared = Path(root) if inside else Path(root) / "pretrained_models"
    if (shared / "sv").is_dir():
        return shared
    write_lexicon(shared / "text")
    hub = shared / "chinese-hubert-base"
    hub.mkdir(parents=True, exist_ok=True)
    (hub / "config.json").write_text(json.dumps(HUBERT_CONFIG, indent=2))   # as Hugging Face writes it
    torch.save(hubert_weights(seed), hub / "pytorch_model.bin")
    if bert:
        folder = shared / "chinese-roberta-wwm-ext-large"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(BERT_CONFIG, indent=2))
        (folder / "tokenizer.json").write_text(bert_tokenizer_json())
        torch.save({k: v.half() for k, v in bert_weights(seed).items()}, folder / "pytorch_model.bin")
    (shared / "sv").mkdir(parents=True, exist_ok=True)
    torch.save(sv_weights(seed), shared / "sv" / "pretrained_eres2netv2w24s4ep4.ckpt")
    return shared


def sovits_weights(version: str, seed: int = SEED) -> dict[str, torch.Tensor]:
    shapes = sovits_upstream_shapes(sovits_config(version))
    if "sv_emb.weight" in shapes:                   # the tiny speaker model's width, not 20480
        shapes["sv_emb.weight"] = ((shapes["sv_emb.weight"][0][0], sv_dim()), torch.float32)
    return random_state(shapes, seed)


def write_folder(root: Path, version: str = "v2", seed: int = SEED, self_contained: bool = False) -> Path:
    """A complete tiny voice `root/tiny-<version>` (+ the shared pretrained_models beside it, or, when
    `self_contained`, HuBERT / RoBERTa / sv / text inside the voice folder)."""
    root = Path(root)
    folder = root / f"tiny-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    if self_contained:
        write_shared(folder, seed, inside=True)
    else:
        write_shared(root, seed)
    save_t2s(folder / "s1tiny-e15.ckpt", t2s_weights(seed))
    save_sovits(folder / "s2Gtiny_e8_s200.pth", sovits_weights(version, seed), s2_config(version), version)
    return folder


def conformance_case(root: Path):
    """A v2Pro voice speaking Chinese with an English word after a 3 s reference and a Chinese transcript
    (tests/engines_native/test_conformance.py): every phase runs, "bert" included."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    t = torch.arange(32000 * 3) / 32000
    wav = 0.3 * torch.sin(2 * torch.pi * 190 * t) * (1 + torch.sin(2 * torch.pi * 2 * t)) / 2
    folder = write_folder(Path(root), "v2Pro", self_contained=True)     # its config files inside the folder
    return Case(folder, SpeakRequest("你好，我是一二三。Hello!", seed=5, language="zh",
                                     reference={"waveform": wav[None, None], "sample_rate": 32000},
                                     reference_text="你好。"))

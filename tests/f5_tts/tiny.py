"""Tiny random F5-TTS checkpoints in the upstream layout (no f5-tts or vocos package needed):

    folder/
        model_1200.safetensors     ema_model.transformer.* + step + initted (as ema_pytorch saves them)
        vocab.txt                  space first (id 0), ASCII, CJK punctuation, some pinyin syllables
        config.yaml                upstream's training-config format (model.arch, model.mel_spec)
        vocos/config.yaml  vocos/pytorch_model.bin
"""
from __future__ import annotations

from pathlib import Path

import torch
import yaml
from safetensors.torch import save_file

ARCH = {"dim": 64, "depth": 4, "heads": 4, "dim_head": 16, "ff_mult": 2, "text_dim": 64, "text_mask_padding": True,
        "qk_norm": None, "conv_layers": 2, "pe_attn_head": None, "attn_backend": "torch", "attn_mask_enabled": False,
        "checkpoint_activations": False}
MEL = {"target_sample_rate": 24000, "n_mel_channels": 100, "hop_length": 256, "win_length": 1024, "n_fft": 1024,
       "mel_spec_type": "vocos"}
VOCOS = {
    "feature_extractor": {"class_path": "vocos.feature_extractors.MelSpectrogramFeatures",
                          "init_args": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "n_mels": 100,
                                        "padding": "center"}},
    "backbone": {"class_path": "vocos.models.VocosBackbone",
                 "init_args": {"input_channels": 100, "dim": 64, "intermediate_dim": 192, "num_layers": 2}},
    "head": {"class_path": "vocos.heads.ISTFTHead",
             "init_args": {"dim": 64, "n_fft": 1024, "hop_length": 256, "padding": "same"}},
}
PINYIN = ("ni3 ni2 hao3 shi4 jie4 jin1 tian1 tian4 qi4 hen3 hao4 wo3 men5 de5 zhong1 wen2 yu3 yin1 he2 cheng2 "
          "ce4 shi4 yi1 yi2 yi4 ge4 ren2 ni3men5 zai4 xue2 xi2 shuo1 hua4 shu4 zi4 ma5 ba5 le5 bu4 bu2 "
          "ta1 men2 lai2 qu4 kan4 dao4 hui4 you3 mei2 da4 xiao3 duo1 shao3").split()


def vocab_tokens() -> list[str]:
    """Space first (upstream asserts it is id 0), then printable ASCII, CJK punctuation and pinyin."""
    ascii_ = [chr(c) for c in range(33, 127)]
    return [" "] + ascii_ + list("，。！？、；：“”") + sorted(set(PINYIN))


def training_config(arch: dict | None = None) -> dict:
    return {"model": {"name": "F5TTS_tiny", "tokenizer": "pinyin", "backbone": "DiT", "arch": dict(arch or ARCH),
                      "mel_spec": dict(MEL)}}


def write_vocab(folder: Path, tokens: list[str] | None = None) -> None:
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in (tokens or vocab_tokens())), encoding="utf-8")


def write_vocos_config(folder: Path) -> None:
    (folder / "vocos").mkdir(parents=True, exist_ok=True)
    (folder / "vocos" / "config.yaml").write_text(yaml.safe_dump(VOCOS, sort_keys=False), encoding="utf-8")


def randomize(module: torch.nn.Module, seed: int, scale: float = 0.2) -> None:
    """Every parameter random (upstream zero-initialises adaLN and the output layers, which would hide bugs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def write_tiny_checkpoint(folder: Path, seed: int = 0) -> Path:
    """Our own modules (whose names match upstream's), randomised, saved in the upstream layout."""
    from mizuoto.nodes.blocks.vocoder import Vocos, VocosConfig
    from mizuoto.nodes.f5_tts.model import DiT, DiTConfig
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = vocab_tokens()
    write_vocab(folder, tokens)
    (folder / "config.yaml").write_text(yaml.safe_dump(training_config(), sort_keys=False), encoding="utf-8")
    cfg = DiTConfig.from_arch(ARCH, mel_dim=MEL["n_mel_channels"], vocab_size=len(tokens), source="tiny")
    torch.manual_seed(seed)
    dit = DiT(cfg)
    randomize(dit, seed)
    state = {f"ema_model.transformer.{k}": v.contiguous() for k, v in dit.state_dict().items()}
    state["step"] = torch.tensor(1200)
    state["initted"] = torch.tensor(True)
    save_file(state, str(folder / "model_1200.safetensors"))
    write_vocos_config(folder)
    voc = Vocos(VocosConfig.from_dict(VOCOS))
    randomize(voc.backbone, seed + 1)
    randomize(voc.head, seed + 2, scale=0.05)
    torch.save(voc.state_dict(), folder / "vocos" / "pytorch_model.bin")
    return folder


def conformance_case(root: Path):
    """The tiny model and a short voice-clone request, 4 flow steps (tests/engines_native/test_conformance.py)."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_tiny_checkpoint(Path(root) / "tiny", seed=6)
    t = torch.arange(int(16000 * 0.6)) / 16000               # at 16 kHz: the pipeline resamples it
    ref = 0.1 * torch.sin(2 * torch.pi * 170 * t) * (1 + torch.sin(2 * torch.pi * 3 * t))
    return Case(folder, SpeakRequest("Hello world. The quick brown fox!", seed=9, language="en",
                                     reference={"waveform": ref.reshape(1, 1, -1), "sample_rate": 16000},
                                     reference_text="Some call me nature.", options={"steps": 4}))

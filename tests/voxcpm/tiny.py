"""Tiny VoxCPM 2 checkpoints in the upstream layout, written by our own code (no voxcpm package needed):
config.json (upstream's format), model.safetensors, audiovae.pth (legacy weight-norm keys), tokenizer.json
(a small Llama-style BPE with byte fallback and multi-character Chinese tokens).

Import it by path (`load_tiny()` in the tests): the folder is named like the upstream package, which
must stay importable as `voxcpm` in the parity venv.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

HEAD_DIM = 8
LONG = [1.0, 1.5, 3.0, 7.5]          # head_dim / 2 divisors; long is used (max positions > original)
SHORT = [1.0, 1.2, 1.7, 2.5]

LM = {
    "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 32, "intermediate_size": 64,
    "max_position_embeddings": 2048, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-05, "rope_theta": 10000, "kv_channels": HEAD_DIM,
    "rope_scaling": {"type": "longrope", "long_factor": LONG, "short_factor": SHORT,
                     "original_max_position_embeddings": 512},
    "vocab_size": 400, "use_mup": False, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
}
VAE = {
    "encoder_dim": 4, "encoder_rates": [2, 5], "latent_dim": 4, "decoder_dim": 16, "decoder_rates": [3, 2],
    "sr_bin_boundaries": [20000, 30000, 40000], "sample_rate": 16000, "out_sample_rate": 48000,
}
CONFIG = {
    "architecture": "voxcpm2", "lm_config": LM, "patch_size": 2, "feat_dim": 4,
    "scalar_quantization_latent_dim": 8, "scalar_quantization_scale": 9,
    "residual_lm_num_layers": 2, "residual_lm_no_rope": True,
    "encoder_config": {"hidden_dim": 16, "ffn_dim": 32, "num_heads": 2, "num_layers": 1, "kv_channels": HEAD_DIM},
    "dit_config": {"hidden_dim": 16, "ffn_dim": 32, "num_heads": 2, "num_layers": 2, "kv_channels": HEAD_DIM,
                   "mean_mode": False,
                   "cfm_config": {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "log-norm",
                                  "inference_cfg_rate": 2.0}},
    "audio_vae_config": VAE, "max_length": 1024, "device": "cpu", "dtype": "float32",
}

# Llama-style BPE: "▁" word marks, byte fallback, a few multi-character Chinese tokens (some with "▁").
WORDS = ["hello", "world", "the", "voice", "speak", "tiny", "test"]
CJK = ["你", "好", "世", "界", "我", "们", "说", "话"]
CJK_MERGES = [("▁", "你"), ("你", "好"), ("▁你", "好"), ("世", "界"), ("你好", "世界"), ("▁你好", "世界"), ("我", "们"), ("说", "话")]


def config(**changes) -> dict:
    """CONFIG with top-level keys replaced and `lm_config` entries given as lm_<key>."""
    c = copy.deepcopy(CONFIG)
    for k, v in changes.items():
        if k.startswith("lm_"):
            c["lm_config"][k[3:]] = v
        else:
            c[k] = v
    return c


def tokenizer_json() -> dict:
    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    merges: list[tuple[str, str]] = []

    def add(tok: str) -> None:
        vocab.setdefault(tok, len(vocab))

    for ch in "▁abcdefghijklmnopqrstuvwxyz.,!?" + "".join(CJK):
        add(ch)
    for word in WORDS:
        piece = "▁"
        for ch in word:
            merges.append((piece, ch))
            piece += ch
            add(piece)
    for a, b in CJK_MERGES:
        merges.append((a, b))
        add(a + b)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


def write_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(), ensure_ascii=False), encoding="utf-8")
    # what upstream's LlamaTokenizerFast.from_pretrained reads next to tokenizer.json (our loader does not)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "legacy": True, "model_max_length": 4096}))


def random_state(module: torch.nn.Module, seed: int, scale: float = 0.3) -> dict[str, torch.Tensor]:
    """Every floating tensor of the module's state dict drawn at random (norm weights around 1)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in module.state_dict().items():
        if not t.is_floating_point():
            out[name] = t.clone()
            continue
        r = torch.randn(t.shape, generator=g) * scale
        if name.endswith("norm.weight") or name.endswith("weight_g") or name.endswith(".alpha"):
            r = 1.0 + r.abs() if name.endswith(".alpha") else 1.0 + r
        out[name] = r.to(t.dtype).contiguous()
    return out


def silence(state: dict[str, torch.Tensor]) -> None:
    """Stop logits fixed at (positive, 0) whatever the hidden state: the model never stops."""
    state["stop_proj.weight"].zero_()
    state["stop_proj.bias"].fill_(1.0)
    state["stop_head.weight"][0].fill_(1.0)
    state["stop_head.weight"][1].zero_()


def write_tiny_checkpoint(folder: str | Path, seed: int = 0, cfg: dict | None = None, silent: bool = False) -> Path:
    """A complete model folder with random weights, written from our own module definitions.
    `silent`: the model never stops (every attempt runs to the frame limit), see `silence`."""
    from mizuoto.nodes.voxcpm.audiovae import AudioVAE, AudioVAEConfig
    from mizuoto.nodes.voxcpm.model import VoxCPM2, VoxCPMConfig
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = cfg or CONFIG
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    c = VoxCPMConfig.from_dict(cfg)
    state = random_state(VoxCPM2(c), seed)
    if silent:
        silence(state)
    save_file(state, str(folder / "model.safetensors"))
    torch.save(random_state(AudioVAE(AudioVAEConfig.from_dict(cfg.get("audio_vae_config"))), seed + 1),
               folder / "audiovae.pth")
    write_tokenizer(folder)
    return folder


def reference_wave(seconds: float = 0.05, rate: int = 16000, freq: float = 220.0) -> torch.Tensor:
    t = torch.arange(int(rate * seconds)) / rate
    return 0.3 * torch.sin(2 * torch.pi * freq * t) * torch.sin(2 * torch.pi * 3 * t)


def conformance_case(root: Path):
    """A tiny model and a voice-design request (its main modes: text, plus an instruction; the reference
    phase runs in test_voxcpm_streaming.py, the pipeline's 0.5 s minimum is 400 tiny patches)."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_tiny_checkpoint(Path(root) / "tiny", seed=3)
    return Case(folder, SpeakRequest("Hello world, the tiny voice speaks. 你好世界!", seed=9, instruction="warm",
                                     options={"inference_timesteps": 4}), unit_bytes=4 << 10)

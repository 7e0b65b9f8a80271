"""Tiny Fish Speech checkpoints in the upstream layout, written by our own code (no fish-speech needed).

    config.json  model.pth  codec.pth  tokenizer.tiktoken  special_tokens.json                 (S1)
    config.json  model.safetensors.index.json + 2 shards  codec.pth  tokenizer.json  tokenizer_config.json (S2)

`model.pth` holds the LM's state dict under upstream's names; `codec.pth` the codec's, with the
encoder/decoder convolutions weight-normed as upstream saves them (parametrization originals) and the
quantizer projections in the old `weight_g`/`weight_v` form. The BPE ranks are trained on TEXTS so
that multi-byte merges (CJK, accents, emoji) occur. test_parity.py uses the same configs for upstream.
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import torch

from mizuoto.nodes.fish_speech.codec import CodecConfig, FishCodec, TransformerConfig
from mizuoto.nodes.fish_speech.model import DualARTransformer, FishConfig
from mizuoto.nodes.fish_speech.tokenizer import pretokenize

TEXTS = [
    "Hello, world! It's a test; we'll see what's there.",
    "(excited) Wow!! That's amazing... (whispering) don't tell anyone.",
    "你好，世界。今天的天气非常好，我们去公园散步吧！",
    "こんにちは、世界。今日はいい天気ですね。",
    "안녕하세요, 세계! 반갑습니다.",
    "Grüße aus München — äöü ß, ça va? Déjà vu; naïve café.",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "Numbers 12345 and 3.14159, prices $9.99 & €5; emails a.b@c.de",
    "Emoji 😀🎉 and tabs\tand\nnew lines\r\n  indented   spaces  ",
    "What?! Really?!  ?!x  Ok.\n\n\nEnd",
    "I'M SURE THEY'LL SAY IT'S FINE, YOU'VE SEEN IT, HE'D AGREE, I'D.",
]
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|im_start|>", "<|im_end|>",
           "<|phoneme_start|>", "<|phoneme_end|>", "<|tool_call_start|>", "<|tool_call_end|>", "<|text|>",
           "<|voice|>", "<|interleave|>", "<|audio_start|>", "<|audio_end|>", "<|audio|>",
           *[f"<|semantic:{i}|>" for i in range(1024)], "<|speaker:0|>", "<|speaker:1|>"]
MERGES = 400


def train_ranks(texts: list[str] = TEXTS, merges: int = MERGES) -> dict[bytes, int]:
    """Byte-level BPE ranks: the 256 bytes, then the most frequent adjacent pair, `merges` times."""
    ranks = {bytes([i]): i for i in range(256)}
    words = Counter(tuple(bytes([b]) for b in p.encode()) for t in texts for p in pretokenize(t))
    for _ in range(merges):
        pairs: Counter = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        ranks.setdefault(a + b, len(ranks))
        merged = Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return ranks


def lm_config(**over) -> dict:
    ranks = len(train_ranks())
    cfg = {"model_type": "dual_ar", "vocab_size": ranks + len(SPECIAL), "n_layer": 2, "n_head": 4, "dim": 64,
           "intermediate_size": 128, "n_local_heads": 2, "head_dim": 16, "rope_base": 1000000.0, "norm_eps": 1e-6,
           "max_seq_len": 2600, "dropout": 0.0, "tie_word_embeddings": True, "attention_qkv_bias": False,
           "attention_qk_norm": True, "codebook_size": 1024, "num_codebooks": 4, "use_gradient_checkpointing": True,
           "initializer_range": 0.02, "is_reward_model": False, "scale_codebook_embeddings": True,
           "n_fast_layer": 2, "fast_dim": 48, "fast_n_head": 4, "fast_n_local_heads": 2, "fast_head_dim": 12,
           "fast_intermediate_size": 96, "fast_attention_qkv_bias": False, "fast_attention_qk_norm": False,
           "fast_attention_o_bias": False}
    cfg.update(over)
    return cfg


def codec_config() -> CodecConfig:
    """4 codebooks (1 semantic + 3), 2048 samples per frame, 64-wide latents (head size 64: one head)."""
    return CodecConfig(encoder_dim=4, encoder_rates=(2, 4, 8, 8),
                       encoder_transformers=(None, None, None, TransformerConfig(1, 64, 192, 64, 512)),
                       latent_dim=64, decoder_dim=64, decoder_rates=(8, 8, 4, 2), n_codebooks=3, codebook_size=1024,
                       codebook_dim=8, semantic_codebook_size=1024, downsample_factor=(2, 2), downsample_dims=(64, 64),
                       pre_module=TransformerConfig(1, 64, 192, 64, 128),
                       post_module=TransformerConfig(1, 64, 192, 64, 128))


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Every parameter random (positive where upstream divides by it: Snake alphas, norms' scales)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("alpha"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif p.dim() == 1 and ("norm" in name or "gamma" in name or "scale" in name):
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.75)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 / max(p.shape[-1], 1) ** 0.5 + 0.02))


def _weight_normed(name: str) -> str | None:
    """How upstream saves a codec weight: "param" (parametrizations), "old" (weight_g/v) or None (plain)."""
    if name.startswith(("encoder.", "decoder.")) and name.endswith(".weight") and ".block.5." not in name \
            and "norm" not in name:
        return "param"
    if "quantizers." in name and (".in_proj.weight" in name or ".out_proj.weight" in name):
        return "old"
    return None


def codec_state_upstream(codec: FishCodec) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in codec.state_dict().items():
        kind = _weight_normed(name)
        if kind is None or t.dim() < 2:
            out[name] = t
            continue
        g = torch.norm_except_dim(t, 2, 0)
        base = name[: -len(".weight")]
        if kind == "param":
            out[base + ".parametrizations.weight.original0"] = g
            out[base + ".parametrizations.weight.original1"] = t
        else:
            out[base + ".weight_g"] = g
            out[base + ".weight_v"] = t
    return out


def write_tokenizer(folder: Path) -> None:
    ranks = train_ranks()
    (folder / "tokenizer.tiktoken").write_text(
        "".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()), encoding="utf-8")
    (folder / "special_tokens.json").write_text(
        json.dumps({t: len(ranks) + i for i, t in enumerate(SPECIAL)}, indent=2, ensure_ascii=False), encoding="utf-8")


def write_tiny_checkpoint(folder: Path, seed: int = 0, **over) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder)
    cfg = lm_config(**over)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    ranks = len(train_ranks())
    lm = DualARTransformer(FishConfig.from_dict(cfg), ranks + SPECIAL.index("<|semantic:0|>"),
                           ranks + SPECIAL.index("<|semantic:1023|>"))
    randomize(lm, seed)
    torch.save(lm.state_dict(), folder / "model.pth")
    codec = FishCodec(codec_config())
    randomize(codec, seed + 1)
    torch.save(codec_state_upstream(codec), folder / "codec.pth")
    return folder


# S2's tokenizer.json: Qwen2/3's pre-tokenizer (fish-speech's head loads it with AutoTokenizer).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
S2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>", "<|phoneme_start|>", "<|phoneme_end|>",
              "<|text|>", "<|voice|>", "<|interleave|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
              *[f"<|semantic:{i}|>" for i in range(1024)]]


def write_hf_tokenizer(folder: Path, merges: int = MERGES) -> int:
    """A byte-level BPE trained on TEXTS with the S2 special tokens added; returns the vocabulary size."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + merges, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TEXTS, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in S2_SPECIAL])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "eos_token": "<|im_end|>",
         "pad_token": "<|pad|>", "clean_up_tokenization_spaces": False}, indent=2), encoding="utf-8")
    return tok.get_vocab_size(with_added_tokens=True)


def s2_config(vocab: int, **over) -> dict:
    """An S2-shaped config (model_type fish_qwen3_omni): qk-norm slow LM, a narrower fast LM (so the
    projection between them exists), 4 codebooks of 1024; max_seq_len above 2048 because upstream keeps
    2048 positions of it free for generation."""
    text = {"model_type": "fish_qwen3", "vocab_size": vocab, "n_layer": 2, "n_head": 4, "dim": 64,
            "intermediate_size": 128, "n_local_heads": 2, "head_dim": 16, "rope_base": 1000000.0, "norm_eps": 1e-6,
            "max_seq_len": 2600, "dropout": 0.0, "tie_word_embeddings": True, "attention_qkv_bias": False,
            "attention_o_bias": False, "attention_qk_norm": True, "use_gradient_checkpointing": False,
            "initializer_range": 0.02}
    audio = {"model_type": "fish_qwen3_audio_decoder", "vocab_size": 1024, "n_layer": 2, "n_head": 4, "dim": 48,
             "intermediate_size": 96, "n_local_heads": 2, "head_dim": 12, "rope_base": 1000000.0, "norm_eps": 1e-6,
             "max_seq_len": 5, "dropout": 0.0, "tie_word_embeddings": False, "attention_qkv_bias": False,
             "attention_o_bias": False, "attention_qk_norm": False, "use_gradient_checkpointing": False,
             "initializer_range": 0.02, "text_dim": 64, "num_codebooks": 4}
    text.update({k[5:]: v for k, v in over.items() if k.startswith("text_")})
    audio.update({k[6:]: v for k, v in over.items() if k.startswith("audio_")})
    return {"model_type": "fish_qwen3_omni", "architectures": ["FishQwen3OmniForCausalLM"], "dtype": "float32",
            "pad_token_id": None, "eos_token_id": None, "text_config": text, "audio_decoder_config": audio}


def s2_checkpoint_name(name: str) -> str:
    """Our module's tensor name -> the S2 checkpoint's (the inverse of loader.s2_name)."""
    if name.startswith("fast_"):
        return "audio_decoder." + name[len("fast_"):]
    if name.startswith("codebook_embeddings."):
        return "audio_decoder." + name
    return "text_model.model." + name


def write_tiny_s2(folder: Path, seed: int = 0, **over) -> Path:
    """A tiny S2 folder: fish_qwen3_omni config, the LM in two safetensors shards with an index under S2's
    names, tokenizer.json, and the same codec.pth as S1."""
    from safetensors.torch import save_file

    from mizuoto.nodes.fish_speech.tokenizer import HFTokenizer
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_hf_tokenizer(folder)
    cfg = s2_config(vocab, **over)
    tok = HFTokenizer.from_folder(folder)
    cfg["semantic_start_token_id"], cfg["semantic_end_token_id"] = tok.semantic_begin_id, tok.semantic_end_id
    (folder / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    lm = DualARTransformer(FishConfig.from_omni(cfg), tok.semantic_begin_id, tok.semantic_end_id)
    randomize(lm, seed)
    state = {s2_checkpoint_name(k): v.contiguous() for k, v in lm.state_dict().items()}
    shards = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    for k, v in state.items():
        shards["model-0000%d-of-00002.safetensors" % (1 if k.startswith("text_model.") else 2)][k] = v
    weight_map = {}
    for name, part in shards.items():
        save_file(part, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in part})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(v.nbytes for v in state.values())}, "weight_map": weight_map},
                   indent=2), encoding="utf-8")
    codec = FishCodec(codec_config())
    randomize(codec, seed + 1)
    torch.save(codec_state_upstream(codec), folder / "codec.pth")
    return folder


def conformance_case(root: Path):
    """Cloning (the main mode): a tiny model whose slow LM (12 layers) outweighs the codec's working memory,
    0.6 s of reference audio at 22.05 kHz with its transcript, two sentences, a short generation budget
    (tests/engines_native/test_conformance.py)."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_tiny_checkpoint(Path(root) / "tiny", seed=9, n_layer=12, dim=128, n_head=4, head_dim=32,
                                   intermediate_size=512)
    t = torch.arange(int(22050 * 0.6)) / 22050
    ref = {"waveform": (0.3 * torch.sin(2 * torch.pi * 180 * t) * torch.sin(2 * torch.pi * 2 * t))[None, None],
           "sample_rate": 22050}
    return Case(folder, SpeakRequest("(excited) Hello world. The fox!", seed=9, reference=ref,
                                     reference_text="Some reference words.", options={"max_new_tokens": 8}))


def conformance_case_s2(root: Path):
    """The S2 variant's case (tests/fish_speech/test_s2.py runs the conformance checks on it): cloning with a
    12-layer slow LM, speaker-tagged text with an inline [tag]."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_tiny_s2(Path(root) / "tiny_s2", seed=9, text_n_layer=12, text_dim=128, text_n_head=4,
                           text_head_dim=32, text_intermediate_size=512)
    t = torch.arange(int(22050 * 0.6)) / 22050
    ref = {"waveform": (0.3 * torch.sin(2 * torch.pi * 180 * t) * torch.sin(2 * torch.pi * 2 * t))[None, None],
           "sample_rate": 22050}
    return Case(folder, SpeakRequest("<|speaker:0|>[excited] Hello world. The fox!", seed=9, reference=ref,
                                     reference_text="Some reference words.", options={"max_new_tokens": 8}))

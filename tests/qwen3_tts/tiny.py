"""Tiny Qwen3-TTS checkpoints in the upstream layout, written by our own code (no qwen-tts needed).

The config dicts are upstream's config.json formats (also used by test_parity.py to build the upstream
classes). Layer sizes are small; tests pass a small `min_unit_bytes` so every layer is still a unit.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

# Text special tokens inside a small text vocabulary (the real ones are 151644...).
TEXT = dict(text_vocab_size=320, im_start_token_id=300, im_end_token_id=301, tts_pad_token_id=302,
            tts_bos_token_id=303, tts_eos_token_id=304)
CODEBOOK = 64                       # codebook size of every codebook
VOCAB = CODEBOOK + 1024             # talker vocabulary: codes + 1024 control tokens (upstream's layout)


def talker_config(hidden: int = 128, layers: int = 2, cp_hidden: int = 96) -> dict:
    c = CODEBOOK
    return {
        "vocab_size": VOCAB, "hidden_size": hidden, "intermediate_size": 1024, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000,
        "rope_scaling": {"rope_type": "default", "mrope_section": [4, 6, 6], "interleaved": True},
        "attention_bias": False, "num_code_groups": 16, "text_hidden_size": 64,
        "text_vocab_size": TEXT["text_vocab_size"],
        "codec_pad_id": c + 4, "codec_bos_id": c + 5, "codec_eos_token_id": c + 6, "codec_think_id": c + 10,
        "codec_nothink_id": c + 11, "codec_think_bos_id": c + 12, "codec_think_eos_id": c + 13,
        "codec_language_id": {"english": c + 20, "chinese": c + 21, "beijing_dialect": c + 22},
        "spk_id": {"vivian": c + 40, "dylan": c + 41},
        "spk_is_dialect": {"vivian": False, "dylan": "beijing_dialect"},
        "code_predictor_config": {
            "vocab_size": CODEBOOK, "hidden_size": cp_hidden, "intermediate_size": 1024, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "rms_norm_eps": 1e-6,
            "rope_theta": 10000, "num_code_groups": 16, "max_position_embeddings": 64,
        },
    }


def model_config(kind: str = "base", **talker) -> dict:
    cfg = {
        "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz", "tts_model_size": "1b7", "tts_model_type": kind,
        "talker_config": talker_config(**talker),
        "speaker_encoder_config": {"mel_dim": 128, "enc_dim": talker.get("hidden", 128),
                                   "enc_channels": [32, 32, 32, 32, 96], "enc_kernel_sizes": [5, 3, 3, 3, 1],
                                   "enc_dilations": [1, 2, 3, 4, 1], "enc_attention_channels": 16,
                                   "enc_res2net_scale": 4, "enc_se_channels": 16, "sample_rate": 24000},
    }
    cfg.update({k: v for k, v in TEXT.items() if k != "text_vocab_size"})
    return cfg


def codec_config() -> dict:
    return {
        "model_type": "qwen3_tts_tokenizer_12hz", "encoder_valid_num_quantizers": 16, "input_sample_rate": 24000,
        "output_sample_rate": 24000, "decode_upsample_rate": 1920, "encode_downsample_rate": 1920,
        "encoder_config": {
            "audio_channels": 1, "hidden_size": 32, "num_filters": 8, "num_residual_layers": 1,
            "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7, "last_kernel_size": 3, "residual_kernel_size": 3,
            "dilation_growth_rate": 2, "use_causal_conv": True, "pad_mode": "constant", "compress": 2,
            "codebook_size": CODEBOOK, "codebook_dim": 16, "num_quantizers": 16, "num_semantic_quantizers": 1,
            "vector_quantization_hidden_dimension": 16, "upsample_groups": 32, "num_hidden_layers": 2,
            "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16,
            "hidden_act": "gelu", "max_position_embeddings": 8000, "norm_eps": 1e-5, "rope_theta": 10000.0,
            "sliding_window": 250, "layer_scale_initial_scale": 0.01, "sampling_rate": 24000, "frame_rate": 12.5,
            "use_conv_shortcut": False,
        },
        "decoder_config": {
            "codebook_size": CODEBOOK, "codebook_dim": 32, "hidden_size": 32, "latent_dim": 32,
            "max_position_embeddings": 8000, "rope_theta": 10000, "num_attention_heads": 2, "num_key_value_heads": 2,
            "head_dim": 16, "attention_bias": False, "sliding_window": 4, "intermediate_size": 64,
            "hidden_act": "silu", "layer_scale_initial_scale": 0.01, "rms_norm_eps": 1e-5, "num_hidden_layers": 2,
            "num_quantizers": 16, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "decoder_dim": 32,
        },
    }


GENERATION = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
              "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0,
              "subtalker_temperature": 0.9, "max_new_tokens": 2048}


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Every parameter and persistent float buffer random, but in ranges that keep activations sane."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("cluster_usage",):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif leaf == "initialized":
                t.fill_(1.0)
            elif "norm" in name and leaf in ("weight",):
                t.copy_(1.0 + 0.1 * torch.randn(t.shape, generator=g))
            elif leaf in ("alpha", "beta", "bias", "scale", "gamma"):
                t.copy_(0.1 * torch.randn(t.shape, generator=g))
            else:
                fan_in = t[0].numel() if t.dim() > 1 else t.numel()
                std = 1.0 if ("embedding" in name or "embed_sum" in name) else fan_in ** -0.5
                if t.dim() == 3 and t.shape[0] == 1:        # the waveform conv: keep audio off the +-1 clamp
                    std *= 0.02
                t.copy_(std * torch.randn(t.shape, generator=g))


def write_tiny_checkpoint(folder: Path, kind: str = "base", seed: int = 0, dtype: torch.dtype = torch.float32,
                          **talker) -> Path:
    """A complete model folder (config.json, model.safetensors, generation_config.json, speech_tokenizer/)."""
    from mizuoto.nodes.qwen3_tts.codec import CodecConfig, SpeechTokenizer
    from mizuoto.nodes.qwen3_tts.model import Qwen3TTS, Qwen3TTSConfig
    folder = Path(folder)
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    cfg, ccfg = model_config(kind, **talker), codec_config()
    torch.manual_seed(seed)
    model = Qwen3TTS(Qwen3TTSConfig.from_dict(cfg))
    codec = SpeechTokenizer(CodecConfig.from_dict(ccfg))
    randomize(model, seed)
    randomize(codec, seed + 1)
    for m, path in ((model, folder / "model.safetensors"), (codec, folder / "speech_tokenizer" / "model.safetensors")):
        save_file({k: v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous()
                   for k, v in m.state_dict().items()}, str(path))
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "speech_tokenizer" / "config.json").write_text(json.dumps(ccfg, indent=1))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION, indent=1))
    return folder


def template_ids(n: int, seed: int, kind: str = "assistant") -> torch.Tensor:
    """Token ids shaped like upstream's templates around `n` random text tokens (no BPE needed)."""
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(0, 290, (n,), generator=g).tolist()
    s, e, nl, role = TEXT["im_start_token_id"], TEXT["im_end_token_id"], 10, 291 if kind == "user" else 292
    if kind == "assistant":
        ids = [s, role, nl, *body, e, nl, s, role, nl]
    else:                                   # "ref" / "user": <|im_start|>role\n text <|im_end|>\n
        ids = [s, role, nl, *body, e, nl]
    return torch.tensor([ids])


CORPUS = ["Hello world, this is a tiny tokenizer.", "The quick brown fox jumps over the lazy dog.",
          "Speak slowly and clearly, please!", "Numbers 123 and 4567.", "A calm, low voice."]
SPECIALS = {TEXT["im_start_token_id"]: "<|im_start|>", TEXT["im_end_token_id"]: "<|im_end|>",
            TEXT["tts_pad_token_id"]: "<|tts_pad|>", TEXT["tts_bos_token_id"]: "<|tts_text_bos|>",
            TEXT["tts_eos_token_id"]: "<|tts_text_eod|>", 305: "<|endoftext|>"}


def write_tokenizer(folder: Path) -> None:
    """A byte-level BPE with Qwen2's pre-tokenizer: ids 0..299 (bytes + merges), then the specials at 300..305."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from mizuoto.nodes.qwen3_tts.text import QWEN2_PATTERN
    from tokenizers import Regex
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=min(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    tok.model.save(str(folder))                                  # vocab.json + merges.txt
    vocab = json.loads((folder / "vocab.json").read_text())
    assert max(vocab.values()) == min(SPECIALS) - 1      # specials follow the BPE ids without a gap, as in Qwen's files
    added = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": True} for i, c in sorted(SPECIALS.items())}
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": added, "additional_special_tokens": [], "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}, indent=1))


def conformance_case(root: Path):
    """A tiny CustomVoice model with a tokenizer and a short generation budget (conformance test)."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_tiny_checkpoint(Path(root) / "tiny-custom", "custom_voice", seed=5)
    write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({**GENERATION, "max_new_tokens": 8}))
    return Case(folder, SpeakRequest("Hello world. The fox!", seed=9, language="en", voice="vivian"))

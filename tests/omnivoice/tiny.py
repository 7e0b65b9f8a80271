"""Tiny OmniVoice checkpoints in the upstream layout, written by our own code (no omnivoice needed).

The config dicts use upstream's config.json formats (test_parity.py builds the upstream classes from
the same dicts). The codec keeps the real time structure (24 kHz, hop 960, HuBERT stride 320, 8
codebooks of 1024) with narrow channels, so frame counts and paddings are the real ones.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|denoise|>", "<|lang_start|>", "<|lang_end|>",
            "<|instruct_start|>", "<|instruct_end|>", "<|text_start|>", "<|text_end|>"]
BPE_SIZE = 300                        # byte-level BPE ids 0..299, then the specials
VOCAB = 1088                          # >= 1025: upstream looks audio ids up in the text table too (then discards them)


def model_config(hidden: int = 64, layers: int = 2) -> dict:
    return {
        "model_type": "omnivoice", "architectures": ["OmniVoice"], "audio_vocab_size": 1025, "audio_mask_id": 1024,
        "num_audio_codebook": 8, "audio_codebook_weights": [8, 8, 6, 6, 4, 4, 2, 2],
        "llm_config": {
            "model_type": "qwen3", "vocab_size": VOCAB, "hidden_size": hidden, "intermediate_size": 2 * hidden,
            "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "attention_bias": False,
            "tie_word_embeddings": True, "use_sliding_window": False,
        },
    }


def codec_config() -> dict:
    """The published audio_tokenizer/config.json's fields and time structure with narrow layers."""
    return {
        "model_type": "higgs_audio_v2_tokenizer", "sample_rate": 24000, "semantic_sample_rate": 16000,
        "downsample_factor": 320, "codebook_size": 1024, "codebook_dim": 8, "kernel_size": 3, "unit_kernel_size": 3,
        "strides": [1, 1], "channel_ratios": [1, 1], "block_dilations": [1, 1], "target_bandwidths": [0.5, 1, 1.5, 2],
        "initializer_range": 0.02,
        "acoustic_model_config": {
            "model_type": "dac", "encoder_hidden_size": 2, "decoder_hidden_size": 128, "hidden_size": 16,
            "downsampling_ratios": [8, 5, 4, 2, 3], "upsampling_ratios": [8, 5, 4, 2, 3], "codebook_dim": 8,
            "codebook_size": 1024, "n_codebooks": 9, "hop_length": 960, "sampling_rate": 16000,
        },
        "semantic_model_config": {
            "model_type": "hubert", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 2, "conv_dim": [16] * 7, "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
            "conv_stride": [5, 2, 2, 2, 2, 2, 2], "conv_bias": False, "num_conv_pos_embeddings": 16,
            "num_conv_pos_embedding_groups": 4, "layer_norm_eps": 1e-5, "feat_extract_norm": "group",
            "do_stable_layer_norm": False, "feat_proj_layer_norm": True, "mask_time_prob": 0.0,
            "mask_feature_prob": 0.0, "vocab_size": 32,
        },
    }


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Every parameter and persistent float buffer random, in ranges that keep activations sane."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "inited":
                t.fill_(1.0)
            elif leaf == "alpha":
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            elif "norm" in name and leaf == "weight":
                t.copy_(1.0 + 0.1 * torch.randn(t.shape, generator=g))
            elif leaf in ("bias", "cluster_size", "masked_spec_embed"):
                t.copy_(0.1 * torch.randn(t.shape, generator=g))
            else:
                fan_in = t[0].numel() if t.dim() > 1 else t.numel()
                std = 1.0 if "embed" in name else fan_in ** -0.5
                t.copy_(std * torch.randn(t.shape, generator=g))


CORPUS = ["Hello world, this is a tiny tokenizer.", "The quick brown fox jumps over the lazy dog.",
          "Speak slowly and clearly, please!", "Numbers 123 and 4567.", "A calm, low voice. None en zh",
          "female, low pitch, british accent"]


def write_tokenizer(folder: Path) -> None:
    """A byte-level BPE with Qwen2's pre-tokenizer as tokenizer.json (+ a tokenizer_config.json naming
    Qwen2Tokenizer, as the published folder has), specials at 300.."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from mizuoto.nodes.qwen3_tts.text import QWEN2_PATTERN
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    assert tok.get_vocab_size() == BPE_SIZE
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "unk_token": None, "clean_up_tokenization_spaces": False, "errors": "replace",
        "model_max_length": 32768, "split_special_tokens": False, "add_prefix_space": False,
        "additional_special_tokens": SPECIALS[3:]}, indent=1))


def write_tiny_checkpoint(folder: str | Path, seed: int = 0, dtype: torch.dtype = torch.float32,
                          masked_spec_embed: bool = False, layers: int = 2, hidden: int = 64) -> Path:
    """Our classes from the tiny configs, randomised, saved as the upstream files."""
    from mizuoto.nodes.omnivoice.codec import CodecConfig, HiggsAudioTokenizer
    from mizuoto.nodes.omnivoice.model import OmniVoiceConfig, OmniVoiceLM
    folder = Path(folder)
    (folder / "audio_tokenizer").mkdir(parents=True, exist_ok=True)
    cfg, ccfg = model_config(hidden, layers), codec_config()
    model = OmniVoiceLM(OmniVoiceConfig.from_dict(cfg))
    codec = HiggsAudioTokenizer(CodecConfig.from_dict(ccfg), masked_spec_embed)
    randomize(model, seed)
    randomize(codec, seed + 1)
    for m, path in ((model, folder / "model.safetensors"), (codec, folder / "audio_tokenizer" / "model.safetensors")):
        save_file({k: v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous()
                   for k, v in m.state_dict().items()}, str(path))
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "audio_tokenizer" / "config.json").write_text(json.dumps(ccfg, indent=1))
    (folder / "audio_tokenizer" / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=1))
    write_tokenizer(folder)
    return folder


PREPROCESSOR = {"feature_extractor_type": "DacFeatureExtractor", "feature_size": 1, "hop_length": 960,
                "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True, "sampling_rate": 24000}


def conformance_case(root: Path):
    """Cloning (the main mode: every phase runs) on a tiny model, two chunks, a short unmasking schedule."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    # A backbone whose streamable half outweighs the codec decoder (the test sizes its half-resident
    # device from the resident run's peak, which the generate phase reaches before the decoder loads).
    folder = write_tiny_checkpoint(Path(root) / "tiny", seed=4, layers=8, hidden=128)
    t = torch.arange(int(24000 * 0.8)) / 24000
    reference = {"waveform": (0.3 * torch.sin(2 * torch.pi * 200 * t) * torch.sin(2 * torch.pi * 3 * t))[None, None],
                 "sample_rate": 24000}
    text = ("The first sentence is long enough to fill most of a chunk on its own, as chunks hold 150 characters. "
            "The second one follows.")
    return Case(folder, SpeakRequest(text, seed=9, language="en", reference=reference, reference_text="A reference.",
                                     options={"num_step": 4}), instruction="female, whisper")

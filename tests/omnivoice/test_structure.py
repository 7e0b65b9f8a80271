"""Our model, built on `meta` from the published OmniVoice configs, has exactly the tensor names and shapes
of upstream's classes (recorded in real_omnivoice.json by real_structure.py in the parity venv)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.nodes.omnivoice.codec import CodecConfig, HiggsAudioTokenizer
from mizuoto.nodes.omnivoice.model import OmniVoiceConfig, OmniVoiceLM

REAL = json.loads(Path(__file__).with_name("real_omnivoice.json").read_text())


def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def test_backbone_matches_the_published_model():
    with torch.device("meta"):
        model = OmniVoiceLM(OmniVoiceConfig.from_dict(REAL["config"]))
    assert shapes(model) == REAL["model"]
    assert len(REAL["model"]) == 3 + 28 * 11 + 2                  # embeddings, heads, offsets; 28 layers; norm


def test_audio_tokenizer_matches_the_published_model():
    config = CodecConfig.from_dict(REAL["audio_tokenizer_config"])
    assert (config.hop_length, config.frame_rate, config.num_quantizers, config.semantic_downsample_factor,
            config.hidden_size) == (960, 25, 8, 2, 1024)
    with torch.device("meta"):
        codec = HiggsAudioTokenizer(config)
    assert shapes(codec) == REAL["audio_tokenizer"]
    with torch.device("meta"):                                      # the published file's extra vector
        extra = shapes(HiggsAudioTokenizer(config, masked_spec_embed=True))
    assert set(extra) - set(REAL["audio_tokenizer"]) == {"semantic_model.masked_spec_embed"}


def test_tensor_counts_match_the_published_files():
    """The published files' inventory, as a public intake report of k2-fsa/OmniVoice lists it: model.safetensors
    313 tensors (llm. 310, audio_embeddings, audio_heads, codebook_layer_offsets); audio_tokenizer/
    model.safetensors 527 (no HuBERT masked_spec_embed in this copy of the tokenizer)."""
    from collections import Counter
    prefix = lambda names: Counter(n.split(".")[0] for n in names)  # noqa: E731
    assert prefix(REAL["model"]) == {"llm": 310, "audio_embeddings": 1, "audio_heads": 1, "codebook_layer_offsets": 1}
    assert prefix(REAL["audio_tokenizer"]) == {"semantic_model": 210, "acoustic_encoder": 110, "acoustic_decoder": 110,
                                               "quantizer": 64, "decoder_semantic": 14, "encoder_semantic": 13,
                                               "fc1": 2, "fc2": 2, "fc": 2}

"""Tiny IndexTTS 2 checkpoints in the upstream layout, weights regenerated from a seed.

make_fixtures.py (reference venv, upstream repository) builds upstream's classes from CONFIG, records
their state-dict names and shapes into fixtures/keys.json, fills them with `seeded_state` and records
outputs; the default suite rebuilds the identical files from that key list (no upstream needed).

    folder/config.yaml    upstream's config.yaml fields (gpt, s2mel, ...) at tiny sizes
    folder/gpt.pth        UnifiedVoice state dict
    folder/s2mel.pth      {"net": {"cfm": ..., "length_regulator": ..., "gpt_layer": ...}}
"""
from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import torch
import yaml

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 20251201

CONFIG = {
    "dataset": {"bpe_model": "bpe.model", "sample_rate": 24000, "squeeze": False,
                "mel": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "win_length": 1024, "n_mels": 100,
                        "mel_fmin": 0, "normalize": False}},
    "gpt": {"model_dim": 64, "max_mel_tokens": 120, "max_text_tokens": 40, "heads": 4, "use_mel_codes_as_input": True,
            "mel_length_compression": 1024, "layers": 2, "number_text_tokens": 100, "number_mel_codes": 8194,
            "start_mel_token": 8192, "stop_mel_token": 8193, "start_text_token": 0, "stop_text_token": 1,
            "train_solo_embeddings": False, "condition_type": "conformer_perceiver",
            "condition_module": {"output_size": 32, "linear_units": 64, "attention_heads": 2, "num_blocks": 2,
                                 "input_layer": "conv2d2", "perceiver_mult": 2},
            "emo_condition_module": {"output_size": 32, "linear_units": 48, "attention_heads": 2, "num_blocks": 1,
                                     "input_layer": "conv2d2", "perceiver_mult": 2}},
    "semantic_codec": {"codebook_size": 8192, "hidden_size": 1024, "codebook_dim": 8, "vocos_dim": 32,
                       "vocos_intermediate_dim": 64, "vocos_num_layers": 2},
    "s2mel": {
        "preprocess_params": {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024, "hop_length": 256,
                                                             "n_mels": 80, "fmin": 0, "fmax": "None"}},
        "dit_type": "DiT", "reg_loss_type": "l1", "style_encoder": {"dim": 192},
        "length_regulator": {"channels": 32, "is_discrete": False, "in_channels": 1024, "content_codebook_size": 2048,
                             "sampling_ratios": [1, 1, 1, 1], "vector_quantize": False, "n_codebooks": 1,
                             "quantizer_dropout": 0.0, "f0_condition": False, "n_f0_bins": 512},
        "DiT": {"hidden_dim": 32, "num_heads": 2, "depth": 3, "class_dropout_prob": 0.1, "block_size": 8192,
                "in_channels": 80, "style_condition": True, "final_layer_type": "wavenet", "target": "mel",
                "content_dim": 32, "content_codebook_size": 1024, "content_type": "discrete", "f0_condition": False,
                "n_f0_bins": 512, "content_codebooks": 1, "is_causal": False, "long_skip_connection": True,
                "zero_prompt_speech_token": False, "time_as_token": False, "style_as_token": False,
                "uvit_skip_connection": True, "add_resblock_in_transformer": False},
        "wavenet": {"hidden_dim": 32, "num_layers": 2, "kernel_size": 5, "dilation_rate": 1, "p_dropout": 0.2,
                    "style_condition": True},
    },
    "gpt_checkpoint": "gpt.pth", "w2v_stat": "wav2vec2bert_stats.pt", "s2mel_checkpoint": "s2mel.pth",
    "emo_matrix": "feat2.pt", "spk_matrix": "feat1.pt", "emo_num": [3, 17, 2, 8, 4, 5, 10, 24],
    "qwen_emo_path": "qwen0.6bemo4-merge/",
    "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_22khz_80band_256x"},
    "version": 2.0,
}

W2V_BERT = {"model_type": "wav2vec2-bert", "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 48,
            "num_hidden_layers": 18, "feature_projection_input_dim": 160, "conv_depthwise_kernel_size": 5,
            "position_embeddings_type": "relative_key", "left_max_position_embeddings": 8,
            "right_max_position_embeddings": 2, "hidden_act": "swish", "layer_norm_eps": 1e-5, "add_adapter": True,
            "output_hidden_size": 32, "adapter_kernel_size": 3, "adapter_stride": 2, "num_adapter_layers": 1,
            "use_intermediate_ffn_before_adapter": False, "mask_time_prob": 0.05, "torch_dtype": "float32"}
QWEN_EMO = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 300, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 512,
            "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False, "torch_dtype": "float32"}
QWEN_GENERATION = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": [298, 299]}
CAMPPLUS = {"feat_dim": 80, "embedding_size": 192, "growth_rate": 8, "bn_size": 2, "init_channels": 16}
BIGVGAN = {"resblock": "1", "num_mels": 80, "upsample_rates": [4, 2], "upsample_kernel_sizes": [8, 4],
           "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7], "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]],
           "activation": "snakebeta", "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False,
           "sampling_rate": 22050, "hop_size": 8, "n_fft": 32, "win_size": 32, "fmin": 0, "fmax": None}


def seeded_tensor(key: str, shape: tuple[int, ...], seed: int = SEED) -> torch.Tensor:
    """A deterministic tensor for parameter `key`, scaled so that tiny random networks stay finite.

    Uniform with unit variance, made from the generator's bits by exact or correctly rounded float32 steps
    only: the same bits on every CPU. (`torch.randn` is not: its Box-Muller log/cos differ in the last bit
    between ATEN_CPU_CAPABILITY paths, which moved every weight and so every golden output by ~1e-7.)"""
    g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
    x = math.sqrt(3.0) * (2 * torch.rand(shape, generator=g) - 1)
    leaf = key.rsplit(".", 1)[-1]
    if len(shape) >= 2 and leaf not in ("weight_g",):
        return x / math.sqrt(max(1, math.prod(shape[1:])))
    if leaf in ("weight_g", "gamma") or (("norm" in key or "ln_" in key) and leaf == "weight"):
        return 1.0 + 0.1 * x
    return 0.1 * x


def seeded_state(shapes: dict[str, list[int]], seed: int = SEED) -> dict[str, torch.Tensor]:
    """Seeded tensors; BatchNorm statistics kept valid (positive variances, a step count)."""
    state = {}
    for k, s in sorted(shapes.items()):
        if k.endswith("num_batches_tracked"):
            state[k] = torch.tensor(1000)
        elif k.endswith("running_var"):
            state[k] = 1.0 + seeded_tensor(k, tuple(s), seed).abs()
        else:
            state[k] = seeded_tensor(k, tuple(s), seed)
    return state


def keys() -> dict[str, dict[str, list[int]]]:
    return json.loads((FIXTURES / "keys.json").read_text())


def write_config(folder: Path, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config or CONFIG, sort_keys=False), encoding="utf-8")
    return path


# The stop code's bias in mel_head: the seeded logits are nearly flat (the stop code ranks ~3000th), so no
# seed would stop within the fixtures' 60 codes; at 2.0, seed 0 runs to 60 and seed 3 stops after 11.
STOP_BIAS = 2.0


def gpt_state(shapes: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """The tiny UnifiedVoice weights: seeded, the stop code's bias set to STOP_BIAS."""
    state = seeded_state(shapes)
    state["mel_head.bias"][CONFIG["gpt"]["stop_mel_token"]] = STOP_BIAS
    return state


def write_gpt(folder: Path) -> Path:
    path = folder / "gpt.pth"
    torch.save(gpt_state(keys()["gpt"]), path)
    return path


def write_s2mel(folder: Path) -> Path:
    path = folder / "s2mel.pth"
    k = keys()
    net = {name: seeded_state(k[f"s2mel.{name}"]) for name in ("cfm", "length_regulator", "gpt_layer")}
    torch.save({"net": net}, path)
    return path


def write_bigvgan(folder: Path, taps: torch.Tensor | None = None) -> Path:
    """bigvgan_generator.pt ({"generator": state} with weight_g/weight_v pairs and the filter buffers) + config.json.
    Every filter is the 2x resampling filter of kernel 12: `taps`, or our kaiser_sinc_filter1d's."""
    from mizuoto.nodes.blocks.bigvgan import kaiser_sinc_filter1d
    folder.mkdir(parents=True, exist_ok=True)
    state = seeded_state(keys()["bigvgan"])
    for k in keys()["bigvgan.buffers"]:
        state[k] = (kaiser_sinc_filter1d(0.25, 0.3, 12) if taps is None else taps).clone()
    torch.save({"generator": state}, folder / "bigvgan_generator.pt")
    (folder / "config.json").write_text(json.dumps(BIGVGAN))
    return folder


def write_campplus(folder: Path) -> Path:
    """campplus_cn_common.bin at tiny widths (CAMPPLUS): a plain state dict, BatchNorm statistics included."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campplus_cn_common.bin"
    torch.save(seeded_state(keys()["campplus"]), path)
    return path


def write_codec(folder: Path) -> Path:
    """The MaskGCT semantic codec's model.safetensors (decoder included, as published)."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.safetensors"
    save_file(seeded_state(keys()["codec"]), path)
    return path


def write_w2v_bert(folder: Path) -> Path:
    """A w2v-bert-2.0 folder at tiny width: config.json + model.safetensors (all 18 layers and the adapter)."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    save_file(seeded_state(keys()["w2v_bert"]), folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(W2V_BERT))
    return folder


# ---- a whole tiny model folder for the engine (conformance, streaming, engine tests) ----------------------

E2E_WIDTH = 32        # semantic width (w2v-bert hidden size; 1024 at real size)
BIGVGAN_E2E = {**BIGVGAN, "upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8],
               "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3]], "hop_size": 256}
CORPUS = ["HELLO WORLD", "HI THERE", "THIS IS A TEST", "SPEAK SLOWLY AND SOFTLY", "GOOD MORNING", "THANK YOU",
          "你 好 世 界", "今 天 天 气 很 好"]


def e2e_config(max_text_tokens: int | None = None) -> dict:
    import copy
    c = copy.deepcopy(CONFIG)
    c["semantic_codec"]["hidden_size"] = E2E_WIDTH
    c["s2mel"]["length_regulator"]["in_channels"] = E2E_WIDTH
    if max_text_tokens is not None:      # upstream's 120-piece segments need more than CONFIG's 40 positions
        c["gpt"]["max_text_tokens"] = max_text_tokens
    return c


def _shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def write_bpe(path: Path) -> None:
    import io
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 4), model_writer=model, vocab_size=60,
                                   model_type="bpe", character_coverage=1.0, hard_vocab_limit=False,
                                   bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2, num_threads=1)
    path.write_bytes(model.getvalue())


def write_folder(root: Path, max_text_tokens: int | None = None) -> Path:
    """The published layout (REQUIRED in loader.py, feat1/feat2 included) with tiny seeded weights in the
    names and file formats upstream uses; shapes from our modules at the tiny e2e config."""
    from mizuoto.nodes.blocks.bigvgan import BigVGAN, BigVGANConfig
    from mizuoto.nodes.blocks.campplus import CAMPPlus
    from mizuoto.nodes.blocks.w2v_bert import W2VBert, W2VBertConfig
    from mizuoto.nodes.indextts2.codec import SemanticCodec
    from mizuoto.nodes.indextts2.loader import codec_config, gpt_config, s2mel_config
    from mizuoto.nodes.indextts2.gpt import UnifiedVoice
    from mizuoto.nodes.indextts2.s2mel import S2Mel
    from dataclasses import replace

    folder = Path(root)
    config = e2e_config(max_text_tokens)
    path = write_config(folder, config)
    gc = replace(gpt_config(config, path), semantic_dim=E2E_WIDTH)
    with torch.device("meta"):
        gpt = UnifiedVoice(gc)
        s2mel = S2Mel(s2mel_config(config, path, gc.model_dim))
        codec = SemanticCodec(codec_config(config, path))
        decoder = SemanticCodec(codec_config(config, path)).encoder          # the published file has a decoder too
        w2v = W2VBert(W2VBertConfig.from_dict(W2V_BERT), W2V_BERT["num_hidden_layers"])
        campplus = CAMPPlus(**CAMPPLUS)
        bigvgan = BigVGAN(BigVGANConfig.from_dict(BIGVGAN_E2E))
    torch.save(seeded_state(_shapes(gpt)), folder / "gpt.pth")
    net = {name: seeded_state({k[len(name) + 1:]: v for k, v in _shapes(s2mel).items() if k.startswith(name + ".")})
           for name in ("cfm", "length_regulator", "gpt_layer")}
    torch.save({"net": net}, folder / "s2mel.pth")
    write_bpe(folder / "bpe.model")
    g = torch.Generator().manual_seed(SEED)
    torch.save({"mean": 0.1 * torch.randn(E2E_WIDTH, generator=g), "var": 1 + torch.rand(E2E_WIDTH, generator=g)},
               folder / "wav2vec2bert_stats.pt")
    rows = sum(CONFIG["emo_num"])
    torch.save(torch.randn(rows, 192, generator=g), folder / "feat1.pt")
    torch.save(0.1 * torch.randn(rows, gc.model_dim, generator=g), folder / "feat2.pt")
    from safetensors.torch import save_file
    (folder / "semantic_codec").mkdir()
    codec_state = {**_shapes(codec), **{f"decoder.{k}": v for k, v in _shapes(decoder).items()}}
    save_file(seeded_state(codec_state), folder / "semantic_codec" / "model.safetensors")
    (folder / "w2v-bert-2.0").mkdir()
    save_file(seeded_state(_shapes(w2v)), folder / "w2v-bert-2.0" / "model.safetensors")
    (folder / "w2v-bert-2.0" / "config.json").write_text(json.dumps(W2V_BERT))
    (folder / "campplus").mkdir()
    torch.save(seeded_state(_shapes(campplus)), folder / "campplus" / "campplus_cn_common.bin")
    (folder / "bigvgan").mkdir()
    big = seeded_state({k: v for k, v in _shapes(bigvgan).items() if not k.endswith(".filter")})
    from mizuoto.nodes.blocks.bigvgan import kaiser_sinc_filter1d
    big.update({k: kaiser_sinc_filter1d(0.25, 0.3, 12) for k in _shapes(bigvgan) if k.endswith(".filter")})
    torch.save({"generator": big}, folder / "bigvgan" / "bigvgan_generator.pt")
    (folder / "bigvgan" / "config.json").write_text(json.dumps(BIGVGAN_E2E))
    write_qwen_emotion(folder / "qwen0.6bemo4-merge")
    return folder


def reference(seconds: float = 1.2, rate: int = 22050) -> torch.Tensor:
    t = torch.arange(int(seconds * rate)) / rate
    return 0.3 * torch.sin(2 * torch.pi * 190 * t) * (1 + torch.sin(2 * torch.pi * 3 * t)) / 2


PIPELINE_STOP_BIAS = 2.3    # the stop code's bias in the pipeline folder's mel_head: upstream's defaults allow
                            # 1500 codes, more than the tiny GPT's positions; with it chosen seeds stop soon


def weight_normed(state: dict[str, torch.Tensor], published: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """`X.weight` -> `X.weight_g` + `X.weight_v` where upstream's module (its names in `published`, from
    keys.json; indices generalised) has torch's weight norm, as the published files hold them. v is the
    weight and g its norm, so that the fold torch._weight_norm(v, g, 0) gives the weight back exactly."""
    import re
    normed = {re.sub(r"\d+", "#", k)[: -len("_g")] for k in published if k.endswith(".weight_g")}
    out = {}
    for k, v in state.items():
        if re.sub(r"\d+", "#", k) in normed:
            out[k + "_g"] = torch.norm_except_dim(v, 2, 0)
            out[k + "_v"] = v
        else:
            out[k] = v
    return out


def write_pipeline_folder(root: Path) -> Path:
    """write_folder with room for upstream's 120-piece segments, a GPT that stops (PIPELINE_STOP_BIAS) and
    the weight-norm layers as the published files hold them (upstream's loaders read no other layout)."""
    from safetensors.torch import load_file, save_file
    folder = write_folder(root, max_text_tokens=160)
    k = keys()
    state = torch.load(folder / "gpt.pth", weights_only=True)
    state["mel_head.bias"][CONFIG["gpt"]["stop_mel_token"]] = PIPELINE_STOP_BIAS
    torch.save(state, folder / "gpt.pth")
    s2mel = torch.load(folder / "s2mel.pth", weights_only=True)
    s2mel["net"]["cfm"] = weight_normed(s2mel["net"]["cfm"], k["s2mel.cfm"])
    torch.save(s2mel, folder / "s2mel.pth")
    codec = folder / "semantic_codec" / "model.safetensors"
    save_file(weight_normed(load_file(codec), k["codec"]), codec)
    big = torch.load(folder / "bigvgan" / "bigvgan_generator.pt", weights_only=True)
    torch.save({"generator": weight_normed(big["generator"], k["bigvgan"])}, folder / "bigvgan" / "bigvgan_generator.pt")
    return folder


def stereo_reference(seconds: float = 0.6, rate: int = 44100) -> torch.Tensor:
    """[2, T]: two different sawtooth-like channels from integer steps, multiples of 1/1024, so the file
    upstream reads and the tensor the pipeline gets hold the same float32 values on every CPU."""
    n = torch.arange(int(seconds * rate))
    left = ((n * 7) % 401 - 200) * 4 + ((n * 3) % 97 - 48) * 2
    right = ((n * 5) % 263 - 131) * 3 - ((n * 11) % 53 - 26) * 5
    return torch.stack([left, right]).to(torch.float32) / 1024


def conformance_case(root: Path):
    """Cloning from a speaker reference (tests/engines_native/test_conformance.py); short decodes."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_folder(Path(root) / "tiny")
    return Case(folder, SpeakRequest("hi there", seed=5, reference={"waveform": reference()[None, None],
                                                                      "sample_rate": 22050},
                                     options={"max_mel_tokens": 12, "diffusion_steps": 3}))


def write_qwen_emotion(folder: Path, tokenizer: bool = True) -> Path:
    """qwen0.6bemo4-merge/ at tiny size: config.json, model.safetensors (tied head left out, as published),
    generation_config.json and, for the engine, a byte-level tokenizer.json with Qwen's chat tokens."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    save_file(seeded_state(keys()["qwen_emo"]), folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(QWEN_EMO))
    (folder / "generation_config.json").write_text(json.dumps(QWEN_GENERATION))
    if tokenizer:
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        tok = Tokenizer(models.BPE({s: i for i, s in enumerate(alphabet)}, []))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens(["<|im_start|>", "<|im_end|>", "<think>", "</think>"])
        tok.save(str(folder / "tokenizer.json"))
    return folder

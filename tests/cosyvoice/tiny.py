"""Tiny CosyVoice 2 / 3 model folders in the exact upstream layout, with weights regenerated from a seed.

The fixture script (make_fixtures.py, upstream venv) builds upstream's classes from these same YAML
texts, lists their state-dict keys and shapes into fixtures/keys_v{2,3}.json, fills them with
`seeded_state` and records outputs. The default suite rebuilds identical files from that key list
(no upstream needed), loads them with our loader and compares.
"""
from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import torch

FIXTURES = Path(__file__).parent / "fixtures"
TOKENIZER_TEXTS = ["hello world", "Hello, World! 123", "你好，世界。<|endofprompt|>hello", "[breath] well<strong>ok</strong>",
                   "You are a helpful assistant.<|endofprompt|>[AA1][zh] tail", "  spaced\n\nlines\t", "héllo wörld"]
SEED = 20251201

QWEN_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 151936,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096, "tie_word_embeddings": True,
    "use_sliding_window": False, "hidden_act": "silu", "torch_dtype": "float32", "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643,
}

_COMMON = """
sample_rate: 24000
llm_input_size: 64
llm_output_size: 64
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1
"""

_HIFT = """
hift: !new:cosyvoice.hifigan.generator.{hift_class}
    in_channels: 80
    base_channels: 32
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99{extra}
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.{f0_class}
        num_class: 1
        in_channels: 80
        cond_channels: 16

feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: {fmax}
    center: False
"""

_LLM = """
llm: !new:cosyvoice.llm.llm.{llm_class}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: {speech_tokens}
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""

_CFM = """
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
"""

YAML_V2 = _COMMON + _LLM.format(llm_class="Qwen2LM", speech_tokens=6561) + """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 512
        attention_heads: 4
        linear_units: 64
        num_blocks: 1
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 512
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
""" + _CFM + """        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [32]
            dropout: 0.0
            attention_head_dim: 16
            n_blocks: 1
            num_mid_blocks: 2
            num_heads: 2
            act_fn: 'gelu'
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
""" + _HIFT.format(hift_class="HiFTGenerator", f0_class="ConvRNNF0Predictor", extra="", fmax="8000")

# Upstream's token vocabulary (6561 = 3^8, the S3 tokenizer's) so reference tokens feed the LM and flow.
YAML_V3 = _COMMON + _LLM.format(llm_class="CosyVoice3LM", speech_tokens=6561) + """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: 32
        pre_lookahead_len: 3
""" + _CFM + """        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: 64
            depth: 4
            heads: 4
            dim_head: 16
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
""" + _HIFT.format(hift_class="CausalHiFTGenerator", f0_class="CausalConvRNNF0Predictor",
                   extra="\n    conv_pre_look_right: 4", fmax="null")

# The published YAMLs' text front end (what upstream's CosyVoice2 / CosyVoice3 constructors read).
_TOKENIZER = """
get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True{version}
allowed_special: 'all'
"""
YAML_V2 += _TOKENIZER.format(version="")
YAML_V3 += _TOKENIZER.format(version="\n    version: cosyvoice3")

YAMLS = {2: YAML_V2, 3: YAML_V3}


def seeded_tensor(key: str, shape: tuple[int, ...], seed: int = SEED) -> torch.Tensor:
    """A deterministic tensor for parameter `key`, scaled so that tiny random networks stay finite."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
    # Drawn in float64 and rounded: torch's float32 randn has a vectorised (AVX2) and a scalar kernel that
    # round differently (ATEN_CPU_CAPABILITY=default moves the draws by ~1e-6), its float64 randn one kernel,
    # so these weights are the same bits on every machine, as the recorded outputs need.
    x = torch.randn(shape, generator=g, dtype=torch.float64).float()
    leaf = key.rsplit(".", 1)[-1]
    if len(shape) >= 2 and leaf not in ("original0", "weight_g"):
        return x / math.sqrt(max(1, math.prod(shape[1:])))
    if leaf in ("original0", "weight_g", "alpha") or ("norm" in key and leaf == "weight"):
        return 1.0 + 0.1 * x
    return 0.1 * x


def seeded_state(shapes: dict[str, list[int]], seed: int = SEED) -> dict[str, torch.Tensor]:
    """Seeded tensors for every key; a tied text lm_head is the embedding itself, as in the real files."""
    state = {k: seeded_tensor(k, tuple(s), seed) for k, s in sorted(shapes.items()) if not k.endswith("lm_head.weight")}
    for k in shapes:
        if k.endswith("lm_head.weight"):
            state[k] = state[k.replace("lm_head.weight", "model.embed_tokens.weight")]
    return state


QWEN2_SPECIALS_AT = 151643    # the real Qwen2 vocabulary's size: <|endoftext|>, <|im_start|>, <|im_end|> follow it


def write_tokenizer(folder: Path, real_ids: bool = False) -> None:
    """A byte-level BPE with the 256 byte symbols and a few merges, Qwen2's three specials after them.
    `real_ids`: the vocabulary is padded to Qwen2's 151643 ids with entries no merge produces, so the three
    specials and the tokens upstream's tokenizers add after them (`<|endofprompt|>`: 151646) get their real
    ids; the ids of real text stay those of the small vocabulary."""
    from tokenizers.pre_tokenizers import ByteLevel
    alphabet = sorted(ByteLevel.alphabet())
    vocab = {s: i for i, s in enumerate(alphabet)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    if real_ids:
        # unreachable: BPE yields only the byte symbols and what the merges build, and "<pad" has no merge
        vocab.update((f"<pad{i}>", i) for i in range(len(vocab), QWEN2_SPECIALS_AT))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    n = len(vocab)
    added = {str(n + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                          "special": True}
             for i, t in enumerate(("<|endoftext|>", "<|im_start|>", "<|im_end|>"))}
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": added, "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "model_max_length": 32768, "tokenizer_class": "Qwen2Tokenizer", "split_special_tokens": False,
        "errors": "replace", "clean_up_tokenization_spaces": False}), encoding="utf-8")


def write_folder(folder: Path, version: int, keys: dict[str, dict[str, list[int]]] | None = None,
                 seed: int = SEED, end_bias: float = 0.0, real_ids: bool = False) -> Path:
    """A complete tiny model folder: YAML, CosyVoice-BlankEN, llm/flow/hift.pt from `keys` (default: the
    committed upstream key list), and the two ONNX files if the fixtures hold them. `end_bias` (v2) raises
    the LM's end-of-speech logit: the random LM otherwise almost never ends, so every run lasts upstream's
    20 speech tokens per text token; with it a sentence ends soon after the 2 per text token minimum.
    `real_ids`: the special tokens at their real vocabulary ids (write_tokenizer), which upstream's
    CosyVoice3 needs (its LM looks for `<|endofprompt|>` at 151646; the 151936 embedding rows cover it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"cosyvoice{version}.yaml").write_text(YAMLS[version], encoding="utf-8")
    qwen = folder / "CosyVoice-BlankEN"
    qwen.mkdir(exist_ok=True)
    (qwen / "config.json").write_text(json.dumps(QWEN_CONFIG), encoding="utf-8")
    write_tokenizer(qwen, real_ids)
    if keys is None:
        keys = json.loads((FIXTURES / f"keys_v{version}.json").read_text())
    if end_bias and version != 2:
        raise ValueError("end_bias: only for the v2 LM (its end-of-speech row is speech_token_size, 6561)")
    for name in ("llm", "flow", "hift"):
        state = seeded_state(keys[name], seed)
        if name == "llm" and end_bias:
            state["llm_decoder.bias"][6561] += end_bias
        torch.save(state, folder / f"{name}.pt")
    for name in ("campplus.onnx", f"speech_tokenizer_v{version}.onnx"):
        src = FIXTURES / name
        (folder / name).write_bytes(src.read_bytes() if src.is_file() else b"")
    return folder


def conformance_case(root: Path):
    """CosyVoice 2 tiny folder, zero-shot cloning of a short reference (tests/engines_native/test_conformance.py);
    CosyVoice 3 runs the same checks in tests/engines_native/test_cosyvoice_streaming.py."""
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    t = torch.arange(14400) / 24000
    wav = 0.3 * torch.sin(2 * torch.pi * 190 * t) * (1 + torch.sin(2 * torch.pi * 2 * t)) / 2
    folder = write_folder(Path(root) / "tiny-v2", 2, end_bias=8.0)    # ends soon: the checks need no long run
    return Case(folder, SpeakRequest("hi", seed=5, reference={"waveform": wav[None, None], "sample_rate": 24000},
                                     reference_text="he"))


def stereo_reference(seconds: float = 1.5, rate: int = 44100) -> torch.Tensor:
    """A 44.1 kHz stereo reference [2, T] made with integer arithmetic and one division, so it is the same
    float32 bits on every machine: two sawtooth voices (~180 / ~230 Hz) under a 3 Hz triangle envelope, plus
    a little LCG noise, the channels differently weighted."""
    n = torch.arange(int(seconds * rate), dtype=torch.int64)
    saw = lambda period: (n % period) * 2 - period                      # noqa: E731  in [-period, period)
    tri = (n % 14700 - 7350).abs()                                      # 3 Hz, in [0, 7350]
    noise = (n * 1103515245 + 12345) % 2147483648 - 1073741824
    left = (saw(245) * 2 + saw(192)) * tri // 2048 + noise // 8388608
    right = (saw(245) + saw(192) * 2) * tri // 2048 - noise // 8388608
    return (torch.stack([left, right]).to(torch.float64) / 8192.0).float()

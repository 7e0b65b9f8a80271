"""Tiny Chatterbox configurations and deterministic weights, shared by the tests and by make_fixtures.py
(which runs in the reference venv, so this file needs only torch)."""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

# T3 backbone (upstream's LLAMA_CONFIGS entry) and its T3Config fields, at test size.
TINY_LLAMA = dict(vocab_size=8, max_position_embeddings=131072, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, head_dim=16, num_key_value_heads=4,
                  rms_norm_eps=1e-05, rope_theta=500000.0, tie_word_embeddings=False, hidden_act="silu",
                  attention_bias=False, mlp_bias=False, model_type="llama", attn_implementation="sdpa",
                  rope_scaling=dict(factor=8.0, high_freq_factor=4.0, low_freq_factor=1.0,
                                    original_max_position_embeddings=8192, rope_type="llama3"))
TINY_PERCEIVER = dict(pre_attention_query_token=32, pre_attention_query_size=64, embedding_dim=64, num_attn_heads=4)

T3_CASES = [  # (name, exaggeration, cfg_weight, with prompt tokens, seed)
    ("default_voice_exag05", 0.5, 0.5, True, 11),
    ("default_voice_exag09", 0.9, 0.5, True, 12),
    ("no_prompt_exag03", 0.3, 0.3, False, 13),
]
TEXT_TOKENS = [255, 12, 40, 41, 7, 300, 2, 88, 0]
MAX_NEW_TOKENS = 48


def fill(state: dict[str, torch.Tensor], seed: int = 0, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Random weights by name (sorted), the same on both sides whatever the module classes are."""
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(state[k].shape, generator=g) * scale for k in sorted(state)}


# The voice encoder's LSTM with weights of 0.5 is chaotic (a float32 rounding of one mel changes the
# embedding by 0.1): 0.04 keeps its recurrence contractive, so a recording means something across CPUs.
VE_SCALE = 0.04


def conditioning_inputs(seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """A speaker embedding [1, 256] and 20 prompt speech tokens [1, 20]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 256, generator=g), torch.randint(0, 6561, (1, 20), generator=g)


def voice_wav(seed: int = 7, seconds: float = 3.0) -> torch.Tensor:
    """16 kHz mono float32: 0.4 s of near-silence, a voiced buzz with noise, 0.5 s of near-silence."""
    g = torch.Generator().manual_seed(seed)
    n = int(seconds * 16000)
    t = torch.arange(n, dtype=torch.float64) / 16000
    f0 = 140 + 30 * torch.sin(2 * torch.pi * 1.5 * t)
    voiced = 0.3 * torch.sin(2 * torch.pi * torch.cumsum(f0, 0) / 16000) + 0.05 * torch.randn(n, generator=g,
                                                                                             dtype=torch.float64)
    env = ((t > 0.4) & (t < seconds - 0.5)).double()
    return (voiced * env + 1e-4 * torch.randn(n, generator=g, dtype=torch.float64)).float()


def tokenizer_json() -> str:
    """A tokenizer.json in the published one's form (BPE, special tokens as added tokens), letters only."""
    from tokenizers import AddedToken, Tokenizer, models
    specials = ["[STOP]", "[UNK]", "[SPACE]", "[START]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!?'\"-")
    vocab = {t: i for i, t in enumerate(specials + chars)}
    merges = [("t", "h"), ("th", "e"), ("a", "n")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="[UNK]"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    return tok.to_str()


TEXTS = ["hello there, the cat...", "", "  Many   spaces  here ", "Quotes “like” this; and – dashes: ok",
         "Ends with a question?", "ünïcode ok"]

# S3 speech tokenizer v2: Chatterbox's S3Tokenizer subclass does not pass its config on to S3TokenizerV2,
# so upstream always builds the published size; the recording is at that size (upstream ModelConfig
# fields). 0.1 keeps the projections inside tanh's live range, so the FSQ digits are not all saturated.
TINY_S3TOK = dict(n_mels=128, n_audio_state=1280, n_audio_head=20, n_audio_layer=6)
S3TOK_SCALE = 0.1

# S3Gen at test size: upstream's S3Token2Wav builds its parts with fixed arguments, so make_fixtures
# replaces the classes it calls by these partials (the names it loads by are unchanged). The encoder's
# input width must equal its output width (its up_embed takes the upsampled output): 64 for the token
# embedding too.
TINY_S3GEN = dict(
    encoder=dict(input_size=64, output_size=64, attention_heads=2, linear_units=128, num_blocks=2),
    decoder=dict(channels=[64], attention_head_dim=64, n_blocks=1, num_mid_blocks=2, num_heads=2),
    hift=dict(base_channels=64),
    f0=dict(cond_channels=64),
    campplus=dict(growth_rate=8, bn_size=2, init_channels=32),
    tokenizer=dict(n_mels=128, n_audio_state=128, n_audio_head=2, n_audio_layer=2),
)
S3GEN_TOKENS = 30        # speech tokens of the S3Gen cases (1.2 s of audio)


def exact_normal(shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Unit-variance noise that is the same on every CPU: integer draws (torch.randn's float32 Box-Muller takes
    other vectorised sin/log paths per CPU, a last-bit difference) scaled to a uniform on [-sqrt 3, sqrt 3]."""
    u = torch.randint(0, 2 ** 24, tuple(shape), generator=generator, dtype=torch.int64).double() / 2 ** 23 - 1
    return (u * 3 ** 0.5).to(dtype)


def fill_s3gen(shapes: dict[str, list[int]], seed: int = 31, exact: bool = False) -> dict[str, torch.Tensor]:
    """Random S3Gen weights by name at a well-conditioned scale (rows ~ unit norm), so the 10 Euler
    steps, the HiFT resblocks and CAM++'s batch norms stay in range: batch-norm variances positive,
    weight-norm gains near 1, the f0 head's bias at 150 Hz so the sine source is voiced, HiFT's last conv
    small so its output stays mostly below the 0.99 clip. `exact`: exact_normal draws (the float64 golden)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k in sorted(shapes):
        shape = tuple(shapes[k])
        if k.endswith("num_batches_tracked"):
            out[k] = torch.zeros(shape, dtype=torch.long)
            continue
        r = exact_normal(shape, g) if exact else torch.randn(shape, generator=g)
        if k.endswith("running_var"):
            out[k] = 1 + 0.5 * r.abs()
        elif k.endswith("f0_predictor.classifier.bias"):
            out[k] = 150 + 10 * r
        elif k.startswith("mel2wav.conv_post."):    # log-magnitudes near -1, so the audio is not all clipped
            out[k] = (0.1 if k.endswith("original0") else 1.0) * (1 + 0.1 * r) if "weight" in k else -1 + 0.1 * r
        elif k.endswith("original0") or k.endswith(".alpha") or (len(shape) == 1 and k.endswith("weight")):
            out[k] = 1 + 0.1 * r
        elif len(shape) <= 1 or k.endswith("pos_bias_u") or k.endswith("pos_bias_v"):
            out[k] = 0.1 * r
        elif "embedding" in k and len(shape) == 2:
            out[k] = r
        else:
            out[k] = r / (r[0].numel() ** 0.5)
    return out


def s3gen_tokens(seed: int = 32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 6561, (1, S3GEN_TOKENS), generator=g)


def voice_wav_24k(seed: int = 8, seconds: float = 2.0) -> torch.Tensor:
    """24 kHz mono float32 reference for S3Gen: voice_wav's recipe at 24 kHz."""
    g = torch.Generator().manual_seed(seed)
    n = int(seconds * 24000)
    t = torch.arange(n, dtype=torch.float64) / 24000
    f0 = 160 + 20 * torch.sin(2 * torch.pi * 2.0 * t)
    voiced = 0.3 * torch.sin(2 * torch.pi * torch.cumsum(f0, 0) / 24000) + 0.05 * torch.randn(n, generator=g,
                                                                                             dtype=torch.float64)
    env = ((t > 0.2) & (t < seconds - 0.3)).double()
    return (voiced * env + 1e-4 * torch.randn(n, generator=g, dtype=torch.float64)).float()


# ---- a tiny model folder in the published layout (ResembleAI/chatterbox) ----------------------------------
# The loader reads sizes from the tensor shapes with the published head width of 64, so this T3 keeps it.
FOLDER_LLAMA = dict(TINY_LLAMA, hidden_size=128, intermediate_size=256, num_attention_heads=2, head_dim=64,
                    num_key_value_heads=2)
FOLDER_PERCEIVER = dict(pre_attention_query_token=32, pre_attention_query_size=128, embedding_dim=128,
                        num_attn_heads=4)
FOLDER_T3_TOKENS = 16        # max speech tokens per request in the folder's tests (upstream: 1000)


def s3gen_shapes() -> dict[str, list[int]]:
    """Upstream S3Gen's tensor names and shapes at TINY_S3GEN (recorded in golden_s3gen.pt)."""
    from pathlib import Path
    return torch.load(Path(__file__).parent / "golden_s3gen.pt", weights_only=True)["state_shapes"]


def t3_shapes() -> dict[str, list[int]]:
    """T3's upstream names at FOLDER_LLAMA (our T3 has upstream's names: test_t3 checks them)."""
    from mizuoto.nodes.chatterbox.t3 import T3, T3Config
    c = FOLDER_LLAMA
    with torch.device("meta"):
        model = T3(T3Config(hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                            num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                            num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"]))
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def ve_shapes() -> dict[str, list[int]]:
    from mizuoto.nodes.chatterbox.voice_encoder import VoiceEncoder
    with torch.device("meta"):
        return {k: list(v.shape) for k, v in VoiceEncoder().state_dict().items()}


def builtin_conds(seed: int = 33) -> dict:
    """conds.pt's content in upstream's form (Conditionals.save: t3 = T3Cond.__dict__, gen = ref_dict)."""
    g = torch.Generator().manual_seed(seed)
    mel = torch.load(__import__("pathlib").Path(__file__).parent / "golden_s3gen.pt", weights_only=True)
    prompt_token = mel["prompt_token"][:, :20]
    return {"t3": {"speaker_emb": torch.nn.functional.normalize(torch.randn(1, 256, generator=g), dim=1),
                   "clap_emb": None,
                   "cond_prompt_speech_tokens": torch.randint(0, 6561, (1, 24), generator=g),
                   "cond_prompt_speech_emb": None, "emotion_adv": 0.5 * torch.ones(1, 1, 1)},
            "gen": {"prompt_token": prompt_token, "prompt_token_len": torch.tensor([20]),
                    "prompt_feat": mel["prompt_feat"][:, :40].clone(), "prompt_feat_len": None,
                    "embedding": mel["embedding"].clone()}}


def write_folder(root) -> "Path":
    """t3_cfg / s3gen / ve .safetensors, tokenizer.json and conds.pt with tiny random weights by name."""
    from pathlib import Path

    from safetensors.torch import save_file
    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    t3 = {k: torch.randn(v, generator=torch.Generator().manual_seed(i)) * 0.5 for i, (k, v) in
          enumerate(sorted(t3_shapes().items()))}
    save_file({k: v.contiguous() for k, v in t3.items()}, str(folder / "t3_cfg.safetensors"))
    save_file({k: v.contiguous() for k, v in fill_s3gen(s3gen_shapes()).items()}, str(folder / "s3gen.safetensors"))
    g = torch.Generator().manual_seed(3)
    ve = {k: torch.randn(v, generator=g) * VE_SCALE for k, v in sorted(ve_shapes().items())}
    save_file(ve, str(folder / "ve.safetensors"))
    (folder / "tokenizer.json").write_text(tokenizer_json())
    torch.save(builtin_conds(), folder / "conds.pt")
    return folder


def conformance_case(root) -> "Case":
    from pathlib import Path

    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_folder(Path(root) / "chatterbox")
    return Case(folder, SpeakRequest("Hello there.", seed=3, options={"max_new_tokens": FOLDER_T3_TOKENS}))


# ---- the Speak-pipeline cases against ChatterboxTTS.generate (make_fixtures.py pipeline) ------------------
PIPELINE_TEXT = "hello there, the cat..."
PIPELINE_CASES = [  # (name, exaggeration, with the 44.1 kHz stereo reference, seed); the reference case last
    ("default_voice_exag05", 0.5, False, 21),
    ("default_voice_exag09", 0.9, False, 22),
    ("stereo_44k_exag07", 0.7, True, 23),
]


def stereo_reference(seed: int = 12, seconds: float = 2.0) -> torch.Tensor:
    """[2, T] at 44.1 kHz: voice_wav's recipe, the right channel 0.8 x the left plus its own noise."""
    g = torch.Generator().manual_seed(seed)
    n = int(seconds * 44100)
    t = torch.arange(n, dtype=torch.float64) / 44100
    f0 = 130 + 25 * torch.sin(2 * torch.pi * 1.7 * t)
    voiced = 0.3 * torch.sin(2 * torch.pi * torch.cumsum(f0, 0) / 44100)
    env = ((t > 0.25) & (t < seconds - 0.3)).double()
    left = voiced * env + 0.03 * torch.randn(n, generator=g, dtype=torch.float64) * env
    right = 0.8 * left + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64)
    return torch.stack([left, right]).float()


# ---- a tiny Chatterbox Multilingual folder (ChatterboxMultilingualTTS.from_local's files) -----------------
# The alignment guard reads heads (12, 15), (13, 11), (9, 2): 14 layers of 16 heads at the published head
# width of 64; the hidden size stays 64 (q/o project 64 <-> 1024) and 2 key/value heads keep it small.
MTL_LLAMA = dict(TINY_LLAMA, hidden_size=64, intermediate_size=128, num_hidden_layers=14, num_attention_heads=16,
                 head_dim=64, num_key_value_heads=2)
MTL_PERCEIVER = dict(pre_attention_query_token=32, pre_attention_query_size=64, embedding_dim=64, num_attn_heads=4)
MTL_LANGUAGE_TAGS = ["ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja", "ko", "ms", "nl", "no",
                     "pl", "pt", "ru", "sv", "sw", "tr", "zh"]
# Cangjie5_TC.json's form ("glyph<TAB>code"); 仲 and 中 share no code, 吅 and 叩 share "rr" (index 1)
CANGJIE = ["你\tonf", "好\tvnd", "我\thqi", "是\tamyo", "中\tl", "文\tyk", "仲\tol", "吅\trr", "叩\trr", "們\toan"]
MTL_TEXTS = [("fr", "Bonjour, ça va très bien"), ("de", "Grüße aus München!"), ("ko", "안녕하세요 여러분"),
             ("ko", "  한국어 텍스트  "), ("he", "שלום עולם"), ("ru", "Привет, мир"), ("en", "Hello there"),
             (None, "No language tag"), ("fr", "")]
# Japanese (pykakasi, a chatterbox-tts dependency): kanji phrases to hiragana, は/へ after kanji, katakana kept
JA_TEXTS = ["今日は良い天気です。", "東京へ行きます", "カタカナとひらがなと漢字", "日本語のテキスト、ＡＢＣ１２３"]
CANGJIE_TEXTS = ["你好，我是中文。", "仲叩吅們 abc", "ひらがな混じり中文"]
MTL_PIPELINE_CASES = [  # (name, language, text, exaggeration, seed, other generate options, with the 44.1 kHz
    # stereo reference): the built-in voice, then the reference case last (upstream's prepare_conditionals
    # replaces the built-in voice)
    ("fr_exag05", "fr", "Bonjour, ça va très bien", 0.5, 41, {}, False),
    ("ko_exag07", "ko", "안녕하세요 여러분, 반갑습니다", 0.7, 42, {}, False),
    # a short text drawn near-greedily: the guard sees the alignment complete, then forces the stop token on
    # one speech token drawn twice in a row (at the 11th token)
    ("fr_forced_stop", "fr", "Oui non", 0.5, 5, {"temperature": 0.3, "repetition_penalty": 1.0}, False),
    # pykakasi 2.3.0 on both sides (kanji to hiragana, は after kanji)
    ("ja_exag05", "ja", "今日は良い天気です", 0.5, 43, {}, False),
    # spacy-pkuseg 1.0.2 on both sides with PKUSEG_TINY's model (segmentation adds [SPACE] between words)
    ("zh_exag06", "zh", "你好，我是中文。", 0.6, 44, {}, False),
    ("fr_stereo_44k_exag07", "fr", "Bonjour, ça va très bien", 0.7, 45, {}, True),
]
# spacy-pkuseg's published spacy_ontonotes model is a GitHub release asset, out of reach here: the tiny folder's
# spacy_ontonotes/ is a model spacy-pkuseg 1.0.2 trains on these lines (make_fixtures.py pkuseg_tiny writes
# pkuseg_tiny/features.msgpack and weights.npz), so the pipeline's Chinese case runs spacy-pkuseg itself on both
# sides; it says nothing about how the published model segments.
PKUSEG_TRAIN = ["你好  中文", "我  是  中文", "你们  好", "中国  人"] * 12
PKUSEG_TINY = ("features.msgpack", "weights.npz")


def mtl_tokenizer_json() -> str:
    """grapheme_mtl_merged_expanded_v1.json's form: BPE over lowercase letters, NFKD's combining marks, Hangul
    jamo and kana, with the special, language-tag and Cangjie tokens as added tokens."""
    from tokenizers import AddedToken, Tokenizer, models
    specials = ["[STOP]", "[UNK]", "[SPACE]", "[START]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"]
    added = specials + [f"[{t}]" for t in MTL_LANGUAGE_TAGS] + [f"[cj_{c}]" for c in "abcdefghijklmnopqrstuvwxyz."]
    chars = list("abcdefghijklmnopqrstuvwxyz.,!?'\"-、，。？！") + [chr(c) for c in (0x300, 0x301, 0x302, 0x308, 0x327)]
    chars += [chr(c) for c in range(0x1100, 0x1113)] + [chr(c) for c in range(0x1161, 0x1176)]
    chars += [chr(c) for c in range(0x11A8, 0x11C3)] + [chr(c) for c in range(0x3041, 0x3097)]
    chars += [chr(c) for c in range(0x5D0, 0x5EB)] + [chr(c) for c in range(0x430, 0x450)]
    vocab = {t: i for i, t in enumerate(added + chars)}
    merges = [("o", "n"), ("e", "n"), ("b", "on")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="[UNK]"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in added])
    return tok.to_str()


def mtl_t3_shapes() -> dict[str, list[int]]:
    from mizuoto.nodes.chatterbox.t3 import T3, T3Config
    c = MTL_LLAMA
    with torch.device("meta"):
        model = T3(T3Config(hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                            num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                            num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
                            text_tokens_dict_size=2454))
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def write_mtl_folder(root) -> "Path":
    """t3_mtl23ls_v2.safetensors, s3gen.pt (with the S3 tokenizer's mel filters and window, which upstream's
    strict load wants), ve.pt, the grapheme tokenizer, conds.pt, Cangjie5_TC.json and spacy_ontonotes/ (the
    tiny pkuseg model, see PKUSEG_TRAIN); tiny random weights."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    from mizuoto.nodes.blocks.mel import slaney_filters
    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    t3 = {k: torch.randn(v, generator=torch.Generator().manual_seed(100 + i)) * 0.5 for i, (k, v) in
          enumerate(sorted(mtl_t3_shapes().items()))}
    # upstream's multilingual generate passes ids above the stop token on to S3Gen, which fails on them (the
    # trained model never draws them): zero rows give them a logit of 0, far under min-p's cut here
    t3["speech_head.weight"][6563:] = 0
    save_file({k: v.contiguous() for k, v in t3.items()}, str(folder / "t3_mtl23ls_v2.safetensors"))
    s3gen = fill_s3gen(s3gen_shapes(), seed=34)
    s3gen["tokenizer._mel_filters"] = slaney_filters(16000, 400, 128).float().contiguous()
    s3gen["tokenizer.window"] = torch.hann_window(400)
    torch.save(s3gen, folder / "s3gen.pt")
    g = torch.Generator().manual_seed(4)
    torch.save({k: torch.randn(v, generator=g) * VE_SCALE for k, v in sorted(ve_shapes().items())}, folder / "ve.pt")
    (folder / "grapheme_mtl_merged_expanded_v1.json").write_text(mtl_tokenizer_json())
    torch.save(builtin_conds(), folder / "conds.pt")
    (folder / "Cangjie5_TC.json").write_text(json.dumps(CANGJIE, ensure_ascii=False))
    (folder / "spacy_ontonotes").mkdir(exist_ok=True)
    for name in PKUSEG_TINY:
        (folder / "spacy_ontonotes" / name).write_bytes((Path(__file__).parent / "pkuseg_tiny" / name).read_bytes())
    return folder


@contextlib.contextmanager
def loaded(folder: Path):
    """The folder (<models>/chatterbox/<name>) through the loader node in the default precision."""
    import pytest   # here, not at the top: make_fixtures.py imports this module in the reference venv

    from mizuoto.nodes import NODE_CLASS_MAPPINGS
    from mizuoto.nodes.chatterbox import ENGINE
    from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
    with pytest.MonkeyPatch.context() as mp, use_runtime(build_runtime()):
        mp.setenv("MIZUOTO_MODELS_DIR", str(folder.parent.parent))
        (model,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load(folder.name, ENGINE.precisions[0], "auto")
        yield model


def record_speech_tokens(monkeypatch) -> list[list[int]]:
    """The list every speech-token draw of the engine is appended to from now on."""
    from mizuoto.nodes.chatterbox.phases import ChatterboxEngine
    drawn: list[list[int]] = []
    speech_tokens = ChatterboxEngine.speech_tokens

    def record(self, *args, **kwargs):
        drawn.append(speech_tokens(self, *args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(ChatterboxEngine, "speech_tokens", record)
    return drawn

"""Records the golden files of tests/chatterbox from upstream `chatterbox-tts==0.1.7` (run in the reference
venv, see README.md): `$CHATTERBOX_REF_PYTHON tests/chatterbox/make_fixtures.py` (T3, text, voice encoder),
`... make_fixtures.py s3tokenizer` (golden_s3tok.json), `... make_fixtures.py s3gen` (golden_s3gen.pt)."""
from __future__ import annotations

import contextlib
import functools
import json
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny  # noqa: E402

# chatterbox/__init__ imports its watermarker (resemble-perth), which the parity runs leave off: an empty
# module stands in for it on the reference side only.
sys.modules.setdefault("perth", types.ModuleType("perth"))


def bare_package(name: str) -> None:
    """Import `name` without running its __init__ (chatterbox's pulls in torchaudio, which has no build for
    this torch; the parts recorded here do not use it)."""
    import importlib.util
    spec = importlib.util.find_spec(name)
    pkg = types.ModuleType(name)
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec          # find_spec(name) (transformers asks for torchaudio) sees a package
    sys.modules[name] = pkg


bare_package("chatterbox")


def torchaudio_without_extension() -> None:
    """torchaudio 2.11's compiled extension has no build for this torch; its resamplers and Kaldi fbank are
    plain torch, so the package is imported without __init__ and with the extension module stubbed (its
    flags say "not available", its decorators pass functions through)."""
    import importlib.machinery
    bare_package("torchaudio")
    ext = types.ModuleType("torchaudio._extension")
    ext.__spec__ = importlib.machinery.ModuleSpec("torchaudio._extension", None)
    ext._IS_TORCHAUDIO_EXT_AVAILABLE = False
    ext._IS_ALIGN_AVAILABLE = False

    def passthrough(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: a[0] if a and callable(a[0]) else None

    ext.__getattr__ = passthrough
    sys.modules["torchaudio._extension"] = ext
    import torchaudio.compliance.kaldi  # noqa: F401
    import torchaudio.functional  # noqa: F401
    import torchaudio.transforms  # noqa: F401
    ta = sys.modules["torchaudio"]
    ta.transforms, ta.functional = sys.modules["torchaudio.transforms"], sys.modules["torchaudio.functional"]
    ta.compliance = sys.modules["torchaudio.compliance"]


torchaudio_without_extension()


def upstream_t3():
    from chatterbox.models.t3 import llama_configs, t3
    from chatterbox.models.t3.modules import cond_enc
    from chatterbox.models.t3.modules.perceiver import Perceiver
    from chatterbox.models.t3.modules.t3_config import T3Config
    llama_configs.LLAMA_CONFIGS["tiny"] = tiny.TINY_LLAMA
    cond_enc.Perceiver = functools.partial(Perceiver, **tiny.TINY_PERCEIVER)
    hp = T3Config.english_only()
    hp.llama_config_name = "tiny"
    model = t3.T3(hp).eval()
    model.load_state_dict(tiny.fill(model.state_dict()))
    return model


def t3_tokens(model, name: str, exaggeration: float, cfg: float, with_prompt: bool, seed: int) -> list[int]:
    from chatterbox.models.t3.modules.cond_enc import T3Cond
    spk, prompt = tiny.conditioning_inputs()
    cond = T3Cond(speaker_emb=spk, cond_prompt_speech_tokens=prompt if with_prompt else None,
                  emotion_adv=exaggeration * torch.ones(1, 1, 1))
    text = torch.tensor([tiny.TEXT_TOKENS] * 2)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.inference(t3_cond=cond, text_tokens=text, max_new_tokens=tiny.MAX_NEW_TOKENS, temperature=0.8,
                              cfg_weight=cfg, repetition_penalty=1.2, min_p=0.05, top_p=0.95)
    return out[0].tolist()


def real_size_shapes() -> dict[str, dict[str, list[int]]]:
    """Upstream's published T3 (English and multilingual), built on `meta`: names and shapes only."""
    from chatterbox.models.t3 import t3
    from chatterbox.models.t3.modules.t3_config import T3Config
    from chatterbox.models.t3.modules import cond_enc
    from chatterbox.models.t3.modules.perceiver import Perceiver
    cond_enc.Perceiver = Perceiver          # the published sizes, not the tiny ones
    out = {}
    for name, hp in (("english", T3Config.english_only()), ("multilingual", T3Config.multilingual())):
        with torch.device("meta"):
            model = t3.T3(hp)
        out[name] = {k: list(v.shape) for k, v in model.state_dict().items()}
    return out


def voice_encoder_case() -> dict:
    """Upstream VoiceEncoder (published size, weights by name) on tiny.voice_wav at 16 kHz, as
    `prepare_conditionals` calls it, plus the LSTM alone on fixed partials."""
    import librosa
    from chatterbox.models.voice_encoder import VoiceEncoder
    ve = VoiceEncoder().eval()
    ve.load_state_dict(tiny.fill(ve.state_dict(), seed=3, scale=tiny.VE_SCALE))
    wav = tiny.voice_wav().numpy()
    trimmed = librosa.effects.trim(wav, top_db=20)[0]
    emb = ve.embeds_from_wavs([wav], sample_rate=16000)
    g = torch.Generator().manual_seed(4)
    partials = torch.rand(3, 160, 40, generator=g)
    with torch.inference_mode():
        lstm = ve(partials)
    return {"trimmed_samples": int(trimmed.shape[0]), "embedding": emb.mean(axis=0).tolist(),
            "lstm_embeddings": lstm.tolist()}


def text_case(tmp: Path) -> dict:
    """Upstream punc_norm (taken from tts.py's source: importing tts.py needs torchaudio) and EnTokenizer."""
    import ast
    import importlib.util
    from chatterbox.models.tokenizers.tokenizer import EnTokenizer
    source = Path(sys.modules["chatterbox"].__path__[0], "tts.py").read_text()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "punc_norm")
    scope: dict = {}
    exec(compile(ast.Module([fn], []), "tts.py", "exec"), scope)
    path = tmp / "tokenizer.json"
    path.write_text(tiny.tokenizer_json())
    tok = EnTokenizer(str(path))
    return {t: {"norm": scope["punc_norm"](t), "ids": tok.encode(scope["punc_norm"](t))} for t in tiny.TEXTS}


def s3_tokenizer_case() -> dict:
    """Upstream's S3Tokenizer (Chatterbox's S3TokenizerV2 subclass with its own log-mel) at test size on
    tiny.voice_wav, as prepare_conditionals calls it (max_len = 150 tokens) and without a cut; plus the
    FSQ projection before rounding, to state how far each digit is from a rounding edge."""
    from chatterbox.models.s3tokenizer import S3Tokenizer
    from s3tokenizer.model_v2 import ModelConfig
    tok = S3Tokenizer("speech_tokenizer_v2_25hz", ModelConfig(**tiny.TINY_S3TOK)).eval()
    state = {k: v for k, v in tok.state_dict().items() if k not in ("_mel_filters", "window")}
    tok.load_state_dict(tiny.fill(state, seed=21, scale=tiny.S3TOK_SCALE), strict=False)
    wav = tiny.voice_wav()
    out = {"state_shapes": {k: list(v.shape) for k, v in state.items()}}
    with torch.inference_mode():
        for name, max_len in (("full", None), ("max_len_40", 40)):
            tokens, lens = tok.forward([wav.numpy()], max_len=max_len)
            out[name] = {"tokens": tokens[0].tolist(), "len": int(lens[0])}
        mel = tok.log_mel_spectrogram(wav[None])
        hidden, _ = tok.encoder(mel, torch.tensor([mel.shape[-1]]))
        h = tok.quantizer._codebook.project_down(hidden).float().tanh() * 0.9990000128746033
    out["edge_margin"] = float(((h.abs() - 0.5).abs()).min())
    return out


def forcing(cls, overrides: dict):
    """`cls` called with `overrides` replacing whatever arguments upstream passes for those names."""
    def make(*args, **kwargs):
        return cls(*args, **{**kwargs, **overrides})
    return make


@contextlib.contextmanager
def tiny_s3gen_classes():
    """While open, upstream's S3Token2Wav() builds tiny.TINY_S3GEN: its parts are built with fixed arguments
    inside S3Token2Mel.__init__, so the classes it calls are replaced by makers forcing the tiny sizes (and
    the 512 the encoder writes for its lookahead and upsampling layers); its S3 tokenizer always takes
    s3tokenizer's default ModelConfig, so that default is the tiny one."""
    from chatterbox.models.s3gen import s3gen as m
    from chatterbox.models.s3gen.transformer import upsample_encoder as ue
    from chatterbox.models.s3tokenizer import s3tokenizer as cs3
    from s3tokenizer import model_v2
    t = tiny.TINY_S3GEN
    saved = {name: getattr(m, name) for name in ("UpsampleConformerEncoder", "ConditionalDecoder", "CAMPPlus",
                                                 "HiFTGenerator", "ConvRNNF0Predictor", "CausalMaskedDiffWithXvec")}
    inner = {name: getattr(ue, name) for name in ("PreLookaheadLayer", "Upsample1D")}
    defaults = (model_v2.S3TokenizerV2.__init__.__defaults__, cs3.S3Tokenizer.__init__.__defaults__)
    m.UpsampleConformerEncoder = forcing(saved["UpsampleConformerEncoder"], t["encoder"])
    m.ConditionalDecoder = forcing(saved["ConditionalDecoder"], t["decoder"])
    m.CAMPPlus = forcing(saved["CAMPPlus"], t["campplus"])
    m.HiFTGenerator = forcing(saved["HiFTGenerator"], t["hift"])
    m.ConvRNNF0Predictor = forcing(saved["ConvRNNF0Predictor"], t["f0"])
    m.CausalMaskedDiffWithXvec = forcing(saved["CausalMaskedDiffWithXvec"], {"input_size": t["encoder"]["input_size"]})
    width = t["encoder"]["output_size"]
    ue.PreLookaheadLayer = forcing(inner["PreLookaheadLayer"], {"channels": width})
    ue.Upsample1D = forcing(inner["Upsample1D"], {"channels": width, "out_channels": width})
    model_v2.S3TokenizerV2.__init__.__defaults__ = (model_v2.ModelConfig(**t["tokenizer"]),)
    cs3.S3Tokenizer.__init__.__defaults__ = ("speech_tokenizer_v2_25hz", model_v2.ModelConfig(**t["tokenizer"]))
    try:
        yield
    finally:
        for name, cls in saved.items():
            setattr(m, name, cls)
        for name, cls in inner.items():
            setattr(ue, name, cls)
        model_v2.S3TokenizerV2.__init__.__defaults__, cs3.S3Tokenizer.__init__.__defaults__ = defaults


def upstream_s3gen(exact: bool = False):
    """Upstream's S3Token2Wav (S3Gen) at tiny.TINY_S3GEN, weights tiny.fill_s3gen(exact=exact) by name."""
    from chatterbox.models.s3gen import s3gen as m
    with tiny_s3gen_classes():
        model = m.S3Token2Wav().eval()
    shapes = {k: list(v.shape) for k, v in model.state_dict().items() if k not in model.ignore_state_dict_missing}
    missing, unexpected = model.load_state_dict(tiny.fill_s3gen(shapes, exact=exact), strict=False)
    assert sorted(missing) == sorted(model.ignore_state_dict_missing) and not unexpected, (missing, unexpected)
    return model, shapes


def s3gen_case() -> dict:
    """S3Gen as ChatterboxTTS uses it: embed_ref on a 24 kHz reference (mel, CAM++ x-vector after
    torchaudio's resampler, prompt tokens), the flow (noise = randn_like(mu) after manual_seed), HiFT
    (after manual_seed) and the whole inference with its trim fade (after manual_seed), float32."""
    model, shapes = upstream_s3gen()
    wav = tiny.voice_wav_24k()
    tokens = tiny.s3gen_tokens()
    with torch.inference_mode():
        ref = model.embed_ref(wav, 24000)
        recorded = {k: ref[k].clone() for k in ("prompt_token", "prompt_feat", "embedding")}  # forward casts ref
        torch.manual_seed(41)
        mel = model.flow_inference(tokens, ref_dict=ref, finalize=True)
        torch.manual_seed(42)
        hift, _ = model.hift_inference(mel, None)
        torch.manual_seed(43)
        full, _ = model.inference(tokens, ref_dict=ref)
    return {"upstream": "chatterbox-tts==0.1.7", "state_shapes": shapes,
            **recorded, "flow_mel": mel.clone(), "hift_wav": hift.clone(),
            "wav": full.clone()}


def s3gen64_case() -> dict:
    """The flow run in float64 by upstream's own code (as tests/cosyvoice/make_fixtures.py float64_run): the
    modules `.double()` with weights that are the same on every CPU (tiny.fill_s3gen(exact=True)), the recorded
    float32 reference of golden_s3gen.pt cast to float64, the flow's randn_like(mu) replaced by
    tiny.exact_normal float64 noise, and no float32 left: every `.float()` gives float64 (the
    timestep embedding's `arange(half).float()` frequencies, the casts of results), `mask_to_bias` accepts
    float64 (its body unchanged), the ESPnet relative positional tables (float32 aranges at construction) are
    remade in float64 by the same code. HiFT has no float64 run upstream (its sine source builds float32
    tensors that its linear layer then refuses): only the mel is recorded."""
    import inspect
    import textwrap

    from chatterbox.models.s3gen import decoder
    from chatterbox.models.s3gen.transformer import embedding

    def mask_to_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        assert mask.dtype == torch.bool
        return (1.0 - mask.to(dtype)) * -1.0e+10

    src = textwrap.dedent(inspect.getsource(embedding.EspnetRelPositionalEncoding.extend_pe))
    for old, new in (("dtype=torch.float32", "dtype=x.dtype"),
                     ("torch.zeros(x.size(1), self.d_model)", "torch.zeros(x.size(1), self.d_model, dtype=x.dtype)")):
        assert old in src, old
        src = src.replace(old, new)
    scope: dict = {}
    exec(src, vars(embedding), scope)
    model, _ = upstream_s3gen(exact=True)
    model = model.double()
    for m in model.modules():
        if isinstance(m, embedding.EspnetRelPositionalEncoding):
            length = (m.pe.size(1) + 1) // 2
            m.pe = None
            scope["extend_pe"](m, torch.zeros(1, length, dtype=torch.float64))
    rec = torch.load(Path(__file__).parent / "golden_s3gen.pt", weights_only=True)
    ref = {"prompt_token": rec["prompt_token"], "prompt_token_len": torch.tensor([rec["prompt_token"].shape[1]]),
           "prompt_feat": rec["prompt_feat"].double(), "prompt_feat_len": None,
           "embedding": rec["embedding"].double()}
    tokens = tiny.s3gen_tokens()
    noise = tiny.exact_normal((1, 80, 2 * (ref["prompt_token"].shape[1] + tokens.shape[1])),
                              torch.Generator().manual_seed(41), torch.float64)
    drawn = []

    def randn_like(x, *args, **kwargs):      # the flow's one draw: the CPU-independent noise
        assert x.shape == noise.shape and x.dtype == torch.float64, (x.shape, x.dtype)
        drawn.append(1)
        return noise.clone()

    saved = torch.Tensor.float, decoder.mask_to_bias, torch.randn_like
    torch.Tensor.float, decoder.mask_to_bias = (lambda self, *a, **k: self.double(*a, **k)), mask_to_bias
    torch.randn_like = randn_like
    try:
        with torch.inference_mode():
            mel = model.flow_inference(tokens, ref_dict=ref, finalize=True)
    finally:
        torch.Tensor.float, decoder.mask_to_bias, torch.randn_like = saved
    assert mel.dtype == torch.float64 and drawn == [1], (mel.dtype, drawn)
    return {"upstream": "chatterbox-tts==0.1.7", "flow_mel": mel.clone()}


def real_s3gen_shapes() -> dict[str, list[int]]:
    """Upstream's published S3Gen (S3Token2Wav(), fixed sizes) built on `meta`: names and shapes only, as
    s3gen.safetensors holds them (weight norm unfolded; the tokenizer's mel filters and window left out)."""
    from chatterbox.models.s3gen import s3gen as m
    with torch.device("meta"):
        model = m.S3Token2Wav()
    return {k: list(v.shape) for k, v in model.state_dict().items() if k not in model.ignore_state_dict_missing}


class NoWatermark:
    """perth.PerthImplicitWatermarker with the watermark off: the audio as it came."""

    def apply_watermark(self, wav, sample_rate):
        return wav


def pipeline_case(folder: Path) -> dict:
    """Upstream `ChatterboxTTS.from_local(folder).generate(...)` on tiny.write_folder's files, watermark off,
    T3.inference's max_new_tokens forced to tiny.FOLDER_T3_TOKENS (generate passes 1000): the built-in voice
    at two exaggerations, then a 44.1 kHz stereo reference file (prepare_conditionals replaces the built-in
    voice, so it comes last). torch.manual_seed(seed) before each generate, as a user does."""
    import soundfile
    from chatterbox.models.t3 import llama_configs, t3
    from chatterbox.models.t3.modules import cond_enc
    from chatterbox.models.t3.modules.perceiver import Perceiver
    sys.modules["perth"].PerthImplicitWatermarker = NoWatermark
    llama_configs.LLAMA_CONFIGS["Llama_520M"] = tiny.FOLDER_LLAMA
    cond_enc.Perceiver = functools.partial(Perceiver, **tiny.FOLDER_PERCEIVER)
    drawn: list[list[int]] = []
    inference = t3.T3.inference

    def capped(self, *args, **kwargs):
        out = inference(self, *args, **{**kwargs, "max_new_tokens": tiny.FOLDER_T3_TOKENS})
        drawn.append(out[0].tolist())
        return out

    t3.T3.inference = capped
    from chatterbox.tts import ChatterboxTTS
    with tiny_s3gen_classes():
        model = ChatterboxTTS.from_local(folder, "cpu")
    reference = folder.parent / "reference_44k_stereo.wav"
    soundfile.write(str(reference), tiny.stereo_reference().T.numpy(), 44100, subtype="FLOAT")
    out = {}
    for name, exaggeration, use_reference, seed in tiny.PIPELINE_CASES:
        torch.manual_seed(seed)
        wav = model.generate(tiny.PIPELINE_TEXT, exaggeration=exaggeration,
                             audio_prompt_path=str(reference) if use_reference else None)
        out[name] = {"tokens": drawn[-1], "wav": wav[0].clone()}
    return out


def mtl_text_case(folder: Path) -> dict:
    """Upstream MTLTokenizer on the tiny grapheme tokenizer, as installed without the optional packages
    (no dicta-onnx, russian-text-stresser; spacy-pkuseg absent here too, so the Cangjie conversion is
    recorded unsegmented), and the multilingual punc_norm."""
    from chatterbox import mtl_tts
    from chatterbox.models.tokenizers import tokenizer as tk
    tk.hf_hub_download = lambda repo_id, filename, cache_dir=None: str(Path(cache_dir) / filename)
    sys.modules["spacy_pkuseg"] = None       # as recorded first: without spacy-pkuseg (import fails, as absent)
    mtl = tk.MTLTokenizer(str(folder / "grapheme_mtl_merged_expanded_v1.json"))
    assert mtl.cangjie_converter.segmenter is None and mtl.cangjie_converter.word2cj
    cases = [{"language": lang, "text": text, "norm": mtl_tts.punc_norm(text),
              "ids": mtl.encode(mtl_tts.punc_norm(text), language_id=lang)} for lang, text in tiny.MTL_TEXTS]
    cangjie = [{"text": t, "out": mtl.cangjie_converter(t)} for t in tiny.CANGJIE_TEXTS]
    import pykakasi  # noqa: F401  (pykakasi==2.3.0, chatterbox-tts's pin: Japanese is recorded with it)
    ja = [{"text": t, "kana": tk.hiragana_normalize(mtl.preprocess_text(t)),
           "ids": mtl.encode(mtl_tts.punc_norm(t), language_id="ja")} for t in tiny.JA_TEXTS]
    return {"upstream": "chatterbox-tts==0.1.7", "encode": cases, "cangjie": cangjie, "ja": ja}


def pkuseg_tiny() -> Path:
    """tests/chatterbox/pkuseg_tiny/: the model spacy-pkuseg 1.0.2 trains on tiny.PKUSEG_TRAIN (its own trainer,
    5 iterations), which tiny.write_mtl_folder copies into spacy_ontonotes/. Not bit-reproducible (the trainer
    shuffles without a seed): the committed files are the model golden_mtl_pipeline.pt was recorded with."""
    import os
    import shutil
    import tempfile

    import spacy_pkuseg
    out = Path(__file__).parent / "pkuseg_tiny"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.utf8"
        data.write_text("\n".join(tiny.PKUSEG_TRAIN) + "\n", encoding="utf-8")
        cwd = os.getcwd()
        os.chdir(tmp)                       # the trainer writes its scratch files under the working directory
        try:
            spacy_pkuseg.train(str(data), str(data), str(Path(tmp) / "model"), train_iter=5)
        finally:
            os.chdir(cwd)
        out.mkdir(exist_ok=True)
        for name in tiny.PKUSEG_TINY:
            shutil.copyfile(Path(tmp) / "model" / name, out / name)
    return out


def mtl_pipeline_case(folder: Path) -> dict:
    """Upstream `ChatterboxMultilingualTTS.from_local(folder).generate(text, language_id=...)` on
    tiny.write_mtl_folder's files (the built-in voice; the last case a 44.1 kHz stereo reference file), watermark
    off, T3.inference's max_new_tokens forced to tiny.FOLDER_T3_TOKENS; torch.manual_seed(seed) before each
    generate. Upstream's `pkuseg()` (which downloads spacy_ontonotes) reads the folder's spacy_ontonotes/."""
    import soundfile
    import spacy_pkuseg
    spacy_pkuseg.pkuseg = functools.partial(spacy_pkuseg.pkuseg, model_name=str(folder / "spacy_ontonotes"))
    from chatterbox.models.t3 import llama_configs, t3
    from chatterbox.models.t3.modules import cond_enc
    from chatterbox.models.t3.modules.perceiver import Perceiver
    from chatterbox.models.tokenizers import tokenizer as tk
    tk.hf_hub_download = lambda repo_id, filename, cache_dir=None: str(Path(cache_dir) / filename)
    sys.modules["perth"].PerthImplicitWatermarker = NoWatermark
    llama_configs.LLAMA_CONFIGS["Llama_520M"] = tiny.MTL_LLAMA
    cond_enc.Perceiver = functools.partial(Perceiver, **tiny.MTL_PERCEIVER)
    drawn: list[list[int]] = []
    inference = t3.T3.inference

    def capped(self, *args, **kwargs):
        out = inference(self, *args, **{**kwargs, "max_new_tokens": tiny.FOLDER_T3_TOKENS})
        drawn.append(out[0].tolist())
        return out

    t3.T3.inference = capped
    from chatterbox.mtl_tts import ChatterboxMultilingualTTS
    with tiny_s3gen_classes():
        model = ChatterboxMultilingualTTS.from_local(folder, "cpu")
    assert model.tokenizer.cangjie_converter.segmenter is not None
    reference = folder.parent / "reference_44k_stereo.wav"
    soundfile.write(str(reference), tiny.stereo_reference().T.numpy(), 44100, subtype="FLOAT")
    out = {}
    for name, language, text, exaggeration, seed, options, use_reference in tiny.MTL_PIPELINE_CASES:
        torch.manual_seed(seed)
        wav = model.generate(text, language_id=language, exaggeration=exaggeration,
                             audio_prompt_path=str(reference) if use_reference else None, **options)
        out[name] = {"tokens": drawn[-1], "wav": wav[0].clone()}
    return out


def keep_recorded(new: dict, path: Path) -> dict:
    """The cases `path` already holds keep their recorded values (from the machine that recorded them, the
    golden the tests bound against) when their tokens are drawn again here; their audio difference is printed."""
    if not path.is_file():
        return new
    old = torch.load(path, weights_only=True)
    for name, case in old.items():
        if name in new:
            assert new[name]["tokens"] == case["tokens"], f"{name}: tokens differ from {path}"
            print(f"{name}: kept; audio max-abs difference from this recording "
                  f"{(new[name]['wav'] - case['wav']).abs().max().item():.3g}")
            new[name] = case
    return new


def main() -> None:
    import tempfile
    if sys.argv[1:2] in (["mtl_pipeline"], ["mtl_text"]):
        # mtl_pipeline|mtl_text FOLDER [OUT]: FOLDER written by tiny.write_mtl_folder in the project's venv
        folder = Path(sys.argv[2])
        if sys.argv[1] == "mtl_text":
            path = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(__file__).parent / "golden_mtl_text.json"
            path.write_text(json.dumps(mtl_text_case(folder), ensure_ascii=False, indent=0) + "\n")
        else:
            golden = Path(__file__).parent / "golden_mtl_pipeline.pt"
            path = Path(sys.argv[3]) if len(sys.argv) > 3 else golden
            torch.set_num_threads(1)
            cases = mtl_pipeline_case(folder)
            torch.save(keep_recorded(cases, golden) if path == golden else cases, path)
        print(path)
        return
    if sys.argv[1:] == ["pkuseg_tiny"]:
        print(pkuseg_tiny())
        return
    if sys.argv[1:] == ["real_s3gen"]:
        path = Path(__file__).parent / "real_s3gen.json"
        path.write_text(json.dumps(real_s3gen_shapes(), indent=0) + "\n")
        print(path)
        return
    if sys.argv[1:2] == ["pipeline"]:
        # pipeline FOLDER [OUT]: FOLDER written by tiny.write_folder in the project's venv (it builds the
        # T3 names with our classes), e.g. python -c "import tiny; tiny.write_folder('/tmp/cb/chatterbox')"
        folder = Path(sys.argv[2])
        path = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(__file__).parent / "golden_pipeline.pt"
        torch.set_num_threads(1)
        torch.save(pipeline_case(folder), path)
        print(path)
        return
    if sys.argv[1:2] == ["s3gen64"]:   # optional second argument: where to write
        path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent / "golden_s3gen64.pt"
        torch.set_num_threads(1)
        torch.save(s3gen64_case(), path)
        print(path)
        return
    if sys.argv[1:2] == ["s3gen"]:     # optional second argument: where to write (the live test's copy)
        path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent / "golden_s3gen.pt"
        torch.set_num_threads(1)
        torch.save(s3gen_case(), path)
        print(path)
        return
    if sys.argv[1:] == ["s3tokenizer"]:
        path = Path(__file__).parent / "golden_s3tok.json"
        path.write_text(json.dumps(s3_tokenizer_case(), indent=0) + "\n")
        print(path)
        return
    with tempfile.TemporaryDirectory() as tmp:
        text = text_case(Path(tmp))
    (Path(__file__).parent / "golden_text.json").write_text(json.dumps(text, ensure_ascii=False) + "\n")
    ve = Path(__file__).parent / "golden_ve.json"
    ve.write_text(json.dumps(voice_encoder_case()) + "\n")
    real = Path(__file__).parent / "real_t3.json"
    real.write_text(json.dumps(real_size_shapes(), indent=0) + "\n")
    model = upstream_t3()
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    cases = {name: t3_tokens(model, name, ex, cfg, wp, seed) for name, ex, cfg, wp, seed in tiny.T3_CASES}
    out = Path(__file__).parent / "golden_t3.json"
    out.write_text(json.dumps({"upstream": "chatterbox-tts==0.1.7", "state_shapes": shapes, "tokens": cases},
                              indent=0) + "\n")
    print(out, {k: len(v) for k, v in cases.items()})


if __name__ == "__main__":
    main()

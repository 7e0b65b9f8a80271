"""Our GPT-SoVITS against golden fixtures recorded from the upstream repository (make_fixtures.py).

tiny.py regenerates the weights (seeded, by upstream's tensor names) and the inputs; the files go through
our loader. Compared with what upstream's classes produced (tests/golden.py): T2S tokens (TTS.py's default
`infer_panel_batch_infer`, two sampling settings x two seeds, and the EOS cases) exactly; the T2S logits
along them, chinese-hubert features, RoBERTa hidden_states[-3], Kaldi fbank + ERes2NetV2 `forward3`, the
reference spectrogram and SoVITS audio for v2 and v2Pro at speed 1 and 1.3 in float64 at F64_BOUND against
upstream's float64 run, and in float32 at the bounds below; extract_latent's codes exactly.

The float32 bounds: the largest error measured under every perturbation tests/test_golden_travel.py runs
(ATEN_CPU_CAPABILITY=default / avx2, MKL_CBWR=COMPATIBLE, two threads, oneDNN off; the plain run is
bit-exact on the recording machine), times about 30. Relative to the reference's max-abs.
"""
from __future__ import annotations

import pytest
import torch

import golden

pytestmark = [pytest.mark.golden, pytest.mark.usefixtures("one_thread")]   # recorded with one intra-op thread

from mizuoto.nodes.gpt_sovits.loader import GPTSoVITS, load_bert, load_gpt_sovits
from mizuoto.nodes.gpt_sovits.sovits import linear_spectrogram
from mizuoto.nodes.gpt_sovits.speaker import fbank
from mizuoto.nodes.gpt_sovits.t2s import T2SSampling, generate
from mizuoto.runtime.lm.cache import DynamicCache

from gpt_sovits.tiny import (FIXTURES, T2S_LOGIT_ROWS, eos_likely, f64_reference, fixture_inputs, prior_noise,
                             t2s_forced_logits, write_folder)

SAMPLING = [T2SSampling(top_k=5, top_p=1.0, temperature=1.0, repetition_penalty=1.35),
            T2SSampling(top_k=15, top_p=0.8, temperature=0.7, repetition_penalty=1.0)]

# float32 bounds: measured maximum over the perturbations -> bound (the float64 checks: <= 5.4e-13, the
# fbank's, against F64_BOUND 1e-9; the floor is the recorded float32 correction, tiny.f64_reference)
T2S_LOGITS = 1.5e-5     # 4.2e-7 (MKL_CBWR=COMPATIBLE) -> x35
HUBERT = 3e-5           # 9.3e-7 (oneDNN off) -> x32
BERT = 1.5e-5           # 3.5e-7 (ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE) -> x43
FBANK = 7e-4            # 2.2e-5 (MKL_CBWR=COMPATIBLE: the FFT, then the log of near-empty bands) -> x32
SPEAKER = 3e-5          # 7.6e-7 (MKL_CBWR=COMPATIBLE) -> x40
SPEC = 1e-5             # 2.3e-7 (MKL_CBWR=COMPATIBLE) -> x43
NOISE = 2e-5            # 4.8e-7 (torch's float32 randn under ATEN_CPU_CAPABILITY=default) -> x41
AUDIO = 1.5e-4          # 4.5e-6 (MKL_CBWR=COMPATIBLE, v2 at speed 1) -> x34
# A token comes out of float logits through decisions (EOS argmax, top-k / top-p cut, the exponential race):
# it could flip on another machine only if one of them sat within that machine's logit error. The tokens
# must stay the same with every logit moved by this much (x T2S_LOGITS, relative to the step's max-abs
# logit, signs drawn at random, two draws: 100x the largest measured logit error), and from the float64 model.
T2S_MARGIN = 3 * T2S_LOGITS


@pytest.fixture(scope="module")
def expected() -> dict[str, torch.Tensor]:
    return {**torch.load(FIXTURES / "outputs.pt", weights_only=True), **fixture_inputs()}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("gpt_sovits")
    return {v: write_folder(root, v) for v in ("v2", "v2Pro")}


def _load(folders, dtype: torch.dtype) -> dict[str, GPTSoVITS]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)    # weight-norm folding reduces per thread chunk, as upstream's per-forward norm does
    try:
        return {v: load_gpt_sovits(f, dtype) for v, f in folders.items()}
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models(folders) -> dict[str, GPTSoVITS]:
    return _load(folders, torch.float32)


@pytest.fixture(scope="module")
def models64(folders) -> dict[str, GPTSoVITS]:
    return _load(folders, torch.float64)


def _tokens(t2s, e, sampling: T2SSampling, seed: int, margin_seed: int | None = None) -> list[int]:
    """generate's tokens; with `margin_seed`, every logit moved by T2S_MARGIN x the row's max-abs (random signs)."""
    handle = None
    if margin_seed is not None:
        g = torch.Generator().manual_seed(margin_seed)

        def move(module, args, out):
            signs = torch.randint(0, 2, out.shape, generator=g).to(out.dtype) * 2 - 1
            return out + T2S_MARGIN * out.abs().amax(dim=-1, keepdim=True) * signs
        handle = t2s.ar_predict_layer.register_forward_hook(move)
    try:
        bert = e["t2s.bert"].to(t2s.bert_proj.weight.dtype)
        with torch.no_grad():
            return generate(t2s, e["t2s.phones"][None], bert[None], e["t2s.prompt"], sampling,
                            torch.Generator().manual_seed(seed), DynamicCache()).tolist()
    finally:
        if handle is not None:
            handle.remove()


@pytest.mark.parametrize("setting", [0, 1])
@pytest.mark.parametrize("seed", [0, 3])
def test_t2s_tokens_equal_upstream(models, models64, expected, setting, seed):
    want = expected[f"t2s.tokens.{setting}.{seed}"].tolist()
    assert _tokens(models["v2"].t2s, expected, SAMPLING[setting], seed) == want
    # no decision near a boundary: the float64 model (its logits rounded for the float32 sampler) and logits
    # moved by the margin give the same tokens
    assert _tokens(models64["v2"].t2s, expected, SAMPLING[setting], seed) == want
    for margin_seed in (0, 1):
        assert _tokens(models["v2"].t2s, expected, SAMPLING[setting], seed, margin_seed) == want, margin_seed


@pytest.mark.parametrize("setting", [0, 1])
@pytest.mark.parametrize("seed", [0, 3])
def test_t2s_logits_equal_upstream(models, models64, expected, setting, seed):
    """The logits along the recorded tokens (upstream's loop with its draw replaced by them, make_fixtures.py)."""
    e, name = expected, f"t2s.logits.{setting}.{seed}"
    tokens = e[f"t2s.tokens.{setting}.{seed}"]
    with torch.no_grad():
        logits = t2s_forced_logits(models["v2"].t2s, e["t2s.phones"], e["t2s.bert"], e["t2s.prompt"], tokens)
        logits64 = t2s_forced_logits(models64["v2"].t2s, e["t2s.phones"], e["t2s.bert"].double(), e["t2s.prompt"],
                                     tokens)
    golden.assert_close(logits[T2S_LOGIT_ROWS], e[name], T2S_LOGITS, name)
    golden.assert_f64(logits64[T2S_LOGIT_ROWS], f64_reference(e, name), name)


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_t2s_stops_at_eos_as_upstream(models, models64, expected, seed):
    want = expected[f"t2s.eos.{seed}"].tolist()
    got = []
    for t2s, margin_seed in ((models["v2"].t2s, None), (models64["v2"].t2s, None), (models["v2"].t2s, 0),
                             (models["v2"].t2s, 1)):
        saved = t2s.ar_predict_layer.weight.detach().clone()
        try:
            with torch.no_grad():
                eos_likely(t2s.ar_predict_layer.weight, t2s.h.layers[-1].norm2.bias)
            got.append(_tokens(t2s, expected, T2SSampling(top_k=15), seed, margin_seed))
        finally:
            with torch.no_grad():
                t2s.ar_predict_layer.weight.copy_(saved)
    assert got[0] == want and 11 <= len(want) < 50
    assert got[1:] == [want] * 3      # float64 model, logits moved by the margin (see T2S_MARGIN)


def test_t2s_other_seed_other_tokens(models, expected):
    assert _tokens(models["v2"].t2s, expected, SAMPLING[0], 1) != expected["t2s.tokens.0.0"].tolist()


def _code_gaps(model, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared distances [T, bins] of ssl_proj(feats)'s frames to the codebook (in float64 for a float64 model,
    else in the engine's float32, returned as float64), and each frame's gap between the nearest two."""
    x = model.ssl_proj(feats.transpose(1, 2))[0].transpose(0, 1)
    embed = model.quantizer.vq.layers[0]._codebook.embed
    dist = (x.pow(2).sum(1, keepdim=True) - 2 * x @ embed.t() + embed.t().pow(2).sum(0, keepdim=True)).double()
    two = dist.topk(2, dim=-1, largest=False).values
    return dist, two[:, 1] - two[:, 0]


def test_hubert_and_latent_equal_upstream(models, models64, expected):
    e = expected
    with torch.inference_mode():
        feats = models["v2"].hubert(e["hubert.wav"][None])[-1]
        feats64 = models64["v2"].hubert(e["hubert.wav"][None].double())[-1]
        golden.assert_close(feats, e["hubert.features"], HUBERT, "hubert")
        golden.assert_f64(feats64, f64_reference(e, "hubert.features"), "hubert")
        for v in ("v2", "v2Pro"):
            want = e[f"sovits.{v}.latent"]      # upstream's codes, from its float32 and its float64 features alike
            assert torch.equal(models64[v].sovits.extract_latent(feats64.transpose(1, 2))[0], want), v
            assert torch.equal(models[v].sovits.extract_latent(feats.transpose(1, 2))[0], want), v
            # The codes are an argmin over distances. Each frame's float64 gap between the nearest two rows
            # exceeds 30x what float32 moves any distance here (this machine's own float32 error, on the
            # float32 features it computed; measured >= 836x under every perturbation, the gaps >= 1.7e-4 of
            # the distances): no machine's rounding reaches a tie.
            dist32, _ = _code_gaps(models[v].sovits, feats)
            dist64, gap64 = _code_gaps(models64[v].sovits, feats64)
            moved = (dist32 - dist64).abs().amax(dim=-1)
            assert bool((gap64 > 30 * 2 * moved).all()), f"{v}: min gap / float32 move {(gap64 / moved).min():.3g}"


def test_bert_features_equal_upstream(models, expected, folders):
    bert_dir = folders["v2"].parent / "pretrained_models" / "chinese-roberta-wwm-ext-large"
    threads = torch.get_num_threads()
    bert, tokenizer = load_bert(bert_dir, torch.float32)
    bert64, _ = load_bert(bert_dir, torch.float64)
    torch.set_num_threads(threads)
    assert tokenizer.encode("你好").ids == [2, 7, 8, 3]
    with torch.inference_mode():
        golden.assert_close(bert(expected["bert.ids"]), expected["bert.hidden"], BERT, "bert")
        golden.assert_f64(bert64(expected["bert.ids"]), f64_reference(expected, "bert.hidden"), "bert")


def test_speaker_embedding_equals_upstream(models, models64, expected):
    e = expected
    feats, feats64 = fbank(e["sv.wav"][0])[None], fbank(e["sv.wav"][0].double())[None]
    golden.assert_close(feats, e["sv.fbank"], FBANK, "fbank")
    golden.assert_f64(feats64, f64_reference(e, "sv.fbank"), "fbank")
    with torch.inference_mode():
        golden.assert_close(models["v2Pro"].speaker(feats), e["sv.embedding"], SPEAKER, "speaker")
        golden.assert_f64(models64["v2Pro"].speaker(feats64), f64_reference(e, "sv.embedding"), "speaker")


@pytest.mark.parametrize("version", ["v2", "v2Pro"])
@pytest.mark.parametrize("speed", [1.0, 1.3])
def test_sovits_audio_equals_upstream(models, models64, expected, version, speed):
    e, name = expected, f"sovits.{version}.audio.{speed}"
    spec = linear_spectrogram(e["sovits.ref32k"], 2048, 640, 2048)
    spec64 = linear_spectrogram(e["sovits.ref32k"].double(), 2048, 640, 2048)
    golden.assert_close(spec, e["sovits.spec"], SPEC, "spectrogram")
    golden.assert_f64(spec64, f64_reference(e, "sovits.spec"), "spectrogram")
    model, model64 = models[version].sovits, models64[version].sovits
    # the prior noise upstream drew from seed 5 (torch's float32 randn: its numbers move with the CPU's kernels)
    noise = e[f"sovits.noise.{speed}"]
    golden.assert_close(prior_noise(model.cfg, e["sovits.codes"].shape[-1], speed), noise, NOISE, "noise")
    with torch.inference_mode():
        ge = model.style(spec, e["sv.embedding"] if version == "v2Pro" else None)
        audio = model(e["sovits.codes"][0], e["sovits.text"], ge, speed=speed, generator=torch.Generator().manual_seed(5))
        sv64 = models64["v2Pro"].speaker(fbank(e["sv.wav"][0].double())[None]) if version == "v2Pro" else None
        audio64 = model64(e["sovits.codes"][0], e["sovits.text"], model64.style(spec64, sv64), noise=noise.double(),
                          speed=speed)
    golden.assert_close(audio, e[name], AUDIO, name)
    golden.assert_f64(audio64, f64_reference(e, name), name)

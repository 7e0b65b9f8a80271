"""Our IndexTTS 2 against golden fixtures recorded from the upstream repository (make_fixtures.py).

Tiny upstream-layout checkpoints are regenerated from the recorded key lists (tiny.py), loaded through
our loader and run on the recorded inputs and seeds. As tests/golden.py sets out, a recording travels to
other CPUs: every float output is compared twice, our float64 run against upstream's float64 run at
F64_BOUND (where a wrong op or constant shows), and our float32 run against upstream's float32 output at
the bound stated beside it (the float32 rounding another machine's kernels bring; each bound is the
largest error measured under every perturbation of tests/test_golden_travel.py, with a margin). Integers
(codes, tokens, masks) are equal; where one is decided by floats (sampling, the codec's nearest code) the
float64 run decides it too, and the margin by which the float32 decision cannot flip is checked.
"""
from __future__ import annotations

import golden
import pytest
import torch
import torch.nn.functional as F

# the fixtures were recorded with one intra-op thread (--threads N changes it, as a perturbation)
pytestmark = [pytest.mark.golden, pytest.mark.usefixtures("one_thread")]

from mizuoto.nodes.blocks.bigvgan import kaiser_sinc_filter1d, load_bigvgan
from mizuoto.nodes.blocks.w2v_bert import load_w2v_bert, seamless_features
from mizuoto.nodes.indextts2.generate import Sampling, generate_codes
from mizuoto.nodes.indextts2.loader import (codec_config, gpt_config, load_campplus, load_codec, load_gpt, load_s2mel,
                                            read_config, s2mel_config)

from indextts2.tiny import (CAMPPLUS, FIXTURES, write_bigvgan, write_campplus, write_codec, write_config, write_gpt,
                            write_s2mel, write_w2v_bert)

F64 = torch.float64

# float32 bounds, relative to the reference's max-abs (golden.relative_error). Each is the largest error
# measured over the plain run, ATEN_CPU_CAPABILITY=default / avx2, MKL_CBWR=COMPATIBLE, --threads 2 and
# --mkldnn off (the plain run is exact: this machine type recorded the fixtures), with a margin.
B_COND = 3e-5       # speaker latents, emotion vectors: measured <= 1.1e-6 (merged, MKL); x28
B_LATENT = 2e-5     # GPT latents of 60 codes: measured <= 4.6e-7; x43
B_REGULATOR = 1e-5  # length regulator (prompt and target): measured <= 3.3e-7; x30
B_MEL = 2e-5        # s2mel mel after 25 / 4 Euler steps: measured <= 4.6e-7; x43
B_FILTER = 1e-6     # BigVGAN's 12 Kaiser-sinc taps: measured 0; a few float32 ulps (6e-8) allowed
B_WAV = 1e-4        # BigVGAN audio: measured <= 2.9e-6 (ATEN default; snake activations amplify); x35
B_CODEC = 1e-5      # codec quantized and vq2emb: measured <= 2.8e-7; x36
B_CAMPPLUS = 5e-6   # CAM++ style: measured <= 1.4e-7; x36
B_FEATURES = 5e-5   # SeamlessM4T features: numpy, 0 under every torch perturbation; float32 itself is
                    # 2.0e-6 from the float64 features (upstream's own two runs), a CPU with other numpy
                    # kernels moves within that: x25
B_HIDDEN = 2e-5     # w2v-bert hidden state 17: measured <= 6.2e-7; x32
# Decisions taken from floats. The codec takes the nearest of 8192 codes per frame: float32 distances are
# within B_DISTANCE of float64's (relative to their max-abs; measured <= 5.1e-7), and every frame's
# runner-up is more than CODE_MARGIN = 10 x B_DISTANCE behind (measured: 2.3e-4), where a swap would need
# an error of half the gap: no machine's float32 rounding can change a code.
B_DISTANCE = 1e-5
CODE_MARGIN = 10 * B_DISTANCE
# Sampling: mel codes (beam sampling) and emotion-model tokens are decided on float32 logits, as upstream's
# generate casts them. The float64 path must give upstream's float64 codes, which upstream's float32 run
# gave too. Their margin: the float64 path still gives them with every logit moved by up to LOGIT_NOISE x
# the logits' max-abs (uniform, three seeded draws each; measured: the first flip comes at 3e-5, seed 0's
# mel codes in 1 of 8 draws, none at 1e-5), while float32 logits lie within B_LOGITS of float64's (measured
# <= 9.4e-7, the emotion model's), so no machine's float32 rounding reaches a decision.
B_LOGITS = 3e-6
LOGIT_NOISE = 1e-5


@pytest.fixture(scope="module")
def expected() -> dict:
    return torch.load(FIXTURES / "outputs.pt", weights_only=True)


def f64(x: torch.Tensor) -> torch.Tensor:
    return x.double()


def lengths(feats: torch.Tensor) -> torch.Tensor:
    return torch.tensor([feats.shape[-1]])   # as upstream's infer_v2 passes them


def both(check, *dtypes):
    """Run check(dtype, suffix) for float32 ("") and float64 (".f64")."""
    for dtype in dtypes or (torch.float32, F64):
        check(dtype, ".f64" if dtype == F64 else "")


def compare(ours: torch.Tensor, e: dict, key: str, bound: float) -> None:
    """Float64 against the ".f64" recording at F64_BOUND, float32 against the float32 one at `bound`."""
    if ours.dtype == F64:
        golden.assert_f64(ours, e[key + ".f64"], key + ".f64")
    else:
        golden.assert_close(ours, e[key], bound, key)


def noisy(fn, scale: float, seed: int):
    """fn's outputs with every value moved by up to `scale` x their max-abs (uniform, a seeded draw)."""
    g = torch.Generator().manual_seed(seed)

    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        noise = 2 * torch.rand(out.shape, generator=g, dtype=out.dtype) - 1
        return out + scale * out.abs().max() * noise
    return wrapped


# ---- GPT ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("indextts2")
    path = write_config(folder)
    weights, config = write_gpt(folder), gpt_config(read_config(path), path)
    return {dtype: load_gpt(weights, config, dtype) for dtype in (torch.float32, F64)}


def test_conditioning_equals_upstream(gpts, expected):
    e = expected

    def check(dtype, _):
        gpt, spk, emo = gpts[dtype], e["gpt.spk"].to(dtype), e["gpt.emo"].to(dtype)
        with torch.no_grad():
            compare(gpt.speaker_latents(spk, lengths(spk)), e, "gpt.latents", B_COND)
            compare(gpt.emotion_vector(spk, lengths(spk)), e, "gpt.emovec_spk", B_COND)
            for alpha in (1.0, 0.6):
                merged = gpt.merge_emotion(spk, lengths(spk), emo, lengths(emo), alpha)
                compare(merged, e, f"gpt.merged.{alpha}", B_COND)
    both(check)


def codes_of(gpt, e: dict, suffix: str, seed: int) -> tuple[list[int], bool]:
    """Mel codes from the recorded conditioning of this precision (upstream's, so only the GPT is ours)."""
    with torch.no_grad():
        conds = gpt.conditioning(e["gpt.latents" + suffix], e["gpt.merged.0.6" + suffix])
        prompt = gpt.prompt(conds, e["gpt.text"][0].long())
        return generate_codes(gpt, prompt, Sampling(max_mel_tokens=60), torch.Generator().manual_seed(seed))


def recorded_codes(gpt, e: dict, key: str) -> tuple[list[int], bool]:
    ref = e[key][0].tolist()
    stop = gpt.config.stop_mel_token
    return (ref[:ref.index(stop)], True) if stop in ref else (ref, False)


@pytest.mark.parametrize("seed", [0, 3])
def test_codes_equal_upstream(gpts, expected, seed, monkeypatch):
    e = expected
    assert e["gpt.spk"].shape[1] == 37
    # upstream's float32 and float64 runs sampled the same codes (seed 0 runs to 60, seed 3 stops at 55)
    assert torch.equal(e[f"gpt.codes.{seed}"], e[f"gpt.codes.{seed}.f64"])
    for dtype, suffix in ((F64, ".f64"), (torch.float32, "")):
        codes, stopped = codes_of(gpts[dtype], e, suffix, seed)
        assert (codes, stopped) == recorded_codes(gpts[dtype], e, f"gpt.codes.{seed}{suffix}"), suffix or "float32"
    # the margin of those decisions: the float64 path's codes survive logit noise far above float32 rounding
    gpt = gpts[F64]
    for draw in range(3):
        with monkeypatch.context() as m:
            m.setattr(gpt, "logits", noisy(gpt.logits, LOGIT_NOISE, 100 * seed + draw))
            assert codes_of(gpt, e, ".f64", seed) == (codes, stopped), f"flipped by logit noise, draw {draw}"


def test_mel_logits_float32_within_bound(gpts, expected):
    """The float32 logits the codes are sampled from, against float64's along the recorded codes (what
    B_LOGITS stands for)."""
    e = expected
    codes = e["gpt.codes.0"][0].long()
    out = {}
    for dtype, suffix in ((torch.float32, ""), (F64, ".f64")):
        gpt = gpts[dtype]
        with torch.no_grad():
            conds = gpt.conditioning(e["gpt.latents.f64"].to(dtype), e["gpt.merged.0.6.f64"].to(dtype))
            prompt = gpt.prompt(conds, e["gpt.text"][0].long())
            start = torch.full((1,), gpt.config.start_mel_token, dtype=torch.long)
            steps = [gpt.mel_step_embeds(start, 0)] + [gpt.mel_step_embeds(codes[i:i + 1], i + 2)
                                                       for i in range(codes.numel() - 1)]
            h = gpt.gpt(torch.cat([prompt, *steps], dim=1))[:, prompt.size(1):]
            out[dtype] = gpt.mel_head(gpt.final_norm(h))
    golden.assert_close(out[torch.float32].double(), out[F64], B_LOGITS, "mel logits float32 vs float64")


def test_latent_equals_upstream(gpts, expected):
    e = expected
    codes = e["gpt.codes.0"][0].long()

    def check(dtype, suffix):
        gpt = gpts[dtype]
        with torch.no_grad():
            conds = gpt.conditioning(e["gpt.latents" + suffix], e["gpt.merged.0.6" + suffix])
            compare(gpt.latent(conds, e["gpt.text"][0].long(), codes), e, "gpt.latent", B_LATENT)
    both(check)


# ---- s2mel -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s2mels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("indextts2_s2mel")
    path = write_config(folder)
    weights, config = write_s2mel(folder), s2mel_config(read_config(path), path, 1280)
    return {dtype: load_s2mel(weights, config, dtype) for dtype in (torch.float32, F64)}


def test_length_regulator_equals_upstream(s2mels, expected):
    e = expected

    def check(dtype, _):
        s2mel = s2mels[dtype]
        with torch.no_grad():
            prompt = s2mel.length_regulator(e["s2mel.s_ref"].to(dtype), torch.LongTensor([e["s2mel.ref_mel"].size(2)]))
            s = e["s2mel.s_infer"].to(dtype) + s2mel.gpt_layer(e["s2mel.latent"].to(dtype))
            cond = s2mel.length_regulator(s, (torch.LongTensor([s.size(1)]) * 1.72).long())
        compare(prompt, e, "s2mel.prompt_cond", B_REGULATOR)
        compare(cond, e, "s2mel.cond", B_REGULATOR)
    both(check)


@pytest.mark.parametrize("steps", [25, 4])
def test_s2mel_mel_equals_upstream(s2mels, expected, steps):
    e = expected

    def check(dtype, suffix):
        mu = torch.cat([e["s2mel.prompt_cond" + suffix], e["s2mel.cond" + suffix]], dim=1)
        noise = e[f"s2mel.noise.{steps}"].to(dtype)
        with torch.no_grad():
            mel = s2mels[dtype].cfm(mu, e["s2mel.ref_mel"].to(dtype), e["s2mel.style"].to(dtype), noise, steps=steps,
                                    cfg_rate=0.7)
        compare(mel[:, :, e["s2mel.ref_mel"].size(-1):], e, f"s2mel.mel.{steps}", B_MEL)
    both(check)


# ---- BigVGAN, codec, CAM++, w2v-bert -------------------------------------------------------------------


def test_bigvgan_filter_equals_upstream(expected):
    compare(kaiser_sinc_filter1d(0.25, 0.3, 12), expected, "bigvgan.filter", B_FILTER)
    torch.set_default_dtype(F64)     # both filter functions build their tensors in the default dtype
    try:
        compare(kaiser_sinc_filter1d(0.25, 0.3, 12), expected, "bigvgan.filter", B_FILTER)
    finally:
        torch.set_default_dtype(torch.float32)


def test_bigvgan_audio_equals_upstream(tmp_path, expected):
    e = expected
    # the checkpoint holds upstream's float32 taps (its filters are buffers of the published file), so the
    # audio compares the network alone; our filter function is compared above
    folder = write_bigvgan(tmp_path / "bigvgan", e["bigvgan.filter"])

    def check(dtype, _):
        with torch.no_grad():
            compare(load_bigvgan(folder, dtype)(e["bigvgan.mel"].to(dtype)), e, "bigvgan.wav", B_WAV)
    both(check)


def code_distances(codec, feats: torch.Tensor) -> torch.Tensor:
    """The (frames, codes) distances FactorizedVQ.forward takes the nearest code from."""
    vq = codec.quantizer.quantizers[0]
    z_e = vq.in_project(codec.encoder(feats.transpose(1, 2)).transpose(1, 2))
    enc = F.normalize(z_e.permute(0, 2, 1).reshape(-1, z_e.size(1)))
    book = F.normalize(vq.codebook.weight)
    return enc.pow(2).sum(1, keepdim=True) - 2 * enc @ book.t() + book.pow(2).sum(1, keepdim=True).t()


def test_codec_equals_upstream(tmp_path, expected):
    e = expected
    path = write_config(tmp_path)
    weights, config = write_codec(tmp_path / "codec"), codec_config(read_config(path), path)
    codecs = {dtype: load_codec(weights, config, dtype) for dtype in (torch.float32, F64)}
    out = {}
    for dtype, suffix in ((F64, ".f64"), (torch.float32, "")):
        with torch.no_grad():
            codes, quantized = codecs[dtype].quantize(e["codec.feats"].to(dtype))
            out[dtype] = code_distances(codecs[dtype], e["codec.feats"].to(dtype))
            emb = codecs[dtype].vq2emb(e["codec.codes_in"])
        assert torch.equal(codes, e["codec.codes" + suffix]), suffix or "float32"
        compare(quantized, e, "codec.quantized", B_CODEC)
        compare(emb, e, "codec.emb", B_CODEC)
    # the nearest codes cannot flip in float32: upstream's two runs agree, and every frame's runner-up lies
    # far beyond the float32 error of the distances
    assert torch.equal(e["codec.codes"], e["codec.codes.f64"])
    dist, dist32 = out[F64], out[torch.float32]
    assert torch.equal(dist.argmin(1), e["codec.codes.f64"][0])
    golden.assert_close(dist32.double(), dist, B_DISTANCE, "codec distances float32 vs float64")
    best = dist.topk(2, dim=1, largest=False).values
    margin = (best[:, 1] - best[:, 0]).min().item() / dist.abs().max().item()
    assert margin > CODE_MARGIN, f"a frame's two nearest codes are {margin:.3g} apart (<= {CODE_MARGIN:g})"


def test_campplus_equals_upstream(tmp_path, expected):
    widths = {k: v for k, v in CAMPPLUS.items() if k not in ("feat_dim", "embedding_size")}
    weights = write_campplus(tmp_path)

    def check(dtype, _):
        with torch.no_grad():
            style = load_campplus(weights, dtype, **widths)(expected["campplus.feat"].to(dtype))
        compare(style, expected, "campplus.style", B_CAMPPLUS)
    both(check)


@pytest.mark.parametrize("case", ["odd", "even"])
def test_w2v_bert_equals_transformers(tmp_path, expected, case):
    e = expected
    weights = write_w2v_bert(tmp_path / "w2v")

    def check(dtype, suffix):
        feats, mask = seamless_features(e[f"w2v.wav.{case}"], dtype=dtype)
        assert torch.equal(mask, e[f"w2v.mask.{case}"])
        compare(feats, e, f"w2v.features.{case}", B_FEATURES)
        # the model alone: on the recorded float32 features, in either precision
        model = load_w2v_bert(weights, layers=17, dtype=dtype)
        with torch.no_grad():
            hidden = model(e[f"w2v.features.{case}"].to(dtype), mask)
        compare(hidden, e, f"w2v.hidden17.{case}", B_HIDDEN)
    both(check)


# ---- emotion model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_emotion_model_tokens_equal_transformers(tmp_path, expected, seed, monkeypatch):
    from mizuoto.nodes.indextts2.emotion import generate, load_emotion_model
    from indextts2.tiny import write_qwen_emotion
    folder = write_qwen_emotion(tmp_path / "qwen", tokenizer=True)
    prompt = expected["qwen.prompt"][0].tolist()
    # upstream's float32 and float64 runs sampled the same tokens
    assert torch.equal(expected[f"qwen.tokens.{seed}"], expected[f"qwen.tokens.{seed}.f64"])
    for dtype, suffix in ((F64, ".f64"), (torch.float32, "")):
        emo = load_emotion_model(folder, dtype)
        with torch.no_grad():
            tokens = generate(emo.lm, prompt, emo.settings, torch.Generator().manual_seed(seed), max_new_tokens=16)
        ref = expected[f"qwen.tokens.{seed}{suffix}"].tolist()
        stop = next((i for i, t in enumerate(ref) if t in emo.settings.eos), None)
        assert tokens == (ref if stop is None else ref[:stop]), suffix or "float32"
    # the margin of those decisions (as for the mel codes): the float64 path under logit noise
    lm = load_emotion_model(folder, F64).lm
    settings = emo.settings
    for draw in range(3):
        with monkeypatch.context() as m:
            m.setattr(lm, "forward", noisy(lm.forward, LOGIT_NOISE, 100 * seed + draw))
            with torch.no_grad():
                again = generate(lm, prompt, settings, torch.Generator().manual_seed(seed), max_new_tokens=16)
        assert again == tokens, f"flipped by logit noise, draw {draw}"


def test_emotion_logits_float32_within_bound(tmp_path, expected):
    """The float32 logits the emotion tokens are sampled from, against float64's (what B_LOGITS stands for)."""
    from mizuoto.nodes.indextts2.emotion import load_emotion_model
    from mizuoto.runtime.lm.cache import make_cache
    from indextts2.tiny import write_qwen_emotion
    folder = write_qwen_emotion(tmp_path / "qwen", tokenizer=True)
    ids = torch.tensor([expected["qwen.prompt"][0].tolist() + expected["qwen.tokens.0"].tolist()])
    out = {}
    for dtype in (torch.float32, F64):
        lm = load_emotion_model(folder, dtype).lm
        with torch.no_grad():
            h = lm.model(lm.model.embed_tokens(ids), make_cache(), 0)
            out[dtype] = lm.lm_head(h)
    golden.assert_close(out[torch.float32].double(), out[F64], B_LOGITS, "emotion logits float32 vs float64")

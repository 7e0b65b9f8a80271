"""Our IndexTTS 2 against golden fixtures recorded from the upstream repository (make_fixtures.py).

Tiny upstream-layout checkpoints are regenerated from the recorded key lists (tiny.py), loaded through
our loader and run on the recorded inputs and seeds: conditioning, emotion vectors and GPT latents
`torch.equal` in float32, beam-sampled mel codes equal.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # the fixtures were recorded with one intra-op thread

from mizuoto.nodes.common.bigvgan import load_bigvgan
from mizuoto.nodes.common.w2v_bert import load_w2v_bert, seamless_features
from mizuoto.nodes.indextts2.generate import Sampling, generate_codes
from mizuoto.nodes.indextts2.loader import (codec_config, gpt_config, load_campplus, load_codec, load_gpt, load_s2mel,
                                            read_config, s2mel_config)

from indextts2.tiny import (CAMPPLUS, FIXTURES, write_bigvgan, write_campplus, write_codec, write_config, write_gpt,
                            write_s2mel, write_w2v_bert)


@pytest.fixture(scope="module")
def expected() -> dict:
    return torch.load(FIXTURES / "outputs.pt", weights_only=True)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("indextts2")
    path = write_config(folder)
    return load_gpt(write_gpt(folder), gpt_config(read_config(path), path))


def lengths(feats: torch.Tensor) -> torch.Tensor:
    return torch.tensor([feats.shape[-1]])   # as upstream's infer_v2 passes them


def test_conditioning_equals_upstream(gpt, expected):
    spk, emo = expected["gpt.spk"], expected["gpt.emo"]
    with torch.no_grad():
        assert torch.equal(gpt.speaker_latents(spk, lengths(spk)), expected["gpt.latents"])
        assert torch.equal(gpt.emotion_vector(spk, lengths(spk)), expected["gpt.emovec_spk"])
        for alpha in (1.0, 0.6):
            merged = gpt.merge_emotion(spk, lengths(spk), emo, lengths(emo), alpha)
            assert torch.equal(merged, expected[f"gpt.merged.{alpha}"])


@pytest.mark.parametrize("seed", [0, 3])
def test_codes_equal_upstream(gpt, expected, seed):
    spk = expected["gpt.spk"]
    with torch.no_grad():
        conds = gpt.conditioning(expected["gpt.latents"], expected["gpt.merged.0.6"])
        prompt = gpt.prompt(conds, expected["gpt.text"][0].long())
        codes, stopped = generate_codes(gpt, prompt, Sampling(max_mel_tokens=60), torch.Generator().manual_seed(seed))
    ref = expected[f"gpt.codes.{seed}"][0].tolist()
    stop = gpt.config.stop_mel_token
    assert stopped == (stop in ref)
    assert codes == (ref[:ref.index(stop)] if stop in ref else ref)
    assert spk.shape[1] == 37


def test_latent_equals_upstream(gpt, expected):
    codes = expected["gpt.codes.0"][0].long()
    with torch.no_grad():
        conds = gpt.conditioning(expected["gpt.latents"], expected["gpt.merged.0.6"])
        latent = gpt.latent(conds, expected["gpt.text"][0].long(), codes)
    assert torch.equal(latent, expected["gpt.latent"])


@pytest.fixture(scope="module")
def s2mel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("indextts2_s2mel")
    path = write_config(folder)
    return load_s2mel(write_s2mel(folder), s2mel_config(read_config(path), path, 1280))


def test_length_regulator_equals_upstream(s2mel, expected):
    e = expected
    with torch.no_grad():
        prompt = s2mel.length_regulator(e["s2mel.s_ref"], torch.LongTensor([e["s2mel.ref_mel"].size(2)]))
        s = e["s2mel.s_infer"] + s2mel.gpt_layer(e["s2mel.latent"])
        cond = s2mel.length_regulator(s, (torch.LongTensor([s.size(1)]) * 1.72).long())
    assert torch.equal(prompt, e["s2mel.prompt_cond"])
    assert torch.equal(cond, e["s2mel.cond"])


@pytest.mark.parametrize("steps", [25, 4])
def test_s2mel_mel_equals_upstream(s2mel, expected, steps):
    e = expected
    mu = torch.cat([e["s2mel.prompt_cond"], e["s2mel.cond"]], dim=1)
    noise = torch.randn(1, 80, mu.size(1), generator=torch.Generator().manual_seed(steps))
    with torch.no_grad():
        mel = s2mel.cfm(mu, e["s2mel.ref_mel"], e["s2mel.style"], noise, steps=steps, cfg_rate=0.7)
    assert torch.equal(mel[:, :, e["s2mel.ref_mel"].size(-1):], e[f"s2mel.mel.{steps}"])


def test_bigvgan_audio_equals_upstream(tmp_path, expected):
    model = load_bigvgan(write_bigvgan(tmp_path / "bigvgan"))
    with torch.no_grad():
        wav = model(expected["bigvgan.mel"])
    assert torch.equal(wav, expected["bigvgan.wav"])


def test_codec_equals_upstream(tmp_path, expected):
    e = expected
    path = write_config(tmp_path)
    codec = load_codec(write_codec(tmp_path / "codec"), codec_config(read_config(path), path))
    with torch.no_grad():
        codes, quantized = codec.quantize(e["codec.feats"])
        emb = codec.vq2emb(e["codec.codes_in"])
    assert torch.equal(codes, e["codec.codes"])
    assert torch.equal(quantized, e["codec.quantized"])
    assert torch.equal(emb, e["codec.emb"])


def test_campplus_equals_upstream(tmp_path, expected):
    widths = {k: v for k, v in CAMPPLUS.items() if k not in ("feat_dim", "embedding_size")}
    model = load_campplus(write_campplus(tmp_path), **widths)
    with torch.no_grad():
        assert torch.equal(model(expected["campplus.feat"]), expected["campplus.style"])


@pytest.mark.parametrize("case", ["odd", "even"])
def test_w2v_bert_equals_transformers(tmp_path, expected, case):
    e = expected
    feats, mask = seamless_features(e[f"w2v.wav.{case}"])
    assert torch.equal(feats, e[f"w2v.features.{case}"])
    assert torch.equal(mask, e[f"w2v.mask.{case}"])
    model = load_w2v_bert(write_w2v_bert(tmp_path / "w2v"), layers=17)
    with torch.no_grad():
        assert torch.equal(model(feats, mask), e[f"w2v.hidden17.{case}"])


@pytest.mark.parametrize("seed", [0, 1])
def test_emotion_model_tokens_equal_transformers(tmp_path, expected, seed):
    from mizuoto.nodes.indextts2.emotion import generate, load_emotion_model
    from indextts2.tiny import write_qwen_emotion
    emo = load_emotion_model(write_qwen_emotion(tmp_path / "qwen", tokenizer=True))
    with torch.no_grad():
        tokens = generate(emo.lm, expected["qwen.prompt"][0].tolist(), emo.settings,
                          torch.Generator().manual_seed(seed), max_new_tokens=16)
    ref = expected[f"qwen.tokens.{seed}"].tolist()
    stop = next((i for i, t in enumerate(ref) if t in emo.settings.eos), None)
    assert tokens == (ref if stop is None else ref[:stop])

"""Our GPT-SoVITS against golden fixtures recorded from the upstream repository (make_fixtures.py).

tiny.py regenerates the weights (seeded, by upstream's tensor names) and the inputs; the files go through
our loader; outputs must be `torch.equal` to what upstream's classes produced in float32: T2S tokens
(TTS.py's default `infer_panel_batch_infer`, two sampling settings x two seeds), chinese-hubert features,
RoBERTa hidden_states[-3], Kaldi fbank + ERes2NetV2 `forward3`, the reference spectrogram, extract_latent,
and SoVITS audio for v2 and v2Pro at speed 1 and 1.3.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # recorded with one intra-op thread

from mizuoto.nodes.gpt_sovits.loader import GPTSoVITS, load_bert, load_gpt_sovits
from mizuoto.nodes.gpt_sovits.sovits import linear_spectrogram
from mizuoto.nodes.gpt_sovits.speaker import fbank
from mizuoto.nodes.gpt_sovits.t2s import T2SSampling, generate
from mizuoto.runtime.lm.cache import DynamicCache

from gpt_sovits.tiny import FIXTURES, eos_likely, fixture_inputs, write_folder

SAMPLING = [T2SSampling(top_k=5, top_p=1.0, temperature=1.0, repetition_penalty=1.35),
            T2SSampling(top_k=15, top_p=0.8, temperature=0.7, repetition_penalty=1.0)]


@pytest.fixture(scope="module")
def expected() -> dict[str, torch.Tensor]:
    return {**torch.load(FIXTURES / "outputs.pt", weights_only=True), **fixture_inputs()}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, GPTSoVITS]:
    root = tmp_path_factory.mktemp("gpt_sovits")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)    # weight-norm folding reduces per thread chunk, as upstream's per-forward norm does
    try:
        return {v: load_gpt_sovits(write_folder(root, v), torch.float32) for v in ("v2", "v2Pro")}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("setting", [0, 1])
@pytest.mark.parametrize("seed", [0, 3])
def test_t2s_tokens_equal_upstream(models, expected, setting, seed):
    e = expected
    tokens = generate(models["v2"].t2s, e["t2s.phones"][None], e["t2s.bert"][None], e["t2s.prompt"],
                      SAMPLING[setting], torch.Generator().manual_seed(seed), DynamicCache())
    assert tokens.tolist() == e[f"t2s.tokens.{setting}.{seed}"].tolist()


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_t2s_stops_at_eos_as_upstream(models, expected, seed):
    e, t2s = expected, models["v2"].t2s
    saved = t2s.ar_predict_layer.weight.detach().clone()
    try:
        with torch.no_grad():
            eos_likely(t2s.ar_predict_layer.weight, t2s.h.layers[-1].norm2.bias)
        tokens = generate(t2s, e["t2s.phones"][None], e["t2s.bert"][None], e["t2s.prompt"], T2SSampling(top_k=15),
                          torch.Generator().manual_seed(seed), DynamicCache())
    finally:
        with torch.no_grad():
            t2s.ar_predict_layer.weight.copy_(saved)
    assert tokens.tolist() == e[f"t2s.eos.{seed}"].tolist() and 11 <= tokens.numel() < 50


def test_t2s_other_seed_other_tokens(models, expected):
    e = expected
    tokens = generate(models["v2"].t2s, e["t2s.phones"][None], e["t2s.bert"][None], e["t2s.prompt"], SAMPLING[0],
                      torch.Generator().manual_seed(1), DynamicCache())
    assert tokens.tolist() != e["t2s.tokens.0.0"].tolist()


def test_hubert_and_latent_equal_upstream(models, expected):
    with torch.inference_mode():
        feats = models["v2"].hubert(expected["hubert.wav"][None])[-1]
        assert torch.equal(feats, expected["hubert.features"])
        for v in ("v2", "v2Pro"):
            latent = models[v].sovits.extract_latent(feats.transpose(1, 2))[0]
            assert torch.equal(latent, expected[f"sovits.{v}.latent"])


def test_bert_features_equal_upstream(models, expected, tmp_path_factory):
    folder = tmp_path_factory.getbasetemp()
    bert_dir = next(folder.glob("gpt_sovits*/pretrained_models/chinese-roberta-wwm-ext-large"))
    threads = torch.get_num_threads()
    bert, tokenizer = load_bert(bert_dir, torch.float32)
    torch.set_num_threads(threads)
    assert tokenizer.encode("你好").ids == [2, 7, 8, 3]
    with torch.inference_mode():
        assert torch.equal(bert(expected["bert.ids"]), expected["bert.hidden"])


def test_speaker_embedding_equals_upstream(models, expected):
    feats = fbank(expected["sv.wav"][0])[None]
    assert torch.equal(feats, expected["sv.fbank"])
    with torch.inference_mode():
        assert torch.equal(models["v2Pro"].speaker(feats), expected["sv.embedding"])


@pytest.mark.parametrize("version", ["v2", "v2Pro"])
@pytest.mark.parametrize("speed", [1.0, 1.3])
def test_sovits_audio_equals_upstream(models, expected, version, speed):
    e = expected
    spec = linear_spectrogram(e["sovits.ref32k"], 2048, 640, 2048)
    assert torch.equal(spec, e["sovits.spec"])
    model = models[version].sovits
    with torch.inference_mode():
        ge = model.style(spec, e["sv.embedding"] if version == "v2Pro" else None)
        audio = model(e["sovits.codes"][0], e["sovits.text"], ge, speed=speed, generator=torch.Generator().manual_seed(5))
    assert torch.equal(audio, e[f"sovits.{version}.audio.{speed}"])

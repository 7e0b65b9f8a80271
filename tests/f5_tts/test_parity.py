"""Parity with the upstream packages (f5-tts 1.1.22, vocos 0.1.0) on tiny random checkpoints.

Upstream's own classes (`CFM` + `DiT`, `Vocos.from_hparams`) are built from tiny configs, every
parameter randomised, saved in the published layout (EMA state as ema_pytorch writes it, to
safetensors; vocos `config.yaml` + `pytorch_model.bin`); upstream's own loaders (`load_model`,
`load_vocoder`) and ours read those files. Same reference, text and seed -> `torch.equal` in float32:
tokens, reference mel, sampled mel (Euler, midpoint, EPSS, no guidance), Vocos features and audio,
and the whole chunk against `infer_batch_process`. Needs a separate venv: see README.md.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from f5_tts.upstream_stubs import available, install

if not available():
    pytest.skip("parity needs f5-tts 1.1.22 and vocos 0.1.0 (the parity venv: README.md)", allow_module_level=True)
install()

import yaml  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from f5_tts.tiny import ARCH, MEL, VOCOS, randomize, vocab_tokens, write_vocab, training_config  # noqa: E402
from mizuoto.nodes.pack.engine import Chunk, Reference  # noqa: E402
from mizuoto.nodes.f5_tts.loader import load_f5_tts  # noqa: E402
from mizuoto.nodes.f5_tts.phases import F5TTSEngine  # noqa: E402
from mizuoto.nodes.f5_tts.sample import FlowSettings, sample  # noqa: E402
from mizuoto.runtime import DeviceService, ModelManager  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = {
    "en": ("Some call me nature, others call me mother nature. ", "Hello world, this is a test of F5."),
    "zh": ("对，这就是我，万人敬仰的太乙真人。", "你好，世界！今天天气很好，我们一起学习中文。"),
    "mixed": ("We say 你好 to friends. ", "F5-TTS 说中文 and English; “quotes” ‘too’."),
}


def reference(seconds: float = 0.8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(24000 * seconds)) / 24000
    return (0.05 * torch.sin(2 * torch.pi * 180 * t) * (1 + torch.sin(2 * torch.pi * 3 * t))
            + 0.005 * torch.randn(t.shape, generator=g))


def write_upstream(folder: Path, seed: int = 1) -> Path:
    """Upstream classes from the tiny configs, randomised, saved in the published layout."""
    from f5_tts.model import CFM, DiT
    from vocos import Vocos
    folder.mkdir(parents=True, exist_ok=True)
    tokens = vocab_tokens()
    write_vocab(folder, tokens)
    (folder / "config.yaml").write_text(yaml.safe_dump(training_config(), sort_keys=False), encoding="utf-8")
    mel_kwargs = {k: v for k, v in MEL.items()}
    dit = DiT(**ARCH, text_num_embeds=len(tokens), mel_dim=MEL["n_mel_channels"])
    cfm = CFM(transformer=dit, mel_spec_kwargs=mel_kwargs, vocab_char_map={t: i for i, t in enumerate(tokens)})
    randomize(cfm, seed)
    state = {f"ema_model.{k}": v.contiguous() for k, v in cfm.state_dict().items()}
    state["step"], state["initted"] = torch.tensor(1200), torch.tensor(True)   # ema_pytorch's bookkeeping
    save_file(state, str(folder / "model_1200.safetensors"))
    (folder / "vocos").mkdir(exist_ok=True)
    (folder / "vocos" / "config.yaml").write_text(yaml.safe_dump(VOCOS, sort_keys=False), encoding="utf-8")
    voc = Vocos.from_hparams(str(folder / "vocos" / "config.yaml"))
    randomize(voc.backbone, seed + 1)
    randomize(voc.head, seed + 2, scale=0.05)
    torch.save(voc.state_dict(), folder / "vocos" / "pytorch_model.bin")
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_upstream(tmp_path_factory.mktemp("f5-parity") / "tiny")


@pytest.fixture(scope="module")
def upstream(folder):
    """Upstream's own loaders on the same files (the checkpoint layout is checked from both sides)."""
    from f5_tts.infer.utils_infer import load_model, load_vocoder
    from f5_tts.model import DiT
    arch = {k: v for k, v in ARCH.items()}
    model = load_model(DiT, arch, str(folder / "model_1200.safetensors"), mel_spec_type="vocos",
                       vocab_file=str(folder / "vocab.txt"), device="cpu")
    vocoder = load_vocoder("vocos", is_local=True, local_path=str(folder / "vocos"), device="cpu")
    return model, vocoder


@pytest.fixture(scope="module")
def ours(folder):
    return load_f5_tts(folder, torch.float32)


@pytest.mark.parametrize("lang", sorted(TEXTS))
def test_tokens_equal_upstream(ours, lang):
    from f5_tts.model.utils import convert_char_to_pinyin, list_str_to_idx
    for text in TEXTS[lang]:
        up = convert_char_to_pinyin([text])[0]
        assert ours.tokenizer.tokens(text) == up
        assert ours.tokenizer.encode(text) == list_str_to_idx([up], ours.tokenizer.vocab)[0].tolist()


def test_segmentation_equals_rjieba(ours):
    """Our jieba-driven segmentation against upstream's segmenter (rjieba 0.2.2) on crafted and random text."""
    import random

    import rjieba
    cases = ["F5-TTS, v1.2 is 3.5x faster! e-mail: a_b@c.d", "你好F5-TTS世界", "e-mail地址", "x.y.z", "C++很好",
             "x--y..z", "a.-b", "50%off", "他来到了网易杭研大厦", "小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
             "2024年1月1日，iPhone15发布。", "吃葡萄不吐葡萄皮\n不吃葡萄倒吐葡萄皮", "  多个   空格  ", "㐀㐁 和 龥 字",
             "Ｆ５全角字符，ｔｅｓｔ", *(t for pair in TEXTS.values() for t in pair)]
    rng = random.Random(0)
    alphabet = "ab1.-_%+# 你好世界人中文，。"
    cases += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(3000)]
    differ = [c for c in cases if ours.tokenizer.segments(c) != rjieba.cut(c)]
    assert not differ, differ[:5]


def test_reference_mel_equals_upstream(upstream, ours):
    wav = reference()[None]
    assert torch.equal(ours.mel(wav), upstream[0].mel_spec(wav))


CASES = {
    "euler-32": (FlowSettings(), "euler"),
    "midpoint-8": (FlowSettings(steps=8, method="midpoint"), "midpoint"),
    "epss-16": (FlowSettings(steps=16, cfg_strength=1.5, sway_sampling_coef=None), "euler"),
    "no-cfg-7": (FlowSettings(steps=7, cfg_strength=0.0, sway_sampling_coef=-0.5), "euler"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_sampled_mel_equals_upstream(upstream, ours, case, lang):
    from f5_tts.model.utils import convert_char_to_pinyin
    settings, method = CASES[case]
    model = upstream[0]
    ref_text, text = TEXTS[lang]
    wav = reference()[None]
    final = convert_char_to_pinyin([ref_text + text])
    duration = wav.shape[-1] // 256 + 40
    model.odeint_kwargs = {"method": method}
    with torch.inference_mode():
        want, _ = model.sample(cond=wav, text=final, duration=duration, steps=settings.steps,
                               cfg_strength=settings.cfg_strength, sway_sampling_coef=settings.sway_sampling_coef,
                               seed=7)
        ids = torch.tensor([ours.tokenizer.encode(ref_text + text)])
        got = sample(ours.dit, ours.mel(wav).permute(0, 2, 1), ids, duration,
                     generator=torch.Generator().manual_seed(7), settings=settings)
    model.odeint_kwargs = {"method": "euler"}
    assert got.shape == want.shape
    assert torch.equal(got, want), f"max |diff| {(got - want).abs().max().item():.3g}"


def test_vocos_equals_upstream(upstream, ours):
    vocoder = upstream[1]
    wav = reference(1.1, seed=3)[None]
    with torch.inference_mode():
        feats = vocoder.feature_extractor(wav)
        assert torch.equal(ours.vocoder.feature_extractor(wav), feats)
        mel = torch.randn(1, 100, 57, generator=torch.Generator().manual_seed(5))
        assert torch.equal(ours.vocoder.decode(mel), vocoder.decode(mel))
        assert torch.equal(ours.vocoder.decode(feats), vocoder.decode(feats))


@pytest.mark.parametrize("lang,speed", [("en", 1.0), ("zh", 0.8), ("mixed", 1.3)])
def test_chunk_equals_infer_batch_process(upstream, ours, lang, speed, tmp_path, monkeypatch):
    """The whole chunk (the pydub reference pass, RMS scaling, transcript rule, duration rule, cut,
    vocoder) against upstream's preprocess_ref_audio_text + infer_batch_process with the same seed, on
    the reference as a 16-bit file (torchaudio.load reads it through soundfile, see below)."""
    import soundfile
    import torchaudio
    from f5_tts.infer.utils_infer import infer_batch_process, preprocess_ref_audio_text
    model, vocoder = upstream
    ref_text, text = TEXTS[lang]
    pcm = (reference(0.9, seed=4) * 32768).clamp(-32768, 32767).to(torch.int16)
    soundfile.write(str(tmp_path / "ref.wav"), pcm.numpy(), 24000, subtype="PCM_16")
    path, prepared_text = preprocess_ref_audio_text(str(tmp_path / "ref.wav"), ref_text, show_info=lambda *a: None)
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    torch.manual_seed(21)
    want, sr, _ = next(infer_batch_process((torch.from_numpy(data.T.copy()), rate), prepared_text, [text], model,
                                           vocoder, progress=None, speed=speed, device="cpu"))
    engine = F5TTSEngine(ours, ModelManager(DeviceService()))
    with engine.manager.request(seed=21) as ctx:
        got = engine.speak_chunk(ctx, Chunk(text, seed=21, reference=Reference(pcm.float() / 32768, 24000),
                                            reference_text=ref_text, speed=speed))
    assert sr == 24000
    assert torch.equal(got, torch.from_numpy(want))


# ---- through the Speak pipeline, upstream's defaults, against F5TTS.infer ------------------------------

def stereo_reference_file(path: Path, rate: int = 44100, seconds: float = 1.6) -> torch.Tensor:
    """A 16-bit stereo WAV with 0.3 s of leading silence and a quiet tail (the pydub pass trims both);
    returns its samples as ComfyUI's LoadAudio decodes them ([2, T] float32, int16 / 32768)."""
    import soundfile
    t = torch.arange(int(rate * seconds), dtype=torch.float64) / rate
    voice = 0.3 * torch.sin(2 * torch.pi * 170 * t) * (0.6 + 0.4 * torch.sin(2 * torch.pi * 3 * t))
    left, right = voice, 0.7 * torch.roll(voice, 300)
    pcm = (torch.stack([left, right]) * 32767).round().to(torch.int16)
    pcm[:, : int(0.3 * rate)] = 0
    pcm[:, -int(0.2 * rate):] //= 300
    soundfile.write(str(path), pcm.T.numpy(), rate, subtype="PCM_16")
    return pcm.float() / 32768


PIPELINE_TEXTS = {
    "zh": "今天天气很好。我们去公园散步吧！明天是2024年3月15日，我们再见。" * 14,
    "en": "It costs $5.99, said Dr. Smith. See you on March 3rd at 10:30! " * 20,
}


@pytest.mark.parametrize("lang", sorted(PIPELINE_TEXTS))
def test_the_pipeline_equals_f5tts_infer(upstream, ours, tmp_path, monkeypatch, lang):
    """A SpeakRequest with a 44.1 kHz stereo reference (as LoadAudio gives it) and its transcript, every
    option at its default, against the user-facing F5TTS.infer(ref_file, ref_text, gen_text, seed) on
    the same 16-bit file: the pydub reference pass, the batches, one random stream, the cross-fade.
    Two stand-ins: torchaudio.load (it needs torchcodec here) reads the temporary WAV through soundfile,
    the same int16 / 32768 floats; and infer_batch_process's thread pool gets one worker. With more, its
    batches draw their noise from the global generator in whichever order their threads reach
    torch.randn (measured: the 2-batch Chinese case draws the short batch first, so upstream's own
    output changes from run to run); one worker draws in batch order, as its streaming path does."""
    from concurrent.futures import ThreadPoolExecutor

    import f5_tts.infer.utils_infer as utils_infer
    import soundfile
    import torchaudio
    from f5_tts.api import F5TTS
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize

    monkeypatch.setattr(utils_infer, "ThreadPoolExecutor", lambda: ThreadPoolExecutor(max_workers=1))

    def load(path, *a, **k):
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        return torch.from_numpy(data.T.copy()), rate
    monkeypatch.setattr(torchaudio, "load", load)
    ref_text = "Some call me nature, others call me mother nature."
    samples = stereo_reference_file(tmp_path / f"ref-{lang}.wav")
    api = F5TTS.__new__(F5TTS)
    api.ema_model, api.vocoder = upstream
    api.mel_spec_type, api.target_sample_rate, api.device = "vocos", 24000, "cpu"
    want, sr, _ = api.infer(str(tmp_path / f"ref-{lang}.wav"), ref_text, PIPELINE_TEXTS[lang], show_info=lambda *a: None,
                            progress=None, seed=7)
    engine = F5TTSEngine(ours, ModelManager(DeviceService()))
    got, meta = synthesize(engine, SpeakRequest(PIPELINE_TEXTS[lang], seed=7, reference_text=ref_text,
                                                reference={"waveform": samples[None], "sample_rate": 44100}))
    assert sr == 24000 and meta["chunks"] >= 2, meta["chunks"]
    want = torch.from_numpy(want)                   # float64: upstream's cross-fade is numpy float64
    assert got.shape == want.shape, f"{tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.equal(got, want.float()), f"max |ours - upstream| {(got.double() - want).abs().max().item():.3g}"

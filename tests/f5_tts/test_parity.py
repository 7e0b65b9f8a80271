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
from mizuoto.nodes.common.engine import Chunk, Reference  # noqa: E402
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
def test_chunk_equals_infer_batch_process(upstream, ours, lang, speed):
    """The whole chunk (RMS scaling, transcript rule, duration rule, cut, vocoder) against upstream's
    infer_batch_process with the same seed."""
    from f5_tts.infer.utils_infer import infer_batch_process
    model, vocoder = upstream
    ref_text, text = TEXTS[lang]
    wav = reference(0.9, seed=4)
    torch.manual_seed(21)
    want, sr, _ = next(infer_batch_process((wav[None], 24000), ref_text, [text], model, vocoder, progress=None,
                                           speed=speed, device="cpu"))
    engine = F5TTSEngine(ours, ModelManager(DeviceService()))
    with engine.manager.request(seed=21) as ctx:
        got = engine.speak_chunk(ctx, Chunk(text, seed=21, reference=Reference(wav, 24000),
                                            reference_text=ref_text.rstrip(" ") if lang != "zh" else ref_text,
                                            speed=speed))
    assert sr == 24000
    assert torch.equal(got, torch.from_numpy(want))

"""Parity with the upstream package (voxcpm 2.0.3 on transformers >= 5.3) on tiny random checkpoints.

Upstream's own VoxCPM2Model is built from a tiny config, every parameter randomised, and saved in the
upstream layout (model.safetensors, audiovae.pth, config.json, tokenizer.json); our loader reads those
files. The same text, reference audio and seed must give equal latents, frame counts (the stop
decision) and audio, `torch.equal` in float32, through upstream's `generate_with_prompt_cache` (the
path `VoxCPM.generate` takes): zero-shot, voice design, reference, continuation and both, English and
Chinese, with the bad-case retry; in bfloat16 too (upstream's `from_local`). Needs a separate venv: see
README.md.

Our decode loop runs with `kv="static"` here: attention over a zero-filled buffer read whole under a
mask, the way upstream reads its preallocated 8192-position cache. With the default growing cache the
attention sums run over fewer keys, in another order: the same numbers to float rounding, measured
and printed below (`test_dynamic_cache_close`).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from qwen3_tts.torchaudio_shim import install as _cpu_torchaudio  # noqa: E402

_upstream = importlib.util.find_spec("voxcpm")   # None, or this tests/voxcpm folder (a namespace: no origin)
if _upstream is None or _upstream.origin is None:          # checked before anything is stubbed below
    pytest.skip("the voxcpm package is not installed (parity venv only, see README.md)", allow_module_level=True)
_cpu_torchaudio()
_WAVES: dict[str, np.ndarray] = {}
_STUB = None
if importlib.util.find_spec("librosa") is None:
    # upstream imports librosa for loading files and trimming silence; the test hands it waves directly
    _STUB = types.ModuleType("librosa")
    _STUB.__spec__ = importlib.machinery.ModuleSpec("librosa", None)
    _STUB.load = lambda path, sr=None, mono=True: (_WAVES[str(path)], sr)
    sys.modules["librosa"] = _STUB
try:
    import tokenizers  # noqa: F401
    import voxcpm.model.voxcpm2  # noqa: F401
except ImportError as e:
    if _STUB is not None:
        del sys.modules["librosa"]
    pytest.skip(f"the upstream package does not import: {e}", allow_module_level=True)

from mizuoto.nodes.voxcpm.generate import Sampling, build_prompt, decode_latents, encode_audio, generate  # noqa: E402
from mizuoto.nodes.voxcpm.loader import load_voxcpm  # noqa: E402
from mizuoto.nodes.voxcpm.text import normalize_spaces, with_control  # noqa: E402


def _load_tiny():
    spec = importlib.util.spec_from_file_location("voxcpm_tiny", Path(__file__).with_name("tiny.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tiny = _load_tiny()
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: one thread is faster


@pytest.fixture(scope="module", autouse=True)
def _unstub_librosa():
    """The stand-in serves this module only: later tests must not find a librosa without its functions."""
    yield
    if _STUB is not None and sys.modules.get("librosa") is _STUB:
        del sys.modules["librosa"]


def upstream_model(folder: Path, cfg: dict, seed: int, silent_stop: bool = False):
    """Upstream's VoxCPM2Model from `cfg`, every parameter randomised, saved in the upstream layout."""
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    tiny.write_tokenizer(folder)
    config = VoxCPMConfig.model_validate_json((folder / "config.json").read_text())
    torch.manual_seed(seed)
    vae = AudioVAEV2(config=AudioVAEConfigV2(**cfg["audio_vae_config"]))
    model = VoxCPM2Model(config, LlamaTokenizerFast.from_pretrained(str(folder)), vae, device="cpu").float().eval()
    state = tiny.random_state(model, seed)
    if silent_stop:          # the model never stops (bad-case retries)
        tiny.silence(state)
    model.load_state_dict(state, strict=True)
    save_file({k: v for k, v in state.items() if not k.startswith("audio_vae.")}, str(folder / "model.safetensors"))
    torch.save({k[len("audio_vae."):]: v for k, v in state.items() if k.startswith("audio_vae.")},
               folder / "audiovae.pth")
    return model


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("voxcpm") / "tiny"
    up = upstream_model(folder, tiny.CONFIG, seed=5)
    return up, load_voxcpm(folder, torch.float32)


@pytest.fixture(scope="module")
def silent_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("voxcpm") / "silent"
    up = upstream_model(folder, tiny.CONFIG, seed=6, silent_stop=True)
    return up, load_voxcpm(folder, torch.float32)


def wave_file(tmp_path: Path, name: str, wav: torch.Tensor, rate: int = 16000) -> str:
    """A float32 WAV file of `wav` ([T] or [C, T]): librosa reads it when installed, the stand-in from
    _WAVES (mono, at the model's rate) when not."""
    import soundfile
    path = str(tmp_path / name)
    soundfile.write(path, wav.numpy().T.astype(np.float32), rate, subtype="FLOAT")
    _WAVES[path] = wav.numpy().astype(np.float32)
    return path


def run_upstream(up, text: str, seed: int, cache: dict | None, **kw):
    torch.manual_seed(seed)
    with torch.inference_mode():
        wav, _, feats = up.generate_with_prompt_cache(target_text=text, prompt_cache=cache, **kw)
    return wav[0], feats


def run_ours(bundle, text: str, seed: int, *, ref=None, prompt=None, prompt_text: str = "", kv="static",
             s: Sampling | None = None):
    c = bundle.config
    tok = bundle.tokenizer
    reference = encode_audio(bundle.vae, ref, c.patch_size, pad_left=False) if ref is not None else None
    continuation = encode_audio(bundle.vae, prompt, c.patch_size, pad_left=True) if prompt is not None else None
    p = build_prompt(tok(prompt_text + text), c.patch_size, c.feat_dim, reference=reference, continuation=continuation)
    s = s or Sampling(max_len=4096)
    latents, frames = generate(bundle.model, p, s, torch.Generator().manual_seed(seed), len(tok(text)), kv=kv)
    wav = decode_latents(bundle.vae, latents, p.context, c.patch_size)
    feats = latents.reshape(1, c.feat_dim, -1, c.patch_size).permute(0, 2, 3, 1)[0, p.context:]
    return wav, feats, frames


UPSTREAM = dict(min_len=2, max_len=4096, inference_timesteps=10, cfg_value=2.0, retry_badcase=True,
                retry_badcase_max_times=3, retry_badcase_ratio_threshold=6.0)

CASES = {   # name: (text, reference?, continuation transcript or None, control)
    "en zero-shot": ("hello world, the tiny voice speaks.", False, None, None),
    "zh zero-shot": ("你好世界，我们说话。", False, None, None),
    "en design": ("hello test", False, None, "warm voice"),
    "en reference": ("speak the test", True, None, None),
    "zh reference": ("我们说话", True, None, None),
    "en continuation": ("the world", False, "hello ", None),
    "zh reference + continuation": ("世界", True, "你好", None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_generation_equal(pair, tmp_path, case):
    up, ours = pair
    text, with_ref, transcript, control = CASES[case]
    text = with_control(normalize_spaces(text), control)
    ref = tiny.reference_wave(0.031, freq=190.0)
    prompt = tiny.reference_wave(0.023, freq=330.0)
    cache = None
    if with_ref or transcript is not None:
        cache = up.build_prompt_cache(prompt_text=transcript, prompt_wav_path=wave_file(tmp_path, "p.wav", prompt)
                                      if transcript is not None else None,
                                      reference_wav_path=wave_file(tmp_path, "r.wav", ref) if with_ref else None)
    wav_up, feats_up = run_upstream(up, text, 17, cache, **UPSTREAM)
    wav, feats, frames = run_ours(ours, text, 17, ref=ref if with_ref else None,
                                  prompt=prompt if transcript is not None else None, prompt_text=transcript or "")
    if with_ref:
        assert torch.equal(cache["ref_audio_feat"], encode_audio(ours.vae, ref, 2, pad_left=False))
    if transcript is not None:
        assert torch.equal(cache["audio_feat"], encode_audio(ours.vae, prompt, 2, pad_left=True))
    print(f"{case}: {frames} frames, {wav.numel()} samples")
    assert feats.shape == feats_up.shape            # the same stop decision
    assert torch.equal(feats, feats_up)
    assert torch.equal(wav, wav_up)


def test_bad_case_retries_equal(silent_pair):
    """A model that never stops: each attempt runs to ratio x tokens + 10 frames and is drawn again."""
    up, ours = silent_pair
    text = "hello world"
    wav_up, feats_up = run_upstream(up, text, 3, None, **UPSTREAM)
    wav, feats, frames = run_ours(ours, text, 3)
    assert frames == int(len(ours.tokenizer(text)) * 6.0 + 10) == feats_up.shape[0]
    assert torch.equal(feats, feats_up) and torch.equal(wav, wav_up)


def test_tokenizer_equal(pair):
    up, ours = pair
    for text in ("hello world", "你好世界", "Hello, the voice! 我们说话。", "  spaced  text ", "你好 world 世界好",
                 "ÿ€ unicode ☃", "(warm voice)hello"):
        assert ours.tokenizer(text) == up.text_tokenizer(text), text


def test_dynamic_cache_close(pair):
    """The default growing cache: same frames, latents and audio to float rounding (printed)."""
    up, ours = pair
    text = "hello world, the tiny voice speaks."
    wav_up, feats_up = run_upstream(up, text, 17, None, **UPSTREAM)
    wav, feats, _ = run_ours(ours, text, 17, kv="dynamic")
    print(f"dynamic cache: latents max |diff| {(feats - feats_up).abs().max().item():.3g}, "
          f"audio max |diff| {(wav - wav_up).abs().max().item():.3g}")
    assert feats.shape == feats_up.shape
    torch.testing.assert_close(feats, feats_up, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(wav, wav_up, atol=1e-4, rtol=1e-4)


def test_bfloat16_equal(tmp_path):
    """The published dtype: upstream's own `from_local` (the LMs cast to bfloat16, the AudioVAE float32)
    against our loader reading the config's dtype."""
    from voxcpm.model.voxcpm2 import VoxCPM2Model
    folder = tmp_path / "bf16"
    upstream_model(folder, tiny.config(dtype="bfloat16"), seed=5)
    up = VoxCPM2Model.from_local(str(folder), optimize=False, device="cpu")
    ours = load_voxcpm(folder, None)
    assert ours.dtype == torch.bfloat16 and up.base_lm.norm.weight.dtype == torch.bfloat16
    for text in ("hello world, the tiny voice speaks.", "你好世界，我们说话。"):
        wav_up, feats_up = run_upstream(up, text, 17, None, **UPSTREAM)
        wav, feats, _ = run_ours(ours, text, 17)
        assert feats.shape == feats_up.shape
        assert torch.equal(feats.to(feats_up.dtype), feats_up) and torch.equal(wav, wav_up)


@pytest.mark.skipif(_STUB is not None, reason="reading a 44.1 kHz stereo file needs the real librosa")
@pytest.mark.parametrize("text,transcript", [
    ("今天天气很好。我们去公园散步吧！\n明天是2024年3月15日。", "你好"),
    ("It costs $5.99, said Dr. Smith. See you at 10:30!", None),
])
def test_the_pipeline_in_bfloat16_equals_voxcpm_generate(tmp_path, text, transcript):
    """The user's path: the published bfloat16 folder loaded at its default precision, a SpeakRequest with
    a 44.1 kHz stereo reference (and, in the Chinese case, its transcript: continuation as well as
    reference cloning), every option at its default, through the Speak pipeline; against upstream's
    VoxCPM.generate(text, reference_wav_path=..., prompt_wav_path=..., prompt_text=...) on the same file
    (librosa.load(sr=16000, mono=True): the mean, then soxr)."""
    from voxcpm.core import VoxCPM
    from voxcpm.model.voxcpm2 import VoxCPM2Model
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    from mizuoto.nodes.voxcpm.phases import VoxCPMEngine
    from mizuoto.runtime import DeviceService, ModelManager
    folder = tmp_path / "bf16"
    # max_length: upstream's static cache must hold the reference, the continuation and the text
    upstream_model(folder, tiny.config(dtype="bfloat16", max_length=4096), seed=5)
    api = VoxCPM.__new__(VoxCPM)
    api.tts_model = VoxCPM2Model.from_local(str(folder), optimize=False, device="cpu")
    api.text_normalizer = api.denoiser = None
    left = tiny.reference_wave(0.6, rate=44100, freq=190.0)
    stereo = torch.stack([left, 0.6 * torch.roll(left, 200)])
    path = wave_file(tmp_path, "ref.wav", stereo, rate=44100)
    torch.manual_seed(17)
    want = api.generate(text=text, reference_wav_path=path, prompt_wav_path=path if transcript else None,
                        prompt_text=transcript)
    engine = VoxCPMEngine(load_voxcpm(folder, None), ModelManager(DeviceService()))
    assert engine.bundle.dtype == torch.bfloat16
    got, meta = synthesize(engine, SpeakRequest(text, seed=17, reference_text=transcript,
                                                reference={"waveform": stereo[None], "sample_rate": 44100}))
    want = torch.from_numpy(want)
    assert meta["chunks"] == 1 and got.shape == want.shape, f"{tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.equal(got, want), f"max |ours - upstream| {(got - want).abs().max().item():.3g}"


"""GPT-SoVITS loader and engine on tiny upstream-layout folders (tiny.py): the restricted unpickler for s2G
files, errors that name the file and field, and speech through the Speak pipeline for v2 and v2Pro, in
English and in Chinese (with upstream's pypinyin path, and with G2PW when the folder has G2PWModel/)."""
from __future__ import annotations

import dataclasses
import io
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")

from mizuoto.nodes.formats.checkpoint import ModelFolderError, load_pickle_with_records
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.nodes.gpt_sovits import loader
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

from gpt_sovits import tiny

SPEC = {s.engine_id: s for s in discover()}["gpt_sovits"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("gsv")
    for v in ("v2", "v2Pro"):
        tiny.write_folder(r, v)
    return r


def reference(seconds: float = 3.2) -> dict:
    t = torch.arange(int(32000 * seconds)) / 32000
    wav = 0.3 * torch.sin(2 * torch.pi * 170 * t) * (1 + torch.sin(2 * torch.pi * 3 * t)) / 2
    return {"waveform": wav[None, None], "sample_rate": 32000}


def speak(folder: Path, text: str = "Hello world.", seed: int = 1, **kw) -> torch.Tensor:
    engine = SPEC.build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")), ModelManager(DeviceService()))
    request = SpeakRequest(text, seed=seed, language=kw.pop("language", "en"), reference=kw.pop("ref", reference()),
                           reference_text=kw.pop("reference_text", "Good day."), **kw)
    wav, _ = synthesize(engine, request)
    return wav


# ---- the SoVITS file: header + utils.HParams through the restricted unpickler ---------------------------------


def test_v2pro_header_and_hparams_load_as_plain_data(root):
    path = root / "tiny-v2Pro" / "s2Gtiny_e8_s200.pth"
    assert path.read_bytes()[:2] == b"05"
    obj = load_pickle_with_records(path, ("utils.HParams",))
    assert obj["config"]["model"]["gin_channels"] == 16 and isinstance(obj["config"]["data"], dict)
    assert loader.sovits_version(path) == "v2Pro"
    assert path.read_bytes()[:2] == b"05"          # restored in memory only


class Payload:
    """Any global besides the allowed ones: unpickling it would call os.system."""

    def __reduce__(self):
        import os
        return (os.system, ("echo pwned > /dev/null",))


@pytest.mark.parametrize("header", [b"PK", b"05"])
def test_any_other_global_is_refused(tmp_path, header):
    bio = io.BytesIO()
    torch.save({"weight": {"x": torch.zeros(2)}, "config": Payload()}, bio)
    path = tmp_path / "evil.pth"
    path.write_bytes(header + bio.getvalue()[2:])
    with pytest.raises(CheckpointError, match=r"evil\.pth.*(system|posix|GLOBAL)"):
        load_pickle_with_records(path, ("utils.HParams",))
    with pytest.raises(CheckpointError, match="evil.pth"):
        loader.load_sovits(path, torch.float32)


def test_a_class_named_like_hparams_elsewhere_is_refused(tmp_path):
    mod = types.ModuleType("other")

    class HParams:
        pass
    HParams.__module__, HParams.__qualname__ = "other", "HParams"
    mod.HParams = HParams
    sys.modules["other"] = mod
    try:
        obj = HParams()
        obj.x = 1
        bio = io.BytesIO()
        torch.save({"config": obj}, bio)
    finally:
        del sys.modules["other"]
    path = tmp_path / "other.pth"
    path.write_bytes(bio.getvalue())
    with pytest.raises(CheckpointError, match="other.HParams"):
        load_pickle_with_records(path, ("utils.HParams",))


def test_hparams_with_non_attribute_state_is_refused(tmp_path):
    mod = tiny.hparams_module()

    class Odd(mod.HParams):
        def __reduce__(self):
            return (mod.HParams, (), ["not", "a", "dict"])
    sys.modules["utils"] = mod
    try:
        bio = io.BytesIO()
        torch.save({"config": Odd()}, bio)
    finally:
        del sys.modules["utils"]
    path = tmp_path / "odd.pth"
    path.write_bytes(bio.getvalue())
    with pytest.raises(CheckpointError, match="odd.pth"):
        load_pickle_with_records(path, ("utils.HParams",))


@pytest.mark.parametrize("code,name", [(b"02", "v3"), (b"04", "v4 LoRA"), (b"00", "v1")])
def test_other_versions_are_named_and_refused(tmp_path, root, code, name):
    path = tmp_path / "s2G.pth"
    path.write_bytes(code + (root / "tiny-v2" / "s2Gtiny_e8_s200.pth").read_bytes()[2:])
    with pytest.raises(CheckpointError, match=f"s2G.pth: a GPT-SoVITS {name} SoVITS model"):
        loader.load_sovits(path, torch.float32)


# ---- folder and checkpoint errors name the file --------------------------------------------------------------


def copy_voice(root: Path, tmp_path: Path, version: str = "v2") -> Path:
    shutil.copytree(root / "pretrained_models", tmp_path / "pretrained_models")
    return Path(shutil.copytree(root / f"tiny-{version}", tmp_path / "voice"))


def test_folder_needs_exactly_one_pair(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    assert SPEC.is_model_folder(folder)
    shutil.copy(folder / "s1tiny-e15.ckpt", folder / "s1other.ckpt")
    assert not SPEC.is_model_folder(folder)
    with pytest.raises(FileNotFoundError, match=r"exactly one GPT weights file.*s1other.ckpt"):
        loader.load_gpt_sovits(folder)
    assert not SPEC.is_model_folder(root / "pretrained_models")


def test_missing_hubert_names_the_file(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    (tmp_path / "pretrained_models" / "chinese-hubert-base" / "pytorch_model.bin").unlink()
    assert not SPEC.is_model_folder(folder)
    with pytest.raises(FileNotFoundError, match="chinese-hubert-base has neither"):
        loader.load_gpt_sovits(folder)


def test_wrong_shape_names_file_and_key(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    w = tiny.sovits_weights("v2")
    w["dec.conv_pre.weight"] = torch.zeros(3, 3, 3)
    tiny.save_sovits(folder / "s2Gtiny_e8_s200.pth", w, tiny.s2_config("v2"), "v2")
    with pytest.raises(CheckpointError, match=r"s2Gtiny_e8_s200.pth.*dec\.conv_pre\.weight"):
        loader.load_gpt_sovits(folder)


def test_bad_config_field_names_file_and_field(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    cfg = tiny.s2_config("v2")
    cfg["model"]["upsample_rates"] = [10, -8, 2, 2, 2]
    tiny.save_sovits(folder / "s2Gtiny_e8_s200.pth", tiny.sovits_weights("v2"), cfg, "v2")
    with pytest.raises(CheckpointError, match=r"s2Gtiny_e8_s200.pth: config.model.upsample_rates"):
        loader.load_gpt_sovits(folder)
    t2s = {**tiny.T2S_CONFIG, "model": {**tiny.T2S_CONFIG["model"], "n_layer": 0}}
    tiny.save_t2s(folder / "s1tiny-e15.ckpt", tiny.t2s_weights(), t2s)
    with pytest.raises(CheckpointError, match=r"s1tiny-e15.ckpt: config.model.n_layer"):
        loader.load_t2s(folder / "s1tiny-e15.ckpt", torch.float32)


def test_v1_symbol_table_is_refused(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    w = tiny.sovits_weights("v2")
    w["enc_p.text_embedding.weight"] = torch.zeros(322, 192)
    tiny.save_sovits(folder / "s2Gtiny_e8_s200.pth", w, tiny.s2_config("v2"), "v2")
    with pytest.raises(CheckpointError, match="322: a v1 model"):
        loader.load_gpt_sovits(folder)


def test_enc_q_weights_are_ignored(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    w = tiny.sovits_weights("v2")
    w["enc_q.pre.weight"] = torch.zeros(4, 4, 1)
    opt = {"weight": {k: v.half() for k, v in w.items()}}       # a training checkpoint keeps enc_q
    mod = tiny.hparams_module()
    sys.modules["utils"] = mod
    try:
        opt["config"] = mod.HParams(**tiny.s2_config("v2"))
        torch.save(opt, folder / "s2Gtiny_e8_s200.pth")
    finally:
        del sys.modules["utils"]
    assert loader.load_gpt_sovits(folder).version == "v2"


# ---- speech --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v2", "v2Pro"])
def test_speaks_deterministically(root, version):
    folder = root / f"tiny-{version}"
    a = speak(folder, seed=3)
    assert a.dim() == 1 and a.numel() > 32000 * 0.3 and bool(torch.isfinite(a).all())
    assert a.abs().max() <= 1
    assert torch.equal(a, speak(folder, seed=3))
    assert not torch.equal(a, speak(folder, seed=4))


def test_speed_and_sampling_options(root):
    folder = root / "tiny-v2"
    base = speak(folder, seed=2)
    assert not torch.equal(base, speak(folder, seed=2, speed=1.4))
    assert not torch.equal(base, speak(folder, seed=2, options={"top_k": 1, "temperature": 0.5}))
    with pytest.raises(ValueError, match="top_k"):
        speak(folder, options={"top_k": 0})


def test_reference_outside_3_to_10_seconds_is_refused(root):
    with pytest.raises(ValueError, match="reference"):
        speak(root / "tiny-v2", ref=reference(2.0))


def test_missing_lexicon_is_a_clear_error(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    shutil.rmtree(tmp_path / "pretrained_models" / "text")
    with pytest.raises(FileNotFoundError, match="cmudict.rep"):
        speak(folder)


ZH = "今天天气很好，我们一起去公园吧。Hello world!"


def test_speaks_chinese_with_english_words(root):
    folder = root / "tiny-v2"
    a = speak(folder, ZH, seed=3, language="zh", reference_text="你好，朋友")
    assert a.dim() == 1 and a.numel() > 32000 * 0.3 and bool(torch.isfinite(a).all())
    assert torch.equal(a, speak(folder, ZH, seed=3, language="zh", reference_text="你好，朋友"))
    # a Chinese transcript is read as Chinese under English text too (cross-lingual cloning)
    assert not torch.equal(speak(folder, seed=3, reference_text="你好，朋友"), speak(folder, seed=3))


@pytest.mark.parametrize("text,language", [("😀！", "zh"), ("Café.", "zh"), ("……", "en")])
def test_text_with_nothing_to_read_is_refused(root, text, language):
    with pytest.raises(ValueError, match="the text .* has nothing to read"):
        speak(root / "tiny-v2", text, language=language, reference_text="你好，朋友")


@pytest.mark.parametrize("transcript", ["😀！", "……"])
def test_transcript_with_nothing_to_read_is_refused(root, transcript):
    with pytest.raises(ValueError, match="the reference transcript .* has nothing to read"):
        speak(root / "tiny-v2", reference_text=transcript)


def test_a_chunk_of_only_symbols_among_others_is_skipped(root):
    text = "你好，朋友。Café, Café, Café."            # cut5: "Café," alone is a segment, nothing to read in zh
    engine = SPEC.build(LoadRequest("tiny", root / "tiny-v2", torch.float32, torch.device("cpu")),
                        ModelManager(DeviceService()))
    assert engine.split_text(text, language="zh") == ["你好，朋友。", "Café,", " Café,", " Café."]
    request = SpeakRequest(text, seed=2, language="zh", reference=reference(), reference_text="你好，朋友")
    wav, meta = synthesize(engine, request)
    alone, _ = synthesize(engine, dataclasses.replace(request, text="你好，朋友。"))
    assert meta["chunks"] == 4 and torch.equal(wav, alone)    # the first chunk's audio and nothing more


def test_chinese_needs_roberta(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    shutil.rmtree(tmp_path / "pretrained_models" / "chinese-roberta-wwm-ext-large")
    speak(folder)                                           # English reads zero BERT features: still fine
    with pytest.raises(ValueError, match="chinese-roberta-wwm-ext-large"):
        speak(folder, ZH, language="zh")
    with pytest.raises(ValueError, match="reference transcript is Chinese"):
        speak(folder, reference_text="你好，朋友")


def test_g2pw_model_folder_is_used(root, tmp_path):
    folder = copy_voice(root, tmp_path)
    fixtures = Path(__file__).parent / "fixtures"
    shutil.copytree(fixtures / "g2pw_model", tmp_path / "pretrained_models" / "G2PWModel")
    engine = SPEC.build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")), ModelManager(DeviceService()))
    with pytest.raises(ModelFolderError, match="polyphonic.rep"):
        engine.segments("银行", "zh", "the text")           # G2PW reads upstream's polyphone tables too
    shutil.copytree(fixtures / "g2pw_text" / "g2pw", tmp_path / "pretrained_models" / "text" / "g2pw")
    engine.segments("银行", "zh", "the text")
    assert engine.g2pw is not None and engine.polyphonic
    request = SpeakRequest(ZH, seed=3, language="zh", reference=reference(), reference_text="你好，朋友")
    wav, _ = synthesize(engine, request)
    assert bool(torch.isfinite(wav).all()) and wav.numel() > 0


# A slice of lj1995/GPT-SoVITS's file list (pretrained pairs of every version, the shared models).
HUB = ["README.md", "s1bert25hz-2kh-longer-epoch=68e-step=50232.ckpt", "s2G488k.pth", "s1v3.ckpt", "s2Gv3.pth",
       "gsv-v2final-pretrained/s1bert25hz-5kh-longer-epoch=12-step=369668.ckpt", "gsv-v2final-pretrained/s2G2333k.pth",
       "gsv-v2final-pretrained/s2D2333k.pth", "gsv-v4-pretrained/s2Gv4.pth", "v2Pro/s2Gv2Pro.pth", "v2Pro/s2Dv2Pro.pth",
       "v2Pro/s2Gv2ProPlus.pth", "v2Pro/s2Dv2ProPlus.pth", "sv/pretrained_eres2netv2w24s4ep4.ckpt",
       "chinese-hubert-base/config.json", "chinese-hubert-base/preprocessor_config.json",
       "chinese-hubert-base/pytorch_model.bin", "chinese-roberta-wwm-ext-large/config.json",
       "chinese-roberta-wwm-ext-large/pytorch_model.bin", "chinese-roberta-wwm-ext-large/tokenizer.json"]


@pytest.mark.parametrize("name,sovits", [("GPT-SoVITS-v2", "s2G2333k.pth"), ("GPT-SoVITS-v2Pro", "s2Gv2Pro.pth"),
                                         ("GPT-SoVITS-v2ProPlus", "s2Gv2ProPlus.pth")])
def test_download_entries_make_a_voice_folder(tmp_path, name, sovits):
    (download,) = SPEC.models[name]
    files = {download.destination(f) for f in HUB if download.wants(f)}
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).touch()
    gpt, pth = loader.pair(tmp_path)
    assert pth.name == sovits and gpt.name.endswith(".ckpt") and SPEC.is_model_folder(tmp_path)
    assert {f.split("/")[0] for f in files if "/" in f} == (
        {"chinese-hubert-base", "chinese-roberta-wwm-ext-large"} | ({"sv"} if "Pro" in name else set()))

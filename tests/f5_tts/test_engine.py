"""F5-TTS engine on a tiny random checkpoint in the upstream layout (no f5-tts, no vocos package):
loading, errors that name the file and field, the real-size structure, the text front end, seeds,
speed and the duration rule."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from f5_tts.tiny import VOCOS, training_config, write_tiny_checkpoint
from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.blocks.vocoder import Vocos, VocosConfig
from mizuoto.nodes.f5_tts import ENGINE
from mizuoto.nodes.f5_tts.loader import ModelFolderError, V1_BASE_ARCH, V1_MEL, find_models, load_f5_tts
from mizuoto.nodes.f5_tts.model import DiTConfig, F5Checkpoint
from mizuoto.nodes.f5_tts.phases import F5TTSEngine, frames_for
from mizuoto.nodes.f5_tts.text import F5Tokenizer, read_vocab, reference_prompt
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

HERE = Path(__file__).parent
REF_TEXT = "Some call me nature."
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tts") / "f5_tts"
    write_tiny_checkpoint(root / "tiny", seed=1)
    return root


@pytest.fixture(scope="module")
def engine(root):
    return F5TTSEngine(load_f5_tts(root / "tiny"), ModelManager(DeviceService()), min_unit_bytes=64 << 10)


def reference(seconds: float = 0.6) -> torch.Tensor:
    t = torch.arange(int(24000 * seconds)) / 24000
    return 0.04 * torch.sin(2 * torch.pi * 200 * t) * (1 + torch.sin(2 * torch.pi * 4 * t))


def speak(engine, text="Hello there, friend.", seed=0, speed=1.0, ref=None, ref_text=REF_TEXT, **options):
    chunk = Chunk(text, seed=seed, reference=Reference(reference() if ref is None else ref, 24000),
                  reference_text=ref_text, speed=speed, options={"steps": 6, **options})
    with engine.manager.request(seed=seed) as ctx:
        return engine.speak_chunk(ctx, chunk)


# ---- structure ------------------------------------------------------------------------------------------

def test_real_size_dit_has_the_published_tensor_names_and_shapes():
    """Recorded from upstream's CFM(DiT) built from F5TTS_v1_Base.yaml (real_structure.py)."""
    real = json.loads((HERE / "real_F5TTS_v1_Base.json").read_text())
    assert real["arch"] == {**V1_BASE_ARCH, "attn_backend": "torch", "attn_mask_enabled": False,
                            "checkpoint_activations": False}
    assert {k: real["mel_spec"][k] for k in V1_MEL} == V1_MEL
    cfg = DiTConfig.from_arch(real["arch"], mel_dim=real["mel_spec"]["n_mel_channels"], vocab_size=real["vocab_size"],
                              source="F5TTS_v1_Base.yaml")
    with torch.device("meta"):
        ours = F5Checkpoint(cfg, {})
    assert {k: list(v.shape) for k, v in ours.state_dict().items()} == real["tensors"]
    assert len(real["tensors"]) == 364            # + step and initted = the published file's 366


def test_real_size_vocos_has_the_published_tensor_names_and_shapes():
    real = json.loads((HERE / "real_vocos_mel_24khz.json").read_text())
    ours = Vocos(VocosConfig.from_dict(real["config"]))
    assert {k: list(v.shape) for k, v in ours.state_dict().items()} == real["tensors"]


def test_engine_spec():
    assert ENGINE.loader_node == "MizuotoLoadF5TTS" and ENGINE.engine_id == F5TTSEngine.engine_id
    assert "CC-BY-NC-4.0" in ENGINE.license and "CC-BY-NC-4.0" in ENGINE.description
    caps = F5TTSEngine.capabilities
    assert caps.cloning == "required" and caps.transcript == "required" and caps.sample_rate == 24000
    files = {d.destination(f) for d in ENGINE.models["F5TTS_v1_Base"] for f in d.include}
    assert files == {"model_1250000.safetensors", "vocab.txt", "vocos/config.yaml", "vocos/pytorch_model.bin"}


# ---- loading and errors ---------------------------------------------------------------------------------

def test_find_models(root, tmp_path):
    assert find_models(root) == ["tiny"]
    assert ENGINE.is_model_folder(root / "tiny") and not ENGINE.is_model_folder(tmp_path)
    assert find_models(tmp_path / "nowhere") == []


def test_missing_files_are_named(root, tmp_path):
    with pytest.raises(ModelFolderError, match="not found"):
        load_f5_tts(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(root / "tiny", broken)
    (broken / "vocos" / "pytorch_model.bin").unlink()
    with pytest.raises(ModelFolderError, match="vocos/pytorch_model.bin"):
        load_f5_tts(broken)
    (broken / "model_1200.safetensors").unlink()
    with pytest.raises(ModelFolderError, match="model_<step>.safetensors"):
        load_f5_tts(broken)


def test_bad_config_fields_name_the_file_and_field(root, tmp_path):
    broken = tmp_path / "badcfg"
    shutil.copytree(root / "tiny", broken)
    cfg = training_config()
    cfg["model"]["arch"]["dim"] = "wide"
    (broken / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(CheckpointError, match=r"config\.yaml: model\.arch\.dim"):
        load_f5_tts(broken)
    cfg = training_config()
    cfg["model"]["mel_spec"]["mel_spec_type"] = "bigvgan"
    (broken / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(CheckpointError, match=r"config\.yaml: model\.mel_spec\.mel_spec_type"):
        load_f5_tts(broken)
    (broken / "config.yaml").write_text(yaml.safe_dump(training_config()))
    voc = dict(VOCOS, head={"class_path": "os.system", "init_args": {}})
    (broken / "vocos" / "config.yaml").write_text(yaml.safe_dump(voc))
    with pytest.raises(ValueError, match=r"vocos/config\.yaml: head\.class_path"):
        load_f5_tts(broken)


def test_wrong_shapes_and_vocab_name_the_file(root, tmp_path):
    broken = tmp_path / "shapes"
    shutil.copytree(root / "tiny", broken)
    with open(broken / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(CheckpointError, match=r"model_1200\.safetensors.*vocab\.txt"):
        load_f5_tts(broken)
    shutil.copy(root / "tiny" / "vocab.txt", broken / "vocab.txt")
    state = load_file(broken / "model_1200.safetensors")
    key = "ema_model.transformer.transformer_blocks.0.attn.to_q.weight"
    state[key] = state[key][:, :-1].contiguous()
    save_file(state, str(broken / "model_1200.safetensors"))
    with pytest.raises(CheckpointError, match=r"model_1200\.safetensors.*shape mismatch.*to_q"):
        load_f5_tts(broken)
    del state[key]
    save_file(state, str(broken / "model_1200.safetensors"))
    with pytest.raises(CheckpointError, match=r"model_1200\.safetensors.*missing keys.*to_q"):
        load_f5_tts(broken)


def test_vocoder_pickle_is_loaded_strictly_and_safely(root, tmp_path):
    broken = tmp_path / "voc"
    shutil.copytree(root / "tiny", broken)
    path = broken / "vocos" / "pytorch_model.bin"
    state = torch.load(path, weights_only=True)
    state["head.extra"] = torch.zeros(1)
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"vocos/pytorch_model\.bin.*head\.extra"):
        load_f5_tts(broken)
    torch.save({"weights": Path("/tmp")}, path)          # an arbitrary object: refused, not built
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: not loaded.*pathlib"):
        load_f5_tts(broken)


def test_half_precision_load_keeps_the_vocoder_in_float32(root):
    b = load_f5_tts(root / "tiny", torch.float16)
    assert b.dtype == torch.float16 and b.dit.transformer_blocks[0].attn.to_q.weight.dtype == torch.float16
    assert next(b.vocoder.parameters()).dtype == torch.float32


# ---- text ---------------------------------------------------------------------------------------------------

def test_reference_prompt_rules():
    assert reference_prompt("Hello") == "Hello.  "
    assert reference_prompt("Hello.") == "Hello.  "
    assert reference_prompt("Hello. ") == "Hello.  "
    assert reference_prompt("你好。") == "你好。"
    assert reference_prompt("你好") == "你好.  "


def test_tokenizer(root, tmp_path):
    tok = F5Tokenizer(root / "tiny" / "vocab.txt")
    assert tok.vocab[" "] == 0
    # tone sandhi: third tone before third tone reads as second
    assert tok.tokens("你好，世界") == [" ", "ni2", " ", "hao3", "，", " ", "shi4", " ", "jie4"]
    assert tok.tokens("Say F5-TTS now") == ["S", "a", "y", " ", "F", "5", "-", "T", "T", "S", " ", "n", "o", "w"]
    assert tok.tokens("a;b “c”") == ["a", ",", "b", " ", '"', "c", '"']
    assert tok.encode("ni ☃") == [tok.vocab["n"], tok.vocab["i"], 0, 0]      # unknown -> 0 (as upstream)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty.txt"):
        read_vocab(tmp_path / "empty.txt")


def test_duration_rule():
    # upstream: ref_frames + int(ref_frames / ref_bytes * text_bytes / speed); short texts at speed 0.3
    assert frames_for(24000, "a" * 20, "b" * 40, 1.0, 256) == 93 + int(93 / 20 * 40)
    assert frames_for(24000, "a" * 20, "b" * 40, 2.0, 256) == 93 + int(93 / 20 * 40 / 2)
    assert frames_for(24000, "a" * 20, "short", 1.0, 256) == 93 + int(93 / 20 * 5 / 0.3)
    assert frames_for(24000, "a" * 20, "你好世界", 1.0, 256) == 93 + int(93 / 20 * 12)


# ---- speaking ------------------------------------------------------------------------------------------------

def test_speaks_with_upstream_lengths_and_seeds(engine):
    from mizuoto.nodes.f5_tts.reference import prompt_audio
    ref = prompt_audio(Reference(reference(), 24000))[0][0]     # edges trimmed, 50 ms of silence appended
    a = speak(engine, seed=3)
    text = "Hello there, friend."
    frames = frames_for(ref.numel(), reference_prompt(REF_TEXT), text, 1.0, 256)
    assert a.dtype == torch.float32 and a.dim() == 1 and torch.isfinite(a).all()
    assert a.numel() == (frames - ref.numel() // 256) * 256
    assert torch.equal(a, speak(engine, seed=3))
    assert not torch.equal(a, speak(engine, seed=4))
    assert speak(engine, seed=3, speed=2.0).numel() < a.numel()
    assert speak(engine, text="你好，世界！今天天气很好。", seed=3).numel() > 0


def test_flow_options_and_quiet_reference(engine):
    a = speak(engine, seed=1, steps=4, method="midpoint")
    b = speak(engine, seed=1, steps=4, cfg_strength=0.0)
    assert a.shape == b.shape and not torch.equal(a, b)
    loud = speak(engine, seed=1, ref=reference() * 4)
    quiet = speak(engine, seed=1, ref=reference() * 2)   # RMS below 0.1: scaled up, output scaled back
    assert torch.isfinite(loud).all() and torch.isfinite(quiet).all()
    with pytest.raises(ValueError, match="method"):
        speak(engine, method="rk4")


def test_requires_reference_and_transcript(engine):
    with pytest.raises(ValueError, match="reference audio and its transcript"):
        speak(engine, ref_text="  ")


def test_a_dit_without_text_convolutions_loads_and_speaks(tmp_path, monkeypatch):
    """model.arch.conv_layers: 0 is upstream's DiT default (no ConvNeXt text blocks): loaded and run."""
    import f5_tts.tiny as tiny

    monkeypatch.setitem(tiny.ARCH, "conv_layers", 0)
    folder = write_tiny_checkpoint(tmp_path / "noconv", seed=2)
    bundle = load_f5_tts(folder, torch.float32)
    assert bundle.dit.text_embed.text_blocks is None
    engine = F5TTSEngine(bundle, ModelManager(DeviceService()))
    t = torch.arange(12000) / 24000
    chunk = Chunk("Hello.", seed=1, reference=Reference(0.1 * torch.sin(2 * torch.pi * 200 * t), 24000),
                  reference_text="Some words.", options={"steps": 2})
    with engine.manager.request(seed=1) as ctx:
        wav = engine.speak_chunk(ctx, chunk)
    assert wav.numel() > 0 and bool(torch.isfinite(wav).all())

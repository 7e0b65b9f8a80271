"""The nodes executed directly (no ComfyUI): outputs ComfyUI's audio nodes accept, and clear errors."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
from mizuoto.nodes.formats import folders
from mizuoto.nodes.pack.pack_runtime import build_runtime, get_runtime, use_runtime
from mizuoto.nodes.pack.routes import runtime_report
from mizuoto.nodes.pack.speak import MizuotoRuntimeSettings, MizuotoSpeak
from mizuoto.runtime import VramPolicy

ROOT = Path(__file__).resolve().parents[1]
MizuotoLoadHibari = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]
DEFAULTS = dict(vram_mode="default", vram_reserve_mb=-1, vram_limit_mb=-1, async_offload=-1,
                host_copies="default", oom_retry="default", oom_fallback="default", kv_cache="default")


@pytest.fixture(scope="module")
def model():
    return MizuotoLoadHibari().load("fp32", "auto")[0]


def test_every_node_is_registered_under_audio_tts_with_an_english_name():
    for name, cls in NODE_CLASS_MAPPINGS.items():
        assert cls.CATEGORY == "audio/tts" and NODE_DISPLAY_NAME_MAPPINGS[name]
        assert callable(getattr(cls, cls.FUNCTION)) and "required" in cls.INPUT_TYPES()


def test_speak_returns_comfy_audio_and_the_panel_reports_the_model(model):
    (audio,) = MizuotoSpeak().speak(model, "Hello there. This is a test.", seed=5, speed=1.0, language="en")
    assert audio["sample_rate"] == 24000 and audio["waveform"].dim() == 3
    assert audio["waveform"].shape[:2] == (1, 1) and audio["waveform"].dtype == torch.float32
    (again,) = MizuotoSpeak().speak(model, "Hello there. This is a test.", seed=5, speed=1.0, language="en")
    assert torch.equal(audio["waveform"], again["waveform"])  # the seed decides
    report = runtime_report(get_runtime())
    assert any(c["name"] == "acoustic" and 7 < c["size_mb"] < 8 for c in report["components"])    # int8 Linear weights
    assert report["last"]["model"] == "hibari heart" and "memory" in report["last"]


def test_speak_with_per_graph_settings_streams():
    """On a simulated GPU that holds the whole voice, vram_mode "none" from the settings node streams it."""
    policy = VramPolicy({"compute.simulate_vram_mb": 128})
    with use_runtime(build_runtime(policy, strict=True)) as runtime:
        (model,) = MizuotoLoadHibari().load("fp32", "auto")
        (plain,) = MizuotoSpeak().speak(model, "Short.", seed=0, speed=1.0, language="auto")
        assert runtime.last_meta["memory"]["streamed_mb"] == 0
        (settings,) = MizuotoRuntimeSettings().settings(**{**DEFAULTS, "vram_mode": "none"})
        (audio,) = MizuotoSpeak().speak(model, "Short.", seed=0, speed=1.0, language="auto", settings=settings)
        assert runtime.last_meta["memory"]["streamed_mb"] > 0
        assert runtime.last_meta["memory"]["partial"]["acoustic"]["reason"] == "vram_mode none"
        assert torch.equal(audio["waveform"], plain["waveform"])


@pytest.mark.parametrize("kwargs, match", [
    (dict(text=""), "text: empty"),
    (dict(text="?!..."), "nothing speakable"),
    (dict(text="x" * 200_001), "at most 200000 characters"),
    (dict(language="xx"), "language: this model speaks auto, en; got 'xx'"),
    (dict(language="ja"), "language: this model speaks auto, en"),
    (dict(voice="bella"), "voice:"),
    (dict(speed=9.0), "speed: expected 0.25 to 4.0 for this model"),
    (dict(reference_audio={"waveform": torch.zeros(1, 1, 100), "sample_rate": 16000}), "cannot clone"),
    (dict(instruction="whisper"), "instruction: this model takes no instruction"),
])
def test_speak_bad_input_is_a_clear_error(model, kwargs, match):
    args = dict(text="Hello.", seed=0, speed=1.0, language="auto") | kwargs
    with pytest.raises(ValueError, match=match):
        MizuotoSpeak().speak(model, **args)


def test_speak_rejects_something_that_is_not_a_model():
    with pytest.raises(ValueError, match="model: expected a Mizuoto model"):
        MizuotoSpeak().speak("hibari", "Hello.", 0, 1.0, "auto")


def test_settings_node_validates():
    (s,) = MizuotoRuntimeSettings().settings(**{**DEFAULTS, "vram_reserve_mb": 512, "oom_retry": "off"},
                                             more='{"compute.gpu_jobs": 2}')
    assert s == {"compute.vram_reserve_mb": 512, "compute.oom_retry": False, "compute.gpu_jobs": 2}
    with pytest.raises(ValueError, match="compute.gpu_job"):
        MizuotoRuntimeSettings().settings(**DEFAULTS, more='{"compute.gpu_job": 2}')
    with pytest.raises(ValueError, match="more: expected a JSON object"):
        MizuotoRuntimeSettings().settings(**DEFAULTS, more="vram=low")
    with pytest.raises(ValueError, match="'compute.async_offload'"):
        MizuotoRuntimeSettings().settings(**DEFAULTS, more='{"compute.async_offload": 99}')


def test_loader_bad_choices():
    with pytest.raises(ValueError, match="precision: expected one of"):
        MizuotoLoadHibari().load("int4", "auto")
    with pytest.raises(ValueError, match="device: expected one of"):
        MizuotoLoadHibari().load("fp32", "tpu")


def test_model_names_resolve_only_inside_registered_folders(tmp_path, monkeypatch):
    root = tmp_path / "models" / "TTS"
    (root / "qwen3_tts" / "tiny").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(root))
    assert folders.list_models("qwen3_tts") == ["tiny"]
    assert folders.resolve("qwen3_tts", "tiny") == (root / "qwen3_tts" / "tiny").resolve()
    for bad in ["../../secret", "..", "/etc", "tiny/../..", "a\\b", "", "missing"]:
        with pytest.raises(folders.ModelNotFound):
            folders.resolve("qwen3_tts", bad)
    (root / "qwen3_tts" / "link").symlink_to(tmp_path / "secret")  # models on another drive, linked in
    assert folders.list_models("qwen3_tts") == ["link", "tiny"]
    assert folders.resolve("qwen3_tts", "link").resolve() == (tmp_path / "secret").resolve()
    (root / "qwen3_tts" / "dangling").symlink_to(tmp_path / "nowhere")
    (root / "qwen3_tts" / "chain").symlink_to(root / "qwen3_tts" / "link")        # a chain of links
    assert folders.list_models("qwen3_tts") == ["chain", "link", "tiny"]
    with pytest.raises(folders.ModelNotFound):
        folders.resolve("qwen3_tts", "dangling")
    for bad in ["link/..", "../qwen3_tts/link", str(tmp_path / "secret")]:     # names still cannot walk
        with pytest.raises(folders.ModelNotFound):
            folders.resolve("qwen3_tts", bad)


def test_pack_imports_under_any_folder_name_without_comfyui(tmp_path):
    (tmp_path / "ComfyUI-Mizuoto_clone").symlink_to(ROOT)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib; "
            "m = importlib.import_module('ComfyUI-Mizuoto_clone'); "
            "assert 'MizuotoSpeak' in m.NODE_CLASS_MAPPINGS and m.WEB_DIRECTORY == './web'; "
            "assert 'comfy' not in sys.modules and 'onnxruntime' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_runtime_settings_lists_every_value_the_policy_accepts():
    """One list: what the node offers for a choice setting is what the validator accepts, plus default."""
    from mizuoto.nodes.pack.speak import SETTING_INPUTS
    from mizuoto.runtime.policy import setting_choices

    inputs = MizuotoRuntimeSettings.INPUT_TYPES()["required"]
    checked = []
    for name, (kind, key) in SETTING_INPUTS.items():
        if isinstance(kind, list) and setting_choices(key):
            assert inputs[name][0] == ["default", *setting_choices(key)], name
            checked.append(name)
    assert "shared" in inputs["vram_mode"][0] and {"vram_mode", "host_copies", "kv_cache"} <= set(checked)

"""Bad input and hostile files: an ordinary exception naming the input every time, nothing escapes the
model folders, nothing half-written, and the next request is unaffected. One table per class of input,
then a bounded fuzz of the Speak node."""
from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import threading
import time

import pytest
import torch
from safetensors.torch import save_file

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.pack.engine import Capabilities
from mizuoto.nodes.pack.pipeline import SpeakRequest, check_seed, reference_audio, synthesize
from mizuoto.nodes.pack.speak import MizuotoRuntimeSettings, MizuotoSpeak
from mizuoto.nodes.hibari import loader as hibari_loader
from mizuoto.runtime import DeviceService, ModelManager, SettingsError, VramPolicy
from mizuoto.runtime.calibration import Calibration
from mizuoto.runtime.loading import CheckpointError, load_module

CLONING = Capabilities(24000, cloning="required", transcript="optional", reference_seconds=(0.5, 30.0))
SETTINGS_DEFAULTS = dict(vram_mode="default", vram_reserve_mb=-1, vram_limit_mb=-1, async_offload=-1,
                         host_copies="default", oom_retry="default", oom_fallback="default", kv_cache="default")


@pytest.fixture(scope="module")
def hibari():
    return NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "cpu")[0]


def speak(model, **kw):
    args = dict(text="Hello.", seed=0, speed=1.0, language="en") | kw
    return MizuotoSpeak().speak(model, **args)[0]["waveform"]


# ---- reference audio ----------------------------------------------------------------------------------
def audio(wav, rate=16000):
    return {"waveform": wav, "sample_rate": rate}


REFERENCES = [
    (audio(torch.zeros(1, 1, 16000), 1), "sample_rate: 1 Hz is outside"),
    (audio(torch.zeros(1, 1, 16000), 10**9), "sample_rate: 1000000000 Hz is outside"),
    (audio(torch.zeros(1, 1, 16000), "fast"), "sample_rate: expected a whole number"),
    (audio(torch.zeros(1, 1, 16000), float("nan")), "sample_rate: expected a whole number"),
    (audio(torch.zeros(1, 1, 16000), 16000.5), "sample_rate: expected a whole number"),
    (audio(torch.full((1, 1, 16000), float("inf"))), "NaN or infinite"),
    (audio(torch.full((1, 2, 16000), float("nan"))), "NaN or infinite"),
    (audio(torch.zeros(1, 0, 16000)), "no channels"),
    (audio(torch.zeros(0, 1, 16000)), "batch is empty"),
    (audio(torch.zeros(1, 1, 0)), "no samples"),
    (audio(torch.zeros(1, 1, 160)), "0.01 s long; expected 0.5 to 30 s"),
    (audio(torch.zeros(1, 1, 16000 * 31)), "31.00 s long"),
    (audio(torch.zeros(2, 3, 4, 5)), r"expected a waveform \[T\], \[C, T\] or \[B, C, T\]"),
    (audio([0.0] * 16000), "expected a waveform tensor"),
    ({"waveform": torch.zeros(1, 1, 16000)}, "expected ComfyUI AUDIO"),
    ("ref.wav", "expected ComfyUI AUDIO or"),
]


@pytest.mark.parametrize("ref, match", REFERENCES)
def test_bad_reference_audio_is_refused_before_any_model_runs(ref, match):
    with pytest.raises(ValueError, match=match) as e:
        reference_audio(ref, CLONING)
    assert "reference_audio" in str(e.value)


def test_a_coprime_rate_costs_bounded_memory_and_integer_pcm_equals_float():
    ref = reference_audio(audio(torch.full((1, 1, 22051), 0.1), 44101), Capabilities(24000, reference_rate=24000,
                                                                              resampler="torchaudio_sinc"))
    assert ref.sample_rate == 24000 and abs(ref.wav.numel() - 22051 * 24000 / 44101) <= 1
    pcm = torch.randint(-32768, 32767, (1, 1, 16000), dtype=torch.int16, generator=torch.Generator().manual_seed(0))
    as_int = reference_audio(audio(pcm), CLONING).wav
    as_float = reference_audio(audio(pcm.float() / 32768), CLONING).wav
    assert torch.equal(as_int, as_float)


# ---- text ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["1" * 37, "9" * 5000, "1," * 40 + "1", "Pay 12345678901234567890123456789012345678901."])
def test_numbers_past_the_g2p_are_read_digit_by_digit(hibari, text):
    with hibari.using() as engine:
        chunks = engine.split_text(text)
    digits = sum(c.isdigit() for c in text)
    assert sum(c.count("ˈ") for c in chunks) >= digits                # one stressed word per digit


def test_a_long_number_is_spoken(hibari):
    assert speak(hibari, text="1" * 40).numel() > 0


@pytest.mark.parametrize("field, value, match", [
    ("text", "Hello \ud800 there.", r"text: character 6 \('\\ud800'\) is not valid Unicode"),
    ("text", "\udfff", "text: character 0"),
    ("text", 42, "text: expected a string"),
    ("text", "x" * 200_001, "at most 200000 characters"),
    ("instruction", "soft\udc80", "instruction: character 4"),
])
def test_unencodable_and_wrong_text_is_refused(hibari, field, value, match):
    with pytest.raises(ValueError, match=match):
        synthesize_hibari(hibari, **{field: value})


def synthesize_hibari(model, **kw):
    with model.using() as engine:
        return synthesize(engine, SpeakRequest(**({"text": "Hello."} | kw)))


# ---- seeds -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [2**64, 2**200, -1, 1.0, float("nan"), "7", True, None])
def test_bad_seeds_are_refused_before_the_generator_is_seeded(seed):
    with pytest.raises(ValueError, match="seed: expected an integer from 0 to 18446744073709551615"):
        check_seed(seed)


def test_the_largest_seed_works_and_wraps_like_comfyui(hibari):
    assert torch.equal(speak(hibari, seed=2**64 - 1), speak(hibari, seed=2**63 - 1))


# ---- settings --------------------------------------------------------------------------------------------
SETTINGS_FILES = [
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
    (b'{"compute": {"gpu_jobs": ' + b"9" * 5000 + b"}}", "ValueError"),
    (b'{"compute.vram_mode": "huge"}', "'compute.vram_mode'"),
    (b"[1, 2]", "must hold a JSON object"),
]


@pytest.mark.parametrize("content, match", SETTINGS_FILES)
def test_bad_settings_files_name_the_file(tmp_path, content, match):
    (tmp_path / "settings.json").write_bytes(content)
    with pytest.raises(SettingsError, match=match) as e:
        VramPolicy(settings_path=tmp_path / "settings.json", environ={})
    assert "settings.json" in str(e.value)


@pytest.mark.parametrize("value, match", [("{" * 100_000, "RecursionError|not valid JSON"),
                                          ('{"compute.gpu_jobs": ' + "9" * 5000 + "}", "ValueError"),
                                          ("[]", "must hold a JSON object")])
def test_bad_settings_variables_name_the_variable(tmp_path, value, match):
    with pytest.raises(SettingsError, match=f"MIZUOTO_SETTINGS.*({match})"):
        VramPolicy(settings_path=tmp_path / "none.json", environ={"MIZUOTO_SETTINGS": value})


@pytest.mark.parametrize("settings", ["vram_mode=low", ["compute.vram_mode"], 3])
def test_a_settings_input_that_is_not_a_dict_is_refused(hibari, settings):
    with pytest.raises(ValueError, match="settings: expected the output of a Runtime Settings node"):
        speak(hibari, settings=settings)


def test_the_settings_node_refuses_hostile_json():
    for more in ["[" * 100_000, '{"compute.gpu_jobs": ' + "9" * 5000 + "}"]:
        with pytest.raises(ValueError, match="more: expected a JSON object"):
            MizuotoRuntimeSettings().settings(**SETTINGS_DEFAULTS, more=more)


# ---- the calibration cache never stops a request ---------------------------------------------------------------
@pytest.mark.parametrize("content", ['{"version": 2, "factors": ' * 5000 + "{}" + "}" * 5000,
                                     '{"version": 2, "factors": {"a:b": ' + "9" * 400 + "}}",
                                     '{"version": 2, "factors": {"a:b": 1e999}}', "\x00\x01"])
def test_a_broken_calibration_cache_is_ignored(tmp_path, content, caplog):
    path = tmp_path / "calibration.json"
    path.write_text(content)
    calibration = Calibration(path)
    assert calibration.factor("a:b") == 1.0 and "ignoring memory calibration" in caplog.text
    ModelManager(DeviceService(), calibration=calibration)


# ---- model files -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shard", ["../../secret.safetensors", "/etc/passwd", "sub/model.safetensors", "..", ""])
def test_a_sharded_index_pointing_outside_the_folder_is_refused_before_opening(tmp_path, shard):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.safetensors").write_bytes(b"SECRET-BYTES" * 10)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"weight": shard}}))
    with pytest.raises(CheckpointError, match="expected a file name beside the index") as e:
        load_module(lambda: torch.nn.Linear(2, 2, bias=False), folder / "model.safetensors.index.json")
    assert "SECRET" not in str(e.value) and "root:" not in str(e.value)


def test_nan_weights_are_a_clear_error_at_load(tmp_path):
    save_file({"weight": torch.tensor([[1.0, float("nan")], [0.0, 1.0]])}, str(tmp_path / "m.safetensors"))
    with pytest.raises(CheckpointError, match=r"m.safetensors: tensor 'weight' holds NaN"):
        load_module(lambda: torch.nn.Linear(2, 2, bias=False), tmp_path / "m.safetensors")


# ---- the embedded voice's weight cache -------------------------------------------------------------------------
def corrupt_flip(state):
    key = next(k for k, v in state.items() if v.numel() > 100 and v.dtype == torch.float32)
    state[key] = state[key].clone()
    state[key].view(torch.int32)[7] ^= 0x7F000000


def corrupt_nan(state):
    key = next(k for k, v in state.items() if v.dtype == torch.float32)
    state[key] = state[key].clone()
    state[key].view(-1)[0] = float("nan")


def corrupt_dtype(state):
    key = next(k for k, v in state.items() if v.dtype == torch.float32)
    state[key] = state[key].half()


@pytest.mark.parametrize("corrupt", [corrupt_flip, corrupt_nan, corrupt_dtype])
def test_a_tampered_weight_cache_is_rebuilt(corrupt):
    good = hibari_loader.load_state_dict()                           # writes the cache
    path = hibari_loader._cache_path(hibari_loader.HIBARI_ONNX_SHA256)
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        meta, state = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    corrupt(state)
    save_file(state, str(path), metadata=meta)                       # the old metadata, altered content
    again = hibari_loader.load_state_dict()
    assert all(torch.equal(again[k], good[k]) and again[k].dtype == good[k].dtype for k in good)


# ---- the command line's files --------------------------------------------------------------------------------------
def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "mizuoto", "speak", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_output_and_text_file_problems_fail_before_synthesis(tmp_path, capsys):
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00")
    cases = [(["Hi.", "-o", str(tmp_path / "missing" / "a.wav")], "expected a file path in an existing folder"),
             (["Hi.", "-o", str(tmp_path)], "expected a file path in an existing folder"),
             (["--text-file", str(tmp_path / "none.txt"), "-o", str(tmp_path / "a.wav")], "--text-file"),
             (["--text-file", str(tmp_path), "-o", str(tmp_path / "a.wav")], "--text-file"),
             (["--text-file", str(tmp_path / "bad.txt"), "-o", str(tmp_path / "a.wav")], "cannot be read as UTF-8"),
             (["Hi.", "--seed", str(2**64), "-o", str(tmp_path / "a.wav")], "seed: expected an integer")]
    from mizuoto.cli import main

    for args, message in cases:     # in this process: an uncaught exception (a traceback) fails the test
        t = time.monotonic()
        code = main(["speak", *args])
        err = capsys.readouterr().err
        assert code == 2 and message in err, (args, err)
        assert time.monotonic() - t < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "cache"]    # cache: MIZUOTO_CACHE_DIR


def test_cli_writes_through_links_into_fifos_and_keeps_modes(tmp_path):
    real = tmp_path / "real.wav"
    real.write_bytes(b"old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.wav"
    link.symlink_to(real)
    assert cli("Hi.", "-o", str(link)).returncode == 0
    assert link.is_symlink() and real.read_bytes()[:4] == b"RIFF" and stat.S_IMODE(real.stat().st_mode) == 0o640
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    assert cli("Hi.", "-o", str(fifo)).returncode == 0
    reader.join(60)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and got and got[0][:4] == b"RIFF"
    new = tmp_path / "new.wav"
    r = subprocess.run(f"umask 027 && {sys.executable} -m mizuoto speak Hi. -o {new}", shell=True, timeout=300)
    assert r.returncode == 0 and stat.S_IMODE(new.stat().st_mode) == 0o640


# ---- fuzz -------------------------------------------------------------------------------------------------------------
def test_fuzzed_speak_inputs_raise_only_ordinary_errors_and_leave_the_next_request_exact(hibari):
    clean = speak(hibari, text="Clean run.", seed=5)
    rng = random.Random(1234)
    values = {
        "text": ["", " ", "Hi.", "\ud800", "1" * 60, 7, None, "?!", "Hello there. " * 3, "é" * 20],
        "seed": [0, 1, 2**64 - 1, 2**64, -5, 1.5, "x", None, float("nan")],
        "speed": [1.0, 0.25, 4.0, 0.0, -1, float("nan"), float("inf"), "fast", None, True],
        "language": ["en", "auto", "zh", "xx", "", None, 3],
        "voice": ["", "heart", "nobody", None, 5],
        "reference_audio": [None, audio(torch.zeros(1, 1, 16000)), audio(torch.zeros(1, 1, 10), 7), "x"],
        "reference_text": ["", "hello", None, 3],
        "instruction": ["", "soft", None, "\udc00"],
        "settings": [None, {}, {"compute.vram_mode": "low"}, {"compute.nope": 1}, "x", {"compute.gpu_jobs": 0}],
    }
    errors: dict[str, int] = {}
    for _ in range(200):
        kw = {k: rng.choice(v) for k, v in values.items()}
        kw["text"] = kw["text"] if rng.random() < 0.7 else "Hi."
        t = time.monotonic()
        try:
            out = MizuotoSpeak().speak(hibari, **kw)[0]["waveform"]
            assert torch.isfinite(out).all() and out.numel() < 24000 * 60
        except (ValueError, TypeError) as e:
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
        assert time.monotonic() - t < 20
    assert errors.get("ValueError", 0) > 100
    assert torch.equal(speak(hibari, text="Clean run.", seed=5), clean)


@pytest.mark.parametrize("field, value", [("hidden_size", -128), ("num_attention_heads", 0),
                                          ("hidden_size", 10**7), ("num_hidden_layers", 100_000)])
def test_absurd_config_sizes_are_refused_before_any_module_is_built(tmp_path, field, value):
    from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts
    from qwen3_tts.tiny import write_tiny_checkpoint
    folder = write_tiny_checkpoint(tmp_path / "tiny", "custom_voice", seed=1)
    config = json.loads((folder / "config.json").read_text())
    config["talker_config"][field] = value
    (folder / "config.json").write_text(json.dumps(config))
    t = time.monotonic()
    with pytest.raises((CheckpointError, TypeError, ValueError)) as e:
        load_qwen3_tts(folder, torch.float32)
    assert "config.json" in str(e.value) and field in str(e.value)
    assert time.monotonic() - t < 10


def test_hugging_face_zero_defaults_are_not_mistaken_for_sizes(tmp_path):
    """save_pretrained writes chunk_size_feed_forward = 0 and no_repeat_ngram_size = 0 ("off")."""
    from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts
    from qwen3_tts.tiny import write_tiny_checkpoint
    folder = write_tiny_checkpoint(tmp_path / "tiny", "custom_voice", seed=1)
    config = json.loads((folder / "config.json").read_text())
    config["talker_config"] |= {"chunk_size_feed_forward": 0, "no_repeat_ngram_size": 0, "use_cache": True}
    (folder / "config.json").write_text(json.dumps(config))
    assert load_qwen3_tts(folder, torch.float32).config.talker.hidden_size > 0


@pytest.mark.parametrize("line, value, match", [("attention_heads: 4", "attention_heads: 0", "attention_heads = 0"),
                                                ("num_blocks: 1", "num_blocks: 100000", "num_blocks = 100000"),
                                                ("n_blocks: 1", "n_blocks: -3", "n_blocks = -3")])
def test_hyperpyyaml_sizes_are_checked_like_json_configs(tmp_path, line, value, match):
    """CosyVoice's HyperPyYAML goes through the same size check as every config.json."""
    from cosyvoice.tiny import write_folder
    from mizuoto.nodes.cosyvoice.loader import load_cosyvoice
    folder = write_folder(tmp_path / "v2", 2)
    path = folder / "cosyvoice2.yaml"
    assert line in path.read_text()
    path.write_text(path.read_text().replace(line, value, 1))
    with pytest.raises(CheckpointError, match=match) as e:
        load_cosyvoice(folder)
    assert "cosyvoice2.yaml" in str(e.value)


@pytest.mark.parametrize("field, value, says", [("num_hidden_layers", 5, "the checkpoint holds 2 of talker.model.layers"),
                                                ("intermediate_size", 77, "is [1024, 128] in the checkpoint")])
def test_plausible_sizes_that_do_not_fit_the_weights_name_the_config_field(tmp_path, field, value, says):
    """In bounds but wrong: compared with the checkpoint's header (tensor names and shapes) before any weight is
    read; the error starts with config.json and the field, then lists the tensors."""
    from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts
    from qwen3_tts.tiny import write_tiny_checkpoint
    folder = write_tiny_checkpoint(tmp_path / "tiny", "custom_voice", seed=1)
    config = json.loads((folder / "config.json").read_text())
    config["talker_config"][field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        load_qwen3_tts(folder, torch.float32)
    message = str(e.value)
    assert message.startswith(f"{folder / 'config.json'}: talker_config.{field} = {value}") and says in message

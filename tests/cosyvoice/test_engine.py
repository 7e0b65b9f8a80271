"""CosyVoice 2 / 3 engine on tiny upstream-layout folders: loader errors name the file (and field), every
mode speaks through the Speak pipeline, seeds are deterministic, estimates cover measured peaks."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.cosyvoice import ENGINE
from mizuoto.nodes.cosyvoice.loader import ModelFolderError, is_model_folder, load_cosyvoice
from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine, drop_long_silences
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from mizuoto.runtime.loading import CheckpointError

from cosyvoice.tiny import write_folder

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def folder(request, tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp(f"cv{request.param}") / "tiny", request.param)


@pytest.fixture(scope="module")
def folder3(tmp_path_factory):
    """For checks that do not depend on the version: the cheaper tiny v3 (v2's LM never stops early and its
    conformer is 512 wide); v2's estimates are checked by the registry's conformance test."""
    return write_folder(tmp_path_factory.mktemp("cv3-only") / "tiny", 3)


def make_engine(folder, capacity: int | None = None) -> CosyVoiceEngine:
    """On the plain CPU (nothing moves), or on a strict simulated device of `capacity` bytes."""
    bundle = load_cosyvoice(folder, torch.float32)
    devices = DeviceService(simulate={"cpu": capacity}, strict=True) if capacity else DeviceService()
    return CosyVoiceEngine(bundle, ModelManager(devices, VramPolicy({"compute.vram_mode": "normal"})))


def reference(seconds: float = 1.2, rate: int = 24000) -> tuple[torch.Tensor, int]:
    t = torch.arange(int(rate * seconds)) / rate
    return 0.3 * torch.sin(2 * torch.pi * 180 * t) * (1 + torch.sin(2 * torch.pi * 3 * t)) / 2, rate


def test_registry_entry_and_folder_check(folder, tmp_path):
    assert ENGINE.loader_node == "MizuotoLoadCosyVoice" and ENGINE.engine_id == "cosyvoice"
    assert is_model_folder(folder)
    assert not is_model_folder(tmp_path)
    assert set(ENGINE.models) == {"CosyVoice2-0.5B", "Fun-CosyVoice3-0.5B-2512"}


def test_missing_file_is_named(folder3, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder3, broken)
    (broken / "hift.pt").unlink()
    with pytest.raises(ModelFolderError, match="hift.pt"):
        load_cosyvoice(broken)


def test_bad_yaml_field_names_file_and_field(folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    y = next(broken.glob("cosyvoice*.yaml"))
    y.write_text(y.read_text().replace("base_channels: 32", "base_channels: many"))
    with pytest.raises(CheckpointError, match=r"cosyvoice\d.yaml.*hift.base_channels"):
        load_cosyvoice(broken)


def test_wrong_shapes_name_the_file(folder3, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder3, broken)
    cfg = json.loads((broken / "CosyVoice-BlankEN" / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (broken / "CosyVoice-BlankEN" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="llm.pt.*mlp"):
        load_cosyvoice(broken)


def test_refused_pickle_names_the_file(folder3, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder3, broken)
    import pickle
    (broken / "flow.pt").write_bytes(pickle.dumps({"x": object()}))
    with pytest.raises(CheckpointError, match="flow.pt"):
        load_cosyvoice(broken)


@pytest.fixture(scope="module")
def engine(folder):
    return make_engine(folder)


def speak(engine, **kw):
    wav, meta = synthesize(engine, SpeakRequest(**{"text": "hi", "seed": 3, **kw}))
    return wav, meta


def test_modes_speak_deterministically(engine):
    """Zero-shot (reference + transcript), cross-lingual (reference only), instruct2, and speed."""
    a, meta = speak(engine, reference=reference(), reference_text="hello")
    b, _ = speak(engine, reference=reference(), reference_text="hello")
    assert a.numel() > 0 and a.numel() % 480 == 0 and bool(torch.isfinite(a).all())
    assert a.abs().max() <= 0.99
    assert torch.equal(a, b)
    assert meta["sample_rate"] == 24000
    cross, _ = speak(engine, reference=reference())
    instruct, _ = speak(engine, reference=reference(), instruction="Speak slowly.")
    fast, _ = speak(engine, reference=reference(), reference_text="hello", speed=2.0)
    assert cross.numel() > 0 and instruct.numel() > 0
    assert 0 < fast.numel() < a.numel()


def test_builtin_speaker(folder, tmp_path):
    """spk2info.pt as upstream writes it (an x-vector per speaker) gives named voices."""
    torch.manual_seed(0)
    with_speakers = tmp_path / "speakers"
    shutil.copytree(folder, with_speakers)
    torch.save({"tiny_speaker": {"embedding": torch.randn(1, 192)}}, with_speakers / "spk2info.pt")
    eng = make_engine(with_speakers)
    assert eng.capabilities.voices == ("tiny_speaker",) and eng.capabilities.cloning == "optional"
    wav, _ = speak(eng, voice="Tiny_Speaker")
    assert wav.numel() > 0
    with pytest.raises(ValueError, match="voice"):
        speak(eng, voice="nobody")


def test_cloning_required_without_voices(engine):
    assert engine.capabilities.cloning == "required"
    with pytest.raises(ValueError, match="reference_audio"):
        speak(engine)


def test_prompt_is_computed_once_per_request(engine):
    calls = []
    real = engine.prompt

    def counted(ctx, wav, rate):
        calls.append(rate)
        return real(ctx, wav, rate)

    engine.prompt = counted
    engine.split_text = lambda text, *rest: ["Hi there.", "Hey you."]   # two short segments (tests/cosyvoice/test_segments.py: the cut)
    try:
        wav, meta = speak(engine, text="Hi there. Hey you.", reference=reference(), reference_text="hello")
    finally:
        del engine.prompt, engine.split_text
    assert meta["chunks"] == 2 and len(calls) == 1


def test_v3_drops_long_silences():
    assert drop_long_silences([5, 1, 1, 1, 1, 1, 1, 1, 7, 1]) == [5, 1, 1, 1, 1, 1, 7, 1]


def test_estimates_cover_measured_peaks(folder3):
    eng = make_engine(folder3, capacity=1 << 30)
    devices = eng.manager.devices
    peaks: dict[str, tuple[int, int]] = {}
    real_run = None

    def tracking_run(name, handles, fn, memory, **kw):
        def measured():
            with devices.tracking("cpu") as tr:
                out = fn()
            peaks[name] = (tr.peak_bytes, memory)
            return out
        return real_run(name, handles, measured, memory=memory, **kw)

    with eng.manager.request(seed=1) as ctx:
        real_run = ctx.run
        ctx.run = tracking_run
        from mizuoto.nodes.pack.engine import Chunk, Reference
        wav, rate = reference(2.0)
        chunk = Chunk(text="hi there", seed=1, reference=Reference(wav, rate),
                      reference_text="hello")
        eng.speak_chunk(ctx, chunk)
    assert set(peaks) == {"prompt", "llm", "flow", "vocoder"}
    for phase, (measured, estimate) in peaks.items():
        print(f"{phase}: estimate {estimate / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB")
        assert measured <= estimate, phase


def test_a_spk2info_holding_code_is_refused_naming_the_file(tmp_path):
    """spk2info.pt goes through the project's weights-only loader: a pickle of anything but tensors and
    plain containers is an error naming the file, with no advice to lift weights_only."""
    import fractions

    from mizuoto.nodes.cosyvoice.loader import read_speakers
    from mizuoto.runtime.loading import CheckpointError

    path = tmp_path / "spk2info.pt"
    torch.save({"s": {"embedding": fractions.Fraction(1, 3)}}, path)
    with pytest.raises(CheckpointError, match="spk2info.pt") as e:
        read_speakers(path)
    assert "weights_only=False" not in str(e.value)
    path.write_bytes(b"\x80\x04garbage")
    with pytest.raises(CheckpointError, match="spk2info.pt: (not|a plain Python pickle)"):
        read_speakers(path)

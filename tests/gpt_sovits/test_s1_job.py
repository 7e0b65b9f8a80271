"""GPT-SoVITS fine-tuning end to end on the CPU: a list file of clips -> prepared samples -> GPT (s1)
training -> an exported voice that our loader reads and that speaks; bad clips named; interrupt and
resume reach the same weights; nothing half-written in the models folder after a failure."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from mizuoto.nodes.formats.audio_file import write_flac
from mizuoto.nodes.gpt_sovits import export, s1_data
from mizuoto.nodes.gpt_sovits.loader import load_gpt_sovits, pair
from mizuoto.nodes.gpt_sovits.train import S1Job, train_voice
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.training.datasets import read_list
from mizuoto.training.job import Interrupted

from gpt_sovits import tiny

pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = {s.engine_id: s for s in discover()}["gpt_sovits"]
TEXTS = ["Good day to you, my friend.", "The quick brown fox jumps.", "I like green apples."]


def reference() -> dict:
    return {"waveform": tone(3.2, 170)[None, None], "sample_rate": 32000}


def tone(seconds: float, pitch: float, level: float = 0.3) -> torch.Tensor:
    t = torch.arange(int(32000 * seconds)) / 32000
    return level * torch.sin(2 * torch.pi * pitch * t) * (1 + torch.sin(2 * torch.pi * 3 * t)) / 2


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("gsv_train")
    tiny.write_folder(r, "v2")
    (r / "clips").mkdir()
    for i, _ in enumerate(TEXTS):
        write_flac(r / "clips" / f"c{i}.flac", tone(2.5, 150 + 20 * i)[None], 32000)
    (r / "list.txt").write_text("".join(f"clips/c{i}.flac|spk|en|{t}\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    return r


def listed(root: Path, name: str, lines: list[str]) -> Path:
    path = root / f"{name}.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_hubert_input_is_upstreams_formula():
    """2-get-hubert-wav32k.py's lines in numpy float32, before the 16 kHz resample."""
    wav = tone(1.0, 200, 0.8).numpy()
    tmp_max = np.abs(wav).max()
    maxx, alpha = 0.95, 0.5
    upstream = (wav / tmp_max * (maxx * alpha * 1145.14)) + ((1 - alpha) * 1145.14) * wav
    assert np.array_equal(s1_data.hubert_mix(torch.from_numpy(wav)).numpy(), upstream)
    assert s1_data.hubert_input(torch.from_numpy(wav)).numel() == 16000


def test_bad_clips_are_named(root):
    bundle = load_gpt_sovits(root / "tiny-v2")
    prep = s1_data.S1Preparer(bundle)
    clips = root / "clips"
    soundfile.write(clips / "silent.wav", np.zeros(32000, dtype=np.float32), 32000, subtype="FLOAT")
    soundfile.write(clips / "nan.wav", np.full(32000, np.nan, dtype=np.float32), 32000, subtype="FLOAT")
    soundfile.write(clips / "loud.wav", 3.0 * tone(1.0, 200, 1.0).numpy(), 32000, subtype="FLOAT")
    soundfile.write(clips / "short.wav", tone(1.0, 200).numpy(), 32000, subtype="FLOAT")
    cases = [("clips/silent.wav|s|en|Hello there.", "clip silent.wav \\(line 1\\): .* is silent"),
             ("clips/nan.wav|s|en|Hello there.", "clip nan.wav \\(line 1\\): non-finite samples"),
             ("clips/loud.wav|s|en|Hello there.", "clip loud.wav \\(line 1\\): peak 3.0"),
             ("clips/c0.flac|s|en|" + " ".join(["Wonderful afternoon everybody"] * 8), "per second.*transcript match"),
             ("clips/c0.flac|s|ja|こんにちは", "clip c0.flac \\(line 1\\): language 'ja'"),
             ("clips/c0.flac|s|en|...", "nothing to read")]
    for line, message in cases:
        with pytest.raises(ValueError, match=message):
            prep.prepare(read_list(listed(root, "bad", [line])))
    with pytest.raises(ValueError, match="training data: 1.0 s of audio in 1 clips"):
        prep.prepare(read_list(listed(root, "small", ["clips/short.wav|s|en|Hello friend."])))


def test_train_export_load_speak(root):
    base_ckpt = (root / "tiny-v2" / "s1tiny-e15.ckpt").read_bytes()
    result = train_voice(S1Job(root / "tiny-v2", root / "list.txt", "fine", epochs=2, batch_size=8, seed=3))
    per_epoch = len(result.losses) // 2
    assert result.steps == 2 * per_epoch == 26 and result.updates == 6      # 99 samples: 13 batches an epoch
    first, second = result.losses[:per_epoch], result.losses[per_epoch:]
    assert sum(second) < sum(first), (first, second)                          # the loss falls
    voice = result.voice
    assert voice == root / "fine" and (root / "tiny-v2" / "s1tiny-e15.ckpt").read_bytes() == base_ckpt
    ckpt, pth = pair(voice)
    assert ckpt.name == "fine-e2.ckpt" and pth.read_bytes() == (root / "tiny-v2" / pth.name).read_bytes()
    loaded = load_gpt_sovits(voice).t2s.state_dict()
    base = load_gpt_sovits(root / "tiny-v2").t2s.state_dict()
    assert any(not torch.equal(loaded[k], base[k]) for k in loaded)           # trained weights, not the base's
    saved = torch.load(ckpt, weights_only=True)
    assert saved["info"] == "GPT-e2" and saved["config"]["train"]["epochs"] == 2
    assert all(torch.equal(loaded[k], saved["weight"]["model." + k].float()) for k in loaded)
    engine = SPEC.build(LoadRequest("fine", voice, torch.float32, torch.device("cpu")), ModelManager(DeviceService()))
    request = SpeakRequest("Good day to you.", seed=1, language="en", reference=reference(),
                           reference_text="Good day.")
    wav, _ = synthesize(engine, request)
    assert wav.numel() > 0 and torch.isfinite(wav).all()
    with pytest.raises(ValueError, match="already exists"):
        train_voice(S1Job(root / "tiny-v2", root / "list.txt", "fine", epochs=1))
    assert not [p for p in root.iterdir() if ".partial-" in p.name or ".train-state" in p.name]


def test_failed_export_leaves_nothing(root, monkeypatch):
    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(export, "gpt_checkpoint", broken)
    bundle = load_gpt_sovits(root / "tiny-v2")
    with pytest.raises(OSError, match="disk full"):
        export.export_voice(root / "tiny-v2", "broken", bundle.t2s, {"model": {}}, 1)
    assert not [p for p in root.iterdir() if p.name.startswith(".broken") or p.name == "broken"]
    with pytest.raises(ValueError, match="save_name"):
        export.export_voice(root / "tiny-v2", "../escape", bundle.t2s, {"model": {}}, 1)


def test_interrupt_and_resume_reach_the_same_weights(root):
    job = dict(base=root / "tiny-v2", list_file=root / "list.txt", epochs=1, batch_size=8, seed=7)
    straight = train_voice(S1Job(save_name="straight", **job))
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] == 7            # before the 7th step: 6 done, batch 5's gradient not yet applied
    with pytest.raises(Interrupted) as e:
        train_voice(S1Job(save_name="resumed", **job), interrupted=stop)
    assert e.value.step == 6 and e.value.checkpoint.is_file() and not (root / "resumed").exists()
    with pytest.raises(ValueError, match="other options.*epochs=1.*epochs=2.*delete"):
        train_voice(S1Job(save_name="resumed", **{**job, "epochs": 2}))    # the state is kept for the right options
    resumed = train_voice(S1Job(save_name="resumed", **job))
    assert resumed.losses == straight.losses
    a = torch.load(pair(straight.voice)[0], weights_only=True)["weight"]
    b = torch.load(pair(resumed.voice)[0], weights_only=True)["weight"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    for name in ("straight", "resumed"):
        shutil.rmtree(root / name)


def test_cli_train(root, capsys):
    from mizuoto.cli import main
    argv = ["train", "gpt_sovits", "--base", str(root / "tiny-v2"), "--list", str(root / "list.txt"),
            "--name", "from_cli", "--epochs", "1", "--batch-size", "16"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert f"voice: {root / 'from_cli'}" in out.out and "steps: 7 (1 optimizer updates)" in out.out
    assert "train    [" in out.err and "7/7 loss" in out.err
    assert load_gpt_sovits(root / "from_cli").t2s is not None
    assert main(argv) == 2 and "already exists" in capsys.readouterr().err
    assert main(argv[:-1] + ["0"]) == 2 and "batch_size = 0" in capsys.readouterr().err
    assert main(["train", "gpt_sovits", "--base", str(root), "--list", "x", "--name", "y"]) == 2
    assert "not a GPT-SoVITS voice folder" in capsys.readouterr().err
    assert main(argv[:-2] + ["--preset", "lowest"]) == 2 and "trains with fast" in capsys.readouterr().err
    shutil.rmtree(root / "from_cli")


def node_voice(root: Path, monkeypatch, spawn: bool):
    """Dataset -> Train Voice through the nodes; the job process spawned, or (the default suite) its entry
    called in this process with the same arguments (tests/training/test_job.py covers the spawn itself)."""
    from mizuoto.nodes.pack import train_nodes
    from mizuoto.nodes.pack.pipeline import LoadedModel
    from mizuoto.nodes.pack.train_nodes import MizuotoTrainingDataset, MizuotoTrainVoice

    models = root / "models"
    (models / "gpt_sovits").mkdir(parents=True, exist_ok=True)
    for name in ("tiny-v2", "pretrained_models"):
        link = models / "gpt_sovits" / name
        if not link.exists():
            link.symlink_to(root / name)
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(models))
    calls = []
    if not spawn:
        def in_process(target, kwargs, env, timeout=None, progress=None, interrupted=None):
            calls.append((target.__module__, target.__name__, sorted(env)))
            return target(**kwargs, progress=progress, interrupted=interrupted)
        monkeypatch.setattr(train_nodes, "run_in_process", in_process)
    assert "tiny-v2" in MizuotoTrainVoice.INPUT_TYPES()["required"]["base_model"][0]
    (dataset,) = MizuotoTrainingDataset().read(str(root / "list.txt"), "")
    assert len(dataset.entries) == 3
    model, curve = MizuotoTrainVoice().train("gpt_sovits", "tiny-v2", dataset, "fast", 1, 16, 3, "node_voice")
    assert isinstance(model, LoadedModel) and (models / "gpt_sovits" / "node_voice").is_dir()   # beside the base
    assert curve.shape == (1, 256, 512, 3) and 0 <= float(curve.min()) and float(curve.max()) <= 1
    assert (curve[0] != 1).any(-1).sum() > 100                  # the line is drawn
    assert spawn or calls == [("mizuoto.nodes.gpt_sovits", "run_train_job", calls[0][2])]
    with pytest.raises(ValueError, match="preset"):
        MizuotoTrainVoice().train("gpt_sovits", "tiny-v2", dataset, "lowest", 1, 16, 3, "other")
    with pytest.raises(ValueError, match="base_model"):
        MizuotoTrainVoice().train("gpt_sovits", "../tiny-v2", dataset, "fast", 1, 16, 3, "other")
    with pytest.raises(ValueError, match="list_file"):
        MizuotoTrainingDataset().read("", "")
    shutil.rmtree(models / "gpt_sovits" / "node_voice")


def test_train_voice_node(root, monkeypatch):
    node_voice(root, monkeypatch, spawn=False)


@pytest.mark.slow
def test_train_voice_node_runs_the_job_in_its_own_process(root, monkeypatch):
    node_voice(root, monkeypatch, spawn=True)


def test_training_clips_built_in_the_graph(root, tmp_path, monkeypatch):
    """AUDIO + transcripts -> a dataset (chained after a list file's), prepared like any other."""
    from mizuoto.nodes.pack.train_nodes import MizuotoTrainingClips, MizuotoTrainingDataset

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    (first,) = MizuotoTrainingDataset().read(str(root / "list.txt"), "")
    wave = torch.stack([tone(2.5, 210)[None], tone(2.5, 230)[None]])             # [2, 1, T]
    (both,) = MizuotoTrainingClips().add({"waveform": wave, "sample_rate": 32000},
                                         "One more sentence to learn.\nAnd yet another one here.", "en", first)
    assert [e.text for e in both.entries] == TEXTS + ["One more sentence to learn.", "And yet another one here."]
    assert both.list_file.parent.parent == tmp_path and both.entries[0].audio == (root / "clips" / "c0.flac").resolve()
    samples = s1_data.S1Preparer(load_gpt_sovits(root / "tiny-v2")).prepare(list(both.entries))
    assert len(samples) == 5
    with pytest.raises(ValueError, match="1 lines for 2 clips"):
        MizuotoTrainingClips().add({"waveform": wave, "sample_rate": 32000}, "Only one.", "en")
    with pytest.raises(ValueError, match="silent"):
        MizuotoTrainingClips().add({"waveform": torch.zeros(1, 1, 32000), "sample_rate": 32000}, "Quiet.", "en")
    with pytest.raises(ValueError, match="'\\|'"):
        MizuotoTrainingClips().add({"waveform": wave[:1], "sample_rate": 32000}, "a|b", "en")

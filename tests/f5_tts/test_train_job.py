"""F5-TTS fine-tuning end to end on the tiny model (default suite): list file -> prepared clips -> a few
steps of upstream's recipe -> an exported model folder our loader loads and speaks with; the presets
(`lowest`'s host-side AdamW in float32 equals `fast`), resume, the estimate against the measured peak,
and the job's option errors."""
from __future__ import annotations

import random
import shutil
import time
import warnings
from pathlib import Path

import pytest
import torch

from f5_tts.tiny import write_tiny_checkpoint
from mizuoto.nodes.f5_tts import ENGINE
from mizuoto.nodes.f5_tts.export import export_model
from mizuoto.nodes.f5_tts.loader import checkpoint_file, load_f5_tts
from mizuoto.nodes.f5_tts.phases import F5TTSEngine
from mizuoto.nodes.f5_tts.train import batches, make_job, method_info, prepare, train_voice, training_loop
from mizuoto.nodes.f5_tts.train_step import EMA, cfm_loss
from mizuoto.nodes.formats.audio_file import write_flac
from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.training import resolve_tools
from mizuoto.training.datasets import read_list
from mizuoto.training.job import Interrupted

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["Hello world.", "The quick brown fox.", "你好世界。", "Some call me nature."]


def clip(seconds: float, rate: int, f0: float) -> torch.Tensor:
    t = torch.arange(int(rate * seconds)) / rate
    return (0.1 * torch.sin(2 * torch.pi * f0 * t) * (1 + torch.sin(2 * torch.pi * 3 * t)))[None].to(torch.float32)


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "f5_tts"
    write_tiny_checkpoint(root / "tiny", seed=1)
    clips = tmp_path / "clips"
    clips.mkdir()
    rows = []
    for i, (text, (seconds, rate)) in enumerate(zip(TEXTS, [(0.5, 24000), (0.7, 16000), (0.6, 24000), (0.4, 24000)])):
        write_flac(clips / f"c{i}.flac", clip(seconds, rate, 150 + 40 * i), rate)
        rows.append(f"c{i}.flac|me|{'zh' if i == 2 else 'en'}|{text}")
    write_flac(clips / "short.flac", clip(0.2, 24000, 200), 24000)     # under upstream's 0.3 s: left out
    rows.append("short.flac|me|en|Hi.")
    (clips / "list.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def data(root: Path, batch_size: int = 2):
    bundle = load_f5_tts(root / "tiny")
    samples = prepare(bundle, read_list(root.parent / "clips" / "list.txt"), "pinyin")
    return bundle, batches(samples, batch_size)


def speak(folder: Path) -> torch.Tensor:
    engine = F5TTSEngine(load_f5_tts(folder), ModelManager(DeviceService()), min_unit_bytes=64 << 10)
    t = torch.arange(int(24000 * 0.6)) / 24000
    chunk = Chunk("Hello there, friend.", seed=0, reference=Reference(0.05 * torch.sin(2 * torch.pi * 200 * t), 24000),
                  reference_text="Some call me nature.", options={"steps": 4})
    with engine.manager.request(seed=0) as ctx:
        return engine.speak_chunk(ctx, chunk)


def fixed_loss(dit, data_: list, seed: int = 5) -> float:
    """The recipe's loss on every batch with fixed draws and no dropout (a deterministic measure)."""
    dit.eval()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    with torch.no_grad():
        out = sum(float(cfm_loss(dit, b, rng)) for b in data_) / len(data_)
    dit.train()
    return out


def test_end_to_end_loss_falls_and_the_export_speaks(root):
    job = make_job(base=root / "tiny", list_file=root.parent / "clips" / "list.txt", save_name="mine", epochs=6,
                   batch_size=2, seed=3, learning_rate=3e-3, warmup_updates=1)
    seen = []
    start = time.perf_counter()
    result = train_voice(job, progress=lambda stage, done, total, loss: seen.append((stage, done, total)))
    assert time.perf_counter() - start < 20
    assert result.steps == result.updates == 12 and len(result.losses) == 12      # 4 clips of 5 kept, 2 per batch
    assert seen[0] == ("prepare", 1, 5) and seen[-1] == ("train", 12, 12)
    first, last = sum(result.losses[:3]) / 3, sum(result.losses[-3:]) / 3
    assert last < 0.7 * first, result.losses
    assert result.voice == root / "mine" and ENGINE.is_model_folder(result.voice)
    assert checkpoint_file(result.voice).name == "model_12.safetensors"
    assert not (root / ".mine.train-state.pt").exists()
    wav = speak(result.voice)
    assert wav.numel() > 0 and torch.isfinite(wav).all()
    base, tuned = load_f5_tts(root / "tiny").dit, load_f5_tts(result.voice).dit
    moved = [k for k, v in base.state_dict().items() if not torch.equal(v, tuned.state_dict()[k])]
    assert len(moved) > len(base.state_dict()) // 2            # the EMA (upstream's export) moved with training
    with pytest.raises(ValueError, match="already exists"):
        train_voice(job)


def test_export_round_trip_and_the_online_loss_falls(root, tmp_path):
    """The fixed-draw loss of the trained (online) weights is below the base's; their EMA, exported, loads
    back through our loader equal (torch.equal) to the EMA's weights, with upstream's bookkeeping."""
    bundle, batches_ = data(root)
    dit = bundle.dit
    before = fixed_loss(dit, batches_)
    loop, recipe = training_loop(dit, batches_, resolve_tools("fast"), seed=0, lr=3e-3, warmup_updates=1,
                                 total_updates=11, checkpoint=tmp_path / "state.pt", ema_step=0, ema_initted=False)
    loop.run(11)
    assert fixed_loss(dit, batches_) < 0.7 * before
    folder = export_model(root / "tiny", "exported", recipe.ema, recipe.updates)
    loaded = load_f5_tts(folder).dit.state_dict()
    assert set(loaded) == set(dit.state_dict())
    for k, v in loaded.items():
        assert torch.equal(v, recipe.ema.shadow[k]), k
    from safetensors import safe_open
    with safe_open(str(folder / "model_11.safetensors"), "pt") as f:
        assert int(f.get_tensor("step")) == 11 and bool(f.get_tensor("initted"))
    # ema_pytorch from a fresh state: the first update copies (initting), the eleventh (its step 10, not past
    # update_after_step) copies again: the EMA holds the online weights now
    for k, v in dit.state_dict().items():
        assert torch.equal(recipe.ema.shadow[k], v), k
    with pytest.raises(ValueError, match="already exists"):
        export_model(root / "tiny", "exported", recipe.ema, 1)


def run_preset(root: Path, tmp_path: Path, preset: str, steps: int, overrides: dict | None = None,
               interrupt_at: int | None = None, resume: bool = False):
    _, batches_ = data(root)
    bundle = load_f5_tts(root / "tiny")
    tools = resolve_tools(preset, overrides)
    loop, recipe = training_loop(bundle.dit, batches_, tools, seed=1, lr=1e-3, warmup_updates=1,
                                 total_updates=steps, checkpoint=tmp_path / f"{preset}.pt", ema_step=1200,
                                 ema_initted=True, options=preset)
    if resume:
        loop.resume()
    try:
        loop.run(steps, interrupted=(lambda: loop.step == interrupt_at) if interrupt_at else (lambda: False))
    except Interrupted:
        return None
    master = recipe.optimizer.views if tools.host_optimizer else None
    return bundle.dit, recipe, master


def test_lowest_in_float32_equals_fast(root, tmp_path):
    """The host-side fused AdamW over a float32 master with gradient checkpointing: with float32 device
    weights nothing is rounded, so the weights equal `fast`'s after the steps (torch.equal); under the real
    `lowest` (bf16) the device weights are the master rounded to bf16 (the documented rounding)."""
    fast, fast_recipe, _ = run_preset(root, tmp_path, "fast", 6)
    low32, low_recipe, _ = run_preset(root, tmp_path, "lowest", 6, {"mixed_precision": None})
    assert low_recipe.tools.host_optimizer and low_recipe.tools.gradient_checkpointing
    for (k, a), b in zip(fast.state_dict().items(), low32.state_dict().values()):
        assert torch.equal(a, b), k
    for k in fast_recipe.ema.shadow:
        assert torch.equal(fast_recipe.ema.shadow[k], low_recipe.ema.shadow[k]), k
    half, _, master = run_preset(root, tmp_path, "lowest", 3)
    params = [p for p in half.parameters()]
    assert all(p.dtype == torch.bfloat16 for p in params)
    for p, m in zip(params, master):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))


def test_interrupt_and_resume_equal_an_uninterrupted_run(root, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole, whole_recipe, _ = run_preset(root, tmp_path / "a", "fast", 6)
    assert run_preset(root, tmp_path / "b", "fast", 6, interrupt_at=3) is None
    resumed, resumed_recipe, _ = run_preset(root, tmp_path / "b", "fast", 6, resume=True)
    for (k, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), k
    for k in whole_recipe.ema.shadow:
        assert torch.equal(whole_recipe.ema.shadow[k], resumed_recipe.ema.shadow[k]), k


def test_job_options_are_checked(root):
    base = dict(base=root / "tiny", list_file=root.parent / "clips" / "list.txt", save_name="x")
    with pytest.raises(ValueError, match="batch_size = 0"):
        make_job(**base, batch_size=0)
    with pytest.raises(ValueError, match="learning_rate"):
        make_job(**base, learning_rate=0.0)
    with pytest.raises(ValueError, match="warmup_updates"):
        make_job(**base, warmup_updates=-1)
    with pytest.raises(ValueError, match="save_name"):
        make_job(**{**base, "save_name": "../x"})
    with pytest.raises(ValueError, match="training.memory"):
        make_job(**base, preset="tiny")
    with pytest.raises(ValueError, match="sovits_epochs"):
        make_job(**base, sovits_epochs=2)
    assert ENGINE.trainer is not None and ENGINE.trainer.presets == ("fast", "balanced", "low", "lowest")


def synthetic(batch: int, frames: int, n: int = 2) -> list:
    from mizuoto.nodes.f5_tts.train_step import F5Batch
    g = torch.Generator().manual_seed(0)
    return [F5Batch(torch.randn(batch, 100, frames, generator=g), torch.full((batch,), frames),
                    torch.randint(0, 50, (batch, frames // 3), generator=g)) for _ in range(n)]


def measured(root: Path, tmp_path: Path, preset: str, batch: int) -> tuple[int, float, float]:
    """(peak bytes on the strict simulated device over two steps, the estimate in bytes, seconds per step);
    the model is read on the host and training_loop copies it to the device (as the job does)."""
    data_ = synthetic(batch, 120)
    devices = DeviceService(simulate={"cpu": 1 << 34}, strict=True)
    with devices.tracking("cpu") as tracker, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with devices.host():
            dit = load_f5_tts(root / "tiny").dit
        loop, _ = training_loop(dit, data_, resolve_tools(preset), seed=0, lr=1e-3, warmup_updates=1,
                                total_updates=4, checkpoint=tmp_path / f"{preset}.pt", host_context=devices.host)
        estimate = method_info(dit, data_).memory_bytes(preset, batch)
        start = time.perf_counter()
        loop.run(2)
        per_step = (time.perf_counter() - start) / 2
        del loop, dit
    return tracker.peak_bytes, estimate, per_step


@pytest.mark.parametrize("preset", ["fast", "balanced", "low", "lowest"])
@pytest.mark.parametrize("batch", [2, 4])
def test_estimate_covers_the_measured_peak(root, tmp_path, preset, batch):
    peak, estimate, per_step = measured(root, tmp_path, preset, batch)
    print(f"{preset} batch {batch}: estimate {estimate / 2**20:.2f} MB, measured peak {peak / 2**20:.2f} MB, "
          f"{per_step:.3f} s/step")
    assert peak <= estimate <= 1.6 * peak


def test_estimate_follows_the_batch_and_the_tools(root):
    bundle, _ = data(root)
    info = method_info(bundle.dit, synthetic(2, 120))
    assert info.memory_bytes("fast", 4) > info.memory_bytes("fast", 2)
    assert info.memory_bytes("fast", 4) > info.memory_bytes("low", 4) > info.memory_bytes("lowest", 4)
    params = sum(p.numel() for p in bundle.dit.parameters())
    # the host AdamW takes the two moments (8 bytes) off the device, halves weights and grads (4 of 8 bytes)
    # and needs no autocast copy of float32 weights (2 bytes)
    assert info.memory_bytes("low", 1) - info.memory_bytes("lowest", 1) == pytest.approx(1.1 * 14 * params, abs=2)
    fits, largest = info.fitting(info.memory_mb("lowest", 3) + 0.01, 3)
    assert "lowest" in fits and "fast" not in fits and largest == 3


def test_cli_train(root, capsys):
    from mizuoto.cli import main
    argv = ["train", "f5_tts", "--base", str(root / "tiny"), "--list", str(root.parent / "clips" / "list.txt"),
            "--name", "from_cli", "--epochs", "1", "--batch-size", "2", "--learning-rate", "1e-3",
            "--warmup-updates", "1"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert f"voice: {root / 'from_cli'}" in out.out and "2/2 loss" in out.err
    assert ENGINE.is_model_folder(root / "from_cli")
    assert main(argv) == 2 and "already exists" in capsys.readouterr().err
    assert main(argv[:-4] + ["--learning-rate", "2"]) == 2 and "learning_rate" in capsys.readouterr().err
    assert main(["train", "gpt_sovits", "--base", str(root / "tiny"), "--list", "x", "--name", "y"]) == 2
    capsys.readouterr()
    argv[argv.index("--warmup-updates") + 1] = "2"
    argv[argv.index("--name") + 1] = "other"
    assert main(argv) == 2 and "warmup_updates = 2 equals the job's 2 updates" in capsys.readouterr().err


def test_train_voice_node(root, monkeypatch):
    """Dataset -> Train Voice with engine f5_tts, its entry called in this process (tests/training covers the
    spawn): the F5-TTS options reach the job, the new model comes back loaded, with its loss curve."""
    from mizuoto.nodes.pack import train_nodes
    from mizuoto.nodes.pack.pipeline import LoadedModel
    from mizuoto.nodes.pack.train_nodes import MizuotoTrainingDataset, MizuotoTrainVoice

    models = root.parent / "models"
    (models / "f5_tts").mkdir(parents=True)
    (models / "f5_tts" / "tiny").symlink_to(root / "tiny")
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(models))
    jobs = []

    def in_process(target, kwargs, env, timeout=None, progress=None, interrupted=None):
        jobs.append(kwargs["job"])
        return target(**kwargs, progress=progress, interrupted=interrupted)
    monkeypatch.setattr(train_nodes, "run_in_process", in_process)
    inputs = MizuotoTrainVoice.INPUT_TYPES()
    assert "f5_tts" in inputs["required"]["engine"][0] and "lowest" in inputs["required"]["preset"][0]
    (dataset,) = MizuotoTrainingDataset().read(str(root.parent / "clips" / "list.txt"), "")
    model, curve = MizuotoTrainVoice().train("f5_tts", "tiny", dataset, "lowest", 1, 2, 3, "node_model",
                                             learning_rate=1e-3, warmup_updates=1)
    assert isinstance(model, LoadedModel) and ENGINE.is_model_folder(models / "f5_tts" / "node_model")
    assert jobs[0].learning_rate == 1e-3 and jobs[0].warmup_updates == 1 and jobs[0].preset == "lowest"
    assert curve.shape[-1] == 3
    with pytest.raises(ValueError, match="sovits_epochs"):
        MizuotoTrainVoice().train("f5_tts", "tiny", dataset, "fast", 1, 2, 3, "other", sovits_epochs=2)

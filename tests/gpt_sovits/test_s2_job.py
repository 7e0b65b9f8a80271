"""The SoVITS (s2) stage of a fine-tuning job on the CPU: a list file of clips -> prepared s2 samples ->
upstream's s2 step (s2_train, golden-tested in test_s2_train.py) -> an exported voice whose SoVITS file is
the trained one, read by our loader and speaking through the pipeline. The tiny base voice's config slices
2560-sample segments (4 frames) so a step stays short; the discriminator is upstream's full size."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.formats.audio_file import write_flac
from mizuoto.nodes.gpt_sovits import s2_data
from mizuoto.nodes.gpt_sovits.loader import load_gpt_sovits, pair
from mizuoto.nodes.gpt_sovits.s1_data import S1Preparer
from mizuoto.training.datasets import read_list
from mizuoto.nodes.gpt_sovits.train import S1Job, train_voice
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.runtime import DeviceService, ModelManager

from gpt_sovits import tiny

pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = {s.engine_id: s for s in discover()}["gpt_sovits"]
TEXTS = ["Good day to you, my friend.", "The quick brown fox jumps.", "I like green apples."]


def tone(seconds: float, pitch: float, level: float = 0.3) -> torch.Tensor:
    t = torch.arange(int(32000 * seconds)) / 32000
    return level * torch.sin(2 * torch.pi * pitch * t) * (1 + torch.sin(2 * torch.pi * 3 * t)) / 2


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("gsv_s2")
    folder = tiny.write_folder(r, "v2")
    hps = copy.deepcopy(tiny.s2_config("v2"))
    hps["train"]["segment_size"] = 2560
    _, sovits = pair(folder)
    tiny.save_sovits(sovits, tiny.sovits_weights("v2"), hps, "v2")
    (r / "clips").mkdir()
    for i, _ in enumerate(TEXTS):
        write_flac(r / "clips" / f"c{i}.flac", tone(1.5, 150 + 20 * i)[None], 32000)
    (r / "list.txt").write_text("".join(f"clips/c{i}.flac|spk|en|{t}\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    return r


def test_training_audio_is_upstreams_int16_file():
    wav = tone(0.5, 200, 0.8)
    peak = wav.abs().max()
    want = ((wav / peak * (0.95 * 0.5 * 32768)) + (0.5 * 32768) * wav).numpy().astype("int16")
    assert torch.equal(s2_data.training_audio(wav), torch.from_numpy(want).float() / 32768)


def test_collate_is_upstreams_layout():
    a = s2_data.S2Sample(torch.ones(768, 5), torch.ones(1025, 5), torch.ones(3200), torch.tensor([3, 4]))
    b = s2_data.S2Sample(2 * torch.ones(768, 8), 2 * torch.ones(1025, 8), 2 * torch.ones(5120), torch.tensor([5, 6, 7]))
    batch = s2_data.collate([a, b])
    assert batch.spec.shape == (2, 1025, 10) and batch.ssl.shape == (2, 768, 10) and batch.wav.shape == (2, 1, 5120)
    assert batch.spec_lengths.tolist() == [8, 5] and batch.text_lengths.tolist() == [3, 2]
    assert torch.equal(batch.text, torch.tensor([[5, 6, 7], [3, 4, 0]]))
    assert float(batch.spec[0, 0, 7]) == 2 and float(batch.spec[1, 0, 5]) == 0


@pytest.mark.slow
def test_sovits_stage_trains_exports_loads_and_speaks(root):
    job = S1Job(base=root / "tiny-v2", list_file=root / "list.txt", save_name="s2voice", epochs=0, sovits_epochs=1,
                batch_size=100, seed=7)
    result = train_voice(job)
    assert result.steps == 1 and len(result.losses) == 1 and torch.isfinite(torch.tensor(result.losses)).all()
    ckpt, pth = pair(result.voice)
    assert pth.name == "s2voice_e1_s1.pth"
    assert not list(root.glob(".s2voice*"))            # no training state left behind
    before = load_gpt_sovits(root / "tiny-v2", torch.float32).sovits.state_dict()
    after = load_gpt_sovits(result.voice, torch.float32).sovits.state_dict()
    assert set(before) == set(after)
    assert any(not torch.equal(before[k], after[k]) for k in before)       # the SoVITS was trained
    engine = SPEC.build(LoadRequest("s2voice", result.voice, torch.float32, torch.device("cpu")),
                        ModelManager(DeviceService()))
    request = SpeakRequest("Good day to you.", seed=1, language="en",
                           reference={"waveform": tone(3.2, 170)[None, None], "sample_rate": 32000},
                           reference_text="Good day.")
    wav, _ = synthesize(engine, request)
    assert wav.numel() > 0 and torch.isfinite(wav).all()


def test_collate_stacks_speaker_vectors_in_the_batch_order():
    a = s2_data.S2Sample(torch.ones(768, 5), torch.ones(1025, 5), torch.ones(3200), torch.tensor([3]), torch.full((6,), 1.0))
    b = s2_data.S2Sample(torch.ones(768, 8), torch.ones(1025, 8), torch.ones(5120), torch.tensor([5]), torch.full((6,), 2.0))
    batch = s2_data.collate([a, b])
    assert torch.equal(batch.sv_emb, torch.tensor([[2.0] * 6, [1.0] * 6]))       # longest spectrogram first
    with pytest.raises(ValueError, match="speaker vectors"):
        s2_data.collate([a, dataclasses.replace(b, sv=None)])


@pytest.mark.slow
def test_v2pro_sovits_stage_trains_on_speaker_vectors_exports_loads_and_speaks(tmp_path):
    """2-get-sv.py's vectors prepared from the clips' training audio feed sv_emb; the exported v2Pro voice
    (speaker projection trained too) loads and speaks."""
    folder = tiny.write_folder(tmp_path, "v2Pro")
    hps = copy.deepcopy(tiny.s2_config("v2Pro"))
    hps["train"]["segment_size"] = 2560
    _, sovits = pair(folder)
    tiny.save_sovits(sovits, tiny.sovits_weights("v2Pro"), hps, "v2Pro")
    (tmp_path / "clips").mkdir()
    for i, _ in enumerate(TEXTS):
        write_flac(tmp_path / "clips" / f"c{i}.flac", tone(1.5, 150 + 20 * i)[None], 32000)
    (tmp_path / "list.txt").write_text("".join(f"clips/c{i}.flac|spk|en|{t}\n" for i, t in enumerate(TEXTS)),
                                       encoding="utf-8")
    bundle = load_gpt_sovits(folder, torch.float32)
    preparer = s2_data.S2Preparer(S1Preparer(bundle))
    sample, _ = preparer.sample(read_list(tmp_path / "list.txt")[0])
    assert sample.sv.shape == (tiny.sv_dim(),) and torch.isfinite(sample.sv).all() and sample.sv.abs().sum() > 0
    job = S1Job(base=folder, list_file=tmp_path / "list.txt", save_name="pro", epochs=0, sovits_epochs=1,
                batch_size=100, seed=7)
    result = train_voice(job)
    assert result.steps == 1 and torch.isfinite(torch.tensor(result.losses)).all()
    before = bundle.sovits.state_dict()
    after = load_gpt_sovits(result.voice, torch.float32).sovits.state_dict()
    assert not torch.equal(before["sv_emb.weight"], after["sv_emb.weight"])      # the speaker path was trained
    engine = SPEC.build(LoadRequest("pro", result.voice, torch.float32, torch.device("cpu")),
                        ModelManager(DeviceService()))
    request = SpeakRequest("Good day to you.", seed=1, language="en",
                           reference={"waveform": tone(3.2, 170)[None, None], "sample_rate": 32000},
                           reference_text="Good day.")
    wav, _ = synthesize(engine, request)
    assert wav.numel() > 0 and torch.isfinite(wav).all()


def test_job_options_checked(tmp_path):
    """Checked before anything is read."""
    with pytest.raises(ValueError, match="nothing to train"):
        train_voice(S1Job(base=tmp_path, list_file=tmp_path / "list.txt", save_name="n", epochs=0))
    with pytest.raises(ValueError, match="sovits_epochs"):
        train_voice(S1Job(base=tmp_path, list_file=tmp_path / "list.txt", save_name="n", sovits_epochs=-1))
    with pytest.raises(ValueError, match="discriminator"):
        train_voice(S1Job(base=tmp_path, list_file=tmp_path / "list.txt", save_name="n", sovits_epochs=1,
                          discriminator=tmp_path / "s2D.pth"))

"""Every number a loader reads from a model folder's config files is checked before heavy work (issue 27).

For every registered engine's tiny model folder (`tests/<engine>/tiny.py`), every integer or float of its
config files (config.json, *.yaml, the other *.json configs; token tables left out) is set to 0, -1 or
10^12 (each field one of them in turn by default, all three with --slow); the engine is built and one short
request run, in a subprocess under an address-space limit and a time limit (tests/hostile_config_worker.py). Each outcome must be a ValueError naming the file and the
field, or a clean run (a field that does not matter, such as a dropout of 0). A hang, a crash, a
MemoryError, a ZeroDivisionError, an IndexError or NaN audio fails the test, naming the field.
"""
from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
import sys
from pathlib import Path

import pytest

from mizuoto.nodes.pack.registry import discover

from conformance import NO_CONFIG

TESTS = Path(__file__).resolve().parent
WORKER = TESTS / "hostile_config_worker.py"
ENGINES = sorted(spec.engine_id for spec in discover() if not spec.embedded)   # Hibari: no files, no config
LIMIT_GB = 6


def run_worker(engines: list[str], tmp: Path, plan: str, seconds: int) -> tuple[list[dict], str, str]:
    """The worker's records, a description of how it ended when it did not finish, and the engine it was
    working on then."""
    out = tmp / "records.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(WORKER), ",".join(engines), str(tmp), str(out), "--plan", plan,
           "--limit-gb", str(LIMIT_GB)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds, env=env, cwd=TESTS.parent)
        ended = "" if proc.returncode == 0 else f"exit status {proc.returncode}: {proc.stderr[-2000:]}"
    except subprocess.TimeoutExpired:
        ended = f"no result within {seconds} s"
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    done = [line["done"] for line in lines if "done" in line]
    started = [line["start"] for line in lines if "start" in line]
    if ended and len(started) > len(done):
        ended += f" (while running {started[-1]})"
    return done, ended, started[-1]["engine"] if started else ""


def judge(records: list[dict]) -> list[str]:
    """The outcomes that are neither a clean run nor a ValueError naming the file and the field."""
    bad = []
    for r in records:
        if r["outcome"] == "ok":
            continue
        name = Path(r["file"]).name
        if r["value_error"] and name in r["message"] and r["key"] in r["message"]:
            continue
        bad.append(f"{r['file']}: {r['path']} = {r['value']} -> {r['outcome']}: {r['message'][:300]}\n"
                   f"{r['where']}")
    return bad




def check_engine(engine: str, batch: tuple[list[dict], str, str]) -> None:
    records, ended, last = batch
    mine = [r for r in records if r["engine"] == engine]
    if engine in NO_CONFIG:
        assert not mine, f"{engine}: its folder has config numbers now; take it out of NO_CONFIG"
        assert not (ended and last == engine), f"{engine}: the worker did not finish: {ended}"
        return
    bad = judge(mine)
    assert not bad, f"{engine}: {len(bad)} of {len(mine)} hostile config values were not refused clearly:\n" + \
        "\n".join(bad[:12])
    assert not (ended and (last == engine or not mine)), f"{engine}: the worker did not finish: {ended}"
    assert mine, f"{engine}: no config numbers found in its tiny folder"


# The default run, within the suite's budget: each field gets one of the three values in turn (10^12: the
# terabyte allocations; 0 and -1: the divisions and out-of-range indices), all engines in one subprocess;
# the slow run: every field at every value.
QUICK = f"{10**12}:3+0,0:3+1,-1:3+2"
FULL = f"0:1,-1:1,{10**12}:1"


@pytest.fixture(scope="module")
def quick_batches(tmp_path_factory) -> dict[str, tuple[list[dict], str, str]]:
    """The engines in two workers side by side (each single-threaded: CI has two cores)."""
    halves = [ENGINES[0::2], ENGINES[1::2]]
    with ThreadPoolExecutor(len(halves)) as pool:
        batches = list(pool.map(lambda half: run_worker(half, tmp_path_factory.mktemp("hostile_quick"), QUICK,
                                                        seconds=400), halves))
    return {engine: batch for half, batch in zip(halves, batches) for engine in half}


@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_config_numbers_are_refused_naming_file_and_field(engine, quick_batches):
    check_engine(engine, quick_batches[engine])


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_every_config_number_at_every_hostile_value(engine, tmp_path):
    check_engine(engine, run_worker([engine], tmp_path, FULL, seconds=900))


# Values of published configs (the fields the rules match, and neighbours that look alike): none is refused.
PUBLISHED = {
    "BigVGAN bigvgan_v2_22khz_80band_256x config.json": {
        "num_gpus": 0, "num_workers": 4, "seed": 1234, "batch_size": 4, "segment_size": 65536, "num_mels": 80,
        "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
        "upsample_initial_channel": 1536, "resblock_kernel_sizes": [3, 7, 11],
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "cqtd_filters": 128, "cqtd_filters_scale": 1,
        "cqtd_dilations": [1, 2, 4], "cqtd_hop_lengths": [512, 256, 256], "cqtd_n_octaves": [9, 9, 9],
        "discriminator_channel_mult": 1, "n_fft": 1024, "hop_size": 256, "win_size": 1024, "sampling_rate": 22050,
        "fmin": 0, "lr_decay": 0.9999996, "dist_config": {"world_size": 1}},
    "F5-TTS F5TTS_v1_Base.yaml": {
        "datasets": {"batch_size_per_gpu": 38400, "max_samples": 64, "num_workers": 16},
        "optim": {"epochs": 11, "learning_rate": 7.5e-5, "num_warmup_updates": 20000, "grad_accumulation_steps": 1},
        "model": {"arch": {"dim": 1024, "depth": 22, "heads": 16, "ff_mult": 2, "text_dim": 512, "conv_layers": 4},
                  "mel_spec": {"target_sample_rate": 24000, "n_mel_channels": 100, "hop_length": 256,
                               "win_length": 1024, "n_fft": 1024}},
        "ckpts": {"save_per_updates": 50000, "keep_last_n_checkpoints": -1, "last_per_updates": 5000}},
    "CosyVoice2 cosyvoice2.yaml": {
        "num_decoding_left_chunks": -1, "static_chunk_size": 0, "lsm_weight": 0, "top_p": 0.8, "top_k": 25,
        "win_size": 10, "tau_r": 0.1, "sigma_min": 1e-06, "inference_cfg_rate": 0.7, "fmin": 0,
        "filter": {"max_length": 40960, "min_length": 100, "token_max_length": 200, "token_min_length": 1},
        "train_conf": {"max_epoch": 200, "grad_clip": 5, "accum_grad": 2, "save_per_step": -1,
                       "scheduler_conf": {"warmup_steps": 2500}},
        "shuffle": {"shuffle_size": 1000}, "batch": {"max_frames_in_batch": 2000}, "resample_rate": 24000},
    "Hugging Face save_pretrained defaults": {
        "chunk_size_feed_forward": 0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "min_length": 0,
        "max_length": 20, "num_beams": 1, "num_beam_groups": 1, "diversity_penalty": 0.0, "temperature": 1.0,
        "top_k": 50, "top_p": 1.0, "typical_p": 1.0, "repetition_penalty": 1.0, "length_penalty": 1.0,
        "num_return_sequences": 1, "pad_token_id": 0, "label2id": {"LABEL_0": 0, "LABEL_1": 1},
        "mask_time_min_masks": 2, "mask_feature_min_masks": 0, "mask_feature_prob": 0.0, "layer_norm_eps": 1e-12,
        "max_position_embeddings": 131072, "rope_theta": 1000000.0, "sliding_window": 131072,
        "max_window_layers": 28, "vocab_size": 151936, "layer_scale_initial_scale": 0.01, "frame_rate": 12.5,
        "trim_right_ratio": 1.0, "initializer_range": 0.02, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0}},
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_config_values_are_not_refused(name):
    from mizuoto.nodes.formats.checkpoint import check_sizes
    check_sizes(PUBLISHED[name], name, "test")


@pytest.mark.parametrize("path", sorted(TESTS.glob("*/real_*.json")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_published_configs_recorded_by_the_structure_tests_pass(path):
    """The configs (and tensor shapes) of the published models the real-structure tests record."""
    from mizuoto.nodes.formats.checkpoint import check_sizes
    check_sizes(json.loads(path.read_text(encoding="utf-8")), path, "test")

"""Voice training nodes: a dataset from a list file, and "Train Voice", which fine-tunes a base voice in
its own process with the device held, and outputs the new voice (ready for Speak) and its loss curve.

    Training Dataset (Mizuoto)   list_file (path|speaker|language|text), audio_folder -> MIZUOTO_DATASET
    Train Voice (Mizuoto)        engine, base_model, dataset, preset, gpt_epochs, batch_size, seed,
                                 save_name (+ sovits_epochs; F5-TTS: learning_rate, warmup_updates) -> MIZUOTO_TTS (the new voice), IMAGE (loss
                                 per step: the GPT's, then the SoVITS generator's)

The job (nodes/gpt_sovits/train.py) runs through `training.job.run_in_process` with the allocator
settings in its environment; for its life the pack's ModelManager holds the device (inference there
waits, idle components leave it first) and, inside ComfyUI on a GPU, ComfyUI's own models are freed
from it. Progress (ComfyUI's bar, the loss in the log) comes from the child; ComfyUI's cancel stops the
job at the next step with a resumable state, and running the node again with the same save name resumes.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...training.datasets import ListEntry, read_list
from ...training.job import held, run_in_process
from ...training.memory import PRESETS
from ...training.plot import loss_curve
from .loader_node import load, model_choices, model_folder
from .pack_runtime import get_runtime
from .registry import discover
from .speak import progress_bar

CATEGORY = "audio/tts"
log = logging.getLogger("mizuoto.training")


@dataclass(frozen=True)
class TrainingDataset:
    list_file: Path
    audio_dir: Path | None
    entries: tuple[ListEntry, ...]


class MizuotoTrainingDataset:
    """A folder of clips and a list file in GPT-SoVITS's format (path|speaker|language|text), checked
    line by line (bad lines are errors naming the line and the clip)."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_DATASET",)
    RETURN_NAMES = ("dataset",)
    FUNCTION = "read"
    DESCRIPTION = "Clips and transcripts to train a voice on: a list file path|speaker|language|text."

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"list_file": ("STRING", {"default": "", "tooltip": "path|speaker|language|text per line"}),
                             "audio_folder": ("STRING", {"default": "", "tooltip": "the clips' folder (empty: the "
                                                                                   "paths in the list)"})}}

    def read(self, list_file: str, audio_folder: str) -> tuple[TrainingDataset]:
        if not isinstance(list_file, str) or not list_file.strip():
            raise ValueError("list_file: expected the path of a list file (path|speaker|language|text)")
        audio_dir = Path(audio_folder.strip()) if isinstance(audio_folder, str) and audio_folder.strip() else None
        entries = read_list(Path(list_file.strip()), audio_dir)
        return (TrainingDataset(Path(list_file.strip()), audio_dir, tuple(entries)),)


class MizuotoTrainingClips:
    """Clips built in the graph: each item of an AUDIO batch with its transcript (one line per item), in one
    language; chained through `dataset`, the clips of earlier nodes come first. Written as FLAC with a list
    file in GPT-SoVITS's format into a fresh folder (ComfyUI's temp folder, else the system's)."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_DATASET",)
    RETURN_NAMES = ("dataset",)
    FUNCTION = "add"
    DESCRIPTION = "Training clips from AUDIO and transcripts in the graph (one transcript line per clip)."

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"audio": ("AUDIO",),
                             "transcripts": ("STRING", {"multiline": True, "default": "",
                                                        "tooltip": "one line per clip of the audio batch"}),
                             "language": (["zh", "en", "ja", "ko", "yue"], {"default": "en"})},
                "optional": {"dataset": ("MIZUOTO_DATASET",)}}

    def add(self, audio: Any, transcripts: str, language: str,
            dataset: TrainingDataset | None = None) -> tuple[TrainingDataset]:
        import tempfile

        from ..formats.audio_file import write_flac
        from .audio import check_level, check_rate, to_channels

        if not isinstance(audio, dict) or "waveform" not in audio or "sample_rate" not in audio:
            raise ValueError("audio: expected ComfyUI AUDIO {'waveform': [B, C, T], 'sample_rate': int}")
        rate = check_rate(audio["sample_rate"], "audio.sample_rate")
        wave = audio["waveform"]
        if wave.dim() != 3:
            raise ValueError(f"audio.waveform: expected [B, C, T], got shape {tuple(wave.shape)}")
        lines = [t.strip() for t in (transcripts or "").split("\n") if t.strip()]
        if len(lines) != wave.shape[0]:
            raise ValueError(f"transcripts: {len(lines)} lines for {wave.shape[0]} clips in the audio batch; "
                             "give one line per clip")
        if dataset is not None and not isinstance(dataset, TrainingDataset):
            raise ValueError("dataset: connect a Training Dataset or Training Clips (Mizuoto) node")
        mm_paths = sys.modules.get("folder_paths")
        parent = Path(mm_paths.get_temp_directory()) if mm_paths is not None else Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="mizuoto-clips-", dir=parent))
        rows = [f"{e.audio.resolve()}|{e.speaker}|{e.language}|{e.text}" for e in (dataset.entries if dataset else ())]
        start = len(rows)
        for i, text in enumerate(lines):
            if "|" in text:
                raise ValueError(f"transcripts line {i + 1}: '|' separates the list file's fields; remove it")
            channels = check_level(to_channels(wave[i], f"audio[{i}]"), f"audio[{i}]")
            path = folder / f"clip{start + i:05d}.flac"
            write_flac(path, channels, rate)
            rows.append(f"{path}|graph|{language}|{text}")
        list_file = folder / "list.txt"
        list_file.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return (TrainingDataset(list_file, None, tuple(read_list(list_file))),)


def trainable() -> dict[str, Any]:
    """The engines that declare a Trainer (registry.Trainer), by id."""
    return {s.engine_id: s for s in discover() if s.trainer is not None}


def free_comfy_models(device: Any) -> None:
    """Inside ComfyUI, its own models leave a GPU before a training stage there."""
    mm = sys.modules.get("comfy.model_management")
    if mm is not None and getattr(device, "type", "cpu") != "cpu":
        mm.free_memory(1 << 62, device)
        mm.soft_empty_cache()


def _interrupted() -> bool:
    mm = sys.modules.get("comfy.model_management")
    return bool(mm is not None and mm.processing_interrupted())


class MizuotoTrainVoice:
    """Fine-tune a base voice on a dataset into a new voice folder beside it (GPT-SoVITS: the GPT stage,
    upstream's recipe; the SoVITS of the base voice is kept). Outputs the new voice and its loss curve."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_TTS", "IMAGE")
    RETURN_NAMES = ("model", "loss_curve")
    FUNCTION = "train"
    DESCRIPTION = "Fine-tune a voice on your clips; the new voice appears in the loader's list."

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        specs = trainable()
        bases = [n for s in specs.values() for n in model_choices(s)]
        presets = [p for p in PRESETS if any(p in s.trainer.presets for s in specs.values())]
        return {"required": {
            "engine": (list(specs), {"default": next(iter(specs), "")}),
            "base_model": (bases, {"tooltip": "a voice folder in models/TTS/<engine>/ to start from, or a "
                                              "known pretrained model (downloaded first)"}),
            "dataset": ("MIZUOTO_DATASET",),
            "preset": (presets, {"default": "fast", "tooltip": "fast: upstream's recipe exactly; balanced: "
                                 "bf16 autocast; low: also gradient checkpointing; lowest (F5-TTS): also AdamW on the CPU"}),
            "gpt_epochs": ("INT", {"default": 15, "min": 0, "max": 10_000,
                                    "tooltip": "epochs (GPT-SoVITS: of the GPT stage; 0 trains the SoVITS stage "
                                               "alone)"}),
            "batch_size": ("INT", {"default": 8, "min": 1, "max": 512}),
            "seed": ("INT", {"default": 1234, "min": 0, "max": 2**31 - 1}),
            "save_name": ("STRING", {"default": "my_voice"}),
        }, "optional": {
            "sovits_epochs": ("INT", {"default": 0, "min": 0, "max": 10_000,
                                      "tooltip": "epochs of the SoVITS stage after the GPT's (upstream's webui: 8); "
                                                 "0 keeps the base voice's SoVITS"}),
            "learning_rate": ("FLOAT", {"default": 0.0, "min": 0.0, "max": 1.0, "step": 1e-6,
                                        "tooltip": "F5-TTS: AdamW's rate (0: finetune_cli's 1e-5)"}),
            "warmup_updates": ("INT", {"default": -1, "min": -1, "max": 10_000_000,
                                       "tooltip": "F5-TTS: linear warmup updates (-1: finetune_cli's 20000; with "
                                                  "a small dataset fewer, or the rate stays near 0)"}),
        }, "hidden": {"unique_id": "UNIQUE_ID"}}

    def train(self, engine: str, base_model: str, dataset: TrainingDataset, preset: str, gpt_epochs: int,
              batch_size: int, seed: int, save_name: str, unique_id: Any = None,
              sovits_epochs: int = 0, learning_rate: float = 0.0, warmup_updates: int = -1) -> tuple[Any, Any]:
        from ...runtime.allocator import allocator_env

        specs = trainable()
        if engine not in specs:
            raise ValueError(f"engine: expected one of {list(specs)}, got {engine!r}")
        if not isinstance(dataset, TrainingDataset):
            raise ValueError("dataset: connect a Training Dataset (Mizuoto) node")
        spec = specs[engine]
        if preset not in spec.trainer.presets:
            raise ValueError(f"preset: {engine} trains with {list(spec.trainer.presets)}, got {preset!r}")
        if base_model not in model_choices(spec):
            raise ValueError(f"base_model: expected one of {model_choices(spec)}, got {base_model!r}")
        base = model_folder(spec, base_model, progress_bar(unique_id))     # downloads a known model first
        runtime = get_runtime()
        device = runtime.device
        job = spec.trainer.make_job(base=base, list_file=dataset.list_file, save_name=save_name,
                                    audio_dir=dataset.audio_dir, epochs=gpt_epochs, batch_size=batch_size, seed=seed,
                                    preset=preset, device=str(device), **({"sovits_epochs": sovits_epochs}
                                                                           if sovits_epochs else {}),
                                    # F5-TTS's own options, passed only when set (other methods refuse them)
                                    **({"learning_rate": learning_rate} if learning_rate else {}),
                                    **({"warmup_updates": warmup_updates} if warmup_updates >= 0 else {}))
        bar = progress_bar(unique_id)

        def progress(stage: str, done: int, total: int, loss: float | None) -> None:
            if bar is not None:
                bar(done, total)
            if stage == "train" and (done == total or done % 50 == 0):
                log.info("training %s: step %d/%d, loss %.3f", save_name, done, total, loss)

        with held(runtime.manager, str(device), f"training {save_name}"):
            free_comfy_models(device)
            result = run_in_process(spec.trainer.run, {"job": job}, allocator_env(runtime.manager.policy),
                                    progress=progress, interrupted=_interrupted)
        log.info("trained %s: %d steps, %.3f s/step, estimate %.1f MB (%s%s)", result.voice.name, result.steps,
                 result.seconds_per_step, result.estimate_mb, preset,
                 ": " + ", ".join(result.numerics) if result.numerics else "")
        model = load(spec, result.voice.name, spec.precisions[0], "auto")
        return model, loss_curve(result.losses)

"""The Script and SRT nodes: a script (or subtitle file) with `[Name]`, `[pause:..]`, `[lang:..]`,
`[seed:..]` and `[speed:..]` tags, spoken by up to MAX_VOICES named voices through the Speak pipeline
(docs/scripts.md)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..pack.live import LiveAudio
from ..pack.pipeline import MAX_SEED, LoadedModel
from ..pack.speak import AUDIO_OPTION, CATEGORY, OPTION_INPUTS, languages, parse_options, progress_bar
from ..pack.voice import Voice, cast
from .parse import ScriptError, Segment, assign_seeds, parse_script
from .render import dialogue, perform, perform_each, plan
from .srt import format_srt, parse_srt
from .timeline import FALLBACKS, MAX_SECONDS, POLICIES, check_placement, place_cues

MAX_VOICES = 8
NO_FILE = "(none)"
MAX_SRT_FILE_BYTES = 8 << 20
EXAMPLE = "[Alice] Hello Bob. [pause:0.3s] Lovely day.\n[Bob] It is. [seed:7] Shall we walk?\n[narrator] They walked."


def voice_inputs() -> dict[str, Any]:
    voices = {f"voice_{i}": ("MIZUOTO_VOICE", {"tooltip": "a voice its [Name] tag switches to"})
              for i in range(1, MAX_VOICES + 1)}
    return {"narrator": ("MIZUOTO_VOICE", {"tooltip": "who reads untagged text (default: the model's own voice)"}),
            **voices, "settings": ("MIZUOTO_SETTINGS",), **OPTION_INPUTS}


def common_inputs() -> dict[str, Any]:
    return {
        "model": ("MIZUOTO_TTS", {"tooltip": "speaks every voice that has no model of its own"}),
        "seed": ("INT", {"default": 0, "min": 0, "max": MAX_SEED,
                         "tooltip": "spoken segment i uses seed + i; [seed:N] pins one segment"}),
        "speed": ("FLOAT", {"default": 1.0, "min": 0.25, "max": 4.0, "step": 0.05}),
        "language": (languages(), {"default": "auto"}),
        "unknown_characters": (["error", "narrator"], {"tooltip": "a [Name] with no voice: an error, or the narrator"}),
    }


class _Cast:
    """The inputs every script node shares, checked: the model, the voices by name, the settings."""

    def __init__(self, model: Any, narrator: Voice | None, settings: dict | None, voices: dict[str, Any]) -> None:
        if not isinstance(model, LoadedModel):
            raise ValueError(f"model: expected a Mizuoto model from a Mizuoto loader, got {type(model).__name__}")
        self.options = parse_options(voices.pop("options", ""), voices.pop(AUDIO_OPTION, None))
        unknown = sorted(set(voices) - {f"voice_{i}" for i in range(1, MAX_VOICES + 1)})
        if unknown:
            raise ValueError(f"{unknown[0]}: not an input of this node")
        self.model = model
        self.settings = settings
        self.voices = cast([voices.get(f"voice_{i}") for i in range(1, MAX_VOICES + 1)], narrator)

    @property
    def names(self) -> list[str]:
        return [name for name in self.voices if name is not None]

    def parse(self, text: str, unknown: str, split_lines: bool = True) -> list[Segment]:
        codes = [code for code in languages() if code != "auto"]
        return parse_script(text, characters=self.names, languages=codes, unknown=unknown, split_lines=split_lines)

    def plan(self, segments: list[Segment], language: str, speed: float):
        return plan(segments, self.voices, self.model, language=language, speed=speed, settings=self.settings,
                    options=self.options)

    def dialogue(self, segments: list[Segment], seed: int, language: str, speed: float):
        return [dialogue(segments, self.voices, self.model, seed=seed, language=language, speed=speed,
                         settings=self.settings, options=self.options)]


def _audio(waveform, rate: int) -> dict[str, Any]:
    return {"waveform": waveform.reshape(1, *waveform.shape[-2:]) if waveform.dim() > 1 else
            waveform.reshape(1, 1, -1), "sample_rate": rate}


class MizuotoScript:
    """A script spoken by named voices: [Name] switches the speaker, [pause:0.5s] inserts silence,
    [lang:de] / [de:Name] switch language, [seed:N] and [speed:X] set one segment's options."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("AUDIO", "STRING")
    RETURN_NAMES = ("audio", "report")
    FUNCTION = "speak"
    DESCRIPTION = ("Speaks a script line by line with the voices connected (matched by their names). "
                   "Unchanged lines come from a cache when the script runs again.")

    @classmethod
    def INPUT_TYPES(cls):
        common = common_inputs()
        native = ("BOOLEAN", {"default": False, "tooltip": "one multi-speaker request for a model that reads "
                                                             "dialogues natively (Fish Speech S2)"})
        return {"required": {"model": common.pop("model"),
                             "script": ("STRING", {"multiline": True, "default": EXAMPLE}), **common},
                "optional": {**voice_inputs(), "native_dialogue": native}, "hidden": {"unique_id": "UNIQUE_ID"}}

    def speak(self, model, script: str, seed: int, speed: float, language: str, unknown_characters: str,
              narrator: Voice | None = None, settings: dict | None = None, native_dialogue: bool = False,
              unique_id=None, **voices: Any) -> tuple[dict[str, Any], str]:
        if not isinstance(native_dialogue, bool):
            raise ValueError(f"native_dialogue: expected true or false, got {native_dialogue!r}")
        team = _Cast(model, narrator, settings, voices)
        segments = team.parse(script, unknown_characters)
        if not segments:
            raise ValueError("script: nothing to speak; expected text, optionally with [Name] and [pause:..] tags")
        steps = team.dialogue(segments, seed, language, speed) if native_dialogue else \
            team.plan(assign_seeds(segments, seed), language, speed)
        live = LiveAudio.for_node(unique_id)
        performance = perform(steps, progress=progress_bar(unique_id), on_audio=live)
        if live is not None:
            live.done()
        return _audio(performance.audio, performance.sample_rate), performance.report_text()


def input_srt_files() -> list[str]:
    """.srt files in ComfyUI's input folder (none outside ComfyUI)."""
    folder_paths = sys.modules.get("folder_paths")
    if folder_paths is None:
        return []
    root = Path(folder_paths.get_input_directory())
    return sorted(p.name for p in root.glob("*.srt") if p.is_file()) if root.is_dir() else []


def read_srt_file(name: str) -> str:
    """An .srt file from ComfyUI's input folder by its plain name (nothing outside that folder)."""
    folder_paths = sys.modules.get("folder_paths")
    if folder_paths is None:
        raise ValueError(f"srt_file {name!r}: files are read from ComfyUI's input folder; paste the SRT text instead")
    root = Path(folder_paths.get_input_directory()).resolve()
    if os.path.basename(name) != name or name in (".", "..") or not name.lower().endswith(".srt"):
        raise ValueError(f"srt_file {name!r}: expected the name of an .srt file in {root}")
    path = (root / name).resolve()
    if path.parent != root or not path.is_file():
        raise ValueError(f"srt_file {name!r}: no such file in {root}; expected one of {input_srt_files() or 'none'}")
    size = path.stat().st_size
    if size > MAX_SRT_FILE_BYTES:
        raise ValueError(f"srt_file {name!r}: {size} bytes; expected at most {MAX_SRT_FILE_BYTES} for subtitles")
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"srt_file {name!r}: not UTF-8 (byte {e.start}); save the subtitles as UTF-8") from None


class MizuotoSrt:
    """Subtitles spoken on their timings: each cue (with its [Name] and other tags) placed at its start
    time; speech longer than its cue is trimmed, overlapped, shifts what follows, or is time-stretched."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("AUDIO", "STRING", "STRING")
    RETURN_NAMES = ("audio", "adjusted_srt", "report")
    FUNCTION = "speak"
    DESCRIPTION = ("Speaks an SRT file cue by cue at its times. The report lists every cue that was moved, "
                   "trimmed or stretched; adjusted_srt has the times as spoken.")

    @classmethod
    def INPUT_TYPES(cls):
        common = common_inputs()
        return {"required": {"model": common.pop("model"),
                             "srt": ("STRING", {"multiline": True, "default": "1\n00:00:00,000 --> 00:00:02,000\n"
                                                "Hello from Mizuoto.\n",
                                                "tooltip": "SRT text (ignored when srt_file is chosen)"}),
                             "srt_file": ([NO_FILE, *input_srt_files()], {"tooltip": "an .srt in ComfyUI's input folder"}),
                             "timing": (list(POLICIES), {"default": "stretch",
                                                         "tooltip": "speech longer than its cue: pad_trim cuts it, "
                                                                    "overlap lets it run on, shift moves what follows, "
                                                                    "stretch speeds it up (pitch kept) then falls back"}),
                             "max_stretch": ("FLOAT", {"default": 1.5, "min": 1.0, "max": 2.0, "step": 0.05}),
                             "fallback": (list(FALLBACKS), {"default": "overlap"}),
                             "overlapping_cues": (["trim", "keep", "error"], {"default": "trim"}),
                             **common},
                "optional": voice_inputs(), "hidden": {"unique_id": "UNIQUE_ID"}}

    def speak(self, model, srt: str, srt_file: str, timing: str, max_stretch: float, fallback: str,
              overlapping_cues: str, seed: int, speed: float, language: str, unknown_characters: str,
              narrator: Voice | None = None, settings: dict | None = None, unique_id=None,
              **voices: Any) -> tuple[dict[str, Any], str, str]:
        team = _Cast(model, narrator, settings, voices)
        check_placement(timing, max_stretch, fallback)          # before any audio is made
        text = read_srt_file(srt_file) if srt_file != NO_FILE else srt
        parsed = parse_srt(text, overlap=overlapping_cues)
        if not parsed.cues:
            raise ValueError("srt: no cues; expected subtitles such as '1\\n00:00:01,000 --> 00:00:02,000\\nHello.'")
        end = max(cue.end_ms for cue in parsed.cues) / 1000
        if end > MAX_SECONDS:
            raise ValueError(f"srt: its cues run to {end / 3600:.1f} h; at most {MAX_SECONDS / 3600:g} h are placed")
        per_cue: list[list[Segment]] = []
        for cue in parsed.cues:
            try:    # a cue's wrapped lines are one segment, as a viewer reads them
                per_cue.append(team.parse(cue.text, unknown_characters, split_lines=False))
            except ScriptError as e:
                raise ValueError(f"SRT cue {cue.index}: {e}") from None
        seeded = assign_seeds([s for segments in per_cue for s in segments], seed)
        groups, at = [], 0
        for segments in per_cue:
            groups.append(team.plan(seeded[at:at + len(segments)], language, speed))
            at += len(segments)
        tracks, rate, performances = perform_each(groups, progress=progress_bar(unique_id))
        timeline = place_cues(parsed.cues, tracks, rate, policy=timing, max_stretch=max_stretch, fallback=fallback)
        repairs = [str(r) for r in parsed.repairs]
        report = "\n".join([timeline.report_text(), *(["repairs:", *repairs] if repairs else []),
                            *(f"cue {cue.index}: {p.report_text()}" for cue, p in zip(parsed.cues, performances)
                              if p.spoken)])
        return _audio(timeline.audio, rate), format_srt(timeline.cues), report

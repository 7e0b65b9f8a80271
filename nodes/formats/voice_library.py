"""The voice library: named voices as files in the models folder, `models/TTS/voices/<name>/`.

    reference.flac    the reference audio (24-bit FLAC, its own rate and channels)
    transcript.txt    what it says (UTF-8; may be empty)
    voice.json        {"format": 1, "speaker": ..., "instruction": ..., "language": ..., "note": ...}

A voice is a folder, so users can copy, share and edit voices with a file manager; every registered TTS
folder (extra_model_paths.yaml included) has its `voices/` searched in order, and saving writes into the
first. Each file is bounded before it is parsed; a voice is written into a temporary folder beside its
place and moved there whole, so an interrupted save never leaves a half-written voice, and an existing
voice is never replaced by another (the same voice saved again is left as it is).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import folders
from .audio_file import read_audio, write_flac

VOICES = "voices"
AUDIO, TRANSCRIPT, META = "reference.flac", "transcript.txt", "voice.json"
FORMAT = 1
MAX_SECONDS = 600.0                 # a reference is seconds long; ten minutes is generous
MAX_AUDIO_BYTES = 256 << 20
MAX_TRANSCRIPT_CHARS = 20_000
MAX_META_BYTES = 64 << 10
MAX_NAME_CHARS = 64
META_FIELDS = {"speaker": str, "instruction": str, "language": str, "note": str}
# A plain folder name that a script can also name: no path separators, dots-only names or script syntax.
_NAME_FORBIDDEN = re.compile(r"[/\\:\[\]\n\r\t\x00<>\"|?*]")


class VoiceNotFound(ValueError):
    """A voice name that names no voice folder in the library."""


@dataclass
class VoiceFiles:
    """A voice as stored: audio [C, T] float32 (or None: a voice by speaker name or instruction only)."""

    name: str
    audio: Tensor | None
    sample_rate: int | None
    transcript: str
    meta: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None


def check_name(name: object) -> str:
    """`name` as a voice name (a folder name a script can say), or a ValueError saying what is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"voice name: expected a name such as 'Alice', got {name!r}")
    name = name.strip()
    if len(name) > MAX_NAME_CHARS or name in (".", "..") or name.startswith(".") or _NAME_FORBIDDEN.search(name):
        raise ValueError(f"voice name {name!r}: expected at most {MAX_NAME_CHARS} characters, not starting with "
                         "'.', without / \\ : [ ] < > \" | ? * or line breaks")
    return name


def roots() -> list[Path]:
    return [root / VOICES for root in folders.roots()]


def list_voices() -> list[str]:
    names: set[str] = set()
    for root in roots():
        if root.is_dir():
            names.update(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                         and (p / META).is_file())
    return sorted(names, key=str.lower)


def find(name: str) -> Path:
    name = check_name(name)
    for root in roots():
        folder = root / name
        if (folder / META).is_file():
            return folder
    raise VoiceNotFound(f"voice {name!r} not found in {', '.join(str(r) for r in roots())}; "
                        f"available: {', '.join(list_voices()) or 'none'}")


def _bounded_text(path: Path, limit: int, what: str) -> str:
    size = path.stat().st_size
    if size > limit:
        raise ValueError(f"{what} {path}: {size} bytes; expected at most {limit}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {path}: not UTF-8 text (byte {e.start}); expected UTF-8") from None


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / META
    try:
        meta = json.loads(_bounded_text(path, MAX_META_BYTES, "voice metadata"))
    except json.JSONDecodeError as e:
        raise ValueError(f"voice metadata {path}: not JSON ({e.msg} at line {e.lineno}); expected an object "
                         f"such as {{\"format\": {FORMAT}}}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"voice metadata {path}: expected a JSON object with \"format\": {FORMAT}")
    for key, kind in META_FIELDS.items():
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            raise ValueError(f"voice metadata {path}: {key!r} must be text, got {type(meta[key]).__name__}")
    return meta


def load(name: str) -> VoiceFiles:
    """The voice `name` from the library (a ValueError naming the file for anything malformed)."""
    folder = find(name)
    meta = read_meta(folder)
    audio = rate = None
    if (folder / AUDIO).exists():
        size = (folder / AUDIO).stat().st_size
        if size > MAX_AUDIO_BYTES:
            raise ValueError(f"voice audio {folder / AUDIO}: {size} bytes; expected at most {MAX_AUDIO_BYTES}")
        audio, rate = read_audio(folder / AUDIO, "voice audio", MAX_SECONDS)
    transcript = ""
    if (folder / TRANSCRIPT).exists():
        transcript = _bounded_text(folder / TRANSCRIPT, 4 * MAX_TRANSCRIPT_CHARS, "voice transcript").strip()
        if len(transcript) > MAX_TRANSCRIPT_CHARS:
            raise ValueError(f"voice transcript {folder / TRANSCRIPT}: {len(transcript)} characters; expected at "
                             f"most {MAX_TRANSCRIPT_CHARS}")
    if audio is None and not (meta.get("speaker") or meta.get("instruction")):
        raise ValueError(f"voice {folder}: no {AUDIO}, and voice.json names no speaker or instruction; expected "
                         "at least one")
    return VoiceFiles(folder.name, audio, rate, transcript, meta, folder)


def fingerprint(name: str) -> str:
    """The voice's files by size and modification time (ComfyUI's IS_CHANGED: edits re-run the node)."""
    try:
        folder = find(name)
    except ValueError:
        return f"missing:{name}"
    rows = []
    for file in (AUDIO, TRANSCRIPT, META):
        try:
            st = (folder / file).stat()
            rows.append(f"{file}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            rows.append(f"{file}:-")
    return f"{folder}|" + "|".join(rows)


def _same(folder: Path, voice: VoiceFiles) -> bool:
    try:
        old = load(folder.name) if folder.parent in roots() else None
    except (ValueError, OSError):
        return False
    if old is None or old.transcript != voice.transcript.strip() or old.sample_rate != voice.sample_rate:
        return False
    if {k: old.meta.get(k) for k in META_FIELDS} != {k: voice.meta.get(k) for k in META_FIELDS}:
        return False
    if (old.audio is None) != (voice.audio is None):
        return False
    if voice.audio is None:
        return True
    saved = old.audio.float() / (2.0 ** 31 if old.audio.dtype == torch.int32 else 1.0)
    return saved.shape == voice.audio.shape and float((saved - voice.audio.clamp(-1, 1)).abs().max()) <= 2.0 ** -23


def save(voice: VoiceFiles) -> Path:
    """Write `voice` as `voices/<name>/` in the first TTS folder; an existing different voice of that name is
    an error (nothing is replaced), the same one is left as it is. Returns the folder."""
    name = check_name(voice.name)
    if voice.audio is not None:
        if voice.audio.dim() != 2 or voice.audio.shape[1] == 0 or not torch.isfinite(voice.audio).all():
            raise ValueError("voice audio: expected finite samples [channels, time]")
        if voice.sample_rate is None or voice.audio.shape[1] / voice.sample_rate > MAX_SECONDS:
            raise ValueError(f"voice audio: expected at most {MAX_SECONDS:g} s with a sample rate")
    if len(voice.transcript) > MAX_TRANSCRIPT_CHARS:
        raise ValueError(f"voice transcript: {len(voice.transcript)} characters; expected at most "
                         f"{MAX_TRANSCRIPT_CHARS}")
    meta = {"format": FORMAT, **{k: voice.meta[k] for k in META_FIELDS if voice.meta.get(k)}}
    root = roots()[0]
    target = root / name
    if target.exists():
        if _same(target, voice):
            return target
        raise FileExistsError(f"voice {name!r} already exists in {root} with other audio or settings; choose "
                              "another name, or delete or rename that folder first")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        if voice.audio is not None:
            write_flac(staging / AUDIO, voice.audio, voice.sample_rate)
        (staging / TRANSCRIPT).write_text(voice.transcript.strip() + "\n", encoding="utf-8")
        (staging / META).write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        os.rename(staging, target)          # fails if another save of this name won the race: nothing replaced
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target

"""Training datasets users already have: a folder of clips and a list file in GPT-SoVITS's format.

    path|speaker|language|text          one clip per line (prepare_datasets/1-get-text.py reads it so)

`read_list` parses it within bounds (file size, lines, text length) and answers one `ListEntry` per line;
every problem is a ValueError naming the list file, the line number and the clip: a line without exactly
four fields, an empty path or transcript, a language upstream does not train (upstream's
`language_v1_to_language_v2` table: ZH/zh, JP/jp/JA/ja, EN/en/En, KO/Ko/ko, yue/YUE/Yue), a clip that is
not a file, the same clip twice. A clip path is taken as upstream's 2-get-hubert-wav32k.py does: with an
audio folder given, its base name inside that folder; without, the path itself (relative paths from the
list file's folder). Blank lines are skipped; `\\r\\n` line ends are read as `\\n`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_LIST_BYTES = 16 << 20       # 16 MB: ~100k clips of ordinary transcripts
MAX_CLIPS = 100_000
MAX_TEXT_CHARS = 1000           # a clip's transcript (upstream's recipe keeps clips under 54 s)
LANGUAGES = {"ZH": "zh", "zh": "zh", "JP": "ja", "jp": "ja", "JA": "ja", "ja": "ja", "EN": "en", "en": "en",
             "En": "en", "KO": "ko", "Ko": "ko", "ko": "ko", "yue": "yue", "YUE": "yue", "Yue": "yue"}


@dataclass(frozen=True)
class ListEntry:
    line: int            # 1-based line number in the list file
    audio: Path          # the clip's file
    name: str            # its base name (upstream keys every prepared feature by it)
    speaker: str
    language: str        # upstream's v2 code: zh, ja, en, ko, yue
    text: str


def read_list(path: str | os.PathLike, audio_dir: str | os.PathLike | None = None) -> list[ListEntry]:
    """The clips of a GPT-SoVITS list file (see the module docstring); errors name the line and the clip."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"training list {path}: not found")
    size = path.stat().st_size
    if size > MAX_LIST_BYTES:
        raise ValueError(f"training list {path}: {size >> 20} MB; expected at most {MAX_LIST_BYTES >> 20} MB")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"training list {path}: not UTF-8 text ({e})") from None
    base = Path(audio_dir) if audio_dir is not None else None
    if base is not None and not base.is_dir():
        raise ValueError(f"training audio folder {base}: not a folder")
    entries: list[ListEntry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        where = f"training list {path} line {number}"
        fields = line.split("|")
        if len(fields) != 4:
            raise ValueError(f"{where}: {len(fields)} fields; expected path|speaker|language|text")
        clip, speaker, language, transcript = (f.strip() for f in fields)
        if not clip:
            raise ValueError(f"{where}: empty clip path")
        name = os.path.basename(clip.replace("\\", "/"))
        if not transcript:
            raise ValueError(f"{where} ({name}): empty transcript")
        if len(transcript) > MAX_TEXT_CHARS:
            raise ValueError(f"{where} ({name}): transcript of {len(transcript)} characters; expected at most "
                             f"{MAX_TEXT_CHARS} (split the clip)")
        if language not in LANGUAGES:
            raise ValueError(f"{where} ({name}): language {language!r} is not one GPT-SoVITS trains "
                             f"({', '.join(LANGUAGES)})")
        audio = base / name if base is not None else Path(clip)
        if not audio.is_absolute():
            audio = path.parent / audio
        if not audio.is_file():
            raise ValueError(f"{where} ({name}): audio file {audio} not found")
        if name in seen:
            raise ValueError(f"{where} ({name}): the same clip name as line {seen[name]} (prepared features are "
                             "keyed by it)")
        seen[name] = number
        entries.append(ListEntry(number, audio, name, speaker, LANGUAGES[language], transcript))
        if len(entries) > MAX_CLIPS:
            raise ValueError(f"training list {path}: more than {MAX_CLIPS} clips")
    if not entries:
        raise ValueError(f"training list {path}: no clips")
    return entries

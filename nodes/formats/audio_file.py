"""Audio files through libsndfile (the `soundfile` wheel bundles it): read any format it knows, within a
length bound checked from the header before decoding; write FLAC, as ComfyUI's SaveAudio does."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

# libsndfile subtypes read in the integer width they hold: the pipeline scales integer PCM exactly as
# soundfile/librosa do, so a 16- or 24-bit file gives the same samples as soundfile.read(..., "float32").
_INTEGER_READS = {"PCM_S8": "int16", "PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32", "PCM_32": "int32"}
MAX_FILE_SECONDS = 3600.0     # the engines take seconds to minutes; refuse hours before decoding


def read_audio(path: str | os.PathLike, what: str = "--reference",
               max_seconds: float = MAX_FILE_SECONDS) -> tuple[Tensor, int]:
    """An audio file (WAV in any PCM/float variant, FLAC, OGG, MP3, AIFF, ...) as (samples [C, T], rate);
    a ValueError naming `what` and the file for anything else."""
    import soundfile

    try:
        info = soundfile.info(str(path))
        if info.samplerate <= 0 or info.channels <= 0:
            raise ValueError(f"{info.channels} channels at {info.samplerate} Hz")
        seconds = info.frames / info.samplerate
        if seconds > max_seconds:
            raise ValueError(f"{seconds:.0f} s long; expected at most {max_seconds:.0f} s")
        data, rate = soundfile.read(str(path), dtype=_INTEGER_READS.get(info.subtype, "float32"), always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as e:
        raise ValueError(f"{what} {path}: cannot be read as audio ({e}); expected WAV, FLAC, OGG, MP3 "
                         "or another format libsndfile reads") from None
    except ValueError as e:
        raise ValueError(f"{what} {path}: {e}") from None
    return torch.from_numpy(data.T.copy()), rate


def write_flac(path: str | os.PathLike, channels: Tensor, rate: int) -> None:
    """Float samples [C, T] in [-1, 1] as 24-bit FLAC, written to a temporary file beside `path` and moved
    into place, so a failed write leaves no partial file."""
    import soundfile

    data = np.ascontiguousarray(channels.detach().to("cpu", torch.float32).clamp(-1, 1).numpy().T)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(suffix=".flac", dir=path.parent)
    os.close(fd)
    try:
        soundfile.write(tmp, data, rate, format="FLAC", subtype="PCM_24")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise

"""The long-form models' input: a `Speaker N:` script and up to four reference voices, turned into the prompt
upstream's processor builds (the original VibeVoice `VibeVoiceProcessor`, which transformers' processor
reproduces from the same prompt string):

     Transform the text provided by various speakers into speech output, utilizing the distinct voice of ...\\n
     Voice input:\\n
     Speaker 0:<|vision_start|><|vision_pad|> x frames<|vision_end|>\\n      one per voice, in order
     Text input:\\n
     Speaker 0: Hello.\\n                                                    one per script line
     Speech output:\\n<|vision_start|>

Each piece is tokenized on its own (`add_special_tokens=False`) and the special ids placed between them, as
upstream does. Script lines are `Speaker <n>: <text>` (case-insensitive); when the lowest number is above 0 every
number is lowered by one (upstream's rule: `Speaker 1` is the first voice). Voice k speaks as `Speaker k`.
The voice clips: mono, resampled to 24 kHz as librosa.load does (soxr_hq), normalised to -25 dBFS (scaled down
past full scale) and zero-padded to a common length that is a multiple of the hop, as upstream's feature
extractor does; each clip gives ceil(samples / hop) frames.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import torch
from torch import Tensor

from ..formats.checkpoint import CheckpointError, load_tokenizer
from ..pack.audio import resample, to_mono

ENGINE = "VibeVoice"
SAMPLE_RATE = 24000
MAX_VOICES = 4
SYSTEM_PROMPT = (" Transform the text provided by various speakers into speech output, utilizing the distinct voice "
                 "of each respective speaker.\n")
SPECIAL = {"speech_start": "<|vision_start|>", "speech_end": "<|vision_end|>", "speech_pad": "<|vision_pad|>",
           "eos": "<|endoftext|>"}
_LINE = re.compile(r"^Speaker\s+(\d+)\s*:\s*(.*)$", re.IGNORECASE)
TARGET_DBFS = -25.0
NORM_EPS = 1e-6


def parse_script(script: str) -> list[tuple[int, str]]:
    """(speaker, text) per non-empty line, the speaker numbers as the model sees them; the text keeps upstream's
    leading space. A script with no `Speaker N:` line at all is one speaker's (Speaker 0), line by line."""
    if not isinstance(script, str) or not script.strip():
        raise ValueError("text: nothing to speak (empty or only whitespace)")
    lines = [line.strip() for line in script.strip().split("\n") if line.strip()]
    matches = [_LINE.match(line) for line in lines]
    if not any(matches):
        return [(0, " " + line) for line in lines]
    parsed = []
    for number, (line, m) in enumerate(zip(lines, matches), 1):
        if m is None:
            raise ValueError(f"text line {number} {line[:60]!r}: expected 'Speaker <n>: <text>' (every line of a "
                             "script that names speakers must)")
        parsed.append((int(m.group(1)), " " + m.group(2).strip()))
    if min(s for s, _ in parsed) > 0:
        parsed = [(s - 1, t) for s, t in parsed]
    return parsed


@dataclass(frozen=True)
class Prompt:
    ids: Tensor             # (T,) int64, the prompt's token ids
    speech_mask: Tensor     # (T,) bool, the voice frames' positions (their embeddings are the voices')
    audio: Tensor | None    # (clips, 1, samples) the clips padded to one length, or None without voices
    frames: list[int]       # each clip's frame count
    speakers: int           # distinct speakers in the script


def prepare_voice(wav: Tensor, sample_rate: int, what: str = "voice") -> Tensor:
    """A reference clip ([T], [C, T] or [B, C, T] at `sample_rate`) as upstream reads it: mono (channels
    averaged), 24 kHz (soxr_hq, as librosa.load), float32 [T]."""
    mono = to_mono(wav, what).float()
    return resample(mono, sample_rate, SAMPLE_RATE).float()


def normalise(clip: Tensor) -> Tensor:
    """Upstream's feature extractor: scaled to -25 dBFS RMS, then divided by its peak when past full scale."""
    clip = clip.clone()
    rms = torch.sqrt(torch.mean(clip ** 2))
    clip *= 10 ** (TARGET_DBFS / 20) / (rms + NORM_EPS)
    peak = torch.max(torch.abs(clip))
    if peak > 1.0:
        clip = clip / (peak + NORM_EPS)
    return clip


class ScriptTokenizer:
    """Qwen2.5's tokenizer.json with the ids of the four tokens the long-form prompt and generation use."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path
        self._tok = load_tokenizer(path, ENGINE)
        ids = {}
        for name, token in SPECIAL.items():
            i = self._tok.token_to_id(token)
            if i is None:
                raise CheckpointError(f"{ENGINE}: {path} has no {token} token (expected Qwen2.5's tokenizer.json)")
            ids[name] = i
        self.speech_start, self.speech_end, self.speech_pad, self.eos = (
            ids["speech_start"], ids["speech_end"], ids["speech_pad"], ids["eos"])

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def prompt(self, script: str, voices: list[Tensor], hop: int) -> Prompt:
        """The prompt for `script` spoken by `voices` (24 kHz mono float32 clips, prepare_voice's output), voice k
        being `Speaker k`. With voices, every speaker of the script needs one and more voices than speakers are
        refused too; without any, the model picks the voices (upstream's prompt without its voice section)."""
        lines = parse_script(script)
        speakers = sorted({s for s, _ in lines})
        if len(voices) > MAX_VOICES:
            raise ValueError(f"voices: {len(voices)} given, expected 1 to {MAX_VOICES} reference clips "
                             "(one per speaker, Speaker 1 first), or none")
        if voices and (speakers[-1] >= len(voices) or len(speakers) != len(voices)):
            raise ValueError(f"text: the script's speakers {speakers} (as the model numbers them, from 0) need "
                             f"{speakers[-1] + 1} voices, one each, {len(voices)} given; voice k speaks as the "
                             "k-th speaker")
        clips = []
        for k, clip in enumerate(voices):
            if clip.dim() != 1 or clip.numel() == 0 or not torch.isfinite(clip).all():
                raise ValueError(f"voice {k + 1}: expected a non-empty finite mono clip, got {tuple(clip.shape)}")
            clips.append(normalise(clip.float()))
        frames = [math.ceil(c.numel() / hop) for c in clips]
        audio = None
        if clips:
            audio = torch.zeros(len(clips), 1, max(frames) * hop)
            for k, c in enumerate(clips):
                audio[k, 0, :c.numel()] = c
        # without voices upstream's prompt has no voice section at all
        ids: list[int] = self.encode(SYSTEM_PROMPT) + (self.encode(" Voice input:\n") if clips else [])
        mask: list[bool] = [False] * len(ids)
        for k, n in enumerate(frames):
            head = self.encode(f" Speaker {k}:")
            tail = self.encode("\n")
            ids += head + [self.speech_start] + [self.speech_pad] * n + [self.speech_end] + tail
            mask += [False] * (len(head) + 1) + [True] * n + [False] * (1 + len(tail))
        text = self.encode(" Text input:\n")
        for s, t in lines:
            text += self.encode(f" Speaker {s}:{t}\n")
        text += self.encode(" Speech output:\n") + [self.speech_start]
        ids += text
        mask += [False] * len(text)
        return Prompt(torch.tensor(ids, dtype=torch.long), torch.tensor(mask), audio, frames, len(speakers))

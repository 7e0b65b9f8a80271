"""The reference as F5-TTS's user-facing call reads it (f5_tts.api.F5TTS.infer, 1.1.22).

preprocess_ref_audio_text runs the file through pydub: it keeps the speech up to ~12 s (cut at a
silence of 1 s under -50 dBFS, else of 0.1 s under -40 dBFS, else hard at 12 s; each kept piece keeps
1 s of its silence), trims the edges under -42 dBFS, appends 50 ms of silence and writes a 16-bit
WAV, which infer_process reads back with torchaudio.load; infer_batch_process then averages the
channels. The pydub steps are nodes/pack/silence.py's, on the reference's 16-bit samples (a 16-bit
file's, which is what ComfyUI's LoadAudio decodes most references from).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..pack.engine import Reference
from ..pack.silence import Segment, leading_silence, split_on_silence

CLIP_MS = 12000         # "Audio is over 12s, clipping short."
KEEP_MS = 1000          # split_on_silence's keep_silence
EDGE_DB = -42.0         # remove_silence_edges' silence_threshold
TAIL_MS = 50


def _speech_up_to_12s(seg: Segment, min_silence_ms: int, thresh_db: float) -> Segment:
    kept = Segment.silent(0, seg.rate, seg.samples.shape[1])
    for part in split_on_silence(seg, min_silence_ms, thresh_db, KEEP_MS, 10):
        if len(kept) > 6000 and len(kept + part) > CLIP_MS:
            break
        kept = kept + part
    return kept


def _trim_edges(seg: Segment) -> Segment:
    seg = seg[leading_silence(seg, EDGE_DB):]
    end = leading_silence(seg.reversed(), EDGE_DB)
    return seg[:len(seg) - end] if end > 0 else seg


def prompt_audio(reference: Reference) -> tuple[Tensor, int]:
    """The reference after upstream's pydub pass and channel mean: float32 [1, T] at its own rate (made
    once per Reference: split_text and the prompt both read it)."""
    if "f5 prompt audio" not in reference.derived:
        reference.derived["f5 prompt audio"] = _prompt_audio(reference)
    return reference.derived["f5 prompt audio"]


def _prompt_audio(reference: Reference) -> tuple[Tensor, int]:
    channels, rate = reference.source if reference.source is not None else (reference.wav[None], reference.sample_rate)
    seg = Segment.from_float(channels, rate)
    kept = _speech_up_to_12s(seg, 1000, -50.0)
    if len(kept) > CLIP_MS:
        kept = _speech_up_to_12s(seg, 100, -40.0)
    if len(kept) > CLIP_MS:
        kept = kept[:CLIP_MS]
    wav = (_trim_edges(kept) + Segment.silent(TAIL_MS, rate, seg.samples.shape[1])).to_float()
    if wav.shape[0] > 1:
        wav = torch.mean(wav, dim=0, keepdim=True)
    return wav, rate

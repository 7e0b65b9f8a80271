"""SoVITS (s2) training data from a list file's clips, as upstream's preparation and data_utils make it.

Upstream (48b1a01) and what stands for each step here:

- 1-get-text.py: the phones (S1Preparer.text, shared with the GPT stage);
- 2-get-hubert-wav32k.py: HuBERT's last hidden state of the clip's mix at 16 kHz ([768, T], 50 Hz), and the
  32 kHz training audio written as int16: `x / peak * (0.95 * 0.5 * 32768) + (0.5 * 32768) * x` truncated
  (numpy astype), read back by load_audio as int16 / 32768;
- module/data_utils.py TextAudioSpeakerLoader: clips of 0.6 s to 54 s (others refused by name, upstream
  drops them), the linear spectrogram of that audio (spectrogram_torch, center false), HuBERT frames padded
  by one (replicate) where they are one short of the spectrogram's, a dataset under 100 clips repeated
  max(2, 100 // n) times; TextAudioSpeakerCollate's batch (`collate`).

- 2-get-sv.py (v2Pro / v2ProPlus): the speaker vector of that 32 kHz training audio, as its SV class computes
  it: transforms.Resample(32000, 16000) (kernel in float64), Kaldi fbank (80 bins, no dither), the
  ERes2NetV2's pooled embedding (forward3); TextAudioSpeakerCollate stacks them in the batch's order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ...training.datasets import ListEntry
from .s1_data import MAXX, ALPHA, MAX_SEC, SAMPLE_RATE, S1Preparer, clip_name, prepare_all, read_clip
from ..pack.audio import resample
from .s2_train import S2Batch
from .sovits import linear_spectrogram
from .speaker import fbank

MIN_SECONDS = 0.6
INT16 = 32768.0


@dataclass(frozen=True)
class S2Sample:
    ssl: Tensor       # [768, T] HuBERT features
    spec: Tensor      # [n_fft // 2 + 1, T]
    wav: Tensor       # [samples] the int16-rounded training audio
    phones: Tensor    # [n] int64
    sv: Tensor | None = None   # [sv_dim] v2Pro's speaker vector (7-sv_cn)


def training_audio(wav32: Tensor) -> Tensor:
    """The 5-wav32k file's samples as load_audio returns them."""
    peak = wav32.abs().max()
    mix = (wav32 / peak * (MAXX * ALPHA * INT16)) + ((1 - ALPHA) * INT16) * wav32
    return torch.trunc(mix).clamp(-INT16, INT16 - 1) / INT16


class S2Preparer:
    """Prepared s2 samples with one loaded base voice, through the GPT stage's preparer for text and HuBERT."""

    def __init__(self, text: S1Preparer) -> None:
        self.text = text
        cfg = text.bundle.sovits.cfg
        if cfg.is_v2pro and text.bundle.speaker is None:
            raise ValueError(f"SoVITS training of a {cfg.version} voice needs its speaker-verification model "
                             "(sv/pretrained_eres2netv2w24s4ep4.ckpt) for the speaker vectors")
        self.cfg = cfg

    def speaker_vector(self, audio: Tensor) -> Tensor:
        """2-get-sv.py's embedding of the 32 kHz training audio [sv_dim]."""
        speaker = self.text.bundle.speaker
        sv16 = resample(audio, SAMPLE_RATE, 16000, "torchaudio_sinc")
        with torch.inference_mode():
            weight = next(speaker.parameters())
            emb = speaker(fbank(sv16)[None].to(weight.device, weight.dtype))
        return emb[0].float().cpu()

    def sample(self, entry: ListEntry) -> tuple[S2Sample, float]:
        what = clip_name(entry)
        wav32 = read_clip(entry, MAX_SEC)
        seconds = wav32.numel() / SAMPLE_RATE
        if not MIN_SECONDS < seconds < MAX_SEC:
            raise ValueError(f"{what}: {seconds:.2f} s; the SoVITS recipe trains on clips of {MIN_SECONDS} to "
                             f"{MAX_SEC} s")
        ids, _ = self.text.text(entry)
        ssl = self.text.features(entry, wav32)[0].float().cpu()                  # [768, T]
        audio = training_audio(wav32)
        cfg = self.cfg
        spec = linear_spectrogram(audio[None], cfg.filter_length, cfg.hop_length, cfg.win_length)[0]
        if ssl.shape[-1] != spec.shape[-1]:
            ssl = F.pad(ssl[None], (0, 1), mode="replicate")[0]
        sv = self.speaker_vector(audio) if cfg.is_v2pro else None
        return S2Sample(ssl, spec, audio, torch.tensor(ids, dtype=torch.int64), sv), seconds

    def prepare(self, entries: Sequence[ListEntry],
                progress: Callable[[int, int], None] | None = None) -> list[S2Sample]:
        return prepare_all(self.sample, entries, progress)


def collate(samples: Sequence[S2Sample]) -> S2Batch:
    """TextAudioSpeakerCollate: longest spectrogram first; spectrogram and HuBERT frames padded with zeros to
    2 * (max // 2 + 1), audio to the longest, phones to the longest."""
    if not samples:
        raise ValueError("collate: no samples")
    _, order = torch.sort(torch.LongTensor([s.spec.size(1) for s in samples]), dim=0, descending=True)
    max_ssl = int(2 * ((max(s.ssl.size(1) for s in samples) // 2) + 1))
    max_spec = int(2 * ((max(s.spec.size(1) for s in samples) // 2) + 1))
    max_wav = max(s.wav.numel() for s in samples)
    max_text = max(s.phones.numel() for s in samples)
    b = len(samples)
    ssl = torch.zeros(b, samples[0].ssl.size(0), max_ssl)
    spec = torch.zeros(b, samples[0].spec.size(0), max_spec)
    wav = torch.zeros(b, 1, max_wav)
    text = torch.zeros(b, max_text, dtype=torch.int64)
    lengths = {k: torch.zeros(b, dtype=torch.int64) for k in ("ssl", "spec", "wav", "text")}
    if any((s.sv is None) != (samples[0].sv is None) for s in samples):
        raise ValueError("collate: some samples have speaker vectors and some do not")
    sv = None if samples[0].sv is None else torch.zeros(b, samples[0].sv.numel())
    for i, j in enumerate(order.tolist()):
        s = samples[j]
        ssl[i, :, :s.ssl.size(1)] = s.ssl
        spec[i, :, :s.spec.size(1)] = s.spec
        wav[i, 0, :s.wav.numel()] = s.wav
        text[i, :s.phones.numel()] = s.phones
        if sv is not None:
            sv[i] = s.sv
        lengths["ssl"][i], lengths["spec"][i] = s.ssl.size(1), s.spec.size(1)
        lengths["wav"][i], lengths["text"][i] = s.wav.numel(), s.phones.numel()
    return S2Batch(ssl, lengths["ssl"], spec, lengths["spec"], wav, lengths["wav"], text, lengths["text"], sv)

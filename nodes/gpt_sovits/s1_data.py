"""GPT (s1) training data from a list file's clips, through our engine's pieces, as upstream prepares it.

Upstream (prepare_datasets/, 48b1a01) and what stands for each step here:

- 1-get-text.py: `clean_text(text.replace("%", "-").replace("￥", ","), language, "v2")` -> phones
  (our chinese.clean_text / english.clean_text, the inference front end's, at parity there) and, for
  Chinese, `get_bert_feature(norm_text, word2ph)` (hidden_states[-3] repeated per phone: frontend's
  phone_features on our BERT); other languages have no BERT file and train on zeros;
- 2-get-hubert-wav32k.py: the clip decoded at 32 kHz mono (ffmpeg there; here libsndfile, the channels'
  mean, soxr HQ to 32 kHz when the file has another rate), a peak above 2.2 refused (upstream skips it),
  scaled `x / peak * (0.95 * 0.5 * 1145.14) + (0.5 * 1145.14) * x`, to 16 kHz with soxr HQ (librosa's
  default resampler), HuBERT's last hidden state (NaN refused: upstream skips it);
- 3-get-semantic.py: the pretrained SoVITS's `extract_latent` codes;
- AR/data/dataset.py: the phone ids of the v2 symbol table; clips with more than `max_sec * 25` tokens, more
  than `max_sec * 25 / 2.5` phones, or a phones-per-second ratio outside [3, 25] are refused by name
  (upstream drops them with a count); a dataset under 100 clips is repeated max(2, 100 // n) times.

Clips upstream reads but our front end does not (ja, ko, yue) are refused naming the line.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ...training.datasets import ListEntry
from ..formats.audio_file import read_audio
from ..pack.audio import resample, to_float
from . import chinese, english, frontend
from .g2pw import G2PW, read_polyphonic
from .loader import GPTSoVITS
from .s1_train import S1Sample

SAMPLE_RATE = 32000
SEMANTIC_HZ = 25               # the dataset's `hz` (env "25hz")
PEAK_LIMIT = 2.2
MAXX, ALPHA, HUBERT_SCALE = 0.95, 0.5, 1145.14
MIN_PS_RATIO, MAX_PS_RATIO = 3, 25
MAX_SEC = 54                   # s1longer-v2.yaml data.max_sec (the recipe's, not the base checkpoint's)
MIN_DATASET = 100              # upstream repeats a smaller dataset
MIN_TOTAL_SECONDS = 4.0        # below this no recipe has anything to learn from (upstream suggests minutes)
LANGUAGES = ("zh", "en")


def clip_name(entry: ListEntry) -> str:
    return f"clip {entry.name} (line {entry.line})"


def read_clip(entry: ListEntry, max_seconds: float) -> Tensor:
    """The clip at 32 kHz mono float32, checked finite, not silent and within the peak limit."""
    what = clip_name(entry)
    channels, rate = read_audio(entry.audio, what=what, max_seconds=max_seconds + 1)
    wav = to_float(channels, what).mean(0)
    if rate != SAMPLE_RATE:
        wav = resample(wav, rate, SAMPLE_RATE, "soxr_hq")
    if wav.numel() == 0 or not torch.isfinite(wav).all():
        raise ValueError(f"{what}: {'no samples' if wav.numel() == 0 else 'non-finite samples'} in {entry.audio}")
    peak = float(wav.abs().max())
    if peak == 0:
        raise ValueError(f"{what}: {entry.audio} is silent")
    if peak > PEAK_LIMIT:
        raise ValueError(f"{what}: peak {peak:.2f} in {entry.audio}; expected at most {PEAK_LIMIT} (upstream "
                         "skips such clips)")
    return wav


def hubert_mix(wav32: Tensor) -> Tensor:
    """2-get-hubert-wav32k.py's `tmp_audio32b`: the peak-normalised mix at HuBERT's scale."""
    peak = wav32.abs().max()
    return (wav32 / peak * (MAXX * ALPHA * HUBERT_SCALE)) + ((1 - ALPHA) * HUBERT_SCALE) * wav32


def hubert_input(wav32: Tensor) -> Tensor:
    """The HuBERT input: the mix at 16 kHz (soxr HQ, librosa.resample's default)."""
    return resample(hubert_mix(wav32), SAMPLE_RATE, 16000, "soxr_hq")


def prepare_all(sample: Callable[[ListEntry], tuple[Any, float]], entries: Sequence[ListEntry],
                progress: Callable[[int, int], None] | None = None) -> list:
    """`sample(entry)` -> (sample, seconds) for every entry, with progress; refused when the clips hold too
    little audio to learn from."""
    samples, seconds = [], 0.0
    for i, entry in enumerate(entries):
        item, length = sample(entry)
        samples.append(item)
        seconds += length
        if progress is not None:
            progress(i + 1, len(entries))
    if seconds < MIN_TOTAL_SECONDS:
        raise ValueError(f"training data: {seconds:.1f} s of audio in {len(samples)} clips; expected at least "
                         f"{MIN_TOTAL_SECONDS:.0f} s")
    return samples


class S1Preparer:
    """Prepared samples from list entries with one loaded base voice (`load_gpt_sovits`)."""

    def __init__(self, bundle: GPTSoVITS, max_sec: int = MAX_SEC) -> None:
        self.bundle = bundle
        self.max_sec = max_sec
        self.table = english.symbols()
        self._lexicon: dict | None = None
        self._g2pw: tuple[G2PW | None, dict | None] | None = None

    def lexicon(self) -> dict:
        if self._lexicon is None:
            self._lexicon = english.read_lexicon(self.bundle.text_dir)
        return self._lexicon

    def g2pw(self) -> tuple[G2PW | None, dict | None]:
        if self._g2pw is None:
            if self.bundle.g2pw_dir is None:
                self._g2pw = (None, None)
            else:
                self._g2pw = (G2PW.from_folder(self.bundle.g2pw_dir, self.bundle.tokenizer),
                              read_polyphonic(self.bundle.text_dir))
        return self._g2pw

    def text(self, entry: ListEntry) -> tuple[list[int], Tensor | None]:
        """(phone ids, BERT features [1024, phones] for Chinese, else None)."""
        what = clip_name(entry)
        if entry.language not in LANGUAGES:
            raise ValueError(f"{what}: language {entry.language!r}; this engine's front end reads "
                             f"{' and '.join(LANGUAGES)}")
        text = entry.text.replace("%", "-").replace("￥", ",")
        try:
            if entry.language == "en":
                phones, norm = english.clean_text(text, self.lexicon())
                word2ph = None
            else:
                g2pw, polyphonic = self.g2pw()
                phones, word2ph, norm = chinese.clean_text(text, g2pw, polyphonic)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        ids = [self.table[p] for p in phones]
        pauses = {self.table[p] for p in (*chinese.PUNCTUATION, "UNK")}
        if not any(i not in pauses for i in ids):
            raise ValueError(f"{what}: transcript {entry.text!r} has nothing to read as {entry.language}")
        if entry.language != "zh":
            return ids, None
        if self.bundle.bert is None:
            raise ValueError(f"{what}: Chinese needs the BERT (chinese-roberta-wwm-ext-large) beside the voice")
        with torch.inference_mode():
            seg = frontend.Segment("zh", text, ids, word2ph, norm)
            bert = frontend.bert_features([seg], self.bundle.tokenizer,
                                          lambda t: self.bundle.bert(t.to(self.device)))
        if bert.shape[-1] != len(ids):
            raise ValueError(f"{what}: {bert.shape[-1]} BERT columns for {len(ids)} phones")
        return ids, bert

    @property
    def device(self) -> torch.device:
        return next(self.bundle.hubert.parameters()).device

    def features(self, entry: ListEntry, wav32: Tensor) -> Tensor:
        """HuBERT's last hidden state of the clip [1, 768, T] (2-get-hubert-wav32k.py's 4-cnhubert file)."""
        with torch.inference_mode():
            feats = self.bundle.hubert(hubert_input(wav32)[None].to(self.device, self.bundle.dtype))[-1]
            if not torch.isfinite(feats).all():
                raise ValueError(f"{clip_name(entry)}: HuBERT features are not finite (upstream skips the clip)")
        return feats.transpose(1, 2)

    def semantic(self, entry: ListEntry, wav32: Tensor) -> list[int]:
        feats = self.features(entry, wav32)
        with torch.inference_mode():
            codes = self.bundle.sovits.extract_latent(feats)
        return codes.reshape(-1).cpu().tolist()

    def sample(self, entry: ListEntry) -> tuple[S1Sample, float]:
        """One clip's sample and its seconds, refused by name where upstream's dataset would drop it."""
        what = clip_name(entry)
        wav = read_clip(entry, self.max_sec)
        ids, bert = self.text(entry)
        semantic = self.semantic(entry, wav)
        if len(semantic) > self.max_sec * SEMANTIC_HZ:
            raise ValueError(f"{what}: {len(semantic) / SEMANTIC_HZ:.1f} s of speech tokens; the recipe trains on "
                             f"clips up to max_sec = {self.max_sec} s")
        if len(ids) > self.max_sec * SEMANTIC_HZ / 2.5:
            raise ValueError(f"{what}: {len(ids)} phones; the recipe takes at most {self.max_sec * SEMANTIC_HZ / 2.5:.0f}")
        ratio = len(ids) / (len(semantic) / SEMANTIC_HZ) if semantic else math.inf
        if not MIN_PS_RATIO <= ratio <= MAX_PS_RATIO:
            raise ValueError(f"{what}: {len(ids)} phones for {len(semantic) / SEMANTIC_HZ:.2f} s of audio "
                             f"({ratio:.1f} per second; the recipe keeps {MIN_PS_RATIO} to {MAX_PS_RATIO}): does "
                             "the transcript match the clip?")
        return S1Sample(torch.tensor(ids, dtype=torch.int64), torch.tensor(semantic, dtype=torch.int64), bert), \
            wav.numel() / SAMPLE_RATE

    def prepare(self, entries: Sequence[ListEntry],
                progress: Callable[[int, int], None] | None = None) -> list[S1Sample]:
        return prepare_all(self.sample, entries, progress)


def repeat_small(samples: Sequence[S1Sample]) -> list[S1Sample]:
    """dataset.py's padding of a small dataset: under 100 samples, max(2, 100 // n) copies in order."""
    if len(samples) >= MIN_DATASET:
        return list(samples)
    return list(samples) * max(2, int(MIN_DATASET / len(samples)))

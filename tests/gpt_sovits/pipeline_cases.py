"""The requests test_pipeline.py sends through the Speak pipeline and make_pipeline_fixtures.py sends to
upstream's TTS.run, and the files both read (imported by both; no test here)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

RATE, SECONDS = 44100, 4

# name -> request: multi-sentence Chinese with a date and numbers, cut into segments of different lengths (so
# split_bucket's order is not the text's); English with numbers, a date, currency, a percentage and a run of
# dots; a second request with the first one's voice (ours reuses the cached prompt); a
# speed other than 1 (split_bucket off: the text's order). Each reference a 44.1 kHz stereo 16-bit file.
CASES: dict[str, dict] = {
    "zh_sentences": {"text": "今天是2024年3月15日，天气很好。我们下午三点去公园散步吧！你好。明天见，朋友们，记得带水和雨伞。",
                     "language": "zh", "reference_text": "你好，我是一二三。", "reference_seed": 26, "seed": 11},
    "en_numbers": {"text": "Wait... On May 5th, 2024 I paid $19.99 for 3 books-- that's 50% off!",
                   "language": "en", "reference_text": "Hello world, good day.", "reference_seed": 27, "seed": 12},
    "zh_again": {"text": "我们明天再见吧。你好，朋友，一路平安！", "language": "zh", "reference_text": "你好，我是一二三。",
                 "reference_seed": 26, "seed": 13, "again": True},
    "zh_speed": {"text": "你好，我是一二三。今天是3月15日，我们一起去公园散步吧！", "language": "zh",
                 "reference_text": "你好，我是一二三。", "reference_seed": 28, "seed": 14, "speed": 1.25},
}

# v2Pro (the speaker model's embedding joins the style vector): other texts, seeds and references. Chinese
# sentences with a temperature, a percentage, a phone number and a time; English with a time, an ordinal, a year,
# pounds and a decimal; the cached voice (its prompt and speaker embedding); a slower speed.
CASES_V2PRO: dict[str, dict] = {
    "zh_sentences": {"text": "各位好。今天最高气温是25度，湿度为60%。有问题请拨打12345咨询！下午3点半我们在门口集合，谢谢大家。",
                     "language": "zh", "reference_text": "你好，我是一二三。", "reference_seed": 36, "seed": 21},
    "en_numbers": {"text": "At 10:30 on the 2nd day, I paid £7.25 for 2 books. It was 1990!",
                   "language": "en", "reference_text": "Hello world, good day.", "reference_seed": 37, "seed": 22},
    "zh_again": {"text": "我们下周再见吧。谢谢你，朋友，一路顺风！", "language": "zh", "reference_text": "你好，我是一二三。",
                 "reference_seed": 36, "seed": 23, "again": True},
    "zh_speed": {"text": "大家好，我是一二三。现在是晚上8点，我们一起回家吧！", "language": "zh",
                 "reference_text": "你好，我是一二三。", "reference_seed": 38, "seed": 24, "speed": 0.8},
}

# tiny.write_folder's version -> its cases and the fixture file make_pipeline_fixtures.py writes them to
VERSIONS: dict[str, tuple[dict[str, dict], str]] = {"v2": (CASES, "pipeline_v2.pt"),
                                                    "v2Pro": (CASES_V2PRO, "pipeline_v2Pro.pt")}


def stereo_pcm(seed: int) -> np.ndarray:
    """int16 [2, T]: a seeded random walk (speech-like low-pass content) per channel, integers only (as
    test_reference.stereo_pcm)."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(-300, 301, size=(2, RATE * SECONDS), dtype=np.int64)
    walk = np.cumsum(steps, axis=1)
    walk -= np.cumsum(walk, axis=1) // np.arange(1, walk.shape[1] + 1)      # pull towards the running mean
    return np.clip(walk // 4, -20000, 20000).astype(np.int16)


def write_lexicon_extra(text_dir: Path, entries: dict[str, str]) -> None:
    """`entries` (WORD -> phones) appended to tiny.write_lexicon's cmudict.rep, in its format."""
    with open(Path(text_dir) / "cmudict.rep", "a") as f:
        f.write("".join(f"{word}  {phones}\n" for word, phones in entries.items()))

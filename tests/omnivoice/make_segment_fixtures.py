"""Upstream OmniVoice's long-text cut and join, recorded for tests/omnivoice/test_segments.py.

    "$REF_VENV"/bin/python tests/omnivoice/make_segment_fixtures.py      # the parity venv (README.md)

Runs omnivoice 0.2.1's own functions: RuleDurationEstimator.estimate_duration through
OmniVoice._estimate_target_tokens (the whole text's estimate), GenerationTask.get_indices' 30 s threshold,
_generate_chunked's chunk length and chunk_text_punctuation, and cross_fade_chunks on exact float32
waveforms. Recorded per case: the estimate, the pieces, and the joined waveform's length and SHA-256.
Written to fixtures/segments.json.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from qwen3_tts.torchaudio_shim import install  # noqa: E402

install()
from omnivoice.models.omnivoice import OmniVoice, OmniVoiceGenerationConfig  # noqa: E402
from omnivoice.utils.audio import cross_fade_chunks  # noqa: E402
from omnivoice.utils.duration import RuleDurationEstimator  # noqa: E402
from omnivoice.utils.text import chunk_text_punctuation  # noqa: E402

FRAME_RATE, RATE = 25, 24000
TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    " ".join(f"Sentence number {i} is here, and it goes on a little." for i in range(14)),
    "这是一个很长的句子，" * 40 + "结束。",
    "Dr. Smith met Mr. Jones at 10 a.m. on Jan. 5th. They talked, e.g. about the weather. " * 8,
    "他说：“你好。”然后走了…真的吗？" * 20,
    "No punctuation at all in this rather long sentence that keeps going and going " * 12,
    "一" * 400,
    "Short.",
    "こんにちは。今日はいい天気ですね！散歩に行きましょう。" * 12,
    "A, b; c: d! e? f. " * 60,
    "Mixed 中文 and English. 再来一句！And one more? " * 15,
    "Wait... what?! Really?! " * 40,
    "第一段。\n\n第二段很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长。" * 10,
    "(Quoted) \"text\" with 'marks'. [Brackets] too! 《书名》。」" * 12,
    "Inc. Ltd. Co. St. Ave. approx. fig. vs. etc. " * 30,
    "x." * 300,
]
REFERENCES = [(None, None), ("Speak slowly and clearly.", 80), ("对。", 12)]
SPEEDS = [1.0, 1.6]


def wave(samples: int, marker: int) -> np.ndarray:
    k = np.arange(samples, dtype=np.int64)
    return (((k * 37 + marker * 11) % 101).astype(np.float32) / 101)[None]


def main() -> None:
    model = OmniVoice.__new__(OmniVoice)           # only the estimator: no weights
    model.duration_estimator = RuleDurationEstimator()
    config = OmniVoiceGenerationConfig()
    threshold = int(config.audio_chunk_threshold * FRAME_RATE)
    cases = []
    for text in TEXTS:
        for ref_text, ref_frames in REFERENCES:
            for speed in SPEEDS:
                target = model._estimate_target_tokens(text, ref_text, ref_frames, speed=speed)
                if target <= threshold:
                    pieces = [text]
                else:
                    chunk_len = int(config.audio_chunk_duration * FRAME_RATE / (target / len(text)))
                    pieces = chunk_text_punctuation(text=text, chunk_len=chunk_len, min_chunk_len=3)
                lengths = [960 * (7 + 13 * i) + 5 * i for i in range(len(pieces))]
                joined = cross_fade_chunks([wave(n, i) for i, n in enumerate(lengths)], RATE)
                joined = np.ascontiguousarray(joined[0], dtype=np.float32)
                cases.append({"text": text, "ref_text": ref_text, "ref_frames": ref_frames, "speed": speed,
                              "target_frames": target, "pieces": pieces, "wave_lengths": lengths,
                              "joined_samples": int(joined.size),
                              "joined_sha256": hashlib.sha256(joined.tobytes()).hexdigest()})
    (HERE / "fixtures").mkdir(exist_ok=True)
    (HERE / "fixtures" / "segments.json").write_text(json.dumps(cases, ensure_ascii=False, indent=0) + "\n")
    print(f"{len(cases)} cases, {sum(len(c['pieces']) > 1 for c in cases)} cut")


if __name__ == "__main__":
    main()

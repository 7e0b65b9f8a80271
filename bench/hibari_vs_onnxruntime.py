"""Our torch path for the hibari "heart" voice vs hibari-tts's own onnxruntime path, side by side.

    python bench/hibari_vs_onnxruntime.py [--threads 1] [--repeats 3]

Needs a venv with both the pack and hibari-tts *with* onnxruntime (the test venv). Each side runs
in its own subprocess (so peak RSS is its own): load, one warm-up, then the same sentences
`--repeats` times; each call is text -> waveform (G2P + acoustic model + DSP). x realtime = seconds
of audio / wall seconds (median repeat). Peak RSS = getrusage ru_maxrss of that subprocess.
Both run the int8 Linear layers the same way (int8 weights, activations quantized per call, integer
matmul: nodes/blocks/int8.py); the rest is float32 on each side's own kernels.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore.",
    "On the 3rd of March 2024, 1,250 people paid $9.99 each to hear it read at 7:30 pm.",
    "Hello there, this is hibari, a tiny English voice that runs on one processor core.",
    "Why would anyone paint the garden fence purple?",
    "A journey of a thousand miles begins with a single step, and then another, and another.",
]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024           # KiB on Linux


def worker(side: str, threads: int, repeats: int) -> dict:
    t0 = time.perf_counter()
    if side == "ours":
        import torch
        torch.set_num_threads(threads)
        from mizuoto.nodes.hibari.engine import HibariVoice
        import_rss = _rss_mb()
        voice = HibariVoice.load()
        speak = lambda text: voice.synthesize(text, seed=0)[0].numel()          # noqa: E731
    else:
        import hibari
        import onnxruntime  # noqa: F401  (Hibari() imports it lazily; count it with the imports)
        import_rss = _rss_mb()
        tts = hibari.Hibari(threads=threads)
        speak = lambda text: len(tts(text, seed=0))                               # noqa: E731
    speak("Warm up.")
    load_s = time.perf_counter() - t0
    walls, samples = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        samples = sum(speak(s) for s in SENTENCES)
        walls.append(time.perf_counter() - t)
    wall = statistics.median(walls)
    return {"side": side, "audio_s": samples / 24000, "wall_s": wall, "x_realtime": samples / 24000 / wall,
            "load_s": load_s, "rss_after_import_mb": import_rss, "peak_rss_mb": _rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch / onnxruntime intra-op threads (hibari's default: 1)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", choices=["ours", "hibari"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.threads, a.repeats)))
        return
    results = {}
    for side in ("hibari", "ours"):
        out = subprocess.run([sys.executable, __file__, "--worker", side, "--threads", str(a.threads),
                              "--repeats", str(a.repeats)], capture_output=True, text=True, check=True)
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{len(SENTENCES)} sentences, {results['ours']['audio_s']:.1f} s of audio (ours), {a.threads} thread(s)")
    for r in results.values():
        print(f"  {r['side']:7s} {r['x_realtime']:7.1f}x realtime  wall {r['wall_s'] * 1e3:7.1f} ms"
              f"  load {r['load_s']:.2f} s  peak RSS {r['peak_rss_mb']:6.0f} MB"
              f" (after imports {r['rss_after_import_mb']:.0f} MB)")
    o, h = results["ours"], results["hibari"]
    above = (o["peak_rss_mb"] - o["rss_after_import_mb"]) / (h["peak_rss_mb"] - h["rss_after_import_mb"])
    print(f"ratios ours / hibari: x realtime {o['x_realtime'] / h['x_realtime']:.2f}, "
          f"peak RSS {o['peak_rss_mb'] / h['peak_rss_mb']:.2f}, peak RSS above imports {above:.2f}")


if __name__ == "__main__":
    main()

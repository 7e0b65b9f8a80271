"""Scripts: segments per second for a 200-line dialogue with and without the voice-prompt and segment
caches (a figure, not a test).

    python bench/script.py             # ~2 minutes on one core
    python bench/script.py --lines 50  # shorter

Two voices on two engines' tiny models (tests/<engine>/tiny.py, random float32 weights): Alice clones
a reference on a Fish Speech model (its reference is encoded by the codec: the voice prompt), Bob
clones one on a CosyVoice model (speech tokenizer, speaker embedding and mel: its voice prompt). Lines
alternate. Rows:

- no caches: every line derives its voice's prompt again (the prompt cache holds nothing);
- voice cache: each voice's prompt is derived once and reused;
- both caches, after editing one line: the script run once, one line changed, run again (what
  re-running in ComfyUI after fixing a typo costs).

Every row's audio is compared with the first row's: `exact` when torch.equal segment by segment.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT / "tests")      # not bench/: the tiny models live beside their tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    from conformance import conformance_case
    from mizuoto.nodes.pack.caches import ByteCache
    from mizuoto.nodes.pack.pack_runtime import PROMPT_CACHE_MB, build_runtime
    from mizuoto.nodes.pack.pipeline import LoadedModel
    from mizuoto.nodes.pack.registry import LoadRequest, engine
    from mizuoto.nodes.pack.voice import Voice
    from mizuoto.nodes.script import render
    from mizuoto.nodes.script.parse import assign_seeds, parse_script
    from mizuoto.runtime import VramPolicy

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp())
    runtime = build_runtime(VramPolicy())
    voices, options = {}, {}
    for name, engine_id in (("Alice", "fish_speech"), ("Bob", "cosyvoice")):
        case = conformance_case(engine_id, root / engine_id)
        model = LoadedModel(engine(engine_id), LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu")),
                            runtime)
        ref = case.request.reference
        voices[name] = Voice(name, ref["waveform"][0], ref["sample_rate"], case.request.reference_text or "",
                             language=case.request.language, model=model)
        options[model.key] = case.request.options
    words = ["Hello world.", "The fox!", "hi there", "Some more words."]
    lines = [f"[{'Alice' if i % 2 == 0 else 'Bob'}] {words[i % len(words)]}" for i in range(args.lines)]

    def steps(text: str):
        segments = assign_seeds(parse_script(text, characters=list(voices)), 5)
        out = render.plan(segments, voices, None)
        return [dataclasses.replace(s, request=dataclasses.replace(s.request, options=dict(options[s.model.key])))
                for s in out]

    script = "\n".join(lines)
    edited = "\n".join(lines[:-1] + [lines[-1].replace("]", "] Edited:", 1)])
    render.perform(steps(script), reuse=False)            # warm-up: models loaded, first-call costs paid
    rows = []

    def timed(label: str, text: str, reuse: bool):
        start = time.perf_counter()
        performance = render.perform(steps(text), reuse=reuse)
        seconds = time.perf_counter() - start
        rows.append((label, performance, seconds))

    runtime.prompts = ByteCache(0)                         # nothing kept: every line derives its prompt
    timed("no caches", script, reuse=False)
    runtime.prompts = ByteCache(PROMPT_CACHE_MB << 20)
    timed("voice cache", script, reuse=False)
    runtime.segments.clear()
    render.perform(steps(script), reuse=True)             # the first run fills the segment cache
    timed("both caches, 1 line edited", edited, reuse=True)

    base = rows[0][1]
    print(f"{args.lines}-line dialogue, 2 voices on tiny Fish Speech and CosyVoice models, 1 thread")
    print(f"{'row':30s} {'segments/s':>11s} {'synthesised':>12s} {'x no caches':>12s}  output")
    for label, performance, seconds in rows:
        n = len(performance.spoken)
        same = all(torch.equal(performance.audio[0, a.start:a.start + a.samples],
                               base.audio[0, b.start:b.start + b.samples])
                   for a, b in zip(performance.spoken[:-1], base.spoken[:-1]))
        print(f"{label:30s} {n / seconds:11.1f} {performance.synthesised:12d} "
              f"{rows[0][2] / seconds:12.2f}  {'exact' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()

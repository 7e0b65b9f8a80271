"""Time to first audio ÷ time to the whole audio, per engine, with audio handed over as it is made
(`on_audio`) against the same request waited for whole (a figure, not a test).

    python bench/streaming.py          # ~1 minute on one core

Every registered engine on its tiny model (tests/<engine>/tiny.py, random float32 weights), a text of
three sentences where the engine cuts sentences, its conformance request otherwise (engines whose upstream
reads the whole text in one generation hand it over in one piece). First audio is measured when the
first piece reaches the caller; without streaming the caller has audio only at the end (ratio 1.00).
The pieces are checked `torch.equal` to the whole.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT / "tests")      # the tiny models live beside their tests

THREE = {"en": "The first sentence is short. The second one follows it. And the third ends the text.",
         "zh": "第一句很短。第二句跟着它。第三句结束了。"}


def main() -> None:
    from conformance import conformance_case
    from mizuoto.nodes.pack.pipeline import synthesize
    from mizuoto.nodes.pack.registry import LoadRequest, discover
    from mizuoto.runtime import DeviceService, ModelManager

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp())
    print("engine        segments  first audio s  whole s  first ÷ whole  pieces  output")
    for spec in discover():
        case = conformance_case(spec.engine_id, root / spec.engine_id)
        load = LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu"))
        engine = spec.build(load, ModelManager(DeviceService()))
        request = case.request
        text = THREE["zh" if request.language == "zh" else "en"]
        longer = dataclasses.replace(request, text=text)
        try:                               # three sentences where the tiny model's context holds them
            synthesize(engine, longer)
            request = longer
        except (ValueError, IndexError):  # a tiny vocabulary or context: the engine's own request
            pass
        synthesize(engine, request)        # warm-up
        got: list[tuple[float, torch.Tensor]] = []
        start = time.perf_counter()
        wav, meta = synthesize(engine, request, on_audio=lambda p, sr: got.append((time.perf_counter(), p)))
        whole = time.perf_counter() - start
        first = got[0][0] - start
        exact = torch.equal(torch.cat([p for _, p in got]), wav)
        print(f"{spec.engine_id:13s} {meta['chunks']:8d} {first:14.3f} {whole:8.3f} {first / whole:14.2f} "
              f"{len(got):7d}  {'exact' if exact else 'DIFFERENT'}")


if __name__ == "__main__":
    main()

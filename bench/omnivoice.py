"""OmniVoice: time per unmasking step with the backbone streamed at 50 % residency / fully resident.

    python bench/omnivoice.py [--hidden 512] [--layers 8] [--steps 8] [--text "..."]

A random checkpoint in the upstream layout (tests/omnivoice/tiny.py's writer, a wider backbone) runs the
"generate" phase twice on the strict simulated CPU device: once with room for the whole backbone, once
with room for its minimum working set plus half of the rest (as tests/runtime_helpers.residency_capacity
sizes it). Each step re-runs the whole sequence (two rows, CFG), so every non-resident layer streams once
per step. Prints the median step time of each run and their ratio (a figure, not a test).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _tiny():
    spec = importlib.util.spec_from_file_location("omnivoice_tiny", ROOT / "tests" / "omnivoice" / "tiny.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["omnivoice_tiny"] = module
    spec.loader.exec_module(module)
    return module


def step_times(folder: Path, residency: str, text: str, steps: int) -> tuple[list[float], dict]:
    from mizuoto.nodes.pack.engine import Chunk
    from mizuoto.nodes.omnivoice.generate import Sampling
    from mizuoto.nodes.omnivoice.loader import load_omnivoice
    from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine
    from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
    from runtime_helpers import residency_capacity
    probe = OmniVoiceEngine(load_omnivoice(folder, torch.float32), ModelManager(DeviceService()))
    prompt = probe.make_prompt(Chunk(text, seed=0, language="en"), None, True)
    working = probe.generate_memory(prompt.length, prompt.frames)
    mode, capacity = residency_capacity(probe.backbone, residency, working=working)
    engine = OmniVoiceEngine(load_omnivoice(folder, torch.float32),
                             ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True),
                                          VramPolicy({"compute.vram_mode": mode})))
    stamps: list[float] = []
    sampling = Sampling(num_step=steps)
    with engine.manager.request(seed=0) as ctx:
        start = time.perf_counter()
        engine.generate(ctx, prompt, sampling, 0, progress=lambda done, total: stamps.append(time.perf_counter()))
    h = engine.backbone
    times = [b - a for a, b in zip([start] + stamps, stamps)]
    return times[1:], {"loaded_mib": h.loaded_bytes / 2**20, "size_mib": h.size_bytes / 2**20,
                       "streamed_mib_per_step": h.streamed_bytes / 2**20 / steps, "length": prompt.length}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--text", default="The quick brown fox jumps over the lazy dog, and then it runs away.")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    folder = _tiny().write_tiny_checkpoint(Path(tempfile.mkdtemp()) / "bench", seed=0, layers=args.layers,
                                           hidden=args.hidden)
    results = {}
    for residency in ("full", "half", "full", "half"):          # interleaved; the second pair is reported
        results[residency] = step_times(folder, residency, args.text, args.steps)
    full, half = (statistics.median(results[r][0]) for r in ("full", "half"))
    info = results["half"][1]
    print(f"backbone {info['size_mib']:.1f} MiB ({args.layers} x {args.hidden}), sequence {info['length']} x 2 rows, "
          f"{args.steps} steps, {args.threads} thread(s)")
    print(f"resident: {full * 1000:.1f} ms per step")
    print(f"50 %:     {half * 1000:.1f} ms per step, {info['loaded_mib']:.1f} MiB resident, "
          f"{info['streamed_mib_per_step']:.1f} MiB streamed per step")
    print(f"streamed / resident per unmasking step: {half / full:.3f}")


if __name__ == "__main__":
    main()

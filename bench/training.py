"""GPT-SoVITS GPT (s1) training steps per memory preset: the estimate beside the measured peak, seconds per step.

    python bench/training.py --device cuda:0               # the published s1 size (512 wide, 24 layers, 16 heads)
    python bench/training.py --device cpu --tiny           # what tests/test_bench_training.py runs
        --batch N --phones N --tokens N --batches N        # batch shape (default 8 x (80 phones + 250 tokens)), 9 batches

Random weights in the published layout (no download). Each preset runs the recipe (forward_old's loss,
ScaledAdam, an update every 4 batches) on fresh weights. The peak is `torch.cuda.max_memory_allocated`
on a GPU; on the CPU, the tensors the step allocates counted op by op on a simulated device (not RSS).
Seconds per step are the median over the batches after the first (warm-up).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from mizuoto.nodes.gpt_sovits import s1_train
from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic
from mizuoto.nodes.gpt_sovits.train import method_info
from mizuoto.runtime import DeviceService
from mizuoto.training import resolve_tools

PUBLISHED = {"vocab_size": 1025, "phoneme_vocab_size": 732, "embedding_dim": 512, "hidden_dim": 512, "head": 16,
             "n_layer": 24, "EOS": 1024}
TINY = {**PUBLISHED, "embedding_dim": 64, "hidden_dim": 64, "head": 4, "n_layer": 2}
PRESETS = ("fast", "balanced", "low")
MB = 1 << 20


def batches(n: int, size: int, phones: int, tokens: int, eos: int) -> list[s1_train.S1Batch]:
    g = torch.Generator().manual_seed(0)
    return [s1_train.collate([s1_train.S1Sample(torch.randint(1, 732, (phones,), generator=g),
                                                torch.randint(0, eos, (tokens,), generator=g),
                                                torch.randn(1024, phones, generator=g)) for _ in range(size)], eos)
            for _ in range(n)]


def run(preset: str, model_cfg: dict, data: list[s1_train.S1Batch], device: torch.device) -> dict:
    cfg = T2SConfig.from_dict({"model": model_cfg, "data": {"max_sec": 54}}, "bench")
    tools = resolve_tools(preset)
    times: list[float] = []

    def steps() -> int:
        torch.manual_seed(0)
        model = Text2Semantic(cfg).to(device).train()
        recipe = s1_train.S1Recipe(model, s1_train.make_optimizer(model), tools=tools)
        for i, b in enumerate(data):
            start = time.perf_counter()
            recipe.batch(b, i)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
        return method_info(model, data).memory_bytes(preset, data[0].phoneme_ids.shape[0])

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        estimate = steps()
        peak = torch.cuda.max_memory_allocated(device)
    else:
        with DeviceService(simulate={"cpu": 1 << 50}).tracking("cpu") as tracker:
            estimate = steps()
        peak = tracker.peak_bytes
    return {"preset": preset, "estimate_mb": estimate / MB, "peak_mb": peak / MB,
            "s_per_step": statistics.median(times[1:]) if len(times) > 1 else times[0],
            "numerics": ", ".join(n for n in tools.numerics_changes() if not n.startswith("frozen"))
            or "upstream's float32 recipe"}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny T2S (64 wide, 2 layers)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--phones", type=int, default=80)
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--batches", type=int, default=9)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    model_cfg = TINY if args.tiny else PUBLISHED
    data = [b.to(device) for b in batches(args.batches, args.batch, args.phones, args.tokens, model_cfg["EOS"])]
    print(f"GPT-SoVITS s1 training on {device}: {model_cfg['n_layer']} layers x {model_cfg['hidden_dim']}, "
          f"batch {args.batch} x ({args.phones} phones + {args.tokens} tokens), {args.batches} batches, torch "
          f"{torch.__version__}")
    print(f"{'preset':10s} {'estimate MB':>12s} {'peak MB':>10s} {'est/peak':>9s} {'s/step':>8s}  numerics")
    rows = []
    for preset in PRESETS:
        row = run(preset, model_cfg, data, device)
        rows.append(row)
        print(f"{preset:10s} {row['estimate_mb']:12.1f} {row['peak_mb']:10.1f} "
              f"{row['estimate_mb'] / row['peak_mb']:9.2f} {row['s_per_step']:8.3f}  {row['numerics']}")
    return rows


if __name__ == "__main__":
    main()

"""GPT-SoVITS GPT (s1) training steps per memory preset: the estimate beside the measured peak, seconds per step.

    python bench/training.py --device cuda:0               # the published s1 size (512 wide, 24 layers, 16 heads)
    python bench/training.py --device cpu --tiny           # what tests/test_bench_training.py runs
    python bench/training.py --stage s2 --device cuda:0    # the SoVITS stage (published s2.json size), fast / low / lowest
        --frames N                                         # s2: spectrogram frames a clip (default 250: 5 s)
        --batch N --phones N --tokens N --batches N        # batch shape (default 8 x (80 phones + 250 tokens)), 9 batches

Random weights in the published layout (no download). Each preset runs the recipe (forward_old's loss,
ScaledAdam, an update every 4 batches) on fresh weights. The peak is `torch.cuda.max_memory_allocated`
on a GPU; on the CPU, the tensors the step allocates counted op by op on a simulated device (not RSS).
Seconds per step are the median over the batches after the first (warm-up).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

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


def measured(preset: str, device: torch.device, steps: Callable[[Callable], float], times: list[float],
             tools: Callable[[], Any]) -> dict:
    """Run `steps(host)` (returns the estimate in bytes, appends each step's seconds to `times`; `host` is the
    context for host-side work, e.g. the host AdamW's) under the device's peak measure: CUDA's allocator, or the
    simulated device's tracker on the CPU, which then leaves `devices.host` work out; one row."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        estimate = steps(contextlib.nullcontext)     # host tensors are not in CUDA's allocator statistics
        peak = torch.cuda.max_memory_allocated(device)
    else:
        devices = DeviceService(simulate={"cpu": 1 << 50})
        with devices.tracking("cpu") as tracker:
            estimate = steps(devices.host)
        peak = tracker.peak_bytes
    return {"preset": preset, "estimate_mb": estimate / MB, "peak_mb": peak / MB,
            "s_per_step": statistics.median(times[1:]) if len(times) > 1 else times[0],
            "numerics": numerics(tools())}


def numerics(tools: Any) -> str:
    """The row's label: what changes the numbers (frozen parts are not trained here), else the float32 recipe;
    a float32 host AdamW rounds nothing (torch's AdamW bit for bit), so it is named as such, not as a change."""
    changes = [n for n in tools.numerics_changes() if not n.startswith("frozen")]
    if changes:
        return ", ".join(changes)
    return "upstream's float32 recipe" + (" (host-side AdamW in float32: nothing rounded)"
                                          if tools.host_optimizer else "")


def run(preset: str, model_cfg: dict, data: list[s1_train.S1Batch], device: torch.device) -> dict:
    cfg = T2SConfig.from_dict({"model": model_cfg, "data": {"max_sec": 54}}, "bench")
    tools = resolve_tools(preset)
    times: list[float] = []

    def steps(_host: Callable) -> int:       # no host-side work: ScaledAdam runs on the device
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

    return measured(preset, device, steps, times, lambda: tools)


# upstream's s2.json (v2): the published SoVITS size; the tiny one keeps the widths upstream hard-codes (192 hidden,
# MRTE 512, gin 512) with a narrow decoder and a 16x narrower discriminator
S2_PUBLISHED = {"train": {"segment_size": 20480, "learning_rate": 1e-4, "betas": [0.8, 0.99], "eps": 1e-9,
                          "lr_decay": 0.999875, "c_mel": 45, "c_kl": 1.0, "text_low_lr_rate": 0.4},
                "data": {"max_wav_value": 32768.0, "sampling_rate": 32000, "filter_length": 2048, "hop_length": 640,
                         "win_length": 2048, "n_mel_channels": 128, "mel_fmin": 0.0, "mel_fmax": None},
                "model": {"inter_channels": 192, "hidden_channels": 192, "filter_channels": 768, "n_heads": 2,
                          "n_layers": 6, "kernel_size": 3, "p_dropout": 0.1, "resblock": "1",
                          "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5]] * 3,
                          "upsample_rates": [10, 8, 2, 2, 2], "upsample_initial_channel": 512,
                          "upsample_kernel_sizes": [16, 16, 8, 2, 2], "n_layers_q": 3, "use_spectral_norm": False,
                          "gin_channels": 512, "semantic_frame_rate": "25hz", "freeze_quantizer": True}}
S2_TINY = {**S2_PUBLISHED, "train": {**S2_PUBLISHED["train"], "segment_size": 5120},
           "model": {**S2_PUBLISHED["model"], "inter_channels": 8, "filter_channels": 32, "n_layers": 2,
                     "resblock_kernel_sizes": [3, 5], "resblock_dilation_sizes": [[1, 3, 5]] * 2,
                     "upsample_initial_channel": 32, "upsample_kernel_sizes": [16, 16, 4, 4, 4]}}
S2_PRESETS = ("fast", "low", "lowest")


def s2_batches(n: int, size: int, frames: int, phones: int) -> list:
    """TextAudioSpeakerCollate-shaped random batches: `size` clips of `frames` spectrogram frames."""
    from mizuoto.nodes.gpt_sovits.s2_train import S2Batch
    g = torch.Generator().manual_seed(0)
    hop = S2_PUBLISHED["data"]["hop_length"]
    lengths = torch.full((size,), frames)
    return [S2Batch(torch.randn(size, 768, frames, generator=g), lengths,
                    torch.rand(size, 1025, frames, generator=g) + 0.01, lengths,
                    0.5 * torch.tanh(torch.randn(size, 1, frames * hop, generator=g)), lengths * hop,
                    torch.randint(1, 732, (size, phones), generator=g), torch.full((size,), phones)) for _ in range(n)]


def run_s2(preset: str, hps: dict, divisor: int, data: list, device: torch.device) -> dict:
    """The SoVITS stage (sovits_loop: D then G a batch) on fresh random weights; the estimate is s2_job's
    (weights, gradients, AdamW, weight-norm copies and the batch's activations: s2_memory)."""
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from mizuoto.nodes.gpt_sovits.s2_job import memory_mb, sovits_loop
    from mizuoto.nodes.gpt_sovits.s2_train import MultiPeriodDiscriminator, S2Hparams, training_generator
    from mizuoto.nodes.gpt_sovits.sovits import SoVITSConfig
    tools = resolve_tools(preset)
    times: list[float] = []

    def steps(host: Callable) -> float:
        nonlocal tools
        torch.manual_seed(0)
        net_g = training_generator(SoVITSConfig.from_hparams(hps, "v2", 732, "bench")).to(device)
        net_d = MultiPeriodDiscriminator("v2", divisor).to(device)
        with TemporaryDirectory() as tmp:
            loop = sovits_loop(net_g, net_d, [b.to(device) for b in data], S2Hparams.from_config(hps), tools, seed=0,
                               checkpoint=Path(tmp) / "state.pt", options="bench", host_context=host)
            tools = loop.tools       # the stage's own (lowest keeps float32)
            estimate = memory_mb(net_g, net_d, S2Hparams.from_config(hps), tools, data) * MB
            for i in range(len(data)):
                start = time.perf_counter()
                loop.run(i + 1)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
        return estimate

    return measured(preset, device, steps, times, lambda: tools)


def main_s2(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)
    hps, divisor = (S2_TINY, 16) if args.tiny else (S2_PUBLISHED, 1)
    data = s2_batches(args.batches, args.batch, args.frames, args.phones)
    print(f"GPT-SoVITS s2 (SoVITS) training on {device}: {'tiny' if args.tiny else 'published'} size, batch "
          f"{args.batch} x {args.frames} frames ({hps['train']['segment_size']}-sample segments), {args.batches} "
          f"batches, torch {torch.__version__}")
    print(f"{'preset':10s} {'estimate MB':>12s} {'peak MB':>10s} {'est/peak':>9s} {'s/step':>8s}  numerics")
    rows = []
    for preset in S2_PRESETS:
        row = run_s2(preset, hps, divisor, data, device)
        rows.append(row)
        print(f"{preset:10s} {row['estimate_mb']:12.1f} {row['peak_mb']:10.1f} "
              f"{row['estimate_mb'] / row['peak_mb']:9.2f} {row['s_per_step']:8.3f}  {row['numerics']}")
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny T2S (64 wide, 2 layers)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--phones", type=int, default=80)
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--batches", type=int, default=9)
    parser.add_argument("--stage", choices=("s1", "s2"), default="s1", help="s2: the SoVITS stage's presets")
    parser.add_argument("--frames", type=int, default=250, help="s2: spectrogram frames a clip (50 a second)")
    args = parser.parse_args(argv)
    if args.stage == "s2":
        return main_s2(args)
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

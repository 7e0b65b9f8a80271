"""F5-TTS flow phase: streamed ÷ resident (DESIGN.md §7), measured side by side in one run.

    python bench/f5_tts.py [--quick | --real] [--repeats N] [--threads N] [--steps N] [--clock cpu|wall]

The engine's own "flow" phase (`F5TTSEngine.flow`: text embedding once, then the guided DiT on the
ODE grid) of a randomly initialised DiT, on the strict simulated device at 100 % (resident), 50 %
(half of the room between the minimum working set and the whole DiT) and 0 % residency (every unit
streamed), with the engine's own working-memory estimate. Prints per arm: median time per request,
÷ the resident arm, bytes copied per request, and whether the mel equals the resident one bit for bit.
Sizes: default a reduced DiT (dim 512, 8 blocks) that runs in seconds on a CPU; `--real` the
F5TTS_v1_Base shapes (dim 1024, 22 blocks; slow on a CPU); `--quick` a tiny one (for a smoke test).
Not a test.
"""
from __future__ import annotations

import argparse
import copy
import gc
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mizuoto.nodes.blocks.vocoder import Vocos, VocosConfig
from mizuoto.nodes.f5_tts.loader import V1_BASE_ARCH, F5Bundle, MelConfig
from mizuoto.nodes.f5_tts.model import DiT, DiTConfig
from mizuoto.nodes.f5_tts.phases import F5TTSEngine
from mizuoto.nodes.f5_tts.sample import FlowSettings, total_frames
from mizuoto.nodes.f5_tts.text import F5Tokenizer
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy

MB = 1 << 20
SIZES = {
    "quick": dict(dim=64, depth=4, heads=4, ff_mult=2, text_dim=64, conv_layers=2),
    "reduced": dict(dim=512, depth=8, heads=8, ff_mult=2, text_dim=256, conv_layers=2),
    "real": {k: v for k, v in V1_BASE_ARCH.items()},
}
VOCAB = 256


def build_bundle(arch: dict, tmp: Path, seed: int = 0) -> F5Bundle:
    """A random DiT of the given shape (every parameter drawn, nothing zero-initialised) and a tiny
    Vocos (unused: the bench times the flow phase only)."""
    (tmp / "vocab.txt").write_text("".join(f"{chr(32 + i)}\n" if i < 95 else f"t{i}\n" for i in range(VOCAB)),
                                   encoding="utf-8")
    cfg = DiTConfig.from_arch(arch, mel_dim=100, vocab_size=VOCAB, source="bench")
    torch.manual_seed(seed)
    dit = DiT(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in dit.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (p.shape[-1] ** -0.5 if p.dim() > 1 else 0.1))
    voc = Vocos(VocosConfig(dim=32, intermediate_dim=64, num_layers=1, head_dim=32)).eval()
    return F5Bundle(tmp, cfg, MelConfig(), dit, voc, F5Tokenizer(tmp / "vocab.txt"))


class Arm:
    def __init__(self, label: str, bundle: F5Bundle, residency: float, working: int, clock, unit: int) -> None:
        self.label, self.clock = label, clock
        probe = F5TTSEngine(copy.deepcopy(bundle), ModelManager(DeviceService()), min_unit_bytes=unit)
        dit = probe.dit
        slots = 2                                           # compute.async_offload = 1: two streamed copies
        sizes = sorted((u.nbytes for u in dit.layout.units), reverse=True)
        min_ws = dit.layout.fixed_bytes + sum(sizes[:slots])
        if residency >= 1:
            mode, capacity = "normal", dit.size_bytes + 4 * working
        elif residency <= 0:
            mode, capacity = "none", dit.size_bytes + 4 * working
        else:
            mode, capacity = "normal", min_ws + int((dit.size_bytes - min_ws) * residency) + working
        self.devices = DeviceService(simulate={"cpu": capacity + probe.vocoder.size_bytes}, strict=True)
        # each arm owns its weights: a strict simulated device leaves only meta tensors on the host side
        self.engine = F5TTSEngine(copy.deepcopy(bundle), ModelManager(self.devices,
                                                                      VramPolicy({"compute.vram_mode": mode})),
                                  min_unit_bytes=unit)
        self.times: list[float] = []
        self.copied: list[int] = []
        self.outputs: list[torch.Tensor] = []

    def __call__(self, mel: torch.Tensor, ids: torch.Tensor, duration: int, settings: FlowSettings,
                 timed: bool = True) -> None:
        before = self.devices.transfers.h2d_bytes
        t0 = self.clock()
        with self.engine.manager.request(seed=0) as ctx:
            out = self.engine.flow(ctx, mel, ids, duration, settings)
        dt = self.clock() - t0
        if timed:
            self.times.append(dt)
            self.copied.append(self.devices.transfers.h2d_bytes - before)
        self.outputs.append(out)

    @property
    def loaded(self) -> str:
        h = self.engine.dit
        return f"{h.loaded_bytes / MB:.1f} / {h.size_bytes / MB:.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a tiny DiT (smoke test)")
    size.add_argument("--real", action="store_true", help="F5TTS_v1_Base shapes (slow on a CPU)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--steps", type=int, default=4, help="ODE steps per request (upstream: 32)")
    ap.add_argument("--seconds", type=float, default=1.5, help="reference seconds (the text adds about as much)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: process CPU time (default; robust to other load), wall: perf_counter")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    name = "quick" if args.quick else "real" if args.real else "reduced"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = build_bundle(SIZES[name], Path(tmp))
        ref_frames = int(args.seconds * 24000) // 256 + 1
        mel = torch.randn(1, ref_frames, 100, generator=torch.Generator().manual_seed(1))
        ids = torch.randint(0, VOCAB, (1, 2 * ref_frames // 5), generator=torch.Generator().manual_seed(2))
        duration = 2 * ref_frames
        settings = FlowSettings(steps=args.steps)
        frames = total_frames(ids.shape[1], ref_frames, duration)
        working = F5TTSEngine(copy.deepcopy(bundle), ModelManager(DeviceService())).flow_memory(frames)
        unit = (64 << 10) if args.quick else (1 << 20)    # the tiny DiT's blocks are under the 1 MB default
        arms = [Arm(f"{r:.0%}", bundle, r, working, clock, unit) for r in (1.0, 0.5, 0.0)]
        for arm in arms:                                    # warm-up: the first request places the weights
            arm(mel, ids, duration, settings, timed=False)
        for i in range(args.repeats):                       # round robin: drift and other load hit every arm
            gc.collect()
            for arm in arms[i % len(arms):] + arms[:i % len(arms)]:
                arm(mel, ids, duration, settings)
    resident = arms[0]
    print(f"F5-TTS flow phase, {name} DiT (dim {bundle.config.dim}, {bundle.config.depth} blocks, "
          f"{sum(p.numel() for p in bundle.dit.parameters()) / 1e6:.1f} M parameters, fp32), {frames} frames, "
          f"{settings.steps} steps x guided batch of 2, {args.repeats} repeats, {args.clock} clock, "
          f"{torch.get_num_threads()} threads")
    print(f"{'residency':>9}  {'loaded':>18}  {'time/request':>12}  {'÷ resident':>10}  {'copied/request':>14}  check")
    for arm in arms:
        t = statistics.median(arm.times)
        exact = all(torch.equal(o, resident.outputs[0]) for o in arm.outputs)
        print(f"{arm.label:>9}  {arm.loaded:>18}  {t * 1e3:>9.0f} ms  {t / statistics.median(resident.times):>10.2f}"
              f"  {statistics.median(arm.copied) / MB:>11.1f} MB  {'exact' if exact else 'DIFFERENT'}")
    print(f"({time.perf_counter() - started:.0f} s wall)")


if __name__ == "__main__":
    main()

"""Command line: `python -m mizuoto <command>`."""
from __future__ import annotations

import argparse
import sys

MB = 1 << 20


def _settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--setting expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def doctor(args: argparse.Namespace) -> int:
    """Print the memory check: the effective policy and every device with free/total memory."""
    from .runtime import DeviceService, ModelManager, SettingsError, VramPolicy
    from .runtime.policy import parse_setting

    try:
        policy = VramPolicy({k: parse_setting(k, v) for k, v in _settings(args.setting).items()})
    except SettingsError as e:
        print(f"settings: {e}", file=sys.stderr)
        return 2
    simulate = policy.get("compute.simulate_vram_mb")
    devices = DeviceService(simulate={"cpu": simulate * MB} if simulate else None)
    manager = ModelManager(devices, policy)
    async_offload = policy.get("compute.async_offload")
    limit = policy.get("compute.vram_limit_mb")
    rows = [
        ("mode", policy.get("compute.vram_mode")),
        ("limit", "none" if limit is None else f"{limit} MB"),
        ("ram reserve", f"{policy.ram_reserve_bytes() / MB:.0f} MB"),
        ("host copies", policy.get("compute.host_copies")),
        ("pin budget", f"{policy.max_pinned_bytes() / MB:.0f} MB"),
        ("copy streams", f"{async_offload} (+1 copy held: {async_offload + 1} per oneshot component, 1 per sequence)"),
        ("oom retry", "on" if policy.get("compute.oom_retry") else "off"),
        ("oom fallback", "on" if policy.get("compute.oom_fallback") else "off"),
        ("kv cache", policy.get("compute.kv_cache")),
        ("allocator", policy.get("compute.cuda_allocator")),
    ]
    print("memory")
    for device in devices.devices():
        rows.insert(1, (f"reserve {device}", f"{manager.reserve_bytes(device) / MB:.0f} MB"))
    for key, value in rows:
        print(f"  {key:<14} {value}")
    print("devices")
    for device in devices.devices():
        kind = "simulated" if devices.is_simulated(device) else device.type
        print(f"  {str(device):<8} {kind:<10} free {manager.free_bytes(device) / MB:>10.0f} MB"
              f" of {devices.total(device) / MB:>10.0f} MB")
    return 0


def write_wav(path: str, wav, sample_rate: int) -> None:
    """16-bit mono PCM with the standard library; written to a temporary name, then renamed."""
    import os
    import tempfile
    import wave

    import numpy as np

    pcm = (np.clip(wav.numpy(), -1.0, 1.0) * 32767.0).round().astype("<i2")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".wav", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, wave.open(f, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(sample_rate)
            w.writeframes(pcm.tobytes())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def speak(args: argparse.Namespace) -> int:
    """Speech from text with the embedded voice: a WAV file and the run's meta.memory."""
    import json

    import torch

    from .nodes.hibari.engine import HibariVoice
    from .nodes.hibari.phases import HibariEngine
    from .runtime import DeviceService, ModelManager, SettingsError, VramPolicy
    from .runtime.allocator import apply_cuda_allocator
    from .runtime.policy import parse_setting

    text = args.text
    if args.text_file:
        with open(args.text_file, encoding="utf-8") as f:
            text = f.read()
    if text is None:
        print("speak: give the text to read, or --text-file", file=sys.stderr)
        return 2
    try:
        settings = {k: parse_setting(k, v) for k, v in _settings(args.setting).items()}
        if args.simulate_vram_mb is not None:
            settings["compute.simulate_vram_mb"] = args.simulate_vram_mb
        policy = VramPolicy(settings)
    except SettingsError as e:
        print(f"speak: {e}", file=sys.stderr)
        return 2
    apply_cuda_allocator(policy)  # before the first CUDA use
    simulate = policy.get("compute.simulate_vram_mb")
    if simulate:
        devices, device = DeviceService(simulate={"cpu": simulate * MB}, strict=True), "cpu"
    else:
        devices = DeviceService()
        device = next((str(d) for d in devices.devices() if d.type != "cpu"), "cpu")
    manager = ModelManager(devices, policy)
    engine = HibariEngine(HibariVoice.load(), manager, device=device)
    try:
        with manager.request(seed=args.seed) as ctx:
            wav = engine.speak(ctx, text, seed=args.seed, speed=args.speed)
    except (ValueError, TypeError) as e:
        print(f"speak: {e}", file=sys.stderr)
        return 2
    except torch.OutOfMemoryError as e:
        print(f"speak: out of memory: {e}", file=sys.stderr)
        return 1
    write_wav(args.output, wav, engine.sample_rate)
    print(f"wrote {args.output}: {wav.numel() / engine.sample_rate:.2f} s at {engine.sample_rate} Hz")
    print(json.dumps({"memory": ctx.meta["memory"], "applied": ctx.meta["applied"]}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mizuoto", description="Mizuoto text-to-speech runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="print the memory check (effective policy, devices)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="override a compute.* setting for this run")
    p.set_defaults(func=doctor)
    p = sub.add_parser("speak", help="speak text with the embedded voice into a WAV file")
    p.add_argument("text", nargs="?", help="the text to read (or --text-file)")
    p.add_argument("-o", "--output", required=True, help="WAV file to write (16-bit mono)")
    p.add_argument("--text-file", help="read the text from this UTF-8 file")
    p.add_argument("--engine", choices=["hibari"], default="hibari", help="the engine (the embedded voice)")
    p.add_argument("--seed", type=int, default=0, help="noise seed; chunk i uses seed + i")
    p.add_argument("--speed", type=float, default=1.0, help="speaking rate, 0.25 to 4.0")
    p.add_argument("--simulate-vram-mb", type=int, help="run on a simulated GPU of this size (CPU)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="override a compute.* setting for this run")
    p.set_defaults(func=speak)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mizuoto", description="Mizuoto text-to-speech runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="print the memory check (effective policy, devices)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="override a compute.* setting for this run")
    p.set_defaults(func=doctor)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

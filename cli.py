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
    """16-bit mono PCM with the standard library. A regular file (new, or what a symlink names) is written
    to a temporary name beside it and renamed into place, keeping an existing file's mode (a new one gets
    the user's umask); a FIFO or device is written directly, never replaced by a regular file."""
    import io
    import os
    import stat
    import tempfile
    import wave

    import numpy as np

    pcm = (np.clip(wav.numpy(), -1.0, 1.0) * 32767.0).round().astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    target = os.path.realpath(path)
    existing = os.stat(target) if os.path.exists(target) else None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        if stat.S_ISDIR(existing.st_mode):
            raise IsADirectoryError(f"-o {path}: is a folder; expected a file path")
        with open(target, "wb") as f:
            f.write(buffer.getvalue())
        return
    if existing is not None:
        mode = stat.S_IMODE(existing.st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(suffix=".wav", dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getvalue())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def read_wav(path: str):
    """A PCM WAV file (8/16/32-bit integer) as (samples [C, T] in their integer dtype, rate), standard library only."""
    import wave

    import numpy as np
    import torch

    with wave.open(path, "rb") as w:
        width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
        data = w.readframes(w.getnframes())
    dtype = {1: np.uint8, 2: np.int16, 4: np.int32}.get(width)
    if dtype is None:
        raise ValueError(f"--reference {path}: {8 * width}-bit samples; expected 8, 16 or 32-bit PCM")
    pcm = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    return torch.from_numpy(pcm.reshape(-1, channels).T.copy()), rate


def speak(args: argparse.Namespace) -> int:
    """Speech from text with any registered engine (the embedded voice by default): a WAV file and the
    run's meta.memory."""
    import json
    import os
    from pathlib import Path

    from .nodes.common import folders
    from .nodes.common.pack_runtime import build_runtime
    from .nodes.common.pipeline import LoadedModel, SpeakRequest
    from .nodes.common.pipeline import speak as run
    from .nodes.common.registry import PRECISIONS, LoadRequest, discover
    from .runtime import SettingsError, VramPolicy
    from .runtime.oom import is_oom
    from .runtime.policy import parse_setting

    spec = {s.engine_id: s for s in discover()}[args.engine]
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir) or os.path.isdir(args.output):
        print(f"speak: -o {args.output}: expected a file path in an existing folder", file=sys.stderr)
        return 2
    text = args.text
    if args.text_file:
        try:
            text = Path(args.text_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            print(f"speak: --text-file {args.text_file}: cannot be read as UTF-8 text ({e})", file=sys.stderr)
            return 2
    if text is None:
        print("speak: give the text to read, or --text-file", file=sys.stderr)
        return 2
    precision = args.precision or spec.precisions[0]
    if precision not in spec.precisions:
        print(f"speak: --precision {precision}: expected one of {', '.join(spec.precisions)}", file=sys.stderr)
        return 2
    folder = None
    if spec.embedded:
        if args.model:
            print(f"speak: --model: {spec.display_name} has no model folder; leave it out", file=sys.stderr)
            return 2
    else:
        if not args.model:
            print(f"speak: --model: {spec.display_name} needs a model folder (a path, or a name in "
                  f"models/TTS/{spec.engine_id}/)", file=sys.stderr)
            return 2
        folder = Path(args.model) if os.path.isdir(args.model) else None
        if folder is None:
            try:
                folder = folders.resolve(spec.engine_id, args.model)
            except folders.ModelNotFound as e:
                print(f"speak: --model: {e}", file=sys.stderr)
                return 2
        if not spec.is_model_folder(folder):
            print(f"speak: --model {folder}: not a complete {spec.display_name} model folder", file=sys.stderr)
            return 2
    try:
        settings = {k: parse_setting(k, v) for k, v in _settings(args.setting).items()}
        if args.simulate_vram_mb is not None:
            settings["compute.simulate_vram_mb"] = args.simulate_vram_mb
        policy = VramPolicy(settings)
    except SettingsError as e:
        print(f"speak: {e}", file=sys.stderr)
        return 2
    try:
        reference = read_wav(args.reference) if args.reference else None
    except (OSError, EOFError, ValueError) as e:
        print(f"speak: --reference {args.reference}: not a readable PCM WAV file ({e})", file=sys.stderr)
        return 2
    runtime = build_runtime(policy, strict=bool(policy.get("compute.simulate_vram_mb")))
    model = LoadedModel(spec, LoadRequest(args.model or spec.display_name, folder, PRECISIONS[precision],
                                          runtime.device), runtime)
    request = SpeakRequest(text=text, seed=args.seed, speed=args.speed, language=args.language, voice=args.voice,
                           reference=reference, reference_text=args.reference_text,
                           instruction=args.instruction)
    try:
        wav, meta = run(model, request)
    except (ValueError, TypeError, OSError, FloatingPointError) as e:  # FloatingPointError: NaN audio, not written
        print(f"speak: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        if not is_oom(e):
            raise
        print(f"speak: out of memory: {e}", file=sys.stderr)
        return 1
    rate = meta["sample_rate"]
    write_wav(args.output, wav, rate)
    print(f"wrote {args.output}: {wav.numel() / rate:.2f} s at {rate} Hz ({spec.display_name})")
    print(json.dumps({"memory": meta["memory"], "applied": meta["applied"]}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mizuoto", description="Mizuoto text-to-speech runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="print the memory check (effective policy, devices)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="override a compute.* setting for this run")
    p.set_defaults(func=doctor)
    from .nodes.common.registry import discover

    engines = [s.engine_id for s in discover()]
    p = sub.add_parser("speak", help="speak text into a WAV file (the embedded voice by default)")
    p.add_argument("text", nargs="?", help="the text to read (or --text-file)")
    p.add_argument("-o", "--output", required=True, help="WAV file to write (16-bit mono)")
    p.add_argument("--text-file", help="read the text from this UTF-8 file")
    p.add_argument("--engine", choices=engines, default="hibari",
                   help="the engine (default: hibari, the embedded voice, which needs no model folder)")
    p.add_argument("--model", help="the model folder: a path, or a folder name in models/TTS/<engine>/")
    p.add_argument("--precision", help="fp32, bf16 or fp16 (default: the engine's)")
    p.add_argument("--language", default="auto", help="language code (en, zh, ...; default auto)")
    p.add_argument("--voice", help="a named voice of the model")
    p.add_argument("--reference", help="reference audio to clone (PCM WAV)")
    p.add_argument("--reference-text", help="what the reference audio says")
    p.add_argument("--instruction", help="how to speak, where the model takes instructions")
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

"""Command line: `python -m mizuoto <command>`."""
from __future__ import annotations

import argparse
import os
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


# The pipeline's messages name the Speak node's inputs; on the command line they name the flags.
_FLAGS = {"options": "--option", "reference_audio": "--reference", "reference_text": "--reference-text", "instruction": "--instruction",
          "voice": "--voice", "language": "--language", "speed": "--speed", "seed": "--seed"}
_PHRASES = {"leave it unconnected": "leave it out", "leave it empty": "leave it out",
            "connect reference audio": "give --reference"}


def cli_words(message: str) -> str:
    """A pipeline message in the command line's words: the leading input name and the two-word inputs
    anywhere become flags (`reference_audio: ...` -> `--reference: ...`)."""
    name, sep, rest = message.partition(":")
    if sep and name in _FLAGS:
        message = _FLAGS[name] + sep + rest
    for old, new in [*_PHRASES.items(), ("reference_audio", "--reference"), ("reference_text", "--reference-text")]:
        message = message.replace(old, new)
    return message


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


def read_audio(path: str, flag: str = "--reference"):
    """A reference audio file as (samples [C, T], rate); a ValueError naming `flag` and the file."""
    from .nodes.formats.audio_file import read_audio as read

    return read(path, flag)


def model_folder(spec, model: str | None, download: bool):
    """`--model` as a folder: a path, a model folder in the TTS folders, or (with `--download`) a known
    model fetched as the loader node does; a ValueError that says where it looked and what it knows."""
    import os
    from pathlib import Path

    from .nodes.formats import folders
    from .nodes.formats.download import DownloadError
    from .nodes.pack.loader_node import local_models
    from .nodes.pack.loader_node import model_folder as fetch

    where = " or ".join(str(r / spec.engine_id) for r in folders.roots())
    local = local_models(spec)
    known = [n for n in spec.models if n not in local]
    listing = (f"; model folders there: {', '.join(local)}" if local else f"; {where} has no model folder yet") + \
        (f"; known models to download with --download: {', '.join(known)}" if known else "")
    if not model:
        raise ValueError(f"--model: {spec.display_name} needs a model folder: a path, or a folder name in {where} "
                         f"(the models folder is ComfyUI's models/TTS, else $MIZUOTO_MODELS_DIR){listing}")
    if os.path.isdir(model):
        folder = Path(model)
    elif model in spec.models and model not in local and not download:
        raise ValueError(f"--model {model}: not downloaded yet; add --download to fetch it into "
                         f"{folders.roots()[0] / spec.engine_id / model}")
    else:
        try:
            folder = fetch(spec, model, _download_progress) if download else folders.resolve(spec.engine_id, model)
        except (folders.ModelNotFound, DownloadError) as e:
            raise ValueError(f"--model {model}: {e}{listing}") from None
    missing = spec.missing_files(folder)
    if missing:
        raise ValueError(f"--model {folder}: not a complete {spec.display_name} model folder; missing "
                         f"{', '.join(missing)} (docs/models.md has each model's layout)")
    return folder


def _download_progress(done: int, total: int) -> None:
    print(f"\rdownloading: {done / MB:.0f} of {total / MB:.0f} MB", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def _options(pairs: list[str]) -> dict:
    """--option KEY=VALUE: a JSON number or true/false, an audio file (for audio options such as IndexTTS 2's
    emotion_reference), else text; the pipeline checks each against the engine's declaration."""
    import json
    import os

    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        if not isinstance(parsed, (int, float, bool)) or parsed is None:
            parsed = value
            if os.path.isfile(value):
                wav, rate = read_audio(value, f"--option {key}")
                parsed = {"waveform": wav[None], "sample_rate": rate}
        out[key] = parsed
    return out


def train(args: argparse.Namespace) -> int:
    """Fine-tune a voice from a list file (GPT-SoVITS: the GPT stage, then with --sovits-epochs the SoVITS stage)
    into a new voice folder beside the base voice, with a terminal progress bar; the job's report (steps,
    updates, s/step, estimate) at the end."""
    from pathlib import Path

    from .training.job import Interrupted

    from .nodes.pack.registry import engine

    try:
        spec = engine(args.engine)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if spec.trainer is None:
        raise UsageError(f"engine {args.engine!r}: not trainable here")
    base = Path(args.base)
    if not base.is_dir() or not spec.is_model_folder(base):
        lacks = spec.missing_files(base) if base.is_dir() and spec.missing_files else ["the folder"]
        raise UsageError(f"--base {base}: not a {spec.display_name} voice folder (missing {', '.join(lacks)})")
    try:
        job = spec.trainer.make_job(base=base, list_file=Path(args.list), save_name=args.name,
                                    audio_dir=Path(args.audio_dir) if args.audio_dir else None, epochs=args.epochs,
                                    batch_size=args.batch_size, seed=args.seed, preset=args.preset, device=args.device,
                                    **({"sovits_epochs": args.sovits_epochs} if args.sovits_epochs else {}),
                                    **({"discriminator": Path(args.discriminator)} if args.discriminator else {}),
                                    **({"learning_rate": args.learning_rate} if args.learning_rate is not None else {}),
                                    **({"warmup_updates": args.warmup_updates} if args.warmup_updates is not None
                                       else {}))
    except (ValueError, TypeError) as e:     # TypeError: an option this engine's job does not take
        raise UsageError(str(e)) from None
    if args.preset not in spec.trainer.presets:
        raise UsageError(f"--preset {args.preset}: {args.engine} trains with {', '.join(spec.trainer.presets)}")

    def progress(stage: str, done: int, total: int, loss: float | None) -> None:
        width = 30
        bar = "#" * (width * done // max(total, 1))
        tail = f" loss {loss:.2f}" if loss is not None else ""
        print(f"\r{stage:8s} [{bar:<{width}}] {done}/{total}{tail}", end="" if done < total else "\n",
              file=sys.stderr, flush=True)

    try:
        result = spec.trainer.run(job, progress=progress)
    except Interrupted as e:
        print(f"\n{e}; run the same command again to resume", file=sys.stderr)
        return 130
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"voice: {result.voice}")
    print(f"steps: {result.steps} ({result.updates} optimizer updates), {result.seconds_per_step:.3f} s/step, "
          f"loss {result.losses[0]:.2f} -> {result.losses[-1]:.2f}, estimate {result.estimate_mb:.1f} MB "
          f"({args.preset}{': ' + ', '.join(result.numerics) if result.numerics else ''})")
    return 0


class UsageError(Exception):
    """A bad argument: printed as `<command>: <message>`, exit status 2."""


def _request(args: argparse.Namespace):
    """What speak and verify share: the engine, its model folder, precision, settings and the request."""
    from pathlib import Path

    from .nodes.pack import registry
    from .nodes.pack.pipeline import SpeakRequest
    from .runtime import SettingsError
    from .runtime.policy import parse_setting

    try:
        spec = registry.engine(args.engine)
    except ValueError as e:
        raise UsageError(f"--{e}") from None
    text = args.text
    if args.text_file:
        try:
            text = Path(args.text_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--text-file {args.text_file}: cannot be read as UTF-8 text ({e})") from None
    if text is None:
        raise UsageError("give the text to read, or --text-file")
    precision = args.precision or spec.precisions[0]
    if precision not in spec.precisions:
        raise UsageError(f"--precision {precision}: expected one of {', '.join(spec.precisions)}")
    folder = None
    if spec.embedded:
        if args.model:
            raise UsageError(f"--model: {spec.display_name} has no model folder; leave it out")
    else:
        try:
            folder = model_folder(spec, args.model, args.download)
        except ValueError as e:
            raise UsageError(str(e)) from None
    try:
        settings = {k: parse_setting(k, v) for k, v in _settings(args.setting).items()}
    except SettingsError as e:
        raise UsageError(str(e)) from None
    try:
        reference = read_audio(args.reference) if args.reference else None
        options = _options(args.option)
    except ValueError as e:
        raise UsageError(str(e)) from None
    request = SpeakRequest(text=text, seed=args.seed, speed=args.speed, language=args.language, voice=args.voice,
                           reference=reference, reference_text=args.reference_text, instruction=args.instruction,
                           options=options)
    return spec, folder, registry.PRECISIONS[precision], settings, request


def speak(args: argparse.Namespace) -> int:
    """Speech from text with any registered engine (the embedded voice by default): a WAV file and the
    run's meta.memory."""
    import json
    import os

    from .nodes.pack.pack_runtime import build_runtime
    from .nodes.pack.pipeline import LoadedModel
    from .nodes.pack.pipeline import speak as run
    from .nodes.pack.registry import LoadRequest
    from .runtime import SettingsError, VramPolicy
    from .runtime.oom import is_oom

    to_stdout = args.output == "-"
    if to_stdout and not args.stream:
        raise UsageError("-o -: standard output takes the audio as it is made; add --stream")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not to_stdout and (not os.path.isdir(out_dir) or os.path.isdir(args.output)):
        raise UsageError(f"-o {args.output}: expected a file path in an existing folder")
    report = sys.stderr if to_stdout else sys.stdout     # standard output is the audio then
    spec, folder, dtype, settings, request = _request(args)
    if args.simulate_vram_mb is not None:
        settings["compute.simulate_vram_mb"] = args.simulate_vram_mb
    try:
        policy = VramPolicy(settings)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    runtime = build_runtime(policy, strict=bool(policy.get("compute.simulate_vram_mb")))
    model = LoadedModel(spec, LoadRequest(args.model or spec.display_name, folder, dtype, runtime.device), runtime)
    stream: list[WavStream] = []

    def on_audio(piece, rate: int) -> None:       # the header needs the rate: opened with the first piece
        if not stream:
            stream.append(WavStream(args.output, rate))
        stream[0].write(piece, rate)
    ok = False
    try:
        wav, meta = run(model, request, on_audio=on_audio if args.stream else None)
        ok = True
    except (ValueError, TypeError, OSError, FloatingPointError) as e:  # FloatingPointError: NaN audio, not written
        raise UsageError(cli_words(str(e))) from None
    except Exception as e:
        if not is_oom(e):
            raise
        print(f"speak: out of memory: {e}", file=sys.stderr)
        return 1
    finally:
        if stream:
            stream[0].close(ok)
    for warning in meta.get("warnings", []):
        print(f"speak: warning: {cli_words(warning)}", file=sys.stderr)
    rate = meta["sample_rate"]
    if not args.stream:
        write_wav(args.output, wav, rate)
    where = "standard output" if to_stdout else args.output
    print(f"wrote {where}: {wav.numel() / rate:.2f} s at {rate} Hz ({spec.display_name}); first audio after "
          f"{meta['timing']['first_audio_s']:.2f} s of {meta['timing']['total_s']:.2f} s", file=report)
    print(json.dumps({"memory": meta["memory"], "applied": meta["applied"], "timing": meta["timing"]}, indent=2),
          file=report)
    return 0


class WavStream:
    """16-bit mono WAV written as the audio is made: a header whose sizes say "unknown" (0xFFFFFFFF, as
    streaming players read it), PCM appended piece by piece, and for a seekable file the real sizes
    written into the header at the end. `-` is standard output."""

    UNKNOWN = 0xFFFFFFFF

    def __init__(self, path: str, sample_rate: int) -> None:
        self.path = path
        self.stdout = path == "-"
        self.file = sys.stdout.buffer if self.stdout else open(path, "wb")
        self.rate = sample_rate
        self.frames = 0
        self.file.write(self.header(self.UNKNOWN))
        self.file.flush()

    def header(self, data_bytes: int) -> bytes:
        import struct

        riff = self.UNKNOWN if data_bytes == self.UNKNOWN else 36 + data_bytes
        return b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack(
            "<IHHIIHH", 16, 1, 1, self.rate, self.rate * 2, 2, 16) + b"data" + struct.pack("<I", data_bytes)

    def write(self, wav, sample_rate: int) -> None:
        import numpy as np

        if sample_rate != self.rate:
            raise ValueError(f"audio at {sample_rate} Hz in a {self.rate} Hz stream")
        pcm = (np.clip(wav.numpy(), -1.0, 1.0) * 32767.0).round().astype("<i2")
        self.file.write(pcm.tobytes())
        self.file.flush()
        self.frames += pcm.size

    def close(self, ok: bool) -> None:
        """Sizes into the header (a regular file); a failed run's partial file is removed."""
        if self.stdout:
            self.file.flush()
            return
        try:
            if ok and self.file.seekable():
                self.file.seek(0)
                self.file.write(self.header(2 * self.frames))
        finally:
            self.file.close()
            if not ok and os.path.isfile(self.path):
                os.unlink(self.path)


class ProgressBar:
    """One line per verify run on stderr: the run's name and a bar of its steps (redrawn in place on a
    terminal, printed once per run and at its end otherwise, so that logs stay short)."""

    WIDTH = 24

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.mode: str | None = None

    def __call__(self, mode: str, done: int, total: int) -> None:
        if mode != self.mode:
            self.close()
            self.mode = mode
        filled = self.WIDTH * done // max(total, 1)
        line = f"verify: {mode:<34} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * done // max(total, 1):3d}%"
        if self.live:
            print(f"\r{line}", end="", file=self.stream, flush=True)
        elif done == 0 or done == total:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.live and self.mode is not None:
            print(file=self.stream, flush=True)
        self.mode = None


def _verify_device(name: str):
    """--device: cpu (the strict simulated device) or an existing CUDA device."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: expected cpu or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise UsageError(f"--device {name}: expected cpu or cuda:N")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise UsageError(f"--device {name}: this torch sees no CUDA device (use --device cpu: a simulated GPU)")
    device = torch.device("cuda", device.index or 0)
    if device.index >= count:
        raise UsageError(f"--device {name}: there are {count} CUDA devices (cuda:0 to cuda:{count - 1})")
    return device


def verify(args: argparse.Namespace) -> int:
    """The conformance check on the user's model: resident, half-resident, all streamed and an OOM in
    every phase must give the same audio, and every estimate must cover its phase (exit 1 otherwise)."""
    import dataclasses
    import json
    import os
    import signal
    import threading

    import psutil
    import torch

    from .nodes.pack.registry import LoadRequest
    from .nodes.pack.verify import verify as check
    from .runtime import Cancelled

    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        raise UsageError(f"--json {args.json}: expected a file path in an existing folder")
    device = _verify_device(args.device)
    spec, folder, dtype, settings, request = _request(args)
    weights = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder is not None else 0
    # On the CPU the simulated device holds a second copy of the model; a GPU holds its own.
    copies = 2 if device.type == "cpu" else 1
    available = psutil.virtual_memory().available
    if copies * weights > available:
        raise UsageError(f"--model {folder}: verifying needs about {copies * weights / 2**30:.1f} GB of free RAM "
                         f"({'the model and one device copy' if copies == 2 else 'the model'}); "
                         f"{available / 2**30:.1f} GB is free")
    request = dataclasses.replace(request, settings=settings or None)
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())    # Ctrl-C stops between steps, cleanly
    bar = ProgressBar()
    try:
        report = check(spec, LoadRequest(args.model or spec.display_name, folder, dtype, device), request,
                       progress=bar, cancel=cancel, device=device)
    except Cancelled:
        bar.close()
        print("verify: interrupted; nothing was written", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:
        raise UsageError(cli_words(str(e))) from None
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
    print(report.table())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report.to_dict(), f, indent=1)
        print(f"wrote {args.json}")
    return 0 if report.ok else 1


def _request_arguments(p: argparse.ArgumentParser, engines: list[str]) -> None:
    p.add_argument("--engine", default="hibari", metavar="ENGINE",
                   help=f"{', '.join(engines)} (default: hibari, the embedded voice, which needs no model folder)")
    p.add_argument("--model", help="the model folder: a path, or a folder name in models/TTS/<engine>/ "
                                   "(ComfyUI's models folder, else $MIZUOTO_MODELS_DIR)")
    p.add_argument("--download", action="store_true",
                   help="fetch a known model that is not there yet (checked against its published sha256)")
    p.add_argument("--text-file", help="read the text from this UTF-8 file")
    p.add_argument("--precision", help="fp32, bf16 or fp16 (default: the engine's)")
    p.add_argument("--language", default="auto", help="language code (en, zh, ...; default auto)")
    p.add_argument("--voice", help="a named voice of the model")
    p.add_argument("--reference", help="reference audio to clone (WAV, FLAC, OGG, MP3, ...)")
    p.add_argument("--reference-text", help="what the reference audio says")
    p.add_argument("--instruction", help="how to speak, where the model takes instructions")
    p.add_argument("--seed", type=int, default=0, help="noise seed; chunk i uses seed + i")
    p.add_argument("--speed", type=float, default=1.0, help="speaking rate, 0.25 to 4.0")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine option (sampling, steps, emotion weights, ...): a number, true/false, text, or "
                        "an audio file; checked against the engine's declared range")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="override a compute.* setting for this run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mizuoto", description="Mizuoto text-to-speech runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="print the memory check (effective policy, devices)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="override a compute.* setting for this run")
    p.set_defaults(func=doctor)
    from .nodes import engine_folders     # names only: an engine is imported when it is used

    engines = engine_folders()
    p = sub.add_parser("speak", help="speak text into a WAV file (the embedded voice by default)")
    p.add_argument("text", nargs="?", help="the text to read (or --text-file)")
    p.add_argument("-o", "--output", required=True, help="WAV file to write (16-bit mono); with --stream, "
                                                           "'-' writes it to standard output")
    p.add_argument("--stream", action="store_true",
                   help="write the audio as it is made, segment by segment (the same samples); "
                        "-o - streams to standard output, e.g. | aplay")
    _request_arguments(p, engines)
    p.add_argument("--simulate-vram-mb", type=int, help="run on a simulated GPU of this size (CPU)")
    p.set_defaults(func=speak)
    p = sub.add_parser("verify", help="prove that streaming, partial loading and OOM retries change nothing "
                                      "for a model (exit 1 on any difference)")
    p.add_argument("text", nargs="?", default="Streaming changes nothing. Every sample stays the same.",
                   help="the text to read (default: two short English sentences)")
    _request_arguments(p, engines)
    p.add_argument("--json", help="also write the report to this file (to attach to a bug report)")
    p.add_argument("--device", default="cpu",
                   help="cpu: a strict simulated GPU sized from the model (default); cuda:N: that GPU, each run "
                        "bounded by compute.vram_limit_mb")
    p.set_defaults(func=verify)
    p = sub.add_parser("train", help="fine-tune a voice from a folder of clips and a list file "
                                     "(path|speaker|language|text) into a new voice folder")
    p.add_argument("engine", help="the engine (gpt_sovits, f5_tts)")
    p.add_argument("--base", required=True, help="the base voice folder (models/TTS/gpt_sovits/<voice>)")
    p.add_argument("--list", required=True, help="the list file: path|speaker|language|text per clip")
    p.add_argument("--audio-dir", help="the clips' folder (each path's base name inside it, as upstream)")
    p.add_argument("--name", required=True, help="the new voice's name (a folder beside the base voice)")
    p.add_argument("--epochs", type=int, default=15, help="GPT epochs (default 15, upstream's webui; 0: SoVITS only)")
    p.add_argument("--sovits-epochs", type=int, default=0,
                   help="SoVITS epochs after the GPT's (upstream's webui: 8; default 0 keeps the base SoVITS)")
    p.add_argument("--discriminator", default=None,
                   help="a pretrained s2D*.pth for the SoVITS stage (default: seeded initialisation)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="F5-TTS: AdamW's rate (default finetune_cli's 1e-5)")
    p.add_argument("--warmup-updates", type=int, default=None,
                   help="F5-TTS: linear warmup updates (default finetune_cli's 20000)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--preset", default="fast", help="memory preset: fast (upstream's recipe), balanced, low")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.set_defaults(func=train)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"{args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

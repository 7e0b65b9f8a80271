"""VibeVoice-Realtime-0.5B at its published size: each phase's working-memory estimate against what it measured on
the strict simulated device, for 5 / 10 / 20 diffusion steps and three text lengths.

    python bench/vibevoice.py --voice en-Emma_woman.pt [--dtype float32] [--threads 2] [--tokens 8 40 80] [--stream]

--voice: a published voice preset (demo/voices/streaming_model/ of github.com/microsoft/VibeVoice; the model's
download puts them in voices/). The model is the published config (tests/vibevoice records it) with random
weights, so its EOS classifier is silenced and the context length set to end generation at a chosen frame count:
the estimate's own plan (4 frames a text token, `planned`) and typical speech (2 a token, `typical`). The
tokenizer is a byte-per-id stand-in (ids, not text, size the request; the Qwen2.5 tokenizer gives ~4 characters
a token, so the stand-in's ids are what texts 4x as long give). Prints, per run, the estimate, the measured
working memory and their ratio for the generate and decode phases, or with --stream (the audio taken as it is made,
one frame a piece) for the one stream phase; and the time to the first audio against the whole request's.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TOKENS = (8, 40, 80)        # ~30 / 150 / 300 characters of English in Qwen2.5's tokens


def byte_tokenizer(path: Path) -> Path:
    """One id a character (BPE without merges), Qwen2.5's <|image_pad|> at its id."""
    from tokenizers import Tokenizer, models
    vocab = {chr(i): i for i in range(32, 127)} | {"\n": 10, "<|image_pad|>": 151655}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=" "))
    tok.add_special_tokens(["<|image_pad|>"])
    tok.save(str(path))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voice", type=Path, required=True)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS), help="text lengths in tokens")
    ap.add_argument("--steps", type=int, nargs="+", default=[5, 10, 20], help="diffusion steps")
    ap.add_argument("--frames", nargs="+", default=["planned", "typical"], choices=["planned", "typical"])
    ap.add_argument("--stream", action="store_true", help="take the audio as it is made (the stream phase)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    from mizuoto.nodes.vibevoice.model import RealtimeConfig, VibeVoiceRealtime
    from mizuoto.nodes.vibevoice.phases import FRAMES_PER_TEXT_TOKEN, SPEECH_WINDOW, VibeVoiceEngine
    from mizuoto.nodes.vibevoice.text import TextTokenizer
    from mizuoto.nodes.vibevoice.voices import load_voice_preset
    from mizuoto.runtime import DeviceService, ModelManager

    dtype = getattr(torch, args.dtype)
    config = RealtimeConfig.from_dict(json.loads(
        (ROOT / "tests/vibevoice/fixtures/realtime_0.5b_structure.json").read_text())["config"])
    torch.manual_seed(0)
    model = VibeVoiceRealtime(config).to(dtype).eval()
    for p in model.parameters():                       # small random weights keep the random model finite
        p.data.mul_(0.02 / max(p.data.std().item(), 1e-6) if p.dim() > 1 else 1.0)
    model.tts_eos_classifier.fc2.bias.data.fill_(-1e4)  # never stops early: the context length ends it
    model.model.speech_scaling_factor.fill_(1.0)          # published as numbers in the checkpoint (NaN until loaded)
    model.model.speech_bias_factor.fill_(0.0)
    preset = load_voice_preset(args.voice)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = TextTokenizer(byte_tokenizer(Path(tmp) / "tokenizer.json"))
    room = config.qwen.max_position_embeddings - preset.tts_lm.length
    print(f"VibeVoice-Realtime-0.5B, {args.dtype}, voice {args.voice.name} "
          f"(prompt {preset.lm.length} / {preset.tts_lm.length} positions), simulated device, strict accounting")
    phases = ("stream",) if args.stream else ("generate", "decode")
    print(f"{'tokens':>6} {'frames':>14} {'steps':>5} | " + " | ".join(
        f"{name + ' est':>12} {'measured':>9} {'ratio':>5}" for name in phases)
        + f" | {'first audio':>11} {'total':>8} {'ratio':>6}")
    manager = ModelManager(DeviceService(simulate={"cpu": 64 << 30}, strict=True))
    engine = VibeVoiceEngine(model, {"voice": preset}, tokenizer, manager)
    engine.expected_frames = lambda p, n: min(FRAMES_PER_TEXT_TOKEN * n + SPEECH_WINDOW, room - n)
    for tokens in args.tokens:
        for per_token, label in ((FRAMES_PER_TEXT_TOKEN, "planned"), (2, "typical")):
            if label not in args.frames:
                continue
            frames = per_token * tokens + SPEECH_WINDOW
            for steps in args.steps:
                # generate stops at the context length; the estimate still plans for the published context
                q = dataclasses.replace(config.qwen, max_position_embeddings=preset.tts_lm.length + tokens + frames)
                model.config = dataclasses.replace(config, qwen=q)
                text = "x" * (tokens - 1)       # + the newline upstream's processor appends
                _, meta = synthesize(engine, SpeakRequest(text, seed=0, options={"steps": steps}),
                                     on_audio=(lambda piece, rate: None) if args.stream else None)
                model.config = config
                row = [(meta["memory"]["phases"][name]["estimate_mb"], meta["memory"]["phases"][name]["measured_mb"])
                       for name in phases]
                line = f"{tokens:6d} {frames:5d} {label:>8} {steps:5d} | " + " | ".join(
                    f"{est:10.1f}MB {measured:7.1f}MB {est / measured:5.2f}" for est, measured in row)
                t = meta["timing"]
                line += f" | {t['first_audio_s']:10.2f}s {t['total_s']:7.2f}s {t['first_audio_s'] / t['total_s']:6.3f}"
                print(line)
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

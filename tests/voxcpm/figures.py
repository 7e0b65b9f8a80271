"""Figures for the VoxCPM 2 note: KV-cache bytes per position of the published model, and each phase's
working-memory estimate against the peak measured on the simulated device (op-by-op allocation counting)
for three text lengths, on a model of VoxCPM 2's real widths (hidden 2048 / 1024, the real AudioVAE) with
fewer layers and random weights that never stop (every request runs to its frame limit).

    python tests/voxcpm/figures.py [--dtype bf16|fp32] [--tokens 8 32 96]
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import tempfile
import time
from pathlib import Path

import torch

from mizuoto.nodes.voxcpm.audiovae import AudioVAE, AudioVAEConfig
from mizuoto.nodes.voxcpm.generate import Sampling, build_prompt, decode_latents, encode_audio, generate
from mizuoto.nodes.voxcpm.loader import VoxCPMBundle
from mizuoto.nodes.voxcpm.model import VoxCPM2, VoxCPMConfig
from mizuoto.nodes.voxcpm.phases import VoxCPMEngine
from mizuoto.runtime import DeviceService, ModelManager

HERE = Path(__file__).parent
MiB = 2 ** 20


def tiny_module():
    spec = importlib.util.spec_from_file_location("voxcpm_tiny", HERE / "tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--tokens", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--frames", type=int, default=8, help="frames generated (max_len): the CPU is slow")
    ap.add_argument("--reference-seconds", type=float, default=3.0)
    args = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    tiny = tiny_module()
    torch.manual_seed(0)

    real = json.loads((HERE / "real_voxcpm2.json").read_text())["config"]
    full = VoxCPMConfig.from_dict(real)
    per_layer = 2 * full.lm.num_key_value_heads * full.lm.head_dim * 2
    layers = full.lm.num_hidden_layers + full.residual.num_hidden_layers
    print(f"published model: KV cache {per_layer} B per position per layer (bf16) x {layers} layers (28 base + 8 residual) = "
          f"{per_layer * layers} B per position; {per_layer * layers * full.max_length / MiB:.0f} MiB at "
          f"max_length {full.max_length}")

    cfg = copy.deepcopy(real)          # real widths, fewer layers, the tiny tokenizer's vocabulary
    cfg["lm_config"].update(num_hidden_layers=2, vocab_size=400)
    cfg["residual_lm_num_layers"] = 1
    cfg["encoder_config"]["num_layers"] = 1
    cfg["dit_config"]["num_layers"] = 1
    config = VoxCPMConfig.from_dict(cfg)
    model = VoxCPM2(config)
    state = model.state_dict()
    tiny.silence(state)                                                 # never stops
    model.load_state_dict(state)
    model = model.to(dtype).eval()
    vae = AudioVAE(AudioVAEConfig.from_dict(cfg["audio_vae_config"])).eval()
    folder = Path(tempfile.mkdtemp(prefix="voxcpm_figures_"))
    tiny.write_tokenizer(folder)
    bundle = VoxCPMBundle(folder, config, model, vae)
    devices = DeviceService(simulate={"cpu": 1 << 40})
    engine = VoxCPMEngine(bundle, ModelManager(devices))
    s = Sampling(retry_badcase=False, max_len=args.frames)
    ref = tiny.reference_wave(args.reference_seconds, freq=180.0)
    print(f"real-width model ({args.dtype}; base 2 + residual 1 + LocEnc 1 + LocDiT 1 layers), reference "
          f"{args.reference_seconds:.1f} s, {s.inference_timesteps} flow steps:")
    for n in args.tokens:
        text = " ".join(["hello"] * n)
        start = time.perf_counter()
        rows = {}
        with engine.manager.request(seed=1) as ctx, torch.inference_mode():
            est = engine.encode_memory(ref.numel())
            with devices.tracking("cpu") as tr:
                feats = encode_audio(vae, ref, config.patch_size, pad_left=False)
            rows["prompt"] = (est, tr.peak_bytes)
            times = [time.perf_counter() - start]
            tok = bundle.tokenizer
            prompt = build_prompt(tok(text), config.patch_size, config.feat_dim, reference=feats)
            target = len(tok(text))
            est = engine.generate_memory(len(prompt), s.frame_limit(target))
            with devices.tracking("cpu") as tr:
                latents, frames = generate(model, prompt, s, ctx.generator, target)
            rows["generate"] = (est, tr.peak_bytes)
            times.append(time.perf_counter() - start - sum(times))
            est = engine.decode_memory(latents.shape[-1])
            with devices.tracking("cpu") as tr:
                wav = decode_latents(vae, latents, 0, config.patch_size)
            rows["decode"] = (est, tr.peak_bytes)
            times.append(time.perf_counter() - start - sum(times))
        print(f"  {n} tokens (prompt {len(prompt)} positions, {frames} frames, {wav.numel() / 48000:.1f} s audio, "
              f"{' + '.join(f'{t:.0f}' for t in times)} s): " + "; ".join(
                  f"{k} estimate {e / MiB:.1f} MiB / measured {m / MiB:.1f} MiB ({e / max(m, 1):.2f}x)"
                  for k, (e, m) in rows.items()))


if __name__ == "__main__":
    main()

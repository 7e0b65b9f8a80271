"""Fish Speech: bytes streamed per generated frame ÷ the minimum, with the LM half resident (a figure, not a test).

    python bench/fish_speech.py             # ~20 s on one core
    python bench/fish_speech.py --s2        # the same sizes as an S2 folder (chat prompt, S2 sampling)

A small dual-AR checkpoint in the upstream layout (tests/fish_speech/tiny.py: slow 8 x 256, fast 4 x 256,
random float32 weights) runs the "generate" phase on the strict simulated device, with room for half of
the space between the LM's minimum working set and its full size (tests/runtime_helpers.residency_capacity).
The minimum is every unit that is not resident copied once per generated frame (each frame runs every
unit: the slow layers once, the fast layers and head once per codebook, consecutively, so one copy can
serve a frame's codebooks; the fast part is marked hot and placed first). A one-slot streamer cannot
go below it; the ideal ratio is 1.00.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT / "tests")      # not bench/: this file would shadow tests/fish_speech


def main() -> None:
    from fish_speech.tiny import write_tiny_checkpoint, write_tiny_s2
    from mizuoto.nodes.fish_speech.generate import S2Sampling, Sampling, build_chat_prompt, build_prompt
    from mizuoto.nodes.fish_speech.loader import load_fish_speech
    from mizuoto.nodes.fish_speech.phases import FishS2Engine, FishSpeechEngine
    from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
    from runtime_helpers import residency_capacity

    torch.set_num_threads(1)
    s2 = "--s2" in sys.argv[1:]
    root = Path(tempfile.mkdtemp())
    if s2:
        sizes = dict(n_layer=8, dim=256, n_head=8, n_local_heads=4, head_dim=32, intermediate_size=768)
        folder = write_tiny_s2(root / "fish_s2", seed=3, **{"text_" + k: v for k, v in sizes.items()},
                               **{"audio_" + k: v for k, v in {**sizes, "n_layer": 4}.items()})
    else:
        folder = write_tiny_checkpoint(root / "fish", seed=3, n_layer=8, dim=256, n_head=8, n_local_heads=4,
                                       head_dim=32, intermediate_size=768, fast_dim=256, fast_n_head=8,
                                       fast_n_local_heads=4, fast_head_dim=32, fast_intermediate_size=768,
                                       n_fast_layer=4)
    unit = 64 << 10

    def engine(devices, mode="normal"):
        manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
        cls = FishS2Engine if s2 else FishSpeechEngine
        return cls(load_fish_speech(folder, torch.float32), manager, min_unit_bytes=unit)

    probe = engine(DeviceService(simulate={"cpu": 1 << 32}))
    tok = probe.bundle.tokenizer
    text = "(excited) Hello there, this is a small benchmark of the dual autoregressive decoder."
    prompt = (build_chat_prompt if s2 else build_prompt)(tok, text, probe.bundle.config.num_codebooks)
    s = S2Sampling(max_new_tokens=40) if s2 else Sampling(max_new_tokens=40)
    working = probe.generate_memory(prompt.shape[1], len(tok.encode(text)), s.max_new_tokens)
    mode, capacity = residency_capacity(probe.lm, "half", working=working)
    e = engine(DeviceService(simulate={"cpu": capacity}, strict=True), mode)
    with e.manager.request(seed=0) as ctx:
        ctx.generator.manual_seed(0)
        codes = e.codes(ctx, prompt, len(tok.encode(text)), s)
    h = e.lm
    resident = {id(u) for u in h._placement}
    missing = [u for u in h.layout.units if id(u) not in resident]
    frames = codes.shape[1] + 1                     # the end frame (or the last) is generated, then dropped
    minimum = sum(u.nbytes for u in missing) * frames
    streamed = h.streamed_bytes
    print(f"LM {h.size_bytes / 2**20:.2f} MiB, fixed {h.layout.fixed_bytes / 2**20:.2f} MiB, resident "
          f"{h.loaded_bytes / 2**20:.2f} MiB; {len(missing)} of {len(h.layout.units)} units streamed: "
          f"{[u.name for u in missing]}")
    print(f"frames generated {frames}: streamed {streamed / frames / 2**20:.3f} MiB per frame, minimum "
          f"{minimum / frames / 2**20:.3f} MiB per frame; ratio {streamed / minimum:.3f}")


if __name__ == "__main__":
    main()

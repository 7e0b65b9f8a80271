"""Two Qwen3-TTS figures (a script, not a test; numbers, never timed assertions):

    python tests/qwen3_tts/figures.py stream      # bytes streamed per generated frame at 50 % residency
    python tests/qwen3_tts/figures.py rss         # peak RSS of a bf16 load of a 0.6B-shaped checkpoint / file bytes

stream: the tiny checkpoint (tests/qwen3_tts/tiny.py, 1 MB layers) on the strict simulated device with
the talker half resident; the minimum is every non-resident unit copied once per talker forward
(the prefill and one forward per fed frame), what a one-slot streamer cannot go below.
rss: writes a random checkpoint with the 0.6B model's shapes (talker 28 x 1024, text table 151936 x 2048,
speaker encoder, 12 Hz codec) in bf16, then loads it in a fresh subprocess and reads ru_maxrss.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def stream_figure() -> None:
    from mizuoto.nodes.qwen3_tts.generate import Request, Sampling
    from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts
    from mizuoto.nodes.qwen3_tts.phases import Qwen3TTSEngine
    from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
    from qwen3_tts.tiny import template_ids, write_tiny_checkpoint
    from runtime_helpers import residency_capacity
    torch.set_num_threads(1)
    folder = write_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", "custom_voice", seed=5, hidden=256, layers=6)
    probe = Qwen3TTSEngine(load_qwen3_tts(folder, torch.float32), ModelManager(DeviceService(simulate={"cpu": 1 << 32})))
    ids = template_ids(20, 0)
    s = Sampling.merged({}, max_new_tokens=40, do_sample=True)
    working = probe.talker_memory(ids.numel() + 8, 20, s.max_new_tokens)
    mode, capacity = residency_capacity(probe.talker, "half", working=working)
    engine = Qwen3TTSEngine(load_qwen3_tts(folder, torch.float32),
                            ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True),
                                         VramPolicy({"compute.vram_mode": mode})))
    req = Request(ids, "english", "vivian", non_streaming=True)
    before = engine.talker.streamed_bytes
    with engine.manager.request(seed=0) as ctx:
        codes = engine.codes(ctx, req, s)
    streamed = engine.talker.streamed_bytes - before
    h = engine.talker
    resident = set(id(u) for u in h._placement)
    missing = [u for u in h.layout.units if id(u) not in resident]
    per_forward = sum(u.nbytes for u in missing if u.name != "text_projection")
    frames = codes.shape[0]
    forwards = frames + 1
    prompt_part = sum(u.nbytes for u in missing if u.name == "text_projection")
    print(f"talker {h.size_bytes / 2**20:.1f} MiB, resident {h.loaded_bytes / 2**20:.1f} MiB, "
          f"{len(missing)} of {len(h.layout.units)} units streamed ({[u.name for u in missing]})")
    print(f"frames {frames}; streamed {streamed / 2**20:.2f} MiB = {streamed / frames / 2**20:.3f} MiB per frame; "
          f"minimum (non-resident units once per talker forward, {forwards} forwards"
          f"{' + text projection per prompt call' if prompt_part else ''}) "
          f"{per_forward * forwards / frames / 2**20:.3f} MiB per frame; ratio "
          f"{(streamed - 0) / (per_forward * forwards):.3f} (text projection, if streamed, counted in the numerator)")


CONFIG_06B = {
    "hidden": 1024, "layers": 28, "intermediate": 3072, "heads": 16, "kv": 8, "head_dim": 128,
}


def config_06b() -> tuple[dict, dict]:
    """The 0.6B model's config.json and speech_tokenizer/config.json (also used by bench/units.py)."""
    from qwen3_tts.tiny import model_config
    cfg = model_config("base")
    t = cfg["talker_config"]
    t.update(vocab_size=3072, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128, text_hidden_size=2048, text_vocab_size=151936,
             codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154,
             codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
             codec_language_id={"english": 2050, "chinese": 2055}, spk_id={}, spk_is_dialect={})
    t["code_predictor_config"].update(vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5,
                                      num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    cfg["speaker_encoder_config"] = {"mel_dim": 128, "enc_dim": 1024, "enc_channels": [512, 512, 512, 512, 1536],
                                     "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
                                     "enc_attention_channels": 128, "enc_res2net_scale": 8, "enc_se_channels": 128,
                                     "sample_rate": 24000}
    cfg.update(im_start_token_id=151644, im_end_token_id=151645, tts_pad_token_id=151671, tts_bos_token_id=151672,
               tts_eos_token_id=151673)
    ccfg = {"model_type": "qwen3_tts_tokenizer_12hz", "encoder_valid_num_quantizers": 16,
            "encoder_config": {"num_quantizers": 32, "frame_rate": 12.5},
            "decoder_config": {"codebook_dim": 512}}
    return cfg, ccfg


def write_06b(folder: Path) -> int:
    """Random bf16 checkpoint with the 0.6B shapes; returns its bytes (both safetensors files)."""
    from safetensors.torch import save_file
    from mizuoto.nodes.qwen3_tts.codec import CodecConfig, SpeechTokenizer
    from mizuoto.nodes.qwen3_tts.model import Qwen3TTS, Qwen3TTSConfig
    from mizuoto.runtime.loading import _parameters_on_meta
    cfg, ccfg = config_06b()
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    total = 0
    g = torch.Generator().manual_seed(0)
    for build, path in ((lambda: Qwen3TTS(Qwen3TTSConfig.from_dict(cfg)), folder / "model.safetensors"),
                        (lambda: SpeechTokenizer(CodecConfig.from_dict(ccfg)), folder / "speech_tokenizer" / "model.safetensors")):
        with _parameters_on_meta():
            m = build()
        state = {}
        for k, v in m.state_dict().items():
            if v.is_floating_point():
                state[k] = (torch.randn(v.shape, generator=g, dtype=torch.float32) * 0.02).to(torch.bfloat16)
            else:
                state[k] = torch.zeros(v.shape, dtype=v.dtype)
        save_file(state, str(path))
        total += path.stat().st_size
        del state, m
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "speech_tokenizer" / "config.json").write_text(json.dumps(ccfg))
    return total


def rss_figure() -> None:
    # Both steps run in fresh subprocesses of this small process: a child's ru_maxrss starts at its
    # parent's RSS at fork time, so the writer (several GiB) must not be the loader's parent.
    with tempfile.TemporaryDirectory() as tmp:     # 2.2 GiB: never left behind
        _rss_figure(Path(tmp) / "qwen3-0.6b-shaped")


def _rss_figure(folder: Path) -> None:
    t = time.time()
    subprocess.run([sys.executable, __file__, "write", str(folder)], check=True)
    nbytes = sum(p.stat().st_size for p in (folder / "model.safetensors", folder / "speech_tokenizer" / "model.safetensors"))
    print(f"wrote {nbytes / 2**30:.2f} GiB in {time.time() - t:.0f} s")
    code = ("import resource, sys, time, torch\n"
            "import mizuoto.nodes.qwen3_tts.loader as L\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
            "t = time.time()\n"
            f"b = L.load_qwen3_tts({str(folder)!r}, dtype=torch.bfloat16)\n"
            "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
            "n = sum(p.numel() * p.element_size() for m in (b.model, b.codec) for p in list(m.parameters()) + list(m.buffers()))\n"
            "print(base, peak, n, time.time() - t)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    base, peak, held, secs = int(out[0]), int(out[1]), int(out[2]), float(out[3])
    print(f"checkpoint {nbytes / 2**20:.0f} MiB; weights held {held / 2**20:.0f} MiB; RSS before load "
          f"{base / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB (load {secs:.1f} s)")
    print(f"peak RSS / checkpoint bytes = {peak / nbytes:.3f}; (peak - RSS before load) / checkpoint bytes = "
          f"{(peak - base) / nbytes:.3f}")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "stream"
    if what == "write":
        write_06b(Path(sys.argv[2]))
    else:
        {"stream": stream_figure, "rss": rss_figure}[what]()

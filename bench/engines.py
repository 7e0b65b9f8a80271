"""Ours against each engine's upstream package, side by side, on the same random checkpoint (issue 35).

    python bench/engines.py --upstream qwen3_tts=$REF_VENV/bin/python --upstream f5_tts=$REF_VENV/bin/python \
                            --upstream omnivoice=$REF_OMNI/bin/python
    python bench/engines.py --quick           # tiny shapes, 1 run, ours only unless an upstream is given
        --engines qwen3_tts,f5_tts,omnivoice  --repeats N  --threads 1,all  --frames N (talker)
        --steps N (DiT / OmniVoice)  --layers N (talker / OmniVoice layers; DiT blocks: --dit-depth N)
        --full (every layer, 40 frames, 16 steps)

An upstream interpreter comes from `--upstream ENGINE=PYTHON`, else `$MIZUOTO_UPSTREAM_<ENGINE>` (e.g.
MIZUOTO_UPSTREAM_QWEN3_TTS), else `$MIZUOTO_UPSTREAM_PYTHON` (every engine); without one the engine's
upstream rows are skipped with a printed message and only ours is measured.

The parent writes one random checkpoint per engine in the published layout (the layout the tests' tiny.py
writers produce and the parity tests load from upstream's own files) and starts one worker per side: ours
in this interpreter, upstream in the side venv. Both load the same files and get the same inputs (written
beside the checkpoint) and seed. The parent then drives the workers in turn (ABAB...: round-robin over
every arm of both processes, the order rotated each round), so drift and the load of other work on the
machine hit every arm alike; medians of process CPU time (the main figure: robust to a shared machine)
and of wall time. Outputs are compared bit for bit: `exact`, or `DIFFERENT` with the max abs difference.

Arms: *upstream* (its package, float32, CPU), *ours* (`DeviceService()`, the real CPU), and ours on the
strict simulated device (`DeviceService(simulate=..., strict=True)`) with the model resident (*sim 100 %*)
and half streamed (*sim 50 %*: the minimum working set plus half of the rest, as
tests/runtime_helpers.residency_capacity sizes it). Figures, not tests (DESIGN.md §7).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
ENGINES = ("qwen3_tts", "f5_tts", "omnivoice")
TAG = "@@ "                       # protocol lines on a worker's stdout; anything else it prints is passed on
MB = 1 << 20

# ---- sizes ----------------------------------------------------------------------------------------------

# Qwen3-TTS 0.6B talker (tests/qwen3_tts/figures.py config_06b): hidden 1024, 28 layers, GQA 16/8 x 128,
# SwiGLU 3072, code predictor 5 layers of the same width, 2048 codes per codebook, 16 codebooks.
QWEN_REAL = dict(hidden=1024, layers=28, intermediate=3072, heads=16, kv=8, head_dim=128, cp_layers=5,
                 codebook=2048, text_hidden=2048, text_vocab=8192, prompt_tokens=24)
QWEN_QUICK = dict(hidden=128, layers=2, intermediate=256, heads=4, kv=2, head_dim=32, cp_layers=2,
                  codebook=64, text_hidden=64, text_vocab=320, prompt_tokens=8)
# F5-TTS v1 Base DiT: dim 1024, 22 blocks, 16 heads x 64, ff x2, text dim 512, 4 ConvNeXt layers.
F5_REAL = dict(dim=1024, depth=22, heads=16, dim_head=64, ff_mult=2, text_dim=512, conv_layers=4, ref_frames=188,
               gen_frames=188)
F5_QUICK = dict(dim=64, depth=2, heads=4, dim_head=16, ff_mult=2, text_dim=64, conv_layers=1, ref_frames=24,
                gen_frames=24)
# OmniVoice: a Qwen3-0.6B backbone (hidden 1024, 28 layers, GQA 16/8 x 128, SwiGLU 3072) with 8 audio heads.
OMNI_REAL = dict(hidden=1024, layers=28, intermediate=3072, heads=16, kv=8, head_dim=128)
OMNI_QUICK = dict(hidden=64, layers=2, intermediate=128, heads=4, kv=2, head_dim=16)


def _load(name: str, path: Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---- Qwen3-TTS ------------------------------------------------------------------------------------------

def qwen_config(size: dict) -> dict:
    """A CustomVoice config.json (upstream's format) with the given talker sizes and one speaker. The text
    vocabulary is cut to `text_vocab` rows (the real one has 151936): its table is only looked up, so its
    row count does not change the work, only the memory of the four copies the bench holds."""
    tiny = _load("qwen3_tts_tiny", TESTS / "qwen3_tts" / "tiny.py")
    cfg = tiny.model_config("custom_voice")
    t, c, v = cfg["talker_config"], size["codebook"], size["text_vocab"]
    t.update(vocab_size=c + 1024, hidden_size=size["hidden"], intermediate_size=size["intermediate"],
             num_hidden_layers=size["layers"], num_attention_heads=size["heads"], num_key_value_heads=size["kv"],
             head_dim=size["head_dim"], text_hidden_size=size["text_hidden"], text_vocab_size=v,
             codec_pad_id=c + 100, codec_bos_id=c + 101, codec_eos_token_id=c + 102, codec_think_id=c + 106,
             codec_nothink_id=c + 107, codec_think_bos_id=c + 108, codec_think_eos_id=c + 109,
             codec_language_id={"english": c + 2, "chinese": c + 7}, spk_id={"vivian": c + 500},
             spk_is_dialect={"vivian": False})
    t["rope_scaling"]["mrope_section"] = [size["head_dim"] // 8, size["head_dim"] * 3 // 16,
                                          size["head_dim"] * 3 // 16]
    t["code_predictor_config"].update(vocab_size=c, hidden_size=size["hidden"], intermediate_size=size["intermediate"],
                                      num_hidden_layers=size["cp_layers"], num_attention_heads=size["heads"],
                                      num_key_value_heads=size["kv"], head_dim=size["head_dim"])
    cfg["speaker_encoder_config"]["enc_dim"] = size["hidden"]
    cfg.update(im_start_token_id=v - 20, im_end_token_id=v - 19, tts_pad_token_id=v - 18, tts_bos_token_id=v - 17,
               tts_eos_token_id=v - 16)
    return cfg


def qwen_write(folder: Path, size: dict, args: argparse.Namespace) -> dict:
    """The checkpoint (our model's state dict is upstream's layout; tests/qwen3_tts/test_parity.py loads
    upstream's save_pretrained files with our loader), stored in bfloat16 to halve the file (both sides
    load it as float32, the same values). The speech tokenizer is tiny.py's: only the talker is timed."""
    from safetensors.torch import save_file
    from mizuoto.nodes.qwen3_tts.codec import CodecConfig, SpeechTokenizer
    from mizuoto.nodes.qwen3_tts.model import Qwen3TTS, Qwen3TTSConfig
    tiny = _load("qwen3_tts_tiny", TESTS / "qwen3_tts" / "tiny.py")
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    cfg, ccfg = qwen_config(size), tiny.codec_config()
    torch.manual_seed(args.seed)
    model = Qwen3TTS(Qwen3TTSConfig.from_dict(cfg))
    codec = SpeechTokenizer(CodecConfig.from_dict(ccfg))
    tiny.randomize(model, args.seed)
    tiny.randomize(codec, args.seed + 1)
    for m, path in ((model, folder / "model.safetensors"), (codec, folder / "speech_tokenizer" / "model.safetensors")):
        save_file({k: v.detach().to(torch.bfloat16 if v.is_floating_point() else v.dtype).contiguous()
                   for k, v in m.state_dict().items()}, str(path))
    params = sum(p.numel() for p in model.talker.parameters())
    del model, codec
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "speech_tokenizer" / "config.json").write_text(json.dumps(ccfg, indent=1))
    (folder / "generation_config.json").write_text(json.dumps(tiny.GENERATION, indent=1))
    (folder / "speech_tokenizer" / "preprocessor_config.json").write_text(json.dumps({   # as published
        "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1, "sampling_rate": 24000,
        "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
        "chunk_length_s": None, "overlap": None}))
    # upstream's assistant template around random text tokens: <|im_start|>assistant\n text <|im_end|>\n<|im_start|>assistant\n
    g = torch.Generator().manual_seed(args.seed + 2)
    body = torch.randint(0, size["text_vocab"] - 32, (size["prompt_tokens"],), generator=g).tolist()
    s, e, nl, role = cfg["im_start_token_id"], cfg["im_end_token_id"], 10, size["text_vocab"] - 30
    inputs = {"ids": [s, role, nl, *body, e, nl, s, role, nl], "language": "english", "speaker": "vivian",
              "frames": args.frames}
    (folder / "inputs.json").write_text(json.dumps(inputs))
    return {"params": params, "text_tokens": len(body)}


def qwen_header(size: dict, info: dict, args: argparse.Namespace) -> str:
    return (f"Qwen3-TTS talker ({info['params'] / 1e6:.0f} M parameters): hidden {size['hidden']}, {size['layers']} "
            f"layers (real 28), GQA {size['heads']}/{size['kv']} x {size['head_dim']}, SwiGLU {size['intermediate']}, "
            f"code predictor {size['cp_layers']} layers (real 5), text table {size['text_vocab']} rows (real 151936, "
            f"only looked up); {info['text_tokens']} text tokens, {args.frames} codec frames greedy (talker + code "
            f"predictor), float32; output: the codes")


GREEDY = dict(do_sample=False, subtalker_dosample=False, repetition_penalty=1.05)


def qwen_ours(folder: Path) -> dict[str, Callable[[], torch.Tensor]]:
    from mizuoto.nodes.qwen3_tts.generate import Request, Sampling
    from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts
    from mizuoto.nodes.qwen3_tts.phases import Qwen3TTSEngine
    from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
    sys.path.insert(0, str(TESTS))
    from runtime_helpers import residency_capacity
    inputs = json.loads((folder / "inputs.json").read_text())
    ids = torch.tensor([inputs["ids"]])
    probe = Qwen3TTSEngine(load_qwen3_tts(folder, torch.float32), ModelManager(DeviceService()))
    sampling = Sampling.merged(probe.bundle.generate_defaults, max_new_tokens=inputs["frames"], **GREEDY)
    working = probe.talker_memory(ids.numel() + 8, ids.numel() - 8, sampling.max_new_tokens)

    def arm(devices: DeviceService, mode: str) -> Callable[[], torch.Tensor]:
        engine = Qwen3TTSEngine(load_qwen3_tts(folder, torch.float32),
                                ModelManager(devices, VramPolicy({"compute.vram_mode": mode})))

        def run() -> torch.Tensor:
            req = Request(ids, inputs["language"], inputs["speaker"], None, non_streaming=True)
            with engine.manager.request(seed=0) as ctx:
                return engine.codes(ctx, req, sampling)
        return run

    arms = {"ours": arm(DeviceService(), "normal")}
    for label, residency in (("sim 100 %", "full"), ("sim 50 %", "half")):
        mode, capacity = residency_capacity(probe.talker, residency, working=working)
        arms[label] = arm(DeviceService(simulate={"cpu": capacity}, strict=True), mode)
    del probe
    return arms


def qwen_upstream(folder: Path) -> Callable[[], torch.Tensor]:
    sys.path.insert(0, str(TESTS))
    from qwen3_tts.torchaudio_shim import install
    install()                                     # PyPI's CUDA-linked torchaudio: only its Python parts
    from safetensors import safe_open
    from qwen_tts.core.models import Qwen3TTSForConditionalGeneration
    model = Qwen3TTSForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    missing = sorted(set(model.state_dict()) - stored)
    if missing:                                   # would be random weights of upstream's own: not the same model
        raise RuntimeError(f"upstream found no weights in the checkpoint for {missing[:5]} ({len(missing)} keys)")
    inputs = json.loads((folder / "inputs.json").read_text())
    ids = torch.tensor([inputs["ids"]])
    defaults = json.loads((folder / "generation_config.json").read_text())

    def run() -> torch.Tensor:
        kw = {**defaults, **GREEDY, "max_new_tokens": inputs["frames"]}
        with torch.no_grad():                     # as Qwen3TTSModel.generate_custom_voice runs it
            codes, _ = model.generate(input_ids=[ids], instruct_ids=[None], languages=[inputs["language"]],
                                      speakers=[inputs["speaker"]], non_streaming_mode=True, **kw)
        return codes[0].cpu()
    return run


# ---- F5-TTS ---------------------------------------------------------------------------------------------

def f5_arch(size: dict) -> dict:
    f5_tiny = _load("f5_tts_tiny", TESTS / "f5_tts" / "tiny.py")
    arch = dict(f5_tiny.ARCH)
    arch.update({k: size[k] for k in ("dim", "depth", "heads", "dim_head", "ff_mult", "text_dim", "conv_layers")})
    return arch


def f5_write(folder: Path, size: dict, args: argparse.Namespace) -> dict:
    """model_1200.safetensors (ema_model.transformer.*, as ema_pytorch saves it), vocab.txt, config.yaml,
    a tiny vocos (unused: only the DiT over the ODE steps is timed), and the inputs: a random reference
    mel, random text ids, the total frame count."""
    import yaml
    from safetensors.torch import save_file
    from mizuoto.nodes.blocks.vocoder import Vocos, VocosConfig
    from mizuoto.nodes.f5_tts.model import DiT, DiTConfig
    f5_tiny = _load("f5_tts_tiny", TESTS / "f5_tts" / "tiny.py")
    folder.mkdir(parents=True, exist_ok=True)
    tokens = f5_tiny.vocab_tokens()
    f5_tiny.write_vocab(folder, tokens)
    arch = f5_arch(size)
    (folder / "config.yaml").write_text(yaml.safe_dump(f5_tiny.training_config(arch), sort_keys=False), encoding="utf-8")
    cfg = DiTConfig.from_arch(arch, mel_dim=100, vocab_size=len(tokens), source="bench")
    torch.manual_seed(args.seed)
    dit = DiT(cfg)
    # every parameter drawn (upstream zero-initialises adaLN and the output layers), scaled by fan-in so
    # a real-width DiT's activations stay finite (tiny.py's flat 0.2 suits its 64-wide model only)
    g = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for _, p in sorted(dit.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * (p.shape[-1] ** -0.5 if p.dim() > 1 else 0.1))
    state = {f"ema_model.transformer.{k}": v.detach().contiguous() for k, v in dit.state_dict().items()}
    state["step"], state["initted"] = torch.tensor(1200), torch.tensor(True)   # ema_pytorch's bookkeeping
    params = sum(p.numel() for p in dit.parameters())
    del dit
    save_file(state, str(folder / "model_1200.safetensors"))
    f5_tiny.write_vocos_config(folder)
    voc = Vocos(VocosConfig.from_dict(f5_tiny.VOCOS))
    torch.save(voc.state_dict(), folder / "vocos" / "pytorch_model.bin")
    g = torch.Generator().manual_seed(args.seed + 2)
    ref, gen = size["ref_frames"], size["gen_frames"]
    mel = torch.randn(1, ref, 100, generator=g)
    ids = torch.randint(1, len(tokens), (1, (ref + gen) // 4), generator=g)
    save_file({"mel": mel, "ids": ids, "duration": torch.tensor(ref + gen), "steps": torch.tensor(args.steps)},
              str(folder / "inputs.safetensors"))
    return {"params": params, "frames": ref + gen, "text": ids.shape[1]}


def f5_header(size: dict, info: dict, args: argparse.Namespace) -> str:
    return (f"F5-TTS DiT ({info['params'] / 1e6:.0f} M parameters): dim {size['dim']}, {size['depth']} blocks (real 22), "
            f"{size['heads']} heads x {size['dim_head']}, ff x{size['ff_mult']}, text dim {size['text_dim']}; "
            f"{info['frames']} frames ({size['ref_frames']} reference), {info['text']} text tokens, {args.steps} Euler "
            f"steps (upstream's default 32) x CFG batch 2, sway -1, seed 0, float32; output: the mel")


def f5_ours(folder: Path) -> dict[str, Callable[[], torch.Tensor]]:
    from safetensors.torch import load_file
    from mizuoto.nodes.f5_tts.loader import load_f5_tts
    from mizuoto.nodes.f5_tts.phases import F5TTSEngine
    from mizuoto.nodes.f5_tts.sample import FlowSettings
    from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
    sys.path.insert(0, str(TESTS))
    from runtime_helpers import residency_capacity
    inputs = load_file(str(folder / "inputs.safetensors"))
    settings = FlowSettings(steps=int(inputs["steps"]))
    duration = int(inputs["duration"])
    probe = F5TTSEngine(load_f5_tts(folder, torch.float32), ModelManager(DeviceService()))
    working = probe.flow_memory(duration)

    def arm(devices: DeviceService, mode: str) -> Callable[[], torch.Tensor]:
        engine = F5TTSEngine(load_f5_tts(folder, torch.float32),
                             ModelManager(devices, VramPolicy({"compute.vram_mode": mode})))

        def run() -> torch.Tensor:
            with engine.manager.request(seed=0) as ctx:
                return engine.flow(ctx, inputs["mel"], inputs["ids"], duration, settings)
        return run

    arms = {"ours": arm(DeviceService(), "normal")}
    for label, residency in (("sim 100 %", "full"), ("sim 50 %", "half")):
        mode, capacity = residency_capacity(probe.dit, residency, working=working)
        arms[label] = arm(DeviceService(simulate={"cpu": capacity + probe.vocoder.size_bytes}, strict=True), mode)
    del probe
    return arms


def f5_upstream(folder: Path) -> Callable[[], torch.Tensor]:
    sys.path.insert(0, str(TESTS))
    try:        # where transformers is installed (for qwen-tts) it probes packages with find_spec at import,
        from transformers import pipeline  # noqa: F401 - which fails on the stubs below: let it probe first
    except ImportError:
        pass
    from f5_tts.upstream_stubs import install         # tests/f5_tts: stubs for training-only imports
    install()
    import yaml
    from safetensors.torch import load_file
    from f5_tts.infer.utils_infer import load_model
    from f5_tts.model import DiT
    arch = yaml.safe_load((folder / "config.yaml").read_text())["model"]["arch"]
    model = load_model(DiT, arch, str(folder / "model_1200.safetensors"), mel_spec_type="vocos",
                       vocab_file=str(folder / "vocab.txt"), device="cpu").eval()
    inputs = load_file(str(folder / "inputs.safetensors"))

    def run() -> torch.Tensor:
        with torch.inference_mode():
            out, _ = model.sample(cond=inputs["mel"], text=inputs["ids"], duration=int(inputs["duration"]),
                                  steps=int(inputs["steps"]), cfg_strength=2.0, sway_sampling_coef=-1.0, seed=0)
        return out
    return run


# ---- OmniVoice ------------------------------------------------------------------------------------------

def omni_tiny():
    return _load("omnivoice_tiny", TESTS / "omnivoice" / "tiny.py")   # by path: upstream is also `omnivoice`


def omni_write(folder: Path, size: dict, args: argparse.Namespace) -> dict:
    """config.json + model.safetensors (our model's names are upstream's: tests/omnivoice/test_structure.py),
    the tiny byte-level tokenizer (so the text table has tiny.py's 1088 rows, not 151676: only looked up) and
    tiny.py's narrow audio tokenizer (the published time structure; its decoder runs once per request)."""
    from safetensors.torch import save_file
    from mizuoto.nodes.omnivoice.codec import CodecConfig, HiggsAudioTokenizer
    from mizuoto.nodes.omnivoice.model import OmniVoiceConfig, OmniVoiceLM
    tiny = omni_tiny()
    (folder / "audio_tokenizer").mkdir(parents=True, exist_ok=True)
    cfg, ccfg = tiny.model_config(size["hidden"], size["layers"]), tiny.codec_config()
    cfg["llm_config"].update(intermediate_size=size["intermediate"], num_attention_heads=size["heads"],
                             num_key_value_heads=size["kv"], head_dim=size["head_dim"])
    torch.manual_seed(args.seed)
    model = OmniVoiceLM(OmniVoiceConfig.from_dict(cfg))
    codec = HiggsAudioTokenizer(CodecConfig.from_dict(ccfg), False)
    tiny.randomize(model, args.seed)
    tiny.randomize(codec, args.seed + 1)
    params = sum(p.numel() for p in model.parameters())
    for m, path in ((model, folder / "model.safetensors"), (codec, folder / "audio_tokenizer" / "model.safetensors")):
        save_file({k: v.detach().contiguous() for k, v in m.state_dict().items()}, str(path))
    del model, codec
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "audio_tokenizer" / "config.json").write_text(json.dumps(ccfg, indent=1))
    (folder / "audio_tokenizer" / "preprocessor_config.json").write_text(json.dumps(tiny.PREPROCESSOR, indent=1))
    tiny.write_tokenizer(folder)
    inputs = {"text": "The quick brown fox jumps over the lazy dog.", "language": "en", "num_step": args.steps,
              "seed": 11}
    (folder / "inputs.json").write_text(json.dumps(inputs))
    return {"params": params, **inputs}


def omni_header(size: dict, info: dict, args: argparse.Namespace) -> str:
    return (f"OmniVoice ({info['params'] / 1e6:.0f} M parameters): Qwen3 backbone hidden {size['hidden']}, "
            f"{size['layers']} layers (real 28), GQA {size['heads']}/{size['kv']} x {size['head_dim']}, SwiGLU "
            f"{size['intermediate']}, text table 1088 rows (real 151676, only looked up), tiny.py's narrow audio "
            f"tokenizer; {info['text']!r} ({info['language']}), {info['num_step']} unmasking steps (upstream's "
            f"default 32) x CFG batch 2, seed {info['seed']}, silence passes off, float32; output: the waveform")


def omni_ours(folder: Path) -> dict[str, Callable[[], torch.Tensor]]:
    from mizuoto.nodes.omnivoice.loader import load_omnivoice
    from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine
    from mizuoto.nodes.pack.engine import Chunk
    from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
    sys.path.insert(0, str(TESTS))
    from runtime_helpers import residency_capacity
    inputs = json.loads((folder / "inputs.json").read_text())
    options = {"num_step": inputs["num_step"], "postprocess_output": False, "preprocess_prompt": False}

    def chunk() -> Chunk:
        return Chunk(inputs["text"], seed=inputs["seed"], language=inputs["language"], options=dict(options))

    probe = OmniVoiceEngine(load_omnivoice(folder, torch.float32), ModelManager(DeviceService()))
    prompt = probe.make_prompt(chunk(), None, True)
    working = probe.generate_memory(prompt.length, prompt.frames)

    def arm(devices: DeviceService, mode: str) -> Callable[[], torch.Tensor]:
        engine = OmniVoiceEngine(load_omnivoice(folder, torch.float32),
                                 ModelManager(devices, VramPolicy({"compute.vram_mode": mode})))

        def run() -> torch.Tensor:
            with engine.manager.request(seed=inputs["seed"]) as ctx:
                return engine.speak_chunk(ctx, chunk())
        return run

    arms = {"ours": arm(DeviceService(), "normal")}
    others = sum(h.size_bytes for h in probe.handles if h is not probe.backbone)   # the codec: always room
    for label, residency in (("sim 100 %", "full"), ("sim 50 %", "half")):
        mode, capacity = residency_capacity(probe.backbone, residency, working=working)
        arms[label] = arm(DeviceService(simulate={"cpu": capacity + others}, strict=True), mode)
    del probe
    return arms


def omni_upstream(folder: Path) -> Callable[[], torch.Tensor]:
    sys.path.append(str(TESTS))                   # after site-packages: tests/omnivoice must not shadow omnivoice
    from qwen3_tts.torchaudio_shim import install
    install()
    import numpy as np
    from omnivoice.models.omnivoice import OmniVoice
    model = OmniVoice.from_pretrained(str(folder), dtype=torch.float32).eval()
    inputs = json.loads((folder / "inputs.json").read_text())

    def run() -> torch.Tensor:
        torch.manual_seed(inputs["seed"])
        audio = model.generate(text=inputs["text"], language=inputs["language"], num_step=inputs["num_step"],
                               postprocess_output=False, preprocess_prompt=False)[0]
        return torch.from_numpy(np.asarray(audio))
    return run


SPECS: dict[str, dict[str, Any]] = {
    "qwen3_tts": dict(real=QWEN_REAL, quick=QWEN_QUICK, write=qwen_write, header=qwen_header, ours=qwen_ours,
                      upstream=qwen_upstream, package="qwen-tts 0.1.1"),
    "f5_tts": dict(real=F5_REAL, quick=F5_QUICK, write=f5_write, header=f5_header, ours=f5_ours,
                   upstream=f5_upstream, package="f5-tts 1.1.22"),
    "omnivoice": dict(real=OMNI_REAL, quick=OMNI_QUICK, write=omni_write, header=omni_header, ours=omni_ours,
                      upstream=omni_upstream, package="omnivoice 0.2.1 (transformers >= 5.3: its own venv)"),
}


# ---- worker ---------------------------------------------------------------------------------------------

def _send(obj: dict, out) -> None:
    out.write(TAG + json.dumps(obj) + "\n")
    out.flush()


def worker(engine: str, side: str, folder: Path) -> None:
    """Load the arms of one side, then answer {"arm", "threads", "save"} lines with the arm's times."""
    # bench/f5_tts.py would shadow the upstream package of that name: drop the script's folder from the path
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                                     # library prints go to stderr, never into the protocol
    spec = SPECS[engine]
    try:
        arms = spec["ours"](folder) if side == "ours" else {"upstream": spec["upstream"](folder)}
    except Exception as e:                            # noqa: BLE001 - reported to the parent, which skips the side
        import traceback
        traceback.print_exc()
        _send({"error": f"{type(e).__name__}: {e}"}, out)
        return
    _send({"arms": list(arms), "threads": torch.get_num_threads()}, out)
    for line in sys.stdin:
        cmd = json.loads(line)
        if "quit" in cmd:
            break
        torch.set_num_threads(cmd["threads"])
        c0, w0 = time.process_time(), time.perf_counter()
        result = arms[cmd["arm"]]()
        w1, c1 = time.perf_counter(), time.process_time()
        if cmd.get("save"):
            torch.save(result, cmd["save"])
        _send({"cpu": c1 - c0, "wall": w1 - w0}, out)


class Worker:
    """One side's process. Started at once; `ready()` waits for its models to load (so several workers
    load side by side) and reads what it offers."""

    def __init__(self, python: str, engine: str, side: str, folder: Path, env: dict) -> None:
        self.python, self.error, self.arms, self.all_threads, self._hello = python, None, [], 1, False
        try:
            self.proc = subprocess.Popen([python, str(Path(__file__).resolve()), "--worker", engine, side, str(folder)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        except OSError as e:                          # no such interpreter: reported like a failed load
            self.proc, self.error, self._hello = None, f"cannot start {python!r}: {e}", True

    def ready(self) -> "Worker":
        if not self._hello:
            hello = self._read()
            self.error = hello.get("error")
            self.arms = hello.get("arms", [])
            self.all_threads = hello.get("threads", 1)
            self._hello = True
        return self

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
        return {"error": f"the worker exited with status {self.proc.wait()} (its stderr is above)"}

    def run(self, arm: str, threads: int, save: str | None = None) -> dict:
        self.proc.stdin.write(json.dumps({"arm": arm, "threads": threads, "save": save}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"{arm}: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self.proc.wait()


# ---- parent ---------------------------------------------------------------------------------------------

def upstream_pythons(pairs: list[str]) -> dict[str, str]:
    found = {}
    for engine in ENGINES:
        path = os.environ.get(f"MIZUOTO_UPSTREAM_{engine.upper()}") or os.environ.get("MIZUOTO_UPSTREAM_PYTHON")
        if path:
            found[engine] = path
    for pair in pairs:
        engine, sep, path = pair.partition("=")
        if not sep or engine not in ENGINES or not path:
            raise SystemExit(f"--upstream: expected ENGINE=PYTHON with ENGINE one of {', '.join(ENGINES)}, got {pair!r}")
        found[engine] = path
    return found


def compare(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"DIFFERENT (shapes {tuple(a.shape)} vs {tuple(b.shape)})"
    if torch.equal(a, b):
        return "exact"
    return f"DIFFERENT (max abs {(a.double() - b.double()).abs().max().item():.3g})"


def start(engine: str, folder: Path, upstream: str | None) -> dict[str, Worker]:
    """Both sides' workers for one engine, started (not yet waited for)."""
    import mizuoto
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(mizuoto.__file__).resolve().parents[1])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    workers = {"ours": Worker(sys.executable, engine, "ours", folder, env)}
    if upstream is not None:
        up_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the side venv's own packages
        workers["upstream"] = Worker(upstream, engine, "upstream", folder, up_env)
    return workers


def measure(engine: str, workers: dict[str, Worker], threads: list[int | str], repeats: int,
            warmups: int, out_dir: Path) -> list[dict]:
    """Wait for both workers, run every arm round robin at each thread count, return the rows."""
    if workers["ours"].ready().error:
        for w in workers.values():
            w.close()
        raise RuntimeError(f"{engine}: our worker failed: {workers['ours'].error}")
    notes = []
    if "upstream" not in workers:
        notes.append(f"{engine}: upstream not measured: no upstream interpreter (pass --upstream {engine}=PYTHON "
                     f"or set MIZUOTO_UPSTREAM_{engine.upper()}); {SPECS[engine]['package']} in a side venv")
    elif workers["upstream"].ready().error:
        up = workers.pop("upstream")
        notes.append(f"{engine}: upstream not measured: {up.python} could not load it: {up.error}")
        up.close()
    rows = []
    try:
        arms = [(w, a) for w in workers.values() for a in w.arms]
        for t in threads:
            n = workers["ours"].all_threads if t == "all" else int(t)
            times: dict[str, dict[str, list[float]]] = {a: {"cpu": [], "wall": []} for _, a in arms}
            outputs = {}
            for w, a in arms:                             # warm-up; the first call places the weights
                path = out_dir / f"{engine}-{a.replace(' ', '').replace('%', '')}-{n}.pt"
                w.run(a, n, save=str(path))
                outputs[a] = torch.load(path)
                for _ in range(warmups - 1):
                    w.run(a, n)
            for i in range(repeats):
                k = i % len(arms)
                for w, a in arms[k:] + arms[:k]:
                    r = w.run(a, n)
                    times[a]["cpu"].append(r["cpu"])
                    times[a]["wall"].append(r["wall"])
            med = {a: {c: statistics.median(v[c]) for c in v} for a, v in times.items()}

            def row(what: str, num: str, den: str, check: str) -> dict:
                return {"engine": engine, "threads": n, "figure": what, "num": num, "den": den,
                        "cpu": med[num]["cpu"], "wall": med[num]["wall"],
                        "cpu_ratio": med[num]["cpu"] / med[den]["cpu"] if den else None,
                        "wall_ratio": med[num]["wall"] / med[den]["wall"] if den else None, "check": check}
            if "upstream" in outputs:
                rows.append(row("ours ÷ upstream", "ours", "upstream", compare(outputs["ours"], outputs["upstream"])))
                rows.append(row("upstream", "upstream", "", "-"))
            else:
                rows.append(row("ours", "ours", "", "upstream not measured"))
            rows.append(row("sim 100 % ÷ ours", "sim 100 %", "ours", compare(outputs["sim 100 %"], outputs["ours"])))
            rows.append(row("sim 50 % ÷ sim 100 %", "sim 50 %", "sim 100 %",
                            compare(outputs["sim 50 %"], outputs["sim 100 %"])))
    finally:
        for w in workers.values():
            w.close()
    for note in notes:
        print(note)
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'engine':<10} {'threads':>7}  {'figure':<22} {'CPU ratio':>9} {'wall ratio':>10} "
          f"{'CPU s':>8} {'wall s':>8}  output")
    for r in rows:
        ratio = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        print(f"{r['engine']:<10} {r['threads']:>7}  {r['figure']:<22} {ratio(r['cpu_ratio']):>9} "
              f"{ratio(r['wall_ratio']):>10} {r['cpu']:>8.3f} {r['wall']:>8.3f}  {r['check']}")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=3, metavar=("ENGINE", "SIDE", "FOLDER"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, 1 run (the smoke test)")
    ap.add_argument("--full", action="store_true", help="every real layer, 40 frames, 16 steps (slow on a CPU)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--upstream", action="append", default=[], metavar="ENGINE=PYTHON")
    ap.add_argument("--threads", default="1,all", help="comma-separated thread counts; 'all' = torch's default")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per arm (default 5, quick 1)")
    ap.add_argument("--warmups", type=int, default=1)
    ap.add_argument("--frames", type=int, default=None, help="codec frames (default 16, full 40, quick 4)")
    ap.add_argument("--steps", type=int, default=None,
                    help="DiT ODE steps / OmniVoice unmasking steps (default 4, full 16, quick 2)")
    ap.add_argument("--layers", type=int, default=None, help="talker / OmniVoice layers (default 8 of 28, full 28)")
    ap.add_argument("--dit-depth", type=int, default=None, help="DiT blocks (default 6 of 22, full 22)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.worker:
        engine, side, folder = args.worker
        worker(engine, side, Path(folder))
        return []
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in SPECS:
            raise SystemExit(f"--engines: unknown engine {e!r}; expected some of {', '.join(SPECS)}")
    threads = [t.strip() for t in args.threads.split(",")]
    for t in threads:
        if t != "all" and not (t.isdigit() and int(t) > 0):
            raise SystemExit(f"--threads: expected positive whole numbers or 'all', got {t!r}")
    pythons = upstream_pythons(args.upstream)
    repeats = args.repeats or (1 if args.quick else 5)
    args.frames = args.frames or (4 if args.quick else 40 if args.full else 16)
    args.steps = args.steps or (2 if args.quick else 16 if args.full else 4)
    started = time.perf_counter()
    print(f"bench/engines.py: ours ÷ upstream, same random checkpoint, inputs and seed; {repeats} timed runs per arm "
          f"after {args.warmups} warm-up, interleaved (round robin over every arm, rotated), medians. CPU ratio = "
          f"process CPU time (the main figure: this machine is shared with other work), wall ratio = wall time; "
          f"threads: torch.set_num_threads in each worker ({os.cpu_count()} CPUs here). torch {torch.__version__}.")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prepared = []
        for engine in engines:
            spec = SPECS[engine]
            size = dict(spec["quick"] if args.quick else spec["real"])
            if engine == "qwen3_tts" and not args.quick:
                size["layers"] = args.layers or (28 if args.full else 8)
            if engine == "f5_tts" and not args.quick:
                size["depth"] = args.dit_depth or (22 if args.full else 6)
            if engine == "omnivoice" and not args.quick:
                size["layers"] = args.layers or (28 if args.full else 8)
            folder = Path(tmp) / engine
            folder.mkdir()
            info = spec["write"](folder, size, args)
            # every engine's workers load side by side before anything is timed; --full holds one engine's
            # four model copies at a time (about 12 GB for the talker alone)
            prepared.append((engine, spec["header"](size, info, args), folder,
                             None if args.full else start(engine, folder, pythons.get(engine))))
        for _, _, _, workers in prepared:
            for w in (workers or {}).values():
                w.ready()
        for engine, header, folder, workers in prepared:
            print(header)
            done = measure(engine, workers or start(engine, folder, pythons.get(engine)), threads, repeats,
                           args.warmups, Path(tmp))
            print_table(done)                         # each engine's rows as soon as they exist
            rows += done
    print(f"({time.perf_counter() - started:.0f} s wall)")
    return rows


if __name__ == "__main__":
    main()

"""The unit table: how each model splits into units and the fixed part, by the outermost-list rule alone
and by the runtime's rule (which descends when the fixed part holds more than a quarter of the weights).

    python bench/units.py [--dtype bfloat16|float16|float32]
    python bench/units.py --stream-vits     # also: transformers' VITS streamed none/half/full vs plain (~1 min)

Every model is built on `meta` at real size (no weights, no download): torch's nn.Transformer (default
config); CosyVoice 2's HiFT (a HiFi-GAN with a source module, from tests/cosyvoice/real_v2.json);
transformers' VitsModel at its default config, which transformers documents as facebook/mms-tts-eng's
(only when transformers is importable; it is not a dependency of the pack); and every engine of ours,
each component a row, built from the real configs recorded in tests/<engine>/ and split into
components exactly as the engine does (its own constructor: marks, pinned embeddings, memory_units).
CosyVoice's ONNX-read speech tokenizer and speaker encoder need their .onnx files and are not listed.

Weights are cast to --dtype (default bfloat16, how the engines run on a GPU): the unit rule counts bytes,
so a layer of 1.5 MB in float32 falls under the 1 MB list-child threshold in bfloat16.
Columns: size (what the handle manages: pinned-to-CPU tables are left out), the fixed part's share of it,
the number of units, and the minimum working set (fixed part + the largest units the streamer holds at
once: one for sequence components, two for oneshot ones at the default compute.async_offload = 1), as MB
and as a share of the size.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager

MB = 1 << 20
TESTS = Path(__file__).resolve().parent.parent / "tests"


@contextlib.contextmanager
def outermost_rule_only() -> Iterator[None]:
    """Handles built inside split by the outermost-list rule alone (the rule before descending)."""
    saved = ModelHandle.FIXED_SHARE
    ModelHandle.FIXED_SHARE = None
    try:
        yield
    finally:
        ModelHandle.FIXED_SHARE = saved


def row(model: str, h: ModelHandle) -> dict:
    slots = 1 if h.kind == "sequence" else 2
    sizes = sorted((u.nbytes for u in h.layout.units), reverse=True)
    return {"model": model, "size": h.size_bytes, "fixed": h.layout.fixed_bytes, "units": len(sizes),
            "min_ws": h.layout.fixed_bytes + sum(sizes[:slots])}


def _real(path: str) -> dict:
    return json.loads((TESTS / path).read_text())


def _manager() -> ModelManager:
    return ModelManager(DeviceService())  # the real CPU: registering moves nothing


# ---- the models ----------------------------------------------------------------------------------------
def transformer(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    with torch.device("meta"):
        m = nn.Transformer()
    return [("nn.Transformer", ModelHandle(m.to(dtype), "transformer"))]


def cosyvoice_hift(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.blocks.hift import HiFT, HiFTConfig
    hift = _real("cosyvoice/real_v2.json")["hift"]
    cfg = HiFTConfig(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                        for k, v in hift.items()})
    with torch.device("meta"):
        m = HiFT(cfg)
    return [("HiFi-GAN (CosyVoice 2 HiFT)", ModelHandle(m.to(dtype), "hift"))]


def vits(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    try:
        from transformers import VitsConfig, VitsModel
    except ImportError:
        return []
    with torch.device("meta"):
        m = VitsModel(VitsConfig())
    return [("VITS (transformers, mms-tts-eng config)", ModelHandle(m.to(dtype), "vits"))]


def kokoro(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.kokoro.model import PUBLISHED_SIZES, KModel
    from mizuoto.nodes.kokoro.phases import KokoroEngine
    with torch.device("meta"):
        m = KModel(PUBLISHED_SIZES)
    e = KokoroEngine(m.to(dtype), {"af_heart": torch.zeros(510, 1, 256)}, _manager())
    return [(f"Kokoro-82M {h.name}", h) for h in e.handles]


def hibari(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.hibari.engine import HibariVoice
    from mizuoto.nodes.hibari.model import HibariModel
    from mizuoto.nodes.hibari.phases import HibariEngine
    with torch.device("meta"):
        m = HibariModel()
    e = HibariEngine(HibariVoice(m.to(dtype), None), _manager())
    return [(f"hibari {h.name}", h) for h in e.handles]


def fish_speech(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.fish_speech.codec import CodecConfig, FishCodec
    from mizuoto.nodes.fish_speech.model import DualARTransformer, FishConfig
    from mizuoto.nodes.fish_speech.phases import FishSpeechEngine
    real = _real("fish_speech/real_s1_mini.json")
    config = FishConfig.from_dict(real["lm_config"])
    with torch.device("meta"):
        model = DualARTransformer(config, config.vocab_size - config.codebook_size, config.vocab_size - 1)
        codec = FishCodec(CodecConfig.from_shapes({k: tuple(v) for k, v in real["codec"].items()}))
    e = FishSpeechEngine(SimpleNamespace(model=model.to(dtype), codec=codec.to(dtype), config=config), _manager())
    return [(f"fish-speech {h.name}", h) for h in e.handles]


def f5_tts(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.blocks.vocoder import Vocos, VocosConfig
    from mizuoto.nodes.f5_tts.model import DiT, DiTConfig
    from mizuoto.nodes.f5_tts.phases import F5TTSEngine
    real = _real("f5_tts/real_F5TTS_v1_Base.json")
    cfg = DiTConfig.from_arch(real["arch"], mel_dim=real["mel_spec"]["n_mel_channels"], vocab_size=real["vocab_size"],
                              source="F5TTS_v1_Base.yaml")
    with torch.device("meta"):
        dit = DiT(cfg)
        vocoder = Vocos(VocosConfig.from_dict(_real("f5_tts/real_vocos_mel_24khz.json")["config"]))
    e = F5TTSEngine(SimpleNamespace(dit=dit.to(dtype), vocoder=vocoder.to(dtype), config=cfg), _manager())
    return [(f"F5-TTS {h.name}", h) for h in e.handles]


def cosyvoice(dtype: torch.dtype, version: int) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.blocks.s3gen_flow import Flow, FlowConfig
    from mizuoto.nodes.blocks.hift import HiFT, HiFTConfig
    from mizuoto.nodes.cosyvoice.lm import CosyVoiceLM, LMConfig, Qwen2Config
    from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine
    real = _real(f"cosyvoice/real_v{version}.json")
    lm = real["lm"]
    lm_config = LMConfig(version=version, speech_token_size=lm["speech_token_size"],
                         qwen=Qwen2Config.from_dict(real["qwen"]), top_p=lm["top_p"], top_k=lm["top_k"],
                         win_size=lm["win_size"], tau_r=lm["tau_r"])
    flow_config = FlowConfig(**{**real["flow"], "channels": tuple(real["flow"]["channels"])})
    hift_config = HiFTConfig(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list)
                                else v for k, v in real["hift"].items()})
    with torch.device("meta"):
        bundle = SimpleNamespace(llm=CosyVoiceLM(lm_config).to(dtype), flow=Flow(flow_config).to(dtype),
                                 hift=HiFT(hift_config).to(dtype),
                                 flow_config=flow_config, hift_config=hift_config,
                                 speakers={}, speech_tokenizer=None, campplus=None, version=version)
    e = CosyVoiceEngine(bundle, _manager())
    return [(f"CosyVoice {version} {h.name}", h) for h in e.handles]


def qwen3_tts(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    sys.path.insert(0, str(TESTS))
    from mizuoto.nodes.qwen3_tts.codec import CodecConfig, SpeechTokenizer
    from mizuoto.nodes.qwen3_tts.model import Qwen3TTS, Qwen3TTSConfig
    from mizuoto.nodes.qwen3_tts.phases import Qwen3TTSEngine
    from qwen3_tts.figures import config_06b
    cfg, ccfg = config_06b()
    config = Qwen3TTSConfig.from_dict(cfg)
    with torch.device("meta"):
        model = Qwen3TTS(config)
        codec = SpeechTokenizer(CodecConfig.from_dict(ccfg))
    e = Qwen3TTSEngine(SimpleNamespace(model=model.to(dtype), codec=codec.to(dtype), config=config), _manager())
    return [(f"Qwen3-TTS 0.6B {h.name}", h) for h in e.handles]


def omnivoice(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.omnivoice.codec import CodecConfig, HiggsAudioTokenizer
    from mizuoto.nodes.omnivoice.model import OmniVoiceConfig, OmniVoiceLM
    from mizuoto.nodes.omnivoice.phases import OmniVoiceEngine
    real = _real("omnivoice/real_omnivoice.json")
    config = OmniVoiceConfig.from_dict(real["config"])
    with torch.device("meta"):
        model = OmniVoiceLM(config)
        codec = HiggsAudioTokenizer(CodecConfig.from_dict(real["audio_tokenizer_config"]))
    e = OmniVoiceEngine(SimpleNamespace(model=model.to(dtype), codec=codec.to(dtype), config=config), _manager())
    return [(f"OmniVoice {h.name}", h) for h in e.handles]


def voxcpm(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.voxcpm.audiovae import AudioVAE, AudioVAEConfig
    from mizuoto.nodes.voxcpm.model import VoxCPM2, VoxCPMConfig
    from mizuoto.nodes.voxcpm.phases import VoxCPMEngine
    config = VoxCPMConfig.from_dict(_real("voxcpm/real_voxcpm2.json")["config"])
    with torch.device("meta"):
        model = VoxCPM2(config)
        vae = AudioVAE(AudioVAEConfig.from_dict(config.audio_vae))
    e = VoxCPMEngine(SimpleNamespace(model=model.to(dtype), vae=vae.to(dtype), config=config), _manager())
    return [(f"VoxCPM 2 {h.name}", h) for h in e.handles]


def gpt_sovits(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.blocks.hubert import Hubert, HubertConfig
    from mizuoto.nodes.gpt_sovits.bert import BertConfig, BertFeatures
    from mizuoto.nodes.gpt_sovits.phases import GPTSoVITSEngine
    from mizuoto.nodes.gpt_sovits.sovits import SoVITSConfig, SynthesizerTrn
    from mizuoto.nodes.gpt_sovits.speaker import ERes2NetV2
    from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic
    t2s = T2SConfig.from_dict(_real("gpt_sovits/real_t2s_v2.json")["config"], "s1longer-v2.yaml")
    sovits = SoVITSConfig.from_hparams(_real("gpt_sovits/real_sovits_v2Pro.json")["config"], "v2Pro", 732,
                                       "s2v2Pro.json")
    hubert = HubertConfig.from_dict(_real("gpt_sovits/real_chinese_hubert_base.json")["config"], "config.json")
    bert = BertConfig.from_dict(_real("gpt_sovits/real_chinese_roberta_wwm_ext_large.json")["config"], "config.json")
    with torch.device("meta"):
        bundle = SimpleNamespace(t2s=Text2Semantic(t2s).to(dtype), sovits=SynthesizerTrn(sovits).to(dtype),
                                 hubert=Hubert(hubert, masked_spec_embed=True).to(dtype), speaker=ERes2NetV2().to(dtype),
                                 bert=BertFeatures(bert).to(dtype), dtype=dtype)
    e = GPTSoVITSEngine(bundle, _manager())
    return [(f"GPT-SoVITS v2Pro {h.name}", h) for h in e.handles]


def indextts2(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    from mizuoto.nodes.blocks.bigvgan import BigVGAN, BigVGANConfig
    from mizuoto.nodes.blocks.campplus import CAMPPlus
    from mizuoto.nodes.blocks.w2v_bert import W2VBert, W2VBertConfig
    from mizuoto.nodes.indextts2.codec import SemanticCodec
    from mizuoto.nodes.indextts2.emotion import Qwen3ForCausalLM
    from mizuoto.nodes.indextts2.gpt import UnifiedVoice
    from mizuoto.nodes.indextts2.loader import SEMANTIC_LAYER, codec_config, gpt_config, s2mel_config
    from mizuoto.nodes.indextts2.phases import IndexTTS2Engine
    from mizuoto.nodes.indextts2.s2mel import S2Mel
    from mizuoto.nodes.qwen3_tts.model import LMConfig
    real = _real("indextts2/real_indextts2.json")
    c, path = real["config"], Path("config.yaml")
    g = gpt_config(c, path)
    # nvidia/bigvgan_v2_22khz_80band_256x and Qwen3-0.6B (the emotion model's base) as published
    vocoder = BigVGANConfig.from_dict({"num_mels": 80, "upsample_rates": [4, 4, 2, 2, 2, 2],
                                       "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4], "upsample_initial_channel": 1536,
                                       "resblock_kernel_sizes": [3, 7, 11],
                                       "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                                       "use_tanh_at_final": False, "use_bias_at_final": False})
    qwen = LMConfig.from_dict({"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                               "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                               "vocab_size": 151936, "rope_theta": 1000000.0})
    with torch.device("meta"):
        bundle = SimpleNamespace(
            gpt=UnifiedVoice(g).to(dtype), s2mel=S2Mel(s2mel_config(c, path, g.model_dim)).to(dtype),
            codec=SemanticCodec(codec_config(c, path)).to(dtype), campplus=CAMPPlus().to(dtype),
            w2v_bert=W2VBert(W2VBertConfig.from_dict(real["w2v_bert"]), SEMANTIC_LAYER).to(dtype),
            bigvgan=BigVGAN(vocoder).to(dtype), emotion_model=SimpleNamespace(lm=Qwen3ForCausalLM(qwen).to(dtype)))
    e = IndexTTS2Engine(bundle, _manager())
    return [(f"IndexTTS 2 {h.name}", h) for h in e.handles]


def chatterbox(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    """The published sizes: T3Config's and S3Gen's defaults (Chatterbox publishes no config; the loader reads
    them from the shapes, and tests/chatterbox checks these defaults against upstream's classes on meta)."""
    from mizuoto.nodes.blocks.hift import HiFTConfig
    from mizuoto.nodes.blocks.s3gen_flow import FlowConfig
    from mizuoto.nodes.blocks.s3tokenizer import S3TokenizerConfig
    from mizuoto.nodes.chatterbox.loader import ChatterboxBundle
    from mizuoto.nodes.chatterbox.phases import ChatterboxEngine
    from mizuoto.nodes.chatterbox.s3gen import CAMPPlusConfig, S3Gen, S3GenConfig
    from mizuoto.nodes.chatterbox.t3 import T3, T3Config
    from mizuoto.nodes.chatterbox.voice_encoder import VoiceEncoder
    config = S3GenConfig(FlowConfig(version=2, clock="grid"), HiFTConfig(sine_gen=1), CAMPPlusConfig(),
                         S3TokenizerConfig())
    with torch.device("meta"):
        bundle = ChatterboxBundle(folder=Path("."), t3=T3(T3Config()).to(dtype), s3gen=S3Gen(config).to(dtype),
                                  ve=VoiceEncoder().to(dtype), tokenizer=None, voice=None)
    e = ChatterboxEngine(bundle, _manager())
    return [(f"Chatterbox {h.name}", h) for h in e.handles]


def vibevoice(dtype: torch.dtype) -> list[tuple[str, ModelHandle]]:
    """The published 0.5B config (tests/vibevoice records it); voices and tokenizer take no part in the units."""
    from mizuoto.nodes.vibevoice.model import RealtimeConfig, VibeVoiceRealtime
    from mizuoto.nodes.vibevoice.phases import VibeVoiceEngine
    config = RealtimeConfig.from_dict(_real("vibevoice/fixtures/realtime_0.5b_structure.json")["config"])
    with torch.device("meta"):
        m = VibeVoiceRealtime(config).to(dtype)
    e = VibeVoiceEngine(m, {"en-Carter_man": None}, None, _manager())
    return [(f"VibeVoice-Realtime-0.5B {h.name}", h) for h in e.handles]


# the models nobody here wrote, then our engines by engine id (tests check every registered engine is here)
OTHERS: list[Callable[[torch.dtype], list[tuple[str, ModelHandle]]]] = [transformer, cosyvoice_hift, vits]
ENGINES: dict[str, Callable[[torch.dtype], list[tuple[str, ModelHandle]]]] = {
    "hibari": hibari, "fish_speech": fish_speech, "f5_tts": f5_tts,
    "cosyvoice": lambda d: cosyvoice(d, 2) + cosyvoice(d, 3), "qwen3_tts": qwen3_tts, "omnivoice": omnivoice,
    "voxcpm": voxcpm, "gpt_sovits": gpt_sovits, "indextts2": indextts2, "kokoro": kokoro,
    "chatterbox": chatterbox, "vibevoice": vibevoice,
}


def table(dtype: torch.dtype) -> list[tuple[dict, dict]]:
    rows = []
    for build in OTHERS + list(ENGINES.values()):
        with outermost_rule_only():
            before = [row(name, h) for name, h in build(dtype)]
        after = [row(name, h) for name, h in build(dtype)]
        rows += list(zip(before, after))
    return rows


def _fmt(r: dict) -> str:
    return (f"{100 * r['fixed'] / r['size']:5.1f} % {r['units']:5d} "
            f"{r['min_ws'] / MB:9.1f} {100 * r['min_ws'] / r['size']:5.1f} %")


def stream_vits(dtype: torch.dtype) -> None:
    """transformers' VitsModel at its default (mms-tts-eng) config, random weights, through the runtime on
    the strict simulated device with every unit streamed, half-way between its minimum working set and its
    size, and whole: each waveform compared with torch.equal to the plain model's."""
    from transformers import VitsConfig, VitsModel
    sys.path.insert(0, str(TESTS))
    from runtime_helpers import run_streamed
    torch.manual_seed(0)
    model = VitsModel(VitsConfig()).eval().to(dtype)
    ids = torch.randint(1, VitsConfig().vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))

    def speak(m: nn.Module, ctx) -> torch.Tensor:
        torch.manual_seed(3)  # VITS draws its noise from the global generator
        with torch.no_grad():
            return m(input_ids=ids).waveform

    plain = speak(model, None)
    for residency in ("none", "half", "full"):
        out, ctx, handle, _ = run_streamed(model, speak, "oneshot", residency, working=256 * MB)
        streamed = ctx.meta["memory"]["streamed_mb"]
        print(f"VITS {residency:>4}: {'exact' if torch.equal(out, plain) else 'DIFFERENT'}, "
              f"{handle.loaded_bytes / MB:.1f} of {handle.size_bytes / MB:.1f} MB placed "
              f"(fixed part {handle.layout.fixed_bytes / MB:.1f} MB), streamed {streamed:.1f} MB")


def main(argv: list[str] | None = None) -> list[tuple[dict, dict]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    parser.add_argument("--stream-vits", action="store_true")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    rows = table(dtype)
    width = max(len(b["model"]) for b, _ in rows)
    head = f"{'fixed':>7} {'units':>5} {'min ws MB':>9} {'(%)':>7}"
    print(f"{'':{width}} {'':>9}   outermost-list rule{' ' * 13}|   this rule")
    print(f"{'model / component':{width}} {'size MB':>9}   {head} | {head}")
    for before, after in rows:
        print(f"{before['model']:{width}} {before['size'] / MB:9.1f}   {_fmt(before)} | {_fmt(after)}")
    print(f"\nfixed: the fixed part's share of the size; min ws: fixed part + the largest units held at once "
          f"(1 for sequence components, 2 for oneshot ones); weights in {dtype}; torch {torch.__version__}")
    if args.stream_vits:
        stream_vits(dtype)
    return rows


if __name__ == "__main__":
    main()

"""VibeVoice (Microsoft, code MIT) in plain torch. Equal to upstream's repository bit for bit
on tiny random models: the diffusion head and its DPM-Solver sampling with classifier-free guidance
(diffusion_head.py, blocks/dpm_solver.py), the voice presets (voices.py), the Realtime model's two Qwen2.5 LMs,
connector and EOS classifier (model.py), the streaming σ-VAE decoder (acoustic.py, blocks/streaming_conv.py),
the windowed streaming generation (generate.py), the published-folder loader (loader.py), the text tokenizer
(text.py) and the engine on the runtime (phases.py: request-based estimates, equal resident and streamed).

The voice presets are not on the model's hub repository: Microsoft publishes them, as prefilled caches rather
than audio (a safeguard against cloning), in the VibeVoice GitHub repository's demo/voices/streaming_model/.
They download from there at a pinned commit, each checked against its git blob id and, for the 13 whose bytes
could be read here, a pinned sha256.

VibeVoice 1.5B (and Large, in the same layout): the long-form multi-speaker model (longform.py, script.py,
longform_generate.py, longform_phases.py), equal to transformers' own `VibeVoiceForConditionalGeneration` bit for
bit on tiny random models; one loader node serves both, the folder's config.json model_type picking the model.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..formats.download import Download
from ..pack.registry import EngineSpec, LoadRequest

if TYPE_CHECKING:
    from ...runtime import ModelManager
    from .longform_phases import VibeVoiceLongformEngine
    from .phases import VibeVoiceEngine

FILES = ("config.json", "model.safetensors")
VOICES_COMMIT = "04d19f8352a43ec0ea566ffa009c2e39d0c203a7"   # the last change to demo/voices/streaming_model/
VOICES = "demo/voices/streaming_model"
VOICE_SHA256 = {
    "en-Davis_man": "67561d63bfa2153616e4c02fd967007c182593fc53738a6ad94bf5f84e8832ac",
    "en-Emma_woman": "75b15c481e0d848991f1789620aa9929c583ec2c5f701f8152362cf74498bbf8",
    "en-Frank_man": "acaa8f1a4f46a79f8f5660cfb7a3af06ef473389319df7debc07376fdc840e47",
    "en-Grace_woman": "5f0ef02a3f3cace04cf721608b65273879466bb15fe4044e46ec6842190f6bb1",
    "en-Mike_man": "afb64b580fbc6fab09af04572bbbd2b3906ff8ed35a28731a90b8681e47bdc89",
    "in-Samuel_man": "b6ec5e8cde4006aa3f26fde0422124f3296f83f5738b5b4506268855a305cb06",
    "it-Spk0_woman": "1a838184c0304802c696bac887d15a8143539fbb0b5371fe53de66059a010f3d",
    "it-Spk1_man": "349ce0d28e93ea8b1df55800527f3a8ba8a55bb9e88990841db1bc9ee424519a",
    "kr-Spk0_woman": "c6d15b8d66f8c271655d000b5923cb33a9b564bf84484a82b10431dc1a2fafef",
    "nl-Spk0_man": "70e9221ed11737e2b32af3ccfebb673bd1122f9f9ea8d357efd91e9f3b8e8f72",
    "pl-Spk0_man": "6c06a9e251ab08ade328dfe16e01eb6f5ddc4ba9c66695a73e3aae8a919396bd",
    "pt-Spk0_woman": "40f3a231e011f9c5e1eb4e852599751ce749439edceb36d0fa2bca952387f5a9",
    "pt-Spk1_man": "06a0052170a4ae5217931eb84318a6f86279439b536ad9780c724526d84148e5",
}


# microsoft/VibeVoice-1.5B: three shards and their index (the hub's sha256 checks each file)
LONGFORM_FILES = ("config.json", "model.safetensors.index.json", "model-*-of-*.safetensors")


def _longform(folder: Path) -> bool:
    """A long-form folder (1.5B / Large): config.json says model_type "vibevoice"."""
    import json
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get("model_type") == "vibevoice"
    except (OSError, ValueError, AttributeError):
        return False


def missing_files(folder: Path) -> list[str]:
    if _longform(folder):
        weights = (Path(folder) / "model.safetensors").is_file() or \
            (Path(folder) / "model.safetensors.index.json").is_file()
        return [f for f in ("tokenizer.json",) if not (Path(folder) / f).is_file()] + \
            ([] if weights else ["model.safetensors (or model.safetensors.index.json and its shards)"])
    missing = [f for f in (*FILES, "tokenizer.json") if not (Path(folder) / f).is_file()]
    if not any((Path(folder) / "voices").glob("*.pt")):
        missing.append("voices/*.pt")
    return missing


def build(request: LoadRequest, manager: ModelManager) -> VibeVoiceEngine | VibeVoiceLongformEngine:
    from .loader import load_realtime, model_type
    folder = Path(request.folder)
    if model_type(folder) == "vibevoice":
        from .loader import load_longform
        from .longform_phases import VibeVoiceLongformEngine
        from .script import ScriptTokenizer
        return VibeVoiceLongformEngine(load_longform(folder, dtype=request.dtype),
                                       ScriptTokenizer(folder / "tokenizer.json"), manager, device=request.device,
                                       name=f"VibeVoice ({request.model})")
    from .phases import VibeVoiceEngine
    from .text import TextTokenizer
    from .voices import load_voice_preset, voice_names
    voices = {name: load_voice_preset(folder / "voices" / f"{name}.pt") for name in voice_names(folder / "voices")}
    return VibeVoiceEngine(load_realtime(folder, dtype=request.dtype), voices, TextTokenizer(folder / "tokenizer.json"),
                           manager, device=request.device)


ENGINE = EngineSpec(
    engine_id="vibevoice", display_name="VibeVoice", loader_node="MizuotoLoadVibeVoice", build=build,
    missing_files=missing_files, languages=("auto", "en", "zh"),
    models={"VibeVoice-Realtime-0.5B": (Download("microsoft/VibeVoice-Realtime-0.5B", FILES),
                                        Download("Qwen/Qwen2.5-0.5B", ("tokenizer.json",)),
                                        Download("microsoft/VibeVoice", (f"{VOICES}/*.pt",), strip=VOICES, into="voices",
                                                 hub="github", revision=VOICES_COMMIT,
                                                 sha256={f"{VOICES}/{n}.pt": h for n, h in VOICE_SHA256.items()})),
            "VibeVoice-1.5B": (Download("microsoft/VibeVoice-1.5B", LONGFORM_FILES),
                               Download("Qwen/Qwen2.5-1.5B", ("tokenizer.json",)))},
    precisions=("fp32", "bf16"),
    description="VibeVoice (Microsoft), 24 kHz. Realtime-0.5B: streaming English TTS from voice presets (voices/*.pt, "
                "from the VibeVoice repository's demo/voices/streaming_model/). 1.5B: long-form conversation in one "
                "pass, up to four speakers cloned from reference AUDIO, the script as 'Speaker 1: ...' lines (never "
                "cut into sentences). Options steps and cfg_scale (and max_new_tokens for 1.5B).",
    license="MIT (with Microsoft's responsible-use terms: no voice impersonation without consent)")

"""The engine-independent nodes: Speak (text -> AUDIO through the pipeline) and Runtime settings."""
from __future__ import annotations

import json
import sys
from typing import Any

from ...runtime import SettingsError, VramPolicy
from ...runtime.policy import json_object, parse_setting, setting_choices
from .live import LiveAudio
from .pipeline import MAX_SEED, LoadedModel, SpeakRequest, speak
from .registry import languages
from .voice import Voice

CATEGORY = "audio/tts"


def progress_bar(unique_id, total_hint: int = 1):
    """A (done, total) callback driving ComfyUI's progress bar inside ComfyUI, else None."""
    utils = sys.modules.get("comfy.utils")
    if utils is None:
        return None
    bar = utils.ProgressBar(total_hint, node_id=unique_id)
    return lambda done, total: bar.update_absolute(done, total)


MAX_OPTIONS_CHARS = 20_000
AUDIO_OPTION = "option_audio"      # an option whose value is this string takes the node's option_audio input


def parse_options(text: str, audio: dict | None = None, what: str = "options") -> dict[str, Any]:
    """A node's `options` text: a JSON object of engine options such as {"temperature": 0.7}; an option
    set to "option_audio" takes the connected audio (IndexTTS 2's emotion_reference). The pipeline checks
    every key and value against the model's declaration before any model runs."""
    if not isinstance(text, str):
        raise ValueError(f"{what}: expected text holding a JSON object, got {type(text).__name__}")
    if not text.strip():
        if audio is not None:
            raise ValueError(f'{AUDIO_OPTION}: connected, but no option names it; e.g. {{"emotion_reference": '
                             f'"{AUDIO_OPTION}"}} in {what}')
        return {}
    if len(text) > MAX_OPTIONS_CHARS:
        raise ValueError(f"{what}: {len(text)} characters; expected at most {MAX_OPTIONS_CHARS}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: not JSON ({e.msg} at line {e.lineno}, column {e.colno}); expected an object "
                         'such as {"temperature": 0.7}') from None
    if not isinstance(value, dict):
        raise ValueError(f'{what}: expected a JSON object such as {{"temperature": 0.7}}, got {type(value).__name__}')
    named = [k for k, v in value.items() if v == AUDIO_OPTION]
    if named and audio is None:
        raise ValueError(f"{what}: {named[0]} names {AUDIO_OPTION}, which is not connected")
    if audio is not None and not named:
        raise ValueError(f'{AUDIO_OPTION}: connected, but no option names it; e.g. {{"emotion_reference": '
                         f'"{AUDIO_OPTION}"}} in {what}')
    return {k: audio if v == AUDIO_OPTION else v for k, v in value.items()}


OPTION_INPUTS = {
    "options": ("STRING", {"multiline": True, "default": "",
                           "tooltip": 'engine options as JSON, e.g. {"temperature": 0.7} (the model\'s own names)'}),
    AUDIO_OPTION: ("AUDIO", {"tooltip": 'audio for an option set to "option_audio" (e.g. emotion_reference)'}),
}


class MizuotoSpeak:
    """Text to speech with any Mizuoto model; long text is read sentence by sentence."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("AUDIO",)
    RETURN_NAMES = ("audio",)
    FUNCTION = "speak"
    DESCRIPTION = "Speech from text. Long text is split at sentence boundaries; chunk i uses seed + i."

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "model": ("MIZUOTO_TTS",),
                "text": ("STRING", {"multiline": True, "default": "Hello from Mizuoto."}),
                "seed": ("INT", {"default": 0, "min": 0, "max": MAX_SEED}),
                "speed": ("FLOAT", {"default": 1.0, "min": 0.25, "max": 4.0, "step": 0.05}),
                "language": (languages(), {"default": "auto"}),
            },
            "optional": {
                "voice": ("STRING", {"default": "", "tooltip": "a speaker name of the model (empty: its default)"}),
                "reference_audio": ("AUDIO", {"tooltip": "voice to clone, where the model supports it"}),
                "reference_text": ("STRING", {"multiline": True, "default": "",
                                              "tooltip": "what the reference audio says"}),
                "instruction": ("STRING", {"multiline": True, "default": "",
                                           "tooltip": "how to speak (voice design, style), where supported"}),
                "settings": ("MIZUOTO_SETTINGS",),
                "named_voice": ("MIZUOTO_VOICE", {"tooltip": "a Voice node's voice: its reference, transcript, "
                                                             "speaker or instruction (instead of the inputs above)"}),
                **OPTION_INPUTS,
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    def speak(self, model, text: str, seed: int, speed: float, language: str, voice: str = "",
              reference_audio: dict | None = None, reference_text: str = "", instruction: str = "",
              settings: dict | None = None, named_voice: Voice | None = None, options: str = "",
              option_audio: dict | None = None, unique_id=None) -> tuple[dict[str, Any]]:
        if not isinstance(model, LoadedModel):
            raise ValueError(f"model: expected a Mizuoto model from a Mizuoto loader, got {type(model).__name__}")
        engine_options = parse_options(options, option_audio)
        if named_voice is not None:
            if not isinstance(named_voice, Voice):
                raise ValueError(f"named_voice: expected a voice from a Voice node, got {type(named_voice).__name__}")
            given = [n for n, v in (("voice", voice), ("reference_audio", reference_audio),
                                    ("reference_text", reference_text), ("instruction", instruction)) if v]
            if given:
                raise ValueError(f"{given[0]}: given together with named_voice; expected one or the other")
            request = named_voice.request(text, seed=seed, speed=speed, language=None if language == "auto" else
                                          language, settings=settings, options=engine_options)
        else:
            request = SpeakRequest(text=text, seed=seed, speed=speed, language=language, voice=voice or None,
                                   reference=reference_audio, reference_text=reference_text or None,
                                   instruction=instruction or None, settings=settings, options=engine_options)
        live = LiveAudio.for_node(unique_id)        # the browser plays each segment as it is made
        wav, meta = speak(model, request, progress=progress_bar(unique_id), on_audio=live)
        if live is not None:
            live.done()
        return ({"waveform": wav.reshape(1, 1, -1), "sample_rate": meta["sample_rate"]},)


SETTING_INPUTS = {
    "vram_mode": (["default", *setting_choices("compute.vram_mode")], "compute.vram_mode"),
    "vram_reserve_mb": (("INT", {"default": -1, "min": -1, "max": 1 << 20}), "compute.vram_reserve_mb"),
    "vram_limit_mb": (("INT", {"default": -1, "min": -1, "max": 1 << 22}), "compute.vram_limit_mb"),
    "async_offload": (("INT", {"default": -1, "min": -1, "max": 8}), "compute.async_offload"),
    "host_copies": (["default", *setting_choices("compute.host_copies")], "compute.host_copies"),
    "oom_retry": (["default", "on", "off"], "compute.oom_retry"),
    "oom_fallback": (["default", "on", "off"], "compute.oom_fallback"),
    "kv_cache": (["default", *setting_choices("compute.kv_cache")], "compute.kv_cache"),
}


class MizuotoRuntimeSettings:
    """Per-graph compute.* overrides for Speak (\"default\" / -1 keeps the pack's setting)."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_SETTINGS",)
    RETURN_NAMES = ("settings",)
    FUNCTION = "settings"

    @classmethod
    def INPUT_TYPES(cls):
        required = {}
        for name, (kind, _) in SETTING_INPUTS.items():
            required[name] = (kind, {"default": "default"}) if isinstance(kind, list) else kind
        return {"required": required,
                "optional": {"more": ("STRING", {"multiline": True, "default": "",
                                                 "tooltip": "other settings as JSON, e.g. {\"compute.gpu_jobs\": 2}"})}}

    def settings(self, more: str = "", **values) -> tuple[dict[str, Any]]:
        out: dict[str, Any] = {}
        for name, value in values.items():
            if name not in SETTING_INPUTS:
                raise ValueError(f"{name}: not a Mizuoto runtime setting; expected one of {sorted(SETTING_INPUTS)}")
            key = SETTING_INPUTS[name][1]
            if value in ("default", -1):
                continue
            out[key] = parse_setting(key, str(value), f"input {name}")
        if more.strip():
            try:
                out.update(json_object(more, "more"))
            except SettingsError as e:
                raise ValueError(f"more: expected a JSON object of settings, e.g. {{\"compute.gpu_jobs\": 2}} ({e})") from None
        try:
            VramPolicy().for_request(out)  # every key and value validated here, not mid-run
        except SettingsError as e:
            raise ValueError(str(e)) from None
        return (out,)

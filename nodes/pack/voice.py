"""Voices as things you name: reference audio and its transcript, a model's built-in speaker, or an
instruction, under a name a script can switch to (ComfyUI type MIZUOTO_VOICE); the Voice node makes one
and can keep it in, or take it from, the voice library (`models/TTS/voices/<name>/`).

    voice = Voice("Alice", audio=wav, sample_rate=24000, transcript="What the reference says.")
    req = voice.request("Hello Bob.", seed=3)            # a SpeakRequest with Alice's reference

What an engine derives from a voice is kept by the pack's prompt cache (caches.py) under the voice's
samples and settings, so a script of 200 lines encodes each voice once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ..formats import voice_library
from .audio import check_level, check_rate, check_samples, to_channels, to_mono
from .pipeline import LoadedModel, SpeakRequest
from .registry import languages

CATEGORY = "audio/tts"
NO_LIBRARY_VOICE = "(none)"
MIN_SECONDS = 0.5


@dataclass(frozen=True, eq=False)
class Voice:
    """A named voice. `model`: the model that speaks it (else the script's); `language`: its default."""

    name: str
    audio: Tensor | None = None          # [C, T] float32 within [-1, 1]
    sample_rate: int | None = None
    transcript: str = ""
    speaker: str | None = None           # a built-in voice of the model
    instruction: str | None = None
    language: str | None = None
    model: LoadedModel | None = None

    def request(self, text: str, *, seed: int = 0, speed: float = 1.0, language: str | None = None,
                settings: dict[str, Any] | None = None, options: dict[str, Any] | None = None) -> SpeakRequest:
        """`text` in this voice: its reference, transcript, speaker and instruction; `language` None: the
        voice's own, else "auto"."""
        reference = None if self.audio is None else {"waveform": self.audio[None], "sample_rate": self.sample_rate}
        return SpeakRequest(text=text, seed=seed, speed=speed, language=language or self.language or "auto",
                            voice=self.speaker or None, reference=reference,
                            reference_text=(self.transcript or None) if reference is not None else None,
                            instruction=self.instruction or None, settings=settings, options=dict(options or {}))

    def files(self) -> voice_library.VoiceFiles:
        meta = {"speaker": self.speaker, "instruction": self.instruction, "language": self.language}
        return voice_library.VoiceFiles(self.name, self.audio, self.sample_rate, self.transcript, meta)


def voice_audio(audio: Any, what: str = "audio") -> tuple[Tensor, int]:
    """ComfyUI AUDIO -> (channels [C, T] float32 within full scale, rate): finite, audible, at least
    MIN_SECONDS (each engine checks its own range when it reads the voice)."""
    if not isinstance(audio, dict) or "waveform" not in audio or "sample_rate" not in audio:
        raise ValueError(f"{what}: expected ComfyUI AUDIO {{'waveform': [B, C, T], 'sample_rate': int}}, got "
                         f"{type(audio).__name__}")
    if not isinstance(audio["waveform"], Tensor):
        raise ValueError(f"{what}: expected a waveform tensor, got {type(audio['waveform']).__name__}")
    rate = check_rate(audio["sample_rate"], f"{what} sample_rate")
    channels = to_channels(audio["waveform"].detach().cpu(), what)
    mono = check_samples(to_mono(channels, what), rate, (MIN_SECONDS, voice_library.MAX_SECONDS), what)
    if check_level(mono, what) is not mono:               # past full scale: scaled as the pipeline would
        channels = (channels.double() / float(mono.abs().max())).float()
    if bool(channels.abs().max() > 1):                    # a channel louder than the mix: keep it within
        channels = (channels.double() / float(channels.abs().max())).float()
    return channels.contiguous(), rate


def from_library(name: str) -> Voice:
    stored = voice_library.load(name)
    audio = stored.audio
    if audio is not None:
        audio, _ = voice_audio({"waveform": audio, "sample_rate": stored.sample_rate}, f"voice {name!r} audio")
    meta = stored.meta
    return Voice(stored.name, audio, stored.sample_rate, stored.transcript, meta.get("speaker") or None,
                 meta.get("instruction") or None, meta.get("language") or None)


class MizuotoVoice:
    """A named voice for scripts: reference audio and transcript, a built-in speaker, an instruction, or
    a voice from the library; can save it to the library under its name."""

    CATEGORY = CATEGORY
    RETURN_TYPES = ("MIZUOTO_VOICE",)
    RETURN_NAMES = ("voice",)
    FUNCTION = "voice"
    DESCRIPTION = ("A voice under a name that scripts switch to with [Name]. Saved voices live in "
                   "models/TTS/voices/<name>/ (reference.flac, transcript.txt, voice.json).")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "name": ("STRING", {"default": "Narrator", "tooltip": "what scripts call it: [Name]"}),
                "library_voice": ([NO_LIBRARY_VOICE, *voice_library.list_voices()],
                                  {"tooltip": "take audio, transcript and settings from a saved voice"}),
                "save_to_library": ("BOOLEAN", {"default": False,
                                                "tooltip": "keep this voice as models/TTS/voices/<name>/"}),
            },
            "optional": {
                "audio": ("AUDIO", {"tooltip": "reference audio to clone"}),
                "transcript": ("STRING", {"multiline": True, "default": "", "tooltip": "what the audio says"}),
                "speaker": ("STRING", {"default": "", "tooltip": "a built-in voice of the model"}),
                "instruction": ("STRING", {"multiline": True, "default": "",
                                           "tooltip": "how the voice sounds or speaks, where the model takes one"}),
                "model": ("MIZUOTO_TTS", {"tooltip": "the model that speaks this voice (else the script's)"}),
                "language": (languages(), {"default": "auto",
                                           "tooltip": "the language of this voice's lines ([lang:..] overrides)"}),
            },
        }

    @classmethod
    def IS_CHANGED(cls, library_voice: str = NO_LIBRARY_VOICE, **_: Any) -> str:
        # a saved voice's files edited on disk make the node run again (ComfyUI compares this value)
        return "" if library_voice == NO_LIBRARY_VOICE else voice_library.fingerprint(library_voice)

    def voice(self, name: str, library_voice: str, save_to_library: bool, audio: dict | None = None,
              transcript: str = "", speaker: str = "", instruction: str = "",
              model: LoadedModel | None = None, language: str = "auto") -> tuple[Voice]:
        name = voice_library.check_name(name)
        choices = languages()
        if language not in choices:
            raise ValueError(f"language: expected one of {', '.join(choices)}, got {language!r}")
        if model is not None and not isinstance(model, LoadedModel):
            raise ValueError(f"model: expected a Mizuoto model from a Mizuoto loader, got {type(model).__name__}")
        if not isinstance(save_to_library, bool):
            raise ValueError(f"save_to_library: expected true or false, got {save_to_library!r}")
        for what, value in (("transcript", transcript), ("speaker", speaker), ("instruction", instruction)):
            if not isinstance(value, str):
                raise ValueError(f"{what}: expected text, got {type(value).__name__}")
        if library_voice != NO_LIBRARY_VOICE:
            if audio is not None:
                raise ValueError("audio: connected together with library_voice; expected one of them")
            stored = from_library(library_voice)
            voice = Voice(name, stored.audio, stored.sample_rate, transcript.strip() or stored.transcript,
                          speaker.strip() or stored.speaker, instruction.strip() or stored.instruction,
                          stored.language if language == "auto" else language, model)
        else:
            wav, rate = voice_audio(audio) if audio is not None else (None, None)
            if wav is None and not (speaker.strip() or instruction.strip()):
                raise ValueError("audio: not connected, and no speaker or instruction given; expected reference "
                                 "audio to clone, a built-in speaker name, an instruction or a library voice")
            if transcript.strip() and wav is None:
                raise ValueError("transcript: given without audio; expected the words of the connected audio")
            voice = Voice(name, wav, rate, transcript.strip(), speaker.strip() or None, instruction.strip() or None,
                          None if language == "auto" else language, model)
        if len(voice.transcript) > voice_library.MAX_TRANSCRIPT_CHARS:
            raise ValueError(f"transcript: {len(voice.transcript)} characters; expected at most "
                             f"{voice_library.MAX_TRANSCRIPT_CHARS}")
        if save_to_library:
            voice_library.save(voice.files())
        return (voice,)


def cast(voices: list[Voice | None], narrator: Voice | None = None) -> dict[str | None, Voice]:
    """Name -> voice for a script (None: the narrator); two voices of one name are an error."""
    table: dict[str | None, Voice] = {}
    seen: dict[str, str] = {}
    for i, voice in enumerate(voices, 1):
        if voice is None:
            continue
        if not isinstance(voice, Voice):
            raise ValueError(f"voice_{i}: expected a voice from a Voice node, got {type(voice).__name__}")
        key = voice.name.lower()
        if key in seen:
            raise ValueError(f"voice_{i}: the name {voice.name!r} is also {seen[key]}'s; give each voice its own name")
        seen[key] = f"voice_{i}"
        table[voice.name] = voice
    if narrator is not None:
        if not isinstance(narrator, Voice):
            raise ValueError(f"narrator: expected a voice from a Voice node, got {type(narrator).__name__}")
        table[None] = narrator
    return table


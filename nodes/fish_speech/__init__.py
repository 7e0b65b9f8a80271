"""Fish Speech / OpenAudio S1 (fishaudio/openaudio-s1-mini) as a native torch engine; see phases.py."""

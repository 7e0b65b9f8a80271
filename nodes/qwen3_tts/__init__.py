"""Qwen3-TTS 12 Hz (Qwen/Qwen3-TTS-12Hz-*, Apache-2.0) as a native torch engine: talker + code predictor,
speaker encoder and the 12 Hz speech tokenizer, loading the upstream files unchanged; see phases.py."""

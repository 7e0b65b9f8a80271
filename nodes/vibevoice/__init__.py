"""VibeVoice (Microsoft, code MIT) in plain torch. Under construction. Equal to upstream's repository bit for bit
on tiny random models: the diffusion head and its DPM-Solver sampling with classifier-free guidance
(diffusion_head.py, blocks/dpm_solver.py), the voice presets (voices.py), the Realtime model's two Qwen2.5 LMs,
connector and EOS classifier (model.py), the streaming σ-VAE decoder (acoustic.py, blocks/streaming_conv.py),
the windowed streaming generation (generate.py) and the published-folder loader (loader.py). The engine is
declared (ENGINE) once the text tokenizer, the phases with request-based estimates and the Speak-pipeline
parity are in, so the registry does not list it yet."""

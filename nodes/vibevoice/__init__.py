"""VibeVoice (Microsoft, code MIT) in plain torch. Under construction: the diffusion head and its
DPM-Solver sampling with classifier-free guidance (diffusion_head.py, blocks/dpm_solver.py) match upstream's
repository bit for bit; the engine is declared (ENGINE) once the Qwen2.5 LM, the acoustic decoder and the
voice presets are in, so the registry does not list it yet."""

"""VibeVoice (Microsoft, code MIT) in plain torch. Under construction. Equal to upstream's repository bit for bit
on tiny random models: the diffusion head and its DPM-Solver sampling with classifier-free guidance
(diffusion_head.py, blocks/dpm_solver.py), the voice presets (voices.py), the Realtime model's two Qwen2.5 LMs,
connector and EOS classifier (model.py), the streaming σ-VAE decoder (acoustic.py, blocks/streaming_conv.py),
the windowed streaming generation (generate.py), the published-folder loader (loader.py), the text tokenizer
(text.py) and the engine on the runtime (phases.py: request-based estimates, equal resident and streamed). Its
declaration is spec.py's SPEC, exported here as ENGINE once the voice presets have a hub source for the
download and the example workflow exists, so the registry does not list it yet."""

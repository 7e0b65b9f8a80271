"""Record VibeVoice golden fixtures from upstream's repository code (run in the reference venv, never in the
project's): a tiny random diffusion head in upstream's parameter names, its output for given inputs, and the
latents upstream's `sample_speech_tokens` (DPM-Solver++ with classifier-free guidance) samples from a seeded
noise, for several step counts and guidance scales.

    VIBEVOICE_SRC=/path/to/VibeVoice-checkout $VIBEVOICE_VENV/bin/python tests/vibevoice/make_fixtures.py [OUT]

OUT defaults to tests/vibevoice/fixtures/head.safetensors. The live test runs this into a temporary folder
and compares with torch.equal; the committed file is compared at a float bound (see test_diffusion.py).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.environ["VIBEVOICE_SRC"])
from vibevoice.modular.configuration_vibevoice import VibeVoiceDiffusionHeadConfig  # noqa: E402
from vibevoice.modular.modeling_vibevoice_streaming_inference import (  # noqa: E402
    VibeVoiceStreamingForConditionalGenerationInference as Inference)
from vibevoice.modular.modular_vibevoice_diffusion_head import VibeVoiceDiffusionHead  # noqa: E402
from vibevoice.schedule.dpm_solver import DPMSolverMultistepScheduler  # noqa: E402

HEAD = dict(hidden_size=32, head_layers=2, head_ffn_ratio=3.0, rms_norm_eps=1e-5, latent_size=8,
            prediction_type="v_prediction", ddpm_num_steps=1000, ddpm_num_inference_steps=20,
            ddpm_beta_schedule="cosine")
FRAMES = 3
RUNS = ((5, 1.5), (10, 3.0), (20, 1.3), (1, 1.5), (2, 2.0))   # (steps, cfg_scale)


def main(out: Path) -> None:
    torch.manual_seed(0)
    cfg = VibeVoiceDiffusionHeadConfig(**HEAD)
    head = VibeVoiceDiffusionHead(cfg).eval()
    with torch.no_grad():   # upstream zero-initialises the adaLN and output weights: randomise all of them
        for p in head.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    tensors = {f"weight.{k}": v.contiguous() for k, v in head.state_dict().items()}
    cond = torch.randn(FRAMES, HEAD["hidden_size"])
    neg = torch.randn(FRAMES, HEAD["hidden_size"])
    x = torch.randn(2 * FRAMES, HEAD["latent_size"])
    t = torch.tensor([999.0, 500.0, 37.0, 0.0, 250.0, 750.0])
    with torch.no_grad():
        tensors.update(condition=cond, neg_condition=neg, head_x=x, head_t=t,
                       head_out=head(x, t, torch.cat([cond, neg])))
    sched = DPMSolverMultistepScheduler(num_train_timesteps=HEAD["ddpm_num_steps"],
                                        beta_schedule=HEAD["ddpm_beta_schedule"],
                                        prediction_type=HEAD["prediction_type"])
    for steps, scale in RUNS:
        torch.manual_seed(steps)
        tensors[f"noise.{steps}"] = torch.randn(2 * FRAMES, HEAD["latent_size"])
        torch.manual_seed(steps)     # sample_speech_tokens draws the same noise with torch.randn
        me = SimpleNamespace(model=SimpleNamespace(noise_scheduler=sched, prediction_head=head),
                             ddpm_inference_steps=steps, config=SimpleNamespace(acoustic_vae_dim=HEAD["latent_size"]))
        tensors[f"latents.{steps}"] = Inference.sample_speech_tokens(me, cond, neg, cfg_scale=scale)
        sched.set_timesteps(steps)
        tensors[f"timesteps.{steps}"] = sched.timesteps.clone()
        tensors[f"sigmas.{steps}"] = sched.sigmas.clone()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata={"head": json.dumps(HEAD), "runs": json.dumps(RUNS),
                                           "torch": torch.__version__})


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "fixtures" / "head.safetensors")

"""VibeVoice's diffusion head and DPM-Solver++ sampling with CFG against upstream's repository code.

Golden file (fixtures/head.safetensors, recorded by make_fixtures.py): floats within 1e-5 of each tensor's
largest magnitude (latents reach ~60, where one float32 ulp is 4e-6; an element near zero carries the
error of the large terms it was computed from, so an element-wise relative bound is the wrong shape:
scalar kernels measured 1.5e-5 at a scale of 63, 2.4e-7 of it). Why that bound holds on any x86 CPU: everything is float32; a CPU's matmul kernel (AVX2, AVX-512,
thread count) may sum a row in a different order, an error of about n * 2**-24 * |terms| for the at most
256-term sums here (~1.5e-5 relative in the worst case, far less in practice); the ten DPM-Solver steps are
contractions toward the x0 prediction and do not amplify it. Timesteps are integers and compared exactly.
The live test (reference venv present) reruns make_fixtures.py and demands torch.equal.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from mizuoto.nodes.blocks.dpm_solver import DPMSolverMultistep
from mizuoto.nodes.vibevoice.diffusion_head import DiffusionHead, HeadConfig, sample_latents, scheduler_for

HERE = Path(__file__).parent
GOLDEN = HERE / "fixtures" / "head.safetensors"
VENV = os.environ.get("VIBEVOICE_VENV", "")
SRC = os.environ.get("VIBEVOICE_SRC", "")
LIVE = bool(VENV and SRC and Path(VENV, "bin", "python").is_file() and Path(SRC, "vibevoice").is_dir())


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The file's tensors, each copied into a fresh allocation: a CPU matmul kernel may split its sums
    differently for a buffer at an odd offset in the file, which alone changes the last bit."""
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).clone() for k in f.keys()}, f.metadata()


def ours(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> dict[str, torch.Tensor]:
    cfg = HeadConfig(**json.loads(meta["head"]))
    head = DiffusionHead(cfg).eval()
    head.load_state_dict({k[len("weight."):]: v for k, v in tensors.items() if k.startswith("weight.")})
    sched = scheduler_for(cfg)
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        out["head_out"] = head(tensors["head_x"], tensors["head_t"],
                               torch.cat([tensors["condition"], tensors["neg_condition"]]))
        for steps, scale in json.loads(meta["runs"]):
            run = sched.schedule(steps)
            out[f"timesteps.{steps}"], out[f"sigmas.{steps}"] = run.timesteps, run.sigmas
            out[f"latents.{steps}"] = sample_latents(head, sched, tensors["condition"], tensors["neg_condition"],
                                                     tensors[f"noise.{steps}"], steps, scale)
    return out


def test_golden_head_and_latents() -> None:
    tensors, meta = read(GOLDEN)
    mine = ours(tensors, meta)
    assert len(mine) == 1 + 3 * len(json.loads(meta["runs"]))
    for k, v in mine.items():
        if k.startswith("timesteps."):
            assert torch.equal(v, tensors[k]), k
        else:
            ref = tensors[k]
            bound = 1e-5 * max(1.0, ref.abs().max().item())
            assert v.shape == ref.shape and (v - ref).abs().max().item() <= bound, (k, (v - ref).abs().max().item())


@pytest.mark.skipif(not LIVE, reason="live parity needs VIBEVOICE_VENV (reference venv) and VIBEVOICE_SRC "
                                     "(an upstream checkout)")
def test_live_equal_to_upstream(tmp_path: Path) -> None:
    out = tmp_path / "head.safetensors"
    subprocess.run([str(Path(VENV, "bin", "python")), str(HERE / "make_fixtures.py"), str(out)], check=True,
                   env={**os.environ, "VIBEVOICE_SRC": SRC}, timeout=300)
    tensors, meta = read(out)
    for k, v in ours(tensors, meta).items():
        assert torch.equal(v, tensors[k]), f"{k}: {(v - tensors[k]).abs().max().item():.3g}"


def test_schedule_matches_the_published_settings() -> None:
    run = DPMSolverMultistep(1000, "cosine", "v_prediction").schedule(5)
    assert run.timesteps.tolist() == [999, 799, 599, 400, 200]
    assert run.sigmas.dtype == torch.float32 and run.sigmas[-1].item() == 0.0 and len(run.sigmas) == 6


def test_runs_are_independent() -> None:
    """The solver's history lives in the run: two interleaved runs give what each gives alone."""
    torch.manual_seed(0)
    sched = DPMSolverMultistep(1000, "cosine", "v_prediction")
    x, outs = torch.randn(2, 4), [torch.randn(2, 4) for _ in range(3)]
    alone = sched.schedule(3)
    y = x
    for o in outs:
        y = alone.step(o, y)
    a, b = sched.schedule(3), sched.schedule(3)
    ya, yb = x, x
    for o in outs:
        ya, yb = a.step(o, ya), b.step(o, yb)
    assert torch.equal(ya, y) and torch.equal(yb, y)
    with pytest.raises(RuntimeError, match="already finished its 3 steps"):
        a.step(outs[0], ya)


@pytest.mark.parametrize("kwargs,match", [
    (dict(beta_schedule="karras"), "beta_schedule 'karras'"),
    (dict(prediction_type="flow"), "prediction_type 'flow'"),
    (dict(solver_order=3), "solver_order 3"),
    (dict(num_train_timesteps=1), "num_train_timesteps"),
])
def test_unsupported_settings_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DPMSolverMultistep(**kwargs)


@pytest.mark.parametrize("steps", [0, 1001, 2.5, True])
def test_bad_step_counts_are_refused(steps: object) -> None:
    with pytest.raises(ValueError, match="diffusion steps"):
        DPMSolverMultistep(1000, "cosine").schedule(steps)  # type: ignore[arg-type]


def test_sampler_shapes_are_checked() -> None:
    cfg = HeadConfig(32, 1, 3.0, 1e-5, 8, "v_prediction", 1000, 20, "cosine")
    head, sched = DiffusionHead(cfg), scheduler_for(cfg)
    c = torch.zeros(3, 32)
    with pytest.raises(ValueError, match="noise"):
        sample_latents(head, sched, c, c, torch.zeros(3, 8), 5, 1.5)
    with pytest.raises(ValueError, match="neg_condition"):
        sample_latents(head, sched, c, torch.zeros(2, 32), torch.zeros(6, 8), 5, 1.5)

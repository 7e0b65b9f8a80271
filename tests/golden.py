"""Comparing our engines with golden fixtures recorded from upstream on another machine.

Bit-equality is the promise *within* one machine (streamed vs resident, retried vs first try: the same
kernels in the same process). Across machines fp32 results move by reassociation: another CPU, ISA path,
MKL code path, oneDNN or thread count sums in another order (measured: 4e-7 to 9e-4 between an Intel and
an AMD machine on these fixtures). So a fixture recorded elsewhere is compared this way:

- integers (token ids, codes, phonemes, segmentations) exactly; where one comes out of a float near a
  decision boundary (sampling, argmin, a stop check) it is taken from the float64 path, where no
  machine's rounding reaches the boundary;
- floats against upstream's float64 run, ours in float64, at ``F64_BOUND`` of the reference's scale: the
  float64 rounding noise of these tiny models is ~1e-15 relative (amplified at most a few thousand times
  by the deepest chain, still < 1e-11), while any real divergence (a wrong op, constant or missing step)
  is >= 1e-4 in fp32 and so far above the bound in float64;
- the fp32 run against upstream's fp32 output at a per-output bound stated in the test, which says why.

Each golden test carries ``@pytest.mark.golden``; tests/test_golden_travel.py reruns them all under the
kernel perturbations another machine would bring.
"""
from __future__ import annotations

import torch

F64_BOUND = 1e-9


def relative_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """max |ours - ref| / max |ref| (the reference's scale; 1 for an all-zero reference)."""
    assert ours.shape == ref.shape, f"shape {tuple(ours.shape)} != recorded {tuple(ref.shape)}"
    ours, ref = ours.detach().double(), ref.detach().double()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    err = (ours - ref).abs().max().item() if ref.numel() else 0.0
    return err / (scale or 1.0)


def assert_close(ours: torch.Tensor, ref: torch.Tensor, bound: float, what: str = "output") -> None:
    """``ours`` within ``bound`` of ``ref`` relative to the reference's scale, same dtype as recorded."""
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != recorded {ref.dtype}"
    assert torch.isfinite(ours).all(), f"{what}: non-finite values"
    err = relative_error(ours, ref)
    assert err <= bound, f"{what}: max |ours - upstream| / max |upstream| = {err:.3g} > {bound:g}"


def assert_f64(ours: torch.Tensor, ref: torch.Tensor, what: str = "output") -> None:
    """Our float64 run against upstream's float64 run."""
    assert ref.dtype == torch.float64, f"{what}: the reference is {ref.dtype}, not a float64 recording"
    assert_close(ours, ref, F64_BOUND, what)

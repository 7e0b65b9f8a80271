"""Streamed, half-resident and resident runs on the strict simulated device equal a plain CPU run."""
import pytest
import torch

from runtime_helpers import run_streamed
from toy_models import TinyDecoder, TinyDiT, TinyVits, TinyVocoder, generate, sample

RESIDENCY = ["none", "half", "full"]


def _decoder():
    torch.manual_seed(0)
    return TinyDecoder().eval()


def _dit():
    torch.manual_seed(1)
    return TinyDiT().eval()


def _vocoder(legacy):
    torch.manual_seed(2)
    return TinyVocoder(legacy=legacy).eval()


PROMPT = torch.tensor([[1, 5, 9, 3]])
NOISE = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(3))
MEL = torch.randn(1, 32, 20, generator=torch.Generator().manual_seed(4))


def _check(out, ref, ctx, handle, residency):
    assert torch.equal(out, ref)
    assert ctx.meta["applied"]["oom_retries"] == 0
    streamed = ctx.meta["memory"]["streamed_mb"]
    if residency == "full":
        assert streamed == 0 and handle.hook_count == 0
        assert not handle.partial
    else:
        assert streamed > 0 and handle.partial
        resident_units = handle.loaded_bytes - handle.layout.fixed_bytes
        assert (resident_units > 0) == (residency == "half")
        assert "toy" in ctx.meta["memory"]["partial"]


@pytest.mark.parametrize("residency", RESIDENCY)
def test_decoder_sequence(residency):
    model = _decoder()
    ref = generate(model, PROMPT, 8)
    out, ctx, handle, _ = run_streamed(model, lambda m, ctx: generate(m, PROMPT, 8), "sequence", residency)
    _check(out, ref, ctx, handle, residency)


@pytest.mark.parametrize("residency", RESIDENCY)
def test_decoder_sampling_uses_request_generator(residency):
    model = _decoder()
    ref = generate(model, PROMPT, 8, torch.Generator().manual_seed(7))
    out, ctx, handle, _ = run_streamed(model, lambda m, ctx: generate(m, PROMPT, 8, ctx.generator), "sequence",
                                       residency, seed=7)
    _check(out, ref, ctx, handle, residency)


@pytest.mark.parametrize("residency", RESIDENCY)
def test_dit_oneshot(residency):
    model = _dit()
    ref = sample(model, NOISE)
    out, ctx, handle, _ = run_streamed(model, lambda m, ctx: sample(m, NOISE), "oneshot", residency)
    _check(out, ref, ctx, handle, residency)


@pytest.mark.parametrize("legacy", [False, True], ids=["parametrizations", "legacy_weight_norm"])
@pytest.mark.parametrize("residency", RESIDENCY)
def test_vocoder_weight_norm(residency, legacy):
    model = _vocoder(legacy)
    with torch.no_grad():
        ref = model(MEL)
    def run(m, ctx):
        with torch.no_grad():
            return m(MEL)

    # Legacy weight_norm keeps each computed weight as a module attribute: device memory that stays
    # after the forward (on a GPU too), so its working memory includes a copy of the weights.
    working = (24 if legacy else 16) << 20
    out, ctx, handle, _ = run_streamed(model, run, "oneshot", residency, working=working)
    # weight-norm parameters stream with their convolution
    assert any("original" in n or "weight_v" in n for u in handle.layout.units for n in
               [handle.layout.names[id(p)] for p in u.params])
    _check(out, ref, ctx, handle, residency)


@pytest.mark.parametrize("residency", RESIDENCY)
def test_torch_nn_transformer(residency):
    """A model nobody here wrote: nn.MultiheadAttention reads in_proj_weight (and out_proj's weights) in its
    own forward, so they stream with their layer; the model's first parameter stays fixed."""
    torch.manual_seed(5)
    model = torch.nn.Transformer(d_model=256, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                 dim_feedforward=1024, dropout=0.0).eval()
    src = torch.randn(10, 2, 256, generator=torch.Generator().manual_seed(6))
    tgt = torch.randn(7, 2, 256, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        ref = model(src, tgt)

    def run(m, ctx):
        with torch.no_grad():
            return m(src, tgt)

    out, ctx, handle, _ = run_streamed(model, run, "oneshot", residency)
    fixed = {handle.layout.names[id(t)] for t in handle.layout.fixed}
    assert "encoder.layers.0.self_attn.in_proj_weight" in fixed
    assert "encoder.layers.1.self_attn.in_proj_weight" not in fixed
    _check(out, ref, ctx, handle, residency)


class SharedBlocks(torch.nn.Module):
    """Blocks that share one projection (ALBERT-style weight sharing across units)."""

    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Linear(512, 512)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), self.shared)
                                          for _ in range(4))

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x


@pytest.mark.parametrize("residency", RESIDENCY)
def test_weights_shared_across_units(residency):
    torch.manual_seed(9)
    model = SharedBlocks().eval()
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        ref = model(x)

    def run(m, ctx):
        with torch.no_grad():
            return m(x)

    out, ctx, handle, _ = run_streamed(model, run, "oneshot", residency)
    assert "shared.weight" in {handle.layout.names[id(t)] for t in handle.layout.fixed}
    _check(out, ref, ctx, handle, residency)


@pytest.mark.parametrize("residency", RESIDENCY)
def test_vits_units_below_the_outermost_lists(residency):
    """The outermost-list rule leaves most of this model fixed; the units found below it stream exactly.
    "half" is half-way between the new minimum working set and the size."""
    torch.manual_seed(11)
    model = TinyVits().eval()
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(12))
    noise = torch.randn(1, 64, 48, generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        ref = model(ids, noise)

    def run(m, ctx):
        with torch.no_grad():
            return m(ids, noise)

    out, ctx, handle, _ = run_streamed(model, run, "oneshot", residency)
    layout = handle.layout
    assert layout.fixed_bytes <= 0.25 * handle.size_bytes
    assert any(u.name.startswith("decoder.") and u.name != "decoder.resblocks.1" for u in layout.units)
    _check(out, ref, ctx, handle, residency)

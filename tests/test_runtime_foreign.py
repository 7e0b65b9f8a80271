"""The runtime on a model nobody here wrote: torch.nn.Transformer, handed in as it is.

Its results through the runtime (fully resident, half resident, every unit streamed) must equal the plain
run of the very same module, and the module must come back as it was handed in: requires_grad flags,
hooks, dtypes and devices. torch picks kernels by those flags (multi-head attention takes its fast path
only when no weight requires grad), so a runtime that changed them changed the results."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy

from runtime_helpers import WORKING, residency_capacity

UNIT = 4 << 10   # the layers of this tiny transformer are a few KB: make each one a unit


def transformer() -> nn.Transformer:
    torch.manual_seed(0)
    return nn.Transformer(d_model=32, nhead=4, num_encoder_layers=3, num_decoder_layers=3, dim_feedforward=64,
                          dropout=0.0, batch_first=True).eval()


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randn(2, 9, 32, generator=g), torch.randn(2, 6, 32, generator=g)
    src_pad = torch.zeros(2, 9, dtype=torch.bool)
    src_pad[1, 6:] = True
    return {"src": src, "tgt": tgt, "tgt_mask": nn.Transformer.generate_square_subsequent_mask(6),
            "src_key_padding_mask": src_pad, "memory_key_padding_mask": src_pad, "tgt_is_causal": True}


def state(model: nn.Module) -> list:
    """Everything about the module that the runtime must leave as it found it."""
    hooks = [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()]
    return [(n, t.requires_grad, t.dtype, t.device, type(t)) for n, t in
            [*model.named_parameters(), *model.named_buffers()]] + hooks


def run(model: nn.Module, grad: bool) -> torch.Tensor:
    with torch.set_grad_enabled(grad):
        return model(**inputs()).detach()


@pytest.mark.parametrize("residency", ["full", "half", "none"])
def test_transformer_through_the_runtime_equals_the_plain_run(residency):
    model = transformer()
    before = state(model)
    plain = run(model, grad=False)
    plain_grad = run(model, grad=True)   # weights requiring grad: the slow attention path
    handle = ModelHandle(model, "transformer", min_unit_bytes=UNIT, tiny_unit_bytes=UNIT)
    mode, capacity = residency_capacity(handle, residency)
    manager = ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True), VramPolicy({"compute.vram_mode": mode}))
    manager.register(handle, engine="test", device="cpu")
    assert len(handle.layout.units) >= 6
    with manager.request() as ctx:
        out = ctx.run("transformer", [handle], lambda: run(model, grad=False), memory=WORKING)
        expected_partial = residency != "full"
        assert handle.partial == expected_partial
        if residency == "full":   # streamed weights cannot be part of an autograd graph (strict device)
            assert torch.equal(ctx.run("transformer", [handle], lambda: run(model, grad=True), memory=WORKING),
                               plain_grad)
    assert torch.equal(out, plain)
    manager.unregister(handle)
    assert state(model) == before
    assert torch.equal(run(model, grad=False), plain)


def test_streamed_units_do_not_fill_the_autocast_cache():
    """Autocast keeps its casts of grad-requiring weights for the whole region: inside a streamed unit the
    cache is off (a cast per use, same values), outside it is as the caller set it."""
    seen = {}

    class Probe(nn.Linear):
        def forward(self, x):
            seen[self] = torch.is_autocast_cache_enabled()
            return super().forward(x)

    model = nn.Sequential(*[Probe(64, 64) for _ in range(4)])
    plain = model(torch.ones(1, 64)).detach()
    handle = ModelHandle(model, "probe", min_unit_bytes=UNIT, tiny_unit_bytes=UNIT)
    mode, capacity = residency_capacity(handle, "none")
    manager = ModelManager(DeviceService(simulate={"cpu": capacity}, strict=True), VramPolicy({"compute.vram_mode": mode}))
    manager.register(handle, engine="test", device="cpu")
    with manager.request() as ctx, torch.autocast("cpu", dtype=torch.bfloat16):
        out = ctx.run("probe", [handle], lambda: model(torch.ones(1, 64)), memory=WORKING)
        assert torch.is_autocast_cache_enabled()
    streamed = {u.module for u in handle.layout.units}   # vram_mode none: every unit streams
    assert len(streamed) == 3 and seen == {m: m not in streamed for m in model}
    assert torch.is_autocast_cache_enabled()
    assert all(p.requires_grad for p in model.parameters())
    manager.unregister(handle)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(out, model(torch.ones(1, 64)))
    assert not torch.equal(out.float(), plain)   # autocast did apply


class PythonView(nn.Module):
    """A layer that takes a view of its weight in Python (`weight.t()`), as int8 and fused kernels do."""

    STREAMABLE = True

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(32, 32) / 6, requires_grad=False)

    def forward(self, x):
        return torch.tanh(x @ self.weight.t())


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("residency", ["half", "none"])
def test_a_model_built_under_inference_mode_streams_as_it_was_built(strict, residency):
    """ComfyUI runs loaders under torch.inference_mode, so a model's weights are inference tensors: given
    a normal tensor's data, a weight would lose its version counter and `weight.t()` would fail."""
    torch.manual_seed(0)
    with torch.inference_mode():
        model = nn.Sequential(*[PythonView() for _ in range(4)])
        x = torch.randn(3, 32)
        plain = model(x)
    handle = ModelHandle(model, "views", min_unit_bytes=UNIT, tiny_unit_bytes=UNIT)
    mode, capacity = residency_capacity(handle, residency)
    manager = ModelManager(DeviceService(simulate={"cpu": capacity}, strict=strict),
                           VramPolicy({"compute.vram_mode": mode}))
    manager.register(handle, engine="test", device="cpu")
    with torch.inference_mode(), manager.request() as ctx:
        out = ctx.run("views", [handle], lambda: model(x), memory=WORKING)
        again = ctx.run("views", [handle], lambda: model(x), memory=WORKING)
    assert handle.partial and torch.equal(out, plain) and torch.equal(again, plain)
    manager.unregister(handle)
    assert all(p.is_inference() for p in model.parameters())
    with torch.inference_mode():
        assert torch.equal(model(x), plain)

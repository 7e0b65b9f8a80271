"""A request's phase plan: in its last segment, the components it is done with give up memory before
anything else (ComfyUI's models included); before that, or without a plan, placement is as it was."""
import pytest
import torch

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.phases import Plan
from toy_models import TinyDiT

MB = 1 << 20


def handles(manager, names):
    out = []
    for i, name in enumerate(names):
        torch.manual_seed(i)
        out.append(manager.register(ModelHandle(TinyDiT(depth=4).eval(), name, "oneshot"), engine="test"))
    return out


def test_the_plan_names_what_the_last_segment_is_done_with():
    a, b, c = object(), object(), object()
    plan = Plan([[a], [b], [], [a], [c]], segments=2)
    assert [plan.enter([h]) for h in (a, b, a, c)] == [frozenset()] * 4   # segment 0 of 2: all needed later
    plan.start(1)
    assert plan.enter([a]) == frozenset()            # b, a, c still to come
    assert plan.enter([b]) == frozenset()            # a, c still to come
    assert plan.enter([a]) == {b}
    assert plan.enter([c]) == {a, b}
    assert plan.enter([c]) == {a, b}                 # an OOM retry of the same phase
    assert not plan.void


def test_a_phase_the_plan_does_not_name_voids_it():
    a, b, c = object(), object(), object()
    plan = Plan([[a], [b]])
    assert plan.enter([b]) == {a}                    # a skipped (a cached prompt phase): done with
    assert plan.enter([a]) == frozenset() and plan.void   # out of order: everything counts as needed
    assert plan.enter([b]) == frozenset()
    plan = Plan([[a], [b]])
    assert plan.enter([a, c]) == frozenset() and plan.void


def setup():
    """A device that holds two of the three components with working memory, not three."""
    probe = handles(ModelManager(DeviceService()), ["probe"])[0]
    size = probe.size_bytes
    devices = DeviceService(simulate={"cpu": 2 * size + 2 * MB}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.host_copies": "on", "compute.vram_reserve_mb": 0}))
    other, first, second = handles(manager, ["other", "first", "second"])
    with manager.request() as ctx, ctx.use([other], memory=MB):   # another engine's component, idle, older
        pass
    return manager, other, first, second


@pytest.mark.parametrize("segments, plan", [(1, True), (2, True), (1, False)])
def test_spent_components_yield_before_older_idle_ones(segments, plan):
    manager, other, first, second = setup()
    with manager.request() as ctx, torch.no_grad():
        if plan:
            ctx.plan([[first], [second]], segments)
            ctx.segment(0)                   # the last segment only when there is one
        for h in (first, second):
            with ctx.use([h], memory=MB):
                assert h.loaded_bytes == h.size_bytes
    if plan:
        assert ctx.meta["memory"]["plan"] == "followed"
    if plan and segments == 1:       # the last segment is done with `first`: it yields, `other` stays
        assert other.loaded_bytes == other.size_bytes and first.loaded_bytes < first.size_bytes
    else:                            # `first` is still needed (or nothing says otherwise): least recent yields
        assert first.loaded_bytes == first.size_bytes and other.loaded_bytes < other.size_bytes

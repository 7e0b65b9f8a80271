"""One test per rule that decides what streams and what stays in the fixed part."""
import torch
from torch import nn

from mizuoto.runtime import DeviceService, ModelHandle
from mizuoto.runtime.units import analyse

MB = 1 << 20


def block(dim=512):
    return nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.Linear(dim, dim))  # ~2 MB


def names(layout, tensors):
    return {layout.names[id(t)] for t in tensors}


def streamed_names(layout):
    return {layout.names[id(p)] for u in layout.units for p in u.params}


class Stack(nn.Module):
    def __init__(self, n=3, dim=512):
        super().__init__()
        self.embed = nn.Embedding(100, dim)
        self.blocks = nn.ModuleList(block(dim) for _ in range(n))
        self.norm = nn.LayerNorm(dim)


def test_units_are_children_of_the_outermost_list_of_at_least_1mb():
    m = Stack()
    m.small = nn.ModuleList([nn.Linear(8, 8)])  # under 1 MB: not a unit
    layout = analyse(m)
    assert [u.name for u in layout.units] == ["blocks.0", "blocks.1", "blocks.2"]
    # an inner list inside a unit is never split further
    assert "blocks.0.0.weight" in streamed_names(layout)


def test_memory_units_override():
    class Custom(Stack):
        def memory_units(self):
            return [self.blocks[0][0], self.blocks[1]]

    layout = analyse(Custom())
    assert [u.name for u in layout.units] == ["blocks.0.0", "blocks.1"]


def test_only_linear_conv_and_streamable_weights_stream():
    class MyOp(nn.Module):
        STREAMABLE = True

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(512, 512))

    m = Stack()
    m.blocks[0].append(MyOp())
    layout = analyse(m)
    streamed = streamed_names(layout)
    assert "blocks.0.3.weight" in streamed
    assert "blocks.0.0.weight" in streamed and "blocks.0.0.bias" in streamed
    fixed = names(layout, layout.fixed)
    assert {"embed.weight", "blocks.0.1.weight", "blocks.0.1.bias", "norm.weight"} <= fixed  # embeddings, norms


def test_buffers_are_fixed():
    m = Stack()
    m.blocks[0][0].register_buffer("stat", torch.zeros(512))
    layout = analyse(m)
    assert "blocks.0.0.stat" in names(layout, layout.fixed)


def test_parameters_shared_outside_their_unit_are_fixed():
    m = Stack()
    m.head = nn.Linear(512, 512)
    m.head.weight = m.blocks[2][2].weight  # tied with a module outside the unit
    layout = analyse(m)
    assert "blocks.2.2.weight" in names(layout, layout.fixed)
    assert "blocks.2.2.bias" in streamed_names(layout)


def test_parameters_also_held_by_a_non_streamable_module_are_fixed():
    class Reader(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.w = w

    m = Stack()
    m.blocks[1].append(Reader(m.blocks[1][0].weight))  # read by raw code, not in a Linear forward
    layout = analyse(m)
    assert "blocks.1.0.weight" in names(layout, layout.fixed)


def test_first_parameter_is_fixed():
    m = nn.ModuleList(block() for _ in range(2))
    layout = analyse(m)
    assert "0.0.weight" in names(layout, layout.fixed)
    assert "0.2.weight" in streamed_names(layout)


def test_units_under_64kb_are_fixed():
    class Custom(Stack):
        def memory_units(self):
            return [self.blocks[0], self.blocks[1][1]]  # a LayerNorm-only unit: nothing to stream

    m = Custom()
    layout = analyse(m, tiny_unit_bytes=64 << 10)
    assert [u.name for u in layout.units] == ["blocks.0"]
    layout = analyse(Stack(dim=64), min_unit_bytes=1)  # 64-dim blocks hold ~33 KB each
    assert layout.units == []


def test_marked_fixed_subtree_and_hot_units():
    m = Stack()
    h = ModelHandle(m, "stack")
    h.mark(m.blocks[1], "fixed").mark(m.blocks[2], "hot")
    assert [u.name for u in h.layout.units] == ["blocks.0", "blocks.2"]
    assert [u.hot for u in h.layout.units] == [False, True]
    assert "blocks.1.0.weight" in names(h.layout, h.layout.fixed)


def test_pinned_to_cpu_subtree_is_left_out_and_stays_on_cpu():
    m = Stack()
    DeviceService.pin_to_cpu(m.blocks[0])
    layout = analyse(m)
    assert [u.name for u in layout.units] == ["blocks.1", "blocks.2"]
    assert not any(n.startswith("blocks.0") for n in names(layout, layout.fixed))


def test_weight_norm_parameters_stream_with_their_conv():
    from torch.nn.utils import parametrizations, weight_norm
    m = nn.ModuleList([nn.Sequential(parametrizations.weight_norm(nn.Conv1d(256, 256, 9)),
                                     weight_norm(nn.Conv1d(256, 256, 9))) for _ in range(3)])
    layout = analyse(m)
    streamed = streamed_names(layout)
    assert "1.0.parametrizations.weight.original0" in streamed
    assert "1.0.parametrizations.weight.original1" in streamed
    assert "1.1.weight_g" in streamed and "1.1.weight_v" in streamed


def test_a_module_shared_by_two_units_is_fixed():
    shared = nn.Linear(512, 512)
    m = nn.ModuleList([nn.Sequential(nn.Linear(512, 512), shared), nn.Sequential(nn.Linear(512, 512), shared)])
    layout = analyse(m)
    fixed = names(layout, layout.fixed)
    assert "0.1.weight" in fixed  # named through the first unit; read by both
    assert "1.0.weight" in streamed_names(layout)


# ---- descending below the outermost lists ------------------------------------------------------------------
def fixed_share(layout):
    return layout.fixed_bytes / (layout.fixed_bytes + layout.unit_bytes)


def test_descends_when_the_outermost_lists_leave_more_than_a_quarter_fixed():
    from toy_models import TinyVits
    m = TinyVits()
    old = analyse(m, fixed_share=None)
    assert [u.name for u in old.units] == ["flows.0", "flows.1", "decoder.resblocks.1"]
    assert fixed_share(old) > 0.5
    new = analyse(m)
    assert fixed_share(new) <= 0.25
    # the outermost rule's units stay as they were; the new ones lie outside them, largest first
    assert {u.name: u.nbytes for u in new.units if u.name in {v.name for v in old.units}} == \
        {u.name: u.nbytes for u in old.units}
    added = [u.name for u in new.units if u.name not in {v.name for v in old.units}]
    assert added == ["encoder.0", "encoder.1", "encoder.2", "encoder.3", "decoder.ups.0", "decoder.resblocks.0"]
    assert [u.order for u in new.units] == sorted(u.order for u in new.units)  # module (run) order
    assert {"embed.weight", "encoder.0.norm1.weight"} <= names(new, new.fixed)  # embedding, norms


def test_no_descent_while_the_fixed_part_is_within_a_quarter():
    m = Stack()
    m.tail = nn.Linear(512, 512)  # outside every list: stays fixed, the share is small
    assert [u.name for u in analyse(m).units] == [u.name for u in analyse(m, fixed_share=None).units]
    assert "tail.weight" in names(analyse(m), analyse(m).fixed)


def test_memory_units_are_never_descended():
    class Custom(Stack):
        def memory_units(self):
            return [self.blocks[0]]

    layout = analyse(Custom())
    assert [u.name for u in layout.units] == ["blocks.0"] and fixed_share(layout) > 0.5


class Body(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.a = nn.Linear(dim, dim)
        self.b = nn.Linear(dim, dim)


class Flat(nn.Module):
    """No list at all: the outermost rule finds no unit."""

    def __init__(self, dim=512):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.x, self.y, self.z, self.w = Body(dim), Body(dim), Body(dim), Body(dim)
        self.head = nn.Linear(dim, dim)


def test_descent_keeps_every_fixed_part_rule():
    m = Flat()
    m.head.weight = m.x.a.weight                          # tied with a module outside x
    shared = nn.Linear(512, 512)
    m.z.shared = shared                                   # one module reachable from two subtrees
    m.w.shared = shared
    DeviceService.pin_to_cpu(m.w.b)
    h = ModelHandle(m, "flat", min_unit_bytes=4 * MB)     # a cap above one Body (2 MB): Bodies are units
    h.mark(m.y, "fixed").mark(m.z, "hot")
    layout = h.layout
    assert analyse(m, fixed_share=None).units == []
    # inp and head keep only a bias to stream (under 64 KB): no unit
    assert [u.name for u in layout.units] == ["x", "z", "w"]
    fixed = names(layout, layout.fixed)
    assert {"inp.weight", "inp.bias", "head.bias"} <= fixed                  # the first parameter; tiny
    assert "x.a.weight" in fixed and "x.a.bias" in streamed_names(layout)      # tied
    assert {"y.a.weight", "y.b.weight"} <= fixed                             # marked fixed
    assert "z.shared.weight" in fixed and "z.a.weight" in streamed_names(layout)  # reachable from two parents
    assert not any(n.startswith("w.b.") for n in fixed | streamed_names(layout))  # pinned: left out
    assert [u.hot for u in layout.units] == [False, True, False]


def test_a_subtree_within_the_largest_unit_is_one_unit_a_larger_one_is_split():
    m = Flat()
    m.blocks = nn.ModuleList(block() for _ in range(2))   # the outermost rule's units: ~2 MB each
    m.big = nn.Sequential(Body(), Body())                 # 4 MB: split into its Bodies
    layout = analyse(m)
    units = {u.name for u in layout.units}
    assert {"big.0", "big.1", "blocks.0", "blocks.1"} <= units and "big" not in units
    assert units & {"x", "y", "z", "w"} and not any(u.startswith(("x.", "y.", "z.", "w.")) for u in units)
    assert max(u.nbytes for u in layout.units) == max(u.nbytes for u in analyse(m, fixed_share=None).units)
    assert fixed_share(layout) <= 0.25


def test_a_streamable_module_is_never_split():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 8)
            self.mha = nn.MultiheadAttention(1024, 8)     # 16 MB, reads out_proj's weights in its own forward

    layout = analyse(Attn())
    assert [u.name for u in layout.units] == ["mha"]
    assert {"mha.in_proj_weight", "mha.out_proj.weight"} <= streamed_names(layout)


def test_torch_encoder_layer_is_never_split():
    """In eval mode its forward hands its children's weights to one fused kernel without calling them."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 8)
            self.blocks = nn.ModuleList(block(256) for _ in range(2))   # ~0.5 MB units: the cap
            self.post = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)  # 12 MB

    layout = analyse(Head(), min_unit_bytes=256 << 10)
    assert [u.name for u in layout.units] == ["blocks.0", "blocks.1", "post"]


def test_nn_transformer_default_fixed_part_at_most_a_quarter():
    with torch.device("meta"):
        m = nn.Transformer()
    layout = analyse(m)
    assert fixed_share(layout) <= 0.25
    assert "encoder.layers.1.self_attn.in_proj_weight" in streamed_names(layout)

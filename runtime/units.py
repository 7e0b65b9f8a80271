"""Split a module into units (groups of weights that move together) and the fixed part.

Rules (DESIGN.md §3):
- units come from `module.memory_units()` if it has one, else they are the children of the outermost
  ModuleList/Sequential containers that hold at least `min_unit_bytes` (1 MB) of parameters;
- when that outermost-list rule leaves more than `fixed_share` (a quarter) of the bytes in the fixed
  part, the rule descends: the largest subtrees outside every unit (holding none) become units too,
  largest first, until the fixed part is back under the share. A subtree becomes a unit when it holds
  no more streamable bytes than the largest unit of the outermost rule (so the minimum working set does
  not grow) or is a streamable module or a `WHOLE_TYPES` module (never split: its forward reads all of
  its weights); a larger one, or a ModuleList/ModuleDict (no forward of its own), is replaced by its
  children;
- only weights of nn.Linear, Conv1d/2d, ConvTranspose1d/2d, nn.MultiheadAttention and classes with
  `STREAMABLE = True` stream (including their weight-norm parametrizations: legacy `weight_g/weight_v`
  and `torch.nn.utils.parametrizations` originals), because only they are read inside their own forward;
- everything else is the fixed part: embeddings, norms, scales, other parameters, every buffer,
  parameters also reachable from outside their unit (tied heads), the module's first parameter,
  units with less than `tiny_unit_bytes` (64 KB) of streamable weights, subtrees marked fixed.
Subtrees pinned to the CPU (`DeviceService.pin_to_cpu`) are left out entirely.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import torch
from torch import nn

from .devices import PINNED_CPU_ATTR

# nn.MultiheadAttention reads its in-projection (and its out_proj's weights) inside its own forward.
STREAMABLE_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.MultiheadAttention)
# Modules whose forward may read their children's weights without calling them (torch's encoder layer
# passes its attention's and feed-forward's weights to one fused kernel in eval mode): never split.
WHOLE_TYPES = (nn.TransformerEncoderLayer,)
MIN_UNIT_BYTES = 1 << 20
TINY_UNIT_BYTES = 64 << 10
FIXED_SHARE = 0.25


def is_streamable(module: nn.Module) -> bool:
    return isinstance(module, STREAMABLE_TYPES) or getattr(type(module), "STREAMABLE", False) is True


def streamable_params(module: nn.Module) -> list[nn.Parameter]:
    """The weights a streamable module reads in its forward: its own and its parametrizations'."""
    params = list(module.parameters(recurse=False))
    return params + [p for m in _parametrizations(module) for p in m.parameters(recurse=False)]


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(eq=False)
class Unit:
    """One unit: the module, its streamed weights and the leaf modules that read them."""

    name: str
    module: nn.Module
    params: list[nn.Parameter]
    leaves: list[nn.Module]
    nbytes: int
    order: int
    hot: bool = False
    depth: int = 0  # nesting of active hooks: weights are swapped in while > 0
    autocast_cache: bool = True  # the thread's autocast cache setting, restored when the unit is left


@dataclass
class Layout:
    units: list[Unit]
    fixed: list[torch.Tensor]  # parameters and buffers on the device whenever the component is
    names: dict[int, str] = field(default_factory=dict)  # id(tensor) -> qualified name

    @property
    def fixed_bytes(self) -> int:
        return tensor_bytes(self.fixed)

    @property
    def unit_bytes(self) -> int:
        return sum(u.nbytes for u in self.units)


def _outermost_lists(module: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    if isinstance(module, (nn.ModuleList, nn.Sequential)):
        return [(prefix, module)]
    found = []
    for name, child in module.named_children():
        if not getattr(child, PINNED_CPU_ATTR, False):
            found += _outermost_lists(child, f"{prefix}.{name}" if prefix else name)
    return found


def _named_memory_units(module: nn.Module) -> list[tuple[str, nn.Module]] | None:
    memory_units = getattr(module, "memory_units", None)
    if not callable(memory_units):
        return None
    names = {id(m): n for n, m in module.named_modules()}
    units = list(memory_units())
    for u in units:
        if id(u) not in names:
            raise ValueError(f"memory_units() returned a module that is not inside {type(module).__name__}")
    return [(names[id(u)], u) for u in units]


def _list_units(module: nn.Module, min_unit_bytes: int) -> list[tuple[str, nn.Module]]:
    units = []
    for prefix, container in _outermost_lists(module):
        for name, child in container.named_children():
            if tensor_bytes(child.parameters()) >= min_unit_bytes:
                units.append((f"{prefix}.{name}" if prefix else name, child))
    return units


def _subtree_ids(roots: list[nn.Module]) -> set[int]:
    return {id(m) for r in roots for m in r.modules()}


class _Split:
    """What decides, for one module, which weights a unit may stream (shared by every rule)."""

    def __init__(self, module: nn.Module, fixed_roots: list[nn.Module], hot_roots: list[nn.Module]) -> None:
        self.pinned = _subtree_ids([m for m in module.modules() if getattr(m, PINNED_CPU_ATTR, False)])
        self.marked_fixed = _subtree_ids(list(fixed_roots))
        self.hot = _subtree_ids(list(hot_roots))
        # Every module holding a parameter directly, to find weights shared across units (tied heads)
        # or read by a module that is not streamable. Parametrization containers read for their owner.
        self.owners: dict[int, list[int]] = {}
        for m in module.modules():
            for p in m.parameters(recurse=False):
                self.owners.setdefault(id(p), []).append(id(m))
        streamable = [m for m in module.modules() if is_streamable(m)]
        self.readers = {id(m) for m in streamable} | {id(x) for m in streamable for x in _parametrizations(m)}
        self.first = next(iter(module.parameters()), None)

    def excluded(self, m: nn.Module) -> bool:
        return id(m) in self.pinned or id(m) in self.marked_fixed

    def params(self, unit_module: nn.Module, streamed: set[int], skip: set[int]) -> tuple[list, list]:
        """The weights `unit_module` would stream (none in `streamed`, no leaf in `skip`) and the leaves
        reading them."""
        inside = _subtree_ids([unit_module])
        params, leaves, mine = [], [], set()
        for leaf in unit_module.modules():
            if self.excluded(leaf) or not is_streamable(leaf) or id(leaf) in skip:
                continue
            own = [
                p for p in streamable_params(leaf)
                if p is not self.first and id(p) not in streamed and id(p) not in mine
                and all(o in inside and o in self.readers for o in self.owners.get(id(p), ()))
            ]
            if own:
                params += own
                leaves.append(leaf)
                mine.update(id(p) for p in own)
        return params, leaves

    def units(self, candidates: list[tuple[str, nn.Module]], tiny_unit_bytes: int) -> list[Unit]:
        # A module reachable from two units (a shared block) would be acquired by one and read by both.
        seen_in: dict[int, int] = {}
        for _, unit_module in candidates:
            for m in unit_module.modules():
                seen_in[id(m)] = seen_in.get(id(m), 0) + 1
        shared = {i for i, n in seen_in.items() if n > 1}
        units: list[Unit] = []
        streamed: set[int] = set()
        for order, (name, unit_module) in enumerate(candidates):
            if self.excluded(unit_module):
                continue
            params, leaves = self.params(unit_module, streamed, shared)
            nbytes = tensor_bytes(params)
            if nbytes < tiny_unit_bytes:
                continue
            streamed.update(id(p) for p in params)
            units.append(Unit(name, unit_module, params, leaves, nbytes, order, hot=id(unit_module) in self.hot))
        return units


def _descend(module: nn.Module, split: _Split, units: list[Unit], size: int, fixed_share: float,
             min_unit_bytes: int, tiny_unit_bytes: int) -> list[tuple[str, nn.Module]]:
    """More units from the largest subtrees outside the units, until the fixed part is within the share."""
    taken = _subtree_ids([u.module for u in units])
    holds_unit = {id(module)}
    for u in units:
        parts = u.name.split(".")
        holds_unit.update(id(module.get_submodule(".".join(parts[:i]))) for i in range(1, len(parts)))
    # Modules with two parents: made part of one unit they would be read by code outside it.
    parents: dict[int, int] = {}
    for m in module.modules():
        for c in m.children():
            parents[id(c)] = parents.get(id(c), 0) + 1
    shared = _subtree_ids([m for m in module.modules() if parents.get(id(m), 0) > 1])
    streamed = {id(p) for u in units for p in u.params}
    cap = max([u.nbytes for u in units] + [min_unit_bytes])
    fixed = size - sum(u.nbytes for u in units)

    heap: list[tuple[int, int, str, nn.Module]] = []
    ties = itertools.count()

    def expand(m: nn.Module, prefix: str) -> None:
        for cname, child in m.named_children():
            name = f"{prefix}.{cname}" if prefix else cname
            if split.excluded(child) or id(child) in taken or id(child) in shared:
                continue
            if id(child) in holds_unit:
                expand(child, name)
                continue
            nbytes = tensor_bytes(split.params(child, streamed, shared)[0])
            if nbytes >= tiny_unit_bytes:
                heapq.heappush(heap, (-nbytes, next(ties), name, child))

    found: list[tuple[str, nn.Module]] = []
    expand(module, "")
    while fixed > fixed_share * size and heap:
        negative, _, name, m = heapq.heappop(heap)
        if is_streamable(m) or isinstance(m, WHOLE_TYPES) or \
                (-negative <= cap and not isinstance(m, (nn.ModuleList, nn.ModuleDict))):
            found.append((name, m))
            fixed += negative
        else:
            expand(m, name)
    return found


def analyse(
    module: nn.Module,
    fixed_roots: list[nn.Module] = (),
    hot_roots: list[nn.Module] = (),
    min_unit_bytes: int = MIN_UNIT_BYTES,
    tiny_unit_bytes: int = TINY_UNIT_BYTES,
    fixed_share: float | None = FIXED_SHARE,
) -> Layout:
    """Compute the units and the fixed part of `module` (see the module docstring).

    `fixed_share=None` keeps the outermost-list rule alone (no descent).
    """
    split = _Split(module, fixed_roots, hot_roots)
    names: dict[int, str] = {}
    for n, t in list(module.named_parameters(remove_duplicate=True)) + list(module.named_buffers(remove_duplicate=True)):
        names.setdefault(id(t), n)

    candidates = _named_memory_units(module)
    if candidates is not None:
        units = split.units(candidates, tiny_unit_bytes)
    else:
        candidates = _list_units(module, min_unit_bytes)
        units = split.units(candidates, tiny_unit_bytes)
        size = tensor_bytes(_tensors_except(module, split, set()))
        if fixed_share is not None and size - sum(u.nbytes for u in units) > fixed_share * size:
            more = _descend(module, split, units, size, fixed_share, min_unit_bytes, tiny_unit_bytes)
            if more:
                # Module order is run order for sequence components: keep the units in it.
                position = {id(m): i for i, m in enumerate(module.modules())}
                candidates = sorted(candidates + more, key=lambda c: position[id(c[1])])
                units = split.units(candidates, tiny_unit_bytes)

    streamed = {id(p) for u in units for p in u.params}
    return Layout(units, _tensors_except(module, split, streamed), names)


def _tensors_except(module: nn.Module, split: _Split, streamed: set[int]) -> list[torch.Tensor]:
    """Every parameter and buffer outside pinned subtrees that is not in `streamed`, once (the fixed part)."""
    fixed: list[torch.Tensor] = []
    seen: set[int] = set()
    for m in module.modules():
        if id(m) in split.pinned:
            continue
        for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
            if id(t) not in streamed and id(t) not in seen:
                seen.add(id(t))
                fixed.append(t)
    return fixed


def _parametrizations(module: nn.Module) -> list[nn.Module]:
    parametrizations = getattr(module, "parametrizations", None)
    return list(parametrizations.modules()) if isinstance(parametrizations, nn.ModuleDict) else []

"""Split a module into units (groups of weights that move together) and the fixed part.

Rules (DESIGN.md §3):
- units come from `module.memory_units()` if it has one, else they are the children of the outermost
  ModuleList/Sequential containers that hold at least `min_unit_bytes` (1 MB) of parameters;
- only weights of nn.Linear, Conv1d/2d, ConvTranspose1d/2d and classes with `STREAMABLE = True` stream
  (including their weight-norm parametrizations: legacy `weight_g/weight_v` and
  `torch.nn.utils.parametrizations` originals), because only they are read inside their own forward;
- everything else is the fixed part: embeddings, norms, scales, other parameters, every buffer,
  parameters also reachable from outside their unit (tied heads), the module's first parameter,
  units with less than `tiny_unit_bytes` (64 KB) of streamable weights, subtrees marked fixed.
Subtrees pinned to the CPU (`DeviceService.pin_to_cpu`) are left out entirely.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .devices import PINNED_CPU_ATTR

STREAMABLE_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d)
MIN_UNIT_BYTES = 1 << 20
TINY_UNIT_BYTES = 64 << 10


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


def _candidate_units(module: nn.Module, min_unit_bytes: int) -> list[tuple[str, nn.Module]]:
    memory_units = getattr(module, "memory_units", None)
    if callable(memory_units):
        names = {id(m): n for n, m in module.named_modules()}
        units = list(memory_units())
        for u in units:
            if id(u) not in names:
                raise ValueError(f"memory_units() returned a module that is not inside {type(module).__name__}")
        return [(names[id(u)], u) for u in units]
    units = []
    for prefix, container in _outermost_lists(module):
        for name, child in container.named_children():
            if tensor_bytes(child.parameters()) >= min_unit_bytes:
                units.append((f"{prefix}.{name}" if prefix else name, child))
    return units


def _subtree_ids(roots: list[nn.Module]) -> set[int]:
    return {id(m) for r in roots for m in r.modules()}


def analyse(
    module: nn.Module,
    fixed_roots: list[nn.Module] = (),
    hot_roots: list[nn.Module] = (),
    min_unit_bytes: int = MIN_UNIT_BYTES,
    tiny_unit_bytes: int = TINY_UNIT_BYTES,
) -> Layout:
    """Compute the units and the fixed part of `module` (see the module docstring)."""
    pinned = _subtree_ids([m for m in module.modules() if getattr(m, PINNED_CPU_ATTR, False)])
    marked_fixed = _subtree_ids(list(fixed_roots))
    hot = _subtree_ids(list(hot_roots))

    # Every module holding a parameter directly, to find weights shared across units (tied heads)
    # or read by a module that is not streamable. Parametrization containers read for their owner.
    owners: dict[int, list[int]] = {}
    for m in module.modules():
        for p in m.parameters(recurse=False):
            owners.setdefault(id(p), []).append(id(m))
    readers = {id(m) for m in module.modules() if is_streamable(m)}
    readers |= {id(x) for m in module.modules() if is_streamable(m) for x in _parametrizations(m)}
    names: dict[int, str] = {}
    for n, t in list(module.named_parameters(remove_duplicate=True)) + list(module.named_buffers(remove_duplicate=True)):
        names.setdefault(id(t), n)
    first = next(iter(module.parameters()), None)

    candidates = _candidate_units(module, min_unit_bytes)
    # A module reachable from two units (a shared block) would be acquired by one and read by both.
    seen_in: dict[int, int] = {}
    for _, unit_module in candidates:
        for m in unit_module.modules():
            seen_in[id(m)] = seen_in.get(id(m), 0) + 1
    units: list[Unit] = []
    streamed: set[int] = set()
    for order, (name, unit_module) in enumerate(candidates):
        if id(unit_module) in pinned or id(unit_module) in marked_fixed:
            continue
        inside = _subtree_ids([unit_module])
        params, leaves = [], []
        for leaf in unit_module.modules():
            if id(leaf) in pinned or id(leaf) in marked_fixed or not is_streamable(leaf) or seen_in[id(leaf)] > 1:
                continue
            own = [
                p for p in streamable_params(leaf)
                if p is not first and id(p) not in streamed
                and all(o in inside and o in readers for o in owners.get(id(p), ()))
            ]
            if own:
                params += own
                leaves.append(leaf)
                streamed.update(id(p) for p in own)
        nbytes = tensor_bytes(params)
        if nbytes < tiny_unit_bytes:
            streamed.difference_update(id(p) for p in params)
            continue
        units.append(Unit(name, unit_module, params, leaves, nbytes, order, hot=id(unit_module) in hot))

    fixed: list[torch.Tensor] = []
    seen: set[int] = set()
    for m in module.modules():
        if id(m) in pinned:
            continue
        for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
            if id(t) not in streamed and id(t) not in seen:
                seen.add(id(t))
                fixed.append(t)
    return Layout(units, fixed, names)


def _parametrizations(module: nn.Module) -> list[nn.Module]:
    parametrizations = getattr(module, "parametrizations", None)
    return list(parametrizations.modules()) if isinstance(parametrizations, nn.ModuleDict) else []

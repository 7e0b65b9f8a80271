"""ModelHandle: one component (any nn.Module, its code unchanged) and where its weights are.

The handle owns the host tensors of its weights and places them on its device: the fixed part first,
then hot units, then units by kind (sequence: in run order, so the first N layers stay resident and
every token streams the same ones; oneshot: largest first, so the copies being made are small).
Units that do not fit stay on the host and stream through hooks; a fully placed component has no
hooks at all.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from .devices import DeviceService, StrictDeviceError, assign
from .units import FIXED_SHARE, MIN_UNIT_BYTES, TINY_UNIT_BYTES, Layout, Unit, analyse, tensor_bytes

if TYPE_CHECKING:
    from .pinning import PinBudget
    from .streamer import Streamer

KINDS = ("sequence", "oneshot")
MARKS = ("hot", "fixed")


class ModelHandle:
    # Unit-size thresholds when a handle is built without them; tests of tiny models lower them here so
    # engine code builds its handles unchanged.
    MIN_UNIT_BYTES = MIN_UNIT_BYTES
    TINY_UNIT_BYTES = TINY_UNIT_BYTES
    # Above this share of fixed bytes the unit rule descends below the outermost lists (None: never).
    FIXED_SHARE: float | None = FIXED_SHARE

    def __init__(self, module: nn.Module, name: str, kind: str = "oneshot", *,
                 min_unit_bytes: int | None = None, tiny_unit_bytes: int | None = None) -> None:
        min_unit_bytes = self.MIN_UNIT_BYTES if min_unit_bytes is None else min_unit_bytes
        tiny_unit_bytes = self.TINY_UNIT_BYTES if tiny_unit_bytes is None else tiny_unit_bytes
        if kind not in KINDS:
            raise ValueError(f"ModelHandle kind: expected one of {KINDS}, got {kind!r}")
        if not isinstance(module, nn.Module):
            raise TypeError(f"ModelHandle module: expected an nn.Module, got {type(module).__name__}")
        self.module = module
        self.name = name
        self.kind = kind
        self.cap_bytes: int | None = None
        self.streamed_bytes = 0
        self.engine: str | None = None
        self.pinned = False  # in engines.<id>.pinned_models: yields after other models
        self.gave_up_for: str | None = None  # what it last yielded memory to
        self.in_use = 0
        self.last_used = 0.0
        self.keep_host = True
        self.async_offload: int | None = None  # the running request's compute.async_offload (streamer slots)
        self._min_unit_bytes = min_unit_bytes
        self._tiny_unit_bytes = tiny_unit_bytes
        self._fixed_share = self.FIXED_SHARE
        self._marks: dict[str, list[nn.Module]] = {m: [] for m in MARKS}
        self.devices: DeviceService | None = None
        self.device = torch.device("cpu")
        self.streamer: Streamer | None = None
        self.layout: Layout = analyse(module, min_unit_bytes=min_unit_bytes, tiny_unit_bytes=tiny_unit_bytes,
                                      fixed_share=self._fixed_share)
        self._host: dict[int, torch.Tensor] = {}
        self._tensors: dict[int, torch.Tensor] = {}
        self._buffers: set[int] = set()
        self._fixed_placed = False
        self._placement: list[Unit] = []  # resident units in placement order
        self._hooks: dict[Unit, list] = {}
        self._guard = None

    # ---- configuration ------------------------------------------------------------------------
    def mark(self, submodule: nn.Module, mark: str) -> ModelHandle:
        """`hot`: placed before all other units and yielded last; `fixed`: part of the fixed part."""
        if mark not in MARKS:
            raise ValueError(f"mark: expected one of {MARKS}, got {mark!r}")
        if not any(m is submodule for m in self.module.modules()):
            raise ValueError(f"mark: the module is not part of component {self.name!r}")
        if self.loaded_bytes:
            raise RuntimeError(f"mark: component {self.name!r} is placed; mark it before loading")
        self._marks[mark].append(submodule)
        self.layout = analyse(self.module, self._marks["fixed"], self._marks["hot"],
                              self._min_unit_bytes, self._tiny_unit_bytes, self._fixed_share)
        if self.devices is not None:
            self._index()
        return self

    def attach(self, devices: DeviceService, device: torch.device | str, streamer: Streamer | None) -> None:
        """Bind to a device (called by ModelManager.register); managed devices start offloaded."""
        self.devices = devices
        self.device = torch.device(device)
        self.streamer = streamer
        if not self.managed:
            return
        self._buffers = {id(b) for b in self.module.buffers()}
        for t in self._all_tensors():  # flags untouched: torch picks kernels by them (e.g. MHA's fast path)
            host = t.data if t.device.type == "cpu" else devices.to_host(t)
            self._host[id(t)] = host
            devices.offload(t, host, self.device)
        self._index()
        if devices.strict_on(self.device):
            self._guard = self.module.register_forward_pre_hook(self._check_in_use, prepend=True)

    def detach(self) -> None:
        """Give every weight back to the host and forget the device (ModelManager.unregister)."""
        if self.managed:
            self.unload()
            for t in self._all_tensors():
                assign(t, self._host[id(t)])
            if self._guard is not None:
                self._guard.remove()
                self._guard = None
        self._host.clear()
        self.devices = None
        self.streamer = None

    def _index(self) -> None:
        self._tensors = {id(t): t for t in self._all_tensors()}
        names = self.devices.names
        for i, n in self.layout.names.items():
            names[i] = f"{self.name}.{n}"

    def _all_tensors(self) -> list[torch.Tensor]:
        return self.layout.fixed + [p for u in self.layout.units for p in u.params]

    # ---- counters -----------------------------------------------------------------------------
    @property
    def managed(self) -> bool:
        return self.devices is not None and self.devices.is_managed(self.device)

    @property
    def size_bytes(self) -> int:
        return self.layout.fixed_bytes + self.layout.unit_bytes

    @property
    def loaded_bytes(self) -> int:
        if not self.managed:
            return 0
        return (self.layout.fixed_bytes if self._fixed_placed else 0) + sum(u.nbytes for u in self._placement)

    @property
    def host_bytes(self) -> int:
        return tensor_bytes(self._host.values())

    @property
    def partial(self) -> bool:
        return self._fixed_placed and len(self._placement) < len(self.layout.units)

    @property
    def min_working_set(self) -> int:
        """Fixed part plus the largest units the streamer holds at once."""
        slots = self.streamer.slots(self) if self.streamer is not None else 1
        sizes = sorted((u.nbytes for u in self.layout.units), reverse=True)
        return self.layout.fixed_bytes + sum(sizes[:slots])

    # ---- placement ----------------------------------------------------------------------------
    def load(self, budget: int | None = None) -> int:
        """Place the fixed part and as many units as `budget` (and `cap_bytes`) allow; returns loaded bytes."""
        if not self.managed:
            return 0
        resident = self._plan(budget)
        if not self._fixed_placed:
            for t in self.layout.fixed:
                self._place(t)
            self._fixed_placed = True
        keep = set(resident)
        for unit in reversed(list(self._placement)):
            if unit not in keep:
                self._offload_unit(unit)
        for unit in resident:
            if unit not in self._placement:
                if self.streamer is not None:
                    self.streamer.drop(self, unit)
                for p in unit.params:
                    self._place(p)
                self._placement.append(unit)
        if not self.keep_host and not self.partial:
            # Partially loaded components always keep host copies (their streamed units live there).
            self._host.clear()
        self._sync_hooks()
        return self.loaded_bytes

    def _plan(self, budget: int | None) -> list[Unit]:
        limits = [x for x in (budget, self.cap_bytes) if x is not None]
        limit = min(limits) if limits else None
        units = self.layout.units
        if limit is None or limit >= self.size_bytes:
            return list(units)
        slots = self.streamer.slots(self) if self.streamer is not None else 1
        hot = sorted((u for u in units if u.hot), key=lambda u: -u.nbytes)
        if self.kind == "sequence":
            # Module order is run order for decoders; resident units have no hooks to learn it from.
            ordered = sorted((u for u in units if not u.hot), key=lambda u: u.order)
        else:
            ordered = sorted((u for u in units if not u.hot), key=lambda u: -u.nbytes)
        resident: list[Unit] = []
        used = self.layout.fixed_bytes
        for unit in hot + ordered:
            others = sorted((u.nbytes for u in units if u is not unit and u not in resident), reverse=True)
            if used + unit.nbytes + sum(others[:slots]) <= limit:
                resident.append(unit)
                used += unit.nbytes
            elif self.kind == "sequence" and not unit.hot:
                break  # keep the resident layers the first ones in run order
        return resident

    def partially_unload(self, nbytes: int) -> int:
        """Give units back in reverse placement order (then the fixed part) until `nbytes` are freed."""
        if not self.managed or nbytes <= 0:
            return 0
        freed = 0
        while freed < nbytes and self._placement:
            unit = self._placement[-1]
            self._offload_unit(unit)
            freed += unit.nbytes
        if freed < nbytes and self._fixed_placed:
            freed += self._offload_fixed()
            self.cap_bytes = None  # a cap after an OOM lasts until the component leaves the device
        self._sync_hooks()
        return freed

    def unload(self) -> int:
        """Take the whole component off the device; weights with host copies are just dropped."""
        return self.partially_unload(self.loaded_bytes) if self.loaded_bytes else 0

    def drop_host_copies(self) -> int:
        """Forget host copies of a fully placed component (RAM relief); returns the bytes dropped.

        Partially loaded components keep theirs: their streamed units live there.
        """
        if not self.managed or not self._fixed_placed or self.partial:
            return 0
        dropped = self.host_bytes
        self._host.clear()
        if self.streamer is not None and self.streamer.pin_budget is not None:
            self.streamer.pin_budget.release_cache()  # pinned copies stay locked in torch's host cache
        return dropped

    def replace(self, source: nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Change weights after placement (same names and shapes) without staling host copies."""
        state = source.state_dict() if isinstance(source, nn.Module) else dict(source)
        current = dict(self.module.named_parameters()) | dict(self.module.named_buffers())
        unknown = sorted(set(state) - set(current))
        if unknown:
            raise KeyError(f"replace: {self.name!r} has no weights named {unknown[:5]}")
        for key, value in state.items():
            t = current[key]
            if tuple(value.shape) != tuple(t.shape):
                raise ValueError(f"replace: {key} expected shape {tuple(t.shape)}, got {tuple(value.shape)}")
            host = value.detach().to("cpu", t.dtype).clone()
            if not self.managed or id(t) not in self._tensors:
                with torch.no_grad():
                    t.copy_(host)
                continue
            self._host[id(t)] = host
            if self._is_placed(t):
                assign(t, self.devices.place(host, self.device))
            else:
                self.devices.offload(t, host, self.device)
        if self.streamer is not None:
            self.streamer.drop(self)

    # ---- moving single tensors ------------------------------------------------------------------
    def _is_placed(self, t: torch.Tensor) -> bool:
        if any(p is t for u in self._placement for p in u.params):
            return True
        return self._fixed_placed and any(f is t for f in self.layout.fixed)

    def _place(self, t: torch.Tensor) -> None:
        if self.keep_host and self.streamer is not None and id(t) not in self._buffers:
            # Kept host copies share the pin budget: reloads then copy asynchronously at link speed.
            host = self.host_tensor(t, self.streamer.pin_budget)
            assign(t, self.devices.place(host, self.device, non_blocking=host.is_pinned()))
        else:
            assign(t, self.devices.place(self._host[id(t)], self.device))

    def _offload(self, t: torch.Tensor) -> None:
        if id(t) not in self._host or id(t) in self._buffers:
            self._host[id(t)] = self.devices.to_host(t)
        self.devices.offload(t, self._host[id(t)], self.device)

    def _offload_unit(self, unit: Unit) -> None:
        for p in unit.params:
            self._offload(p)
        self._placement.remove(unit)

    def _offload_fixed(self) -> int:
        for t in self.layout.fixed:
            self._offload(t)
        self._fixed_placed = False
        return self.layout.fixed_bytes

    def return_to_host(self, p: torch.Tensor) -> None:
        """A streamed weight's device copy is done with: point it back at its offloaded tensor."""
        self.devices.offload(p, self._host[id(p)], self.device)

    def host_tensor(self, p: torch.Tensor, pin_budget: PinBudget | None) -> torch.Tensor:
        """The host tensor of a weight, page-locked on CUDA while the pin budget lasts."""
        host = self._host[id(p)]
        if pin_budget is not None and self.device.type == "cuda":
            pinned = pin_budget.pin(host)
            if pinned is not host:
                self._host[id(p)] = pinned
                if p.device.type == "cpu":
                    assign(p, pinned)  # an offloaded weight points at its host tensor
            host = pinned
        return host

    # ---- streaming hooks ------------------------------------------------------------------------
    def streamed_units(self) -> list[Unit]:
        """The units that stream (not resident) while the fixed part is placed."""
        if not self._fixed_placed:
            return []
        return [u for u in self.layout.units if u not in self._placement]

    def _sync_hooks(self) -> None:
        wanted = set(self.streamed_units())
        for unit in list(self._hooks):
            if unit not in wanted:
                for h in self._hooks.pop(unit):
                    h.remove()
        for unit in wanted:
            if unit not in self._hooks:
                self._hooks[unit] = [
                    h for m in {id(m): m for m in [unit.module, *unit.leaves]}.values()
                    for h in (m.register_forward_pre_hook(self._enter(unit), prepend=True),
                              m.register_forward_hook(self._exit(unit), always_call=True))
                ]

    def _enter(self, unit: Unit):
        def pre_hook(module, args):
            unit.depth += 1
            if unit.depth == 1:
                # Autocast caches its casts of grad-requiring leaves for the whole region: without this a
                # low-precision copy of every streamed unit would stay alive. Recasting gives the same values.
                unit.autocast_cache = torch.is_autocast_cache_enabled()
                torch.set_autocast_cache_enabled(False)
                try:
                    self.streamer.acquire(self, unit)
                except BaseException as e:
                    # torch runs always_call post hooks (which undo this) only for an Exception
                    if not isinstance(e, Exception):
                        self._leave(unit)
                    raise
        return pre_hook

    def _exit(self, unit: Unit):
        def post_hook(module, args, output):
            self._leave(unit)
        return post_hook

    def _leave(self, unit: Unit) -> None:
        unit.depth -= 1
        if unit.depth == 0:
            torch.set_autocast_cache_enabled(unit.autocast_cache)
            self.streamer.release(self, unit)

    def settle(self) -> None:
        """After a phase: release units an interrupt (a BaseException inside a forward) left acquired."""
        for unit in self.layout.units:
            if unit.depth:
                unit.depth = 1
                self._leave(unit)

    @property
    def hook_count(self) -> int:
        return sum(len(h) for h in self._hooks.values())

    def _check_in_use(self, module, args):
        if self.in_use == 0:
            raise StrictDeviceError(
                f"component {self.name!r} was used outside a phase: run it inside ctx.use(...) or "
                f"ctx.run(...) so the manager places it (strict simulated device)"
            )

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def __repr__(self) -> str:
        return (f"ModelHandle({self.name!r}, {self.kind}, loaded={self.loaded_bytes >> 20} MB "
                f"of {self.size_bytes >> 20} MB, units={len(self.layout.units)})")

"""The training job: a resumable step loop, run in its own process with its device held exclusively.

`TrainLoop` runs a method's steps over a fixed dataset in a seeded order (one permutation per epoch
from a generator of its own). Every `save_every` steps, and when `interrupted()` answers True, it writes
a checkpoint (model, optimizer, step, epoch order generator, torch's CPU/CUDA RNG states, losses)
atomically; `TrainLoop.resume` continues from one to the same weights as an uninterrupted run.

`run_in_process` starts the job in a new process (multiprocessing spawn) whose environment carries
the allocator settings (`allocator_env`): torch fixes its allocator backend at import, so they must be
in the environment when the child starts. The host holds the device (`ModelManager.exclusive`) for
the job's life: phases of inference on that device wait, idle components leave it first.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .memory import HostAdamW, Tools
from .step import train_step

_ENV_LOCK = threading.Lock()


@dataclass
class TrainResult:
    """What a finished fine-tuning job hands back: the exported model folder and how the run went."""

    voice: Path
    losses: list[float]
    steps: int
    updates: int
    seconds_per_step: float
    estimate_mb: float
    numerics: list[str] = field(default_factory=list)      # presets' numerics changes, named for the report


def check_counts(counts: Sequence[tuple[str, Any, int, int]]) -> None:
    """Each (option name, value, lowest, highest): an integer in that range, else a ValueError naming it."""
    for name, value, low, top in counts:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= top:
            raise ValueError(f"{name} = {value!r}; expected an integer from {low} to {top}")


class Interrupted(Exception):
    """The job stopped at an interrupt; `checkpoint` resumes it."""

    def __init__(self, step: int, checkpoint: Path) -> None:
        super().__init__(f"training interrupted at step {step}; resumable checkpoint {checkpoint}")
        self.step, self.checkpoint = step, checkpoint


def save_atomic(state: Mapping[str, Any], path: Path) -> None:
    """torch.save to a temporary file beside `path`, then rename: never a half-written checkpoint."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        torch.save(dict(state), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class TrainLoop:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | HostAdamW, data: Sequence[Any],
                 loss_fn: Callable[[nn.Module, Any], Tensor] | None, tools: Tools, *, seed: int,
                 checkpoint: Path, save_every: int = 0,
                 step: Callable[[Any, int], float] | None = None, extra: Any = None) -> None:
        """`step(batch, index_in_epoch) -> loss`, when given, replaces `train_step` (a method with its own
        update rule, e.g. gradient accumulation); `extra` (with state_dict / load_state_dict) is saved too."""
        if not data:
            raise ValueError("training data is empty")
        if loss_fn is None and step is None:
            raise ValueError("TrainLoop: give a loss_fn or a step")
        self.model, self.optimizer, self.data, self.loss_fn, self.tools = model, optimizer, data, loss_fn, tools
        self.custom_step, self.extra = step, extra
        self.checkpoint, self.save_every = Path(checkpoint), save_every
        self.step = 0
        self.losses: list[float] = []
        self.order = torch.Generator().manual_seed(seed)
        self._epoch: list[int] = []
        torch.manual_seed(seed)

    def _next_index(self) -> int:
        if not self._epoch:
            self._epoch = torch.randperm(len(self.data), generator=self.order).tolist()
        return self._epoch.pop(0)

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
                "losses": list(self.losses), "order": self.order.get_state(), "epoch": list(self._epoch),
                "rng_cpu": torch.get_rng_state(),
                # gradients accumulated but not yet applied (a method stepping every few batches)
                "grads": {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None},
                "extra": self.extra.state_dict() if self.extra is not None else {},
                "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

    def save(self) -> Path:
        save_atomic(self.state(), self.checkpoint)
        return self.checkpoint

    def resume(self) -> None:
        """Continue from `checkpoint` (written by `save`)."""
        state = torch.load(self.checkpoint, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.losses = int(state["step"]), list(state["losses"])
        self.order.set_state(state["order"])
        self._epoch = list(state["epoch"])
        params = dict(self.model.named_parameters())
        for p in params.values():
            p.grad = None
        for n, g in state["grads"].items():
            params[n].grad = g.to(params[n].device)
        if self.extra is not None:
            self.extra.load_state_dict(state["extra"])
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])

    def run(self, steps: int, progress: Callable[[int, int, float], None] | None = None,
            interrupted: Callable[[], bool] = lambda: False) -> list[float]:
        """Train up to step `steps`; `progress(step, steps, loss)` after each; raises `Interrupted`
        (after saving) when `interrupted()` is True before a step."""
        self.model.train()
        while self.step < steps:
            if interrupted():
                raise Interrupted(self.step, self.save())
            batch = self.data[self._next_index()]
            if self.custom_step is not None:
                loss = self.custom_step(batch, len(self.data) - len(self._epoch) - 1)
            else:
                loss = train_step(self.model, self.loss_fn, batch, self.optimizer, self.tools)
            self.step += 1
            self.losses.append(loss)
            if progress is not None:
                progress(self.step, steps, loss)
            if self.save_every and self.step % self.save_every == 0:
                self.save()
        return self.losses


def run_in_process(target: Callable[..., Any], kwargs: Mapping[str, Any], env: Mapping[str, str],
                   timeout: float | None = None, progress: Callable[..., None] | None = None,
                   interrupted: Callable[[], bool] | None = None) -> Any:
    """Run `target(**kwargs)` (a module-level function) in a spawned process started with `env` added
    to the environment; returns its result, or raises its error with the child's message.

    With `progress`, the child's target gets a `progress` callable whose calls arrive here (in order);
    with `interrupted` (polled here), it gets an `interrupted` callable that turns True once that does."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    process = ctx.Process(target=_child, args=(child, target, dict(kwargs), progress is not None,
                                               stop if interrupted is not None else None), daemon=True)
    with _ENV_LOCK:  # the child inherits the environment at start(); ours is restored at once
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            process.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    child.close()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            if interrupted is not None and not stop.is_set() and interrupted():
                stop.set()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"training process gave no result within {timeout} s")
            if not parent.poll(0.2 if left is None else min(0.2, left)):
                if not process.is_alive() and not parent.poll(0):
                    raise EOFError
                continue
            kind, value = parent.recv()
            if kind == "progress":
                progress(*value)
                continue
            ok = kind == "ok"
            break
    except EOFError:
        process.join(5)
        raise RuntimeError(f"training process died (exit code {process.exitcode})") from None
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    if not ok:
        if isinstance(value, tuple) and value[0] == "Interrupted":
            raise Interrupted(value[1], Path(value[2]))
        raise RuntimeError(f"training process failed: {value}")
    return value


def _child(conn: Any, target: Callable[..., Any], kwargs: dict[str, Any], report: bool, stop: Any) -> None:
    try:
        if report:
            kwargs["progress"] = lambda *args: conn.send(("progress", args))
        if stop is not None:
            kwargs["interrupted"] = stop.is_set
        conn.send(("ok", target(**kwargs)))
    except Interrupted as e:
        conn.send(("error", ("Interrupted", e.step, str(e.checkpoint))))
    except BaseException as e:  # reported to the host, not lost with the process
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def held(manager: Any, device: str, holder: str) -> Any:
    """`manager.exclusive(device, holder)` where the device is managed (a GPU, the simulated one)."""
    if manager is None or not manager.devices.is_managed(device):
        return nullcontext()
    return manager.exclusive(device, holder)

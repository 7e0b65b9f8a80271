"""An image model and each speech engine taking turns on one pretend GPU under ComfyUI's own model
management: bytes loaded per round ÷ the minimum that had to move (a figure, not a test).

    python bench/coresidency.py                   # real comfy.model_management from $COMFYUI_PATH (0.33)
    python bench/coresidency.py --standin         # the in-repo stand-in of its memory API (tests/comfy_standin)
    --gpu-gb 12  --image sdxl,flux-fp8  --engines all|id,id  --rounds 4  --quick (tiny: what the test runs)

Everything is ComfyUI's real arithmetic at 1/64 scale, as in tests/test_bridge.py ("GB" = 16 MiB), in
one process on the strict simulated device (tests/comfy_standin/pretend_gpu.py makes ComfyUI arbitrate
it as its GPU). Each round is what a workflow alternating an image sampler and Speak does:

- **image**: `load_models_gpu([unet])`, as a sampler node does, on a ModelPatcher of the image model's
  size (SD1.5 UNet fp16 1.72 GB, SDXL UNet fp16 5.14 GB, Flux.1 transformer fp8 11.9 GB);
- **speech**: every component of the engine at its real size in bf16 (built on `meta` by bench/units.py
  with the engine's own constructor, then a twin with the same units and fixed part, 1/64 of the
  bytes), used one after the other in one request with 512 MB of working memory each. Two arms:
  *ours*, the components as our handles on our manager with the ComfyUI bridge (what the pack does);
  *comfy*, the same components as ComfyUI ModelPatchers, each loaded with `load_models_gpu(...,
  memory_required=512 MB)` before it runs (what a pack that hands its models to ComfyUI does).

Bytes loaded: host->device bytes of the round (ours: `DeviceService.transfers`, streamed weights
included; ComfyUI's models: the growth of `loaded_size()`), in steady state (the mean over rounds
after the first). Unloading is not counted on either side (ComfyUI copies weights back to the host,
we drop device copies of weights whose host copy we keep). The image model's own per-step streaming
when ComfyUI loads it partially (Flux on 12 GB) is not simulated: only its loads count.

The minimum per round is a lower bound from sizes alone, C the device, M ComfyUI's minimum inference
memory, W the speech working memory: loading the image model, ComfyUI keeps M free beside min(I, C - M)
of it, so at most C - M - min(I, C - M) of the speech set T can stay and the speech must load T - that;
while the largest speech component K runs, at most C - W - K of the image model can stay, so the image
must load I' - that, I' what ComfyUI loaded of it on the first round (min(I, C - M) less its margins).
Ratio 1.00 is ideal; "-" where both are zero.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.comfy.bridge import ComfyArbiter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # comfy_standin
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/units.py
from comfy_standin.pretend_gpu import pretend_gpu  # noqa: E402

SCALE = 64
MB = 1 << 20
GB = 1 << 30  # real-scale; printed sizes are real-scale
DEVICE = torch.device("cpu", 0)  # != torch.device("cpu"): ComfyUI arbitrates it
WORKING = 512 * MB
IMAGES = {"sd15": 1.72, "sdxl": 5.14, "flux-fp8": 11.9}  # GB of the sampler's model (UNet / transformer)
IMAGE_LAYER = 64 * MB  # the image model's layers (Flux.1's blocks in fp8 are ~110-200 MB; smaller is kinder)


@dataclass
class Component:
    name: str
    kind: str
    fixed: int  # real-scale bytes
    units: list[int]

    @property
    def size(self) -> int:
        return self.fixed + sum(self.units)


class Block(nn.Module):
    """`nbytes` of bf16 weight; its forward reads it (so the strict device checks where it is)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max(1, nbytes // 2), dtype=torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[:1].float()


class Twin(nn.Module):
    """A component's memory shape at 1/SCALE: its fixed part and its units, nothing else."""

    def __init__(self, c: Component, scale: int) -> None:
        super().__init__()
        self.fixed = Block(c.fixed // scale)
        self.units = nn.ModuleList(Block(n // scale) for n in c.units)

    def memory_units(self) -> list[nn.Module]:
        return list(self.units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fixed(x)
        for u in self.units:
            x = u(x)
        return x


def components(engine: str) -> list[Component]:
    """The engine's components at real size in bf16, as its own constructor splits them."""
    import units

    def q(n: int) -> int:  # what a bf16 Block at 1/SCALE holds, so the minimum and the twins agree
        return max(1, n // (2 * SCALE)) * 2 * SCALE
    return [Component(name, h.kind, q(h.layout.fixed_bytes), [q(u.nbytes) for u in h.layout.units])
            for name, h in units.ENGINES[engine](torch.bfloat16)]


def tiny_components() -> list[Component]:
    return [Component("tiny lm", "sequence", 64 * MB, [128 * MB] * 8),
            Component("tiny vocoder", "oneshot", 32 * MB, [64 * MB] * 4)]


def comfy_modules(standin: bool):
    if standin:
        from comfy_standin import model_management as mm
        from comfy_standin.model_patcher import ModelPatcher
        return mm, ModelPatcher
    path = os.environ.get("COMFYUI_PATH")
    if not path:
        raise SystemExit("COMFYUI_PATH is not set: point it at a ComfyUI 0.33 checkout, or pass --standin")
    sys.path.insert(0, path)
    import comfy.cli_args
    comfy.cli_args.args.cpu = True  # before model_management: no CUDA here
    return importlib.import_module("comfy.model_management"), importlib.import_module("comfy.model_patcher").ModelPatcher


class Scenario:
    """One device, ComfyUI's registry emptied, the image model as a ModelPatcher on it."""

    def __init__(self, mm, patcher_cls, capacity: int, image_bytes: int, scale: int) -> None:
        self.mm, self.patcher_cls, self.scale = mm, patcher_cls, scale
        mm.unload_all_models()
        mm.current_loaded_models.clear()
        self.devices = DeviceService(simulate={str(DEVICE): capacity // scale}, strict=True)
        self.saved: dict[str, object] = {}  # ComfyUI's own memory queries, put back by close()
        self.others = pretend_gpu(mm, self.devices, DEVICE, capacity // scale, scale, setattr=self._patch)
        layers = -(-image_bytes // IMAGE_LAYER)  # ComfyUI loads a model that does not fit layer by layer
        self.image = self.patcher(nn.Sequential(*(Block(image_bytes // layers // scale) for _ in range(layers))))
        self.inference = mm.minimum_inference_memory() * scale  # real-scale, with this device's patches

    def _patch(self, module, name: str, value) -> None:
        self.saved.setdefault(name, getattr(module, name))
        setattr(module, name, value)

    def patcher(self, module: nn.Module):
        p = self.patcher_cls(module, load_device=DEVICE, offload_device=torch.device("cpu"))
        self.others.add(p)
        return p

    def load(self, patcher, memory_required: int = 0) -> int:
        """ComfyUI loads `patcher` as a node does; returns the bytes it moved in (real-scale)."""
        before = patcher.loaded_size()
        self.mm.load_models_gpu([patcher], memory_required=memory_required)
        return max(0, patcher.loaded_size() - before) * self.scale

    def close(self) -> None:
        self.mm.unload_all_models()
        self.mm.current_loaded_models.clear()
        for name, value in self.saved.items():
            setattr(self.mm, name, value)


def ours(s: Scenario, comps: list[Component], rounds: int) -> list[tuple[int, int]]:
    manager = ModelManager(s.devices, VramPolicy({"compute.host_copies": "on"}), arbiter=ComfyArbiter(s.mm))
    twins = [Twin(c, s.scale) for c in comps]
    handles = [manager.register(ModelHandle(t, c.name, c.kind), engine="bench", device=DEVICE)
               for t, c in zip(twins, comps)]
    x = torch.zeros(1)
    moved = []
    for _ in range(rounds):
        image = s.load(s.image)
        before = s.devices.transfers.h2d_bytes
        with manager.request() as ctx, torch.no_grad():
            ctx.plan([[h] for h in handles])  # what the pipeline declares for a one-segment request
            for twin, handle in zip(twins, handles):
                with ctx.use([handle], memory=WORKING // s.scale):
                    twin(x)
        moved.append((image, (s.devices.transfers.h2d_bytes - before) * s.scale))
    for h in handles:
        manager.unregister(h)
    return moved


def comfy(s: Scenario, comps: list[Component], rounds: int) -> list[tuple[int, int]]:
    patchers = [s.patcher(Twin(c, s.scale)) for c in comps]
    moved = []
    for _ in range(rounds):
        image = s.load(s.image)
        moved.append((image, sum(s.load(p, WORKING // s.scale) for p in patchers)))
    return moved


def minimum(inference: int, capacity: int, image: int, image_loaded: int,
            comps: list[Component]) -> tuple[int, int]:
    """(image, speech) bytes that must load per round in steady state: the lower bound in the docstring,
    `image_loaded` the I' that ComfyUI loaded in the first round."""
    total = sum(c.size for c in comps)
    speech = max(0, total - max(0, capacity - inference - min(image, capacity - inference)))
    image_min = max(0, image_loaded - max(0, capacity - WORKING - max(c.size for c in comps)))
    return image_min, speech


def steady(moved: list[tuple[int, int]]) -> tuple[float, float]:
    rest = moved[1:] or moved
    return sum(i for i, _ in rest) / len(rest), sum(t for _, t in rest) / len(rest)


def ratio(moved: float, least: float) -> str:
    if least == 0:
        return "-" if moved == 0 else "inf"
    return f"{moved / least:.2f}"


def run(engines: list[str], images: list[str], gpu_gb: float, rounds: int, standin: bool,
        quick: bool = False) -> list[dict]:
    mm, patcher_cls = comfy_modules(standin)
    capacity = int(gpu_gb * GB)
    rows = []
    for engine in engines:
        comps = tiny_components() if quick else components(engine)
        for image_name in images:
            image = int(IMAGES[image_name] * GB)
            row = {"engine": engine, "image": image_name, "speech_gb": sum(c.size for c in comps) / GB}
            for arm, fn in (("ours", ours), ("comfy", comfy)):
                s = Scenario(mm, patcher_cls, capacity, image, SCALE)
                try:
                    moved = fn(s, comps, rounds)
                    row[arm] = steady(moved)
                    row["min"] = minimum(s.inference, capacity, image, moved[0][0], comps)
                finally:
                    s.close()
            rows.append(row)
    return rows


def print_table(rows: list[dict], gpu_gb: float, source: str) -> None:
    print(f"pretend GPU {gpu_gb:g} GB at 1/{SCALE}, ComfyUI model management: {source}; "
          f"speech working memory {WORKING // MB} MB per component; GB loaded per round in steady state")
    head = (f"{'engine':<11} {'image':<9} {'speech':>6} {'min img':>7} {'min sp':>6} | "
            f"{'ours img':>8} {'ours sp':>7} {'÷min':>5} | {'comfy img':>9} {'comfy sp':>8} {'÷min':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        least = sum(r["min"])
        o, c = r["ours"], r["comfy"]
        print(f"{r['engine']:<11} {r['image']:<9} {r['speech_gb']:6.2f} {r['min'][0] / GB:7.2f} {r['min'][1] / GB:6.2f} | "
              f"{o[0] / GB:8.2f} {o[1] / GB:7.2f} {ratio(sum(o), least):>5} | "
              f"{c[0] / GB:9.2f} {c[1] / GB:8.2f} {ratio(sum(c), least):>5}")


def main(argv: list[str] | None = None) -> list[dict]:
    import units
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu-gb", type=float, default=12.0)
    parser.add_argument("--image", default="sdxl,flux-fp8", help=f"comma-separated, of {', '.join(IMAGES)}")
    parser.add_argument("--engines", default="all", help=f"comma-separated, of {', '.join(units.ENGINES)}")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--standin", action="store_true", help="the in-repo stand-in instead of $COMFYUI_PATH")
    parser.add_argument("--quick", action="store_true", help="one tiny two-component model, as the test runs")
    args = parser.parse_args(argv)
    images = args.image.split(",")
    engines = list(units.ENGINES) if args.engines == "all" else args.engines.split(",")
    for name, known in (("image", IMAGES), ("engine", units.ENGINES)):
        bad = [x for x in (images if name == "image" else engines) if x not in known]
        if bad:
            parser.error(f"unknown {name} {bad}: expected one of {', '.join(known)}")
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the first round only fills the device)")
    rows = run(["tiny"] if args.quick else engines, images, args.gpu_gb, args.rounds, args.standin, args.quick)
    print_table(rows, args.gpu_gb, "stand-in (tests/comfy_standin)" if args.standin else os.environ["COMFYUI_PATH"])
    return rows


if __name__ == "__main__":
    main()

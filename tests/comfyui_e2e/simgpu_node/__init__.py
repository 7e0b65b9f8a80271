"""Test-only ComfyUI custom node: ComfyUI arbitrates the pack's simulated device as its GPU.

Loaded only by the eviction end-to-end test's own server (never shipped). Under `--cpu` ComfyUI's
device is plain `cpu`, and `load_models_gpu` never frees memory for it, so nothing would ever be
evicted. Here ComfyUI's device becomes `cpu:0` (the same CPU, but not `torch.device("cpu")`), which
the pack simulates as a GPU of `MIZUOTO_COMPUTE_SIMULATE_VRAM_MB` (it simulates ComfyUI's own device
inside ComfyUI). ComfyUI's memory queries for it answer from that one simulated device:

- free memory = capacity - the pack's bytes (its `SimulatedMemory`, weights and working memory)
  - the stand-in models' loaded bytes (counted there as "held by others", so the pack sees them too);
- total memory = the capacity; the device is not a CPU to `is_device_cpu`, VRAM state NORMAL;
- ComfyUI's fixed reserves (400 MB reserve, 800 MB minimum inference memory) scaled by 1/64, the
  same scale as tests/test_bridge.py (a 128 MB device stands for an 8 GB card).

The patching is the same set tests/test_bridge.py applies in-process, applied here at import time
of this node (before any prompt runs). It also adds the nodes of a stand-in "diffusion" model: a
real `comfy.model_patcher.ModelPatcher` around plain Linear layers, loaded like a sampler loads
its model (`load_models_gpu`), and a node saving an AUDIO waveform exactly (`torch.save`).
"""
from __future__ import annotations

import os
import sys
import weakref

import torch
from torch import nn

import comfy.model_management as mm
import comfy.model_patcher
import folder_paths

SIM = torch.device("cpu", 0)  # != torch.device("cpu"): ComfyUI arbitrates it
MB = 1 << 20
SCALE = 64  # ComfyUI's fixed GPU reserves divided like test_bridge's sizes
CAPACITY = int(os.environ["MIZUOTO_COMPUTE_SIMULATE_VRAM_MB"]) * MB

_standins: weakref.WeakSet = weakref.WeakSet()  # ComfyUI's own models on SIM (the loader's outputs)
_orig_free, _orig_total, _orig_is_cpu = mm.get_free_memory, mm.get_total_memory, mm.is_device_cpu


def standin_bytes() -> int:
    """Bytes ComfyUI's own models hold on the simulated device (what a GPU's free memory would show)."""
    return sum(p.loaded_size() for p in list(_standins))


def pack_runtime():
    """The pack's runtime (built on first use), with the stand-ins counted on its simulated device."""
    found = [m for name, m in list(sys.modules.items())
             if name.endswith(".nodes.pack.pack_runtime") and hasattr(m, "get_runtime")]
    if len(found) != 1:
        raise RuntimeError(f"expected the Mizuoto pack loaded once, found {len(found)} pack_runtime modules")
    rt = found[0].get_runtime()
    if not rt.devices.is_simulated(SIM) or rt.device != SIM:
        raise RuntimeError(f"the pack's runtime does not simulate ComfyUI's device {SIM}: {rt.device}")
    # Installed on every lookup: the loader node and every ComfyUI memory query make one, and the
    # pack's placements ask ComfyUI for room (load_models_gpu -> get_free_memory) before measuring.
    rt.devices.memory(SIM).external = standin_bytes
    return rt


def get_free_memory(dev=None, torch_free_too=False):
    if dev is not None and dev != SIM:
        return _orig_free(dev, torch_free_too)
    free = pack_runtime().devices.free(SIM)
    return (free, 0) if torch_free_too else free


def get_total_memory(dev=None, torch_total_too=False):
    if dev is not None and dev != SIM:
        return _orig_total(dev, torch_total_too)
    return (CAPACITY, 0) if torch_total_too else CAPACITY


mm.get_torch_device = lambda: SIM
mm.get_free_memory = get_free_memory
mm.get_total_memory = get_total_memory
mm.get_all_torch_devices = lambda exclude_current=False: [] if exclude_current else [SIM]
mm.is_device_cpu = lambda d: _orig_is_cpu(d) and d != SIM
mm.vram_state = mm.VRAMState.NORMAL_VRAM
mm.total_vram = CAPACITY / MB
mm.EXTRA_RESERVED_VRAM = (400 * MB) // SCALE
mm.minimum_inference_memory = lambda: (800 * MB) // SCALE + mm.extra_reserved_memory()


def snapshot() -> dict:
    """Both sides' view of the simulated device, for the test's accounting checks."""
    rt = pack_runtime()
    mem = rt.devices.memory(SIM)
    with rt.manager.lock:  # never mid-placement
        ours = rt.manager.handles
        return {
            "capacity": mem.capacity, "used": mem.used, "peak": mem.peak, "external": mem.external(),
            "comfy_free": mm.get_free_memory(SIM), "pack_free": rt.devices.free(SIM),
            "standin_loaded": standin_bytes(),
            "ours_loaded": sum(h.loaded_bytes for h in ours if h.device == SIM),
            "ours_in_use": sum(h.in_use for h in ours),
            "gave_up_for": {h.name: h.gave_up_for for h in ours},
        }


class StandinModel:
    """A diffusion-sized model: `size_mb` of 1024x1024 fp32 Linear layers in a ModelPatcher on SIM."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"size_mb": ("INT", {"default": 96, "min": 4, "max": 4096, "step": 4})}}

    RETURN_TYPES = ("MIZUOTO_E2E_MODEL",)
    FUNCTION = "load"
    CATEGORY = "testing"

    def load(self, size_mb):
        width = 1024
        with torch.device("meta"):
            layers = [nn.Linear(width, width, bias=False) for _ in range(size_mb * MB // (width * width * 4))]
        net = nn.Sequential(*layers).to_empty(device="cpu")  # values never read: it is only loaded
        patcher = comfy.model_patcher.ModelPatcher(net, load_device=SIM, offload_device=torch.device("cpu"))
        _standins.add(patcher)
        pack_runtime()  # the stand-in's bytes count on the pack's device from now on
        return (patcher,)


class StandinRun:
    """What a sampler does with its model: `load_models_gpu`. Runs on every prompt; passes `text` on."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MIZUOTO_E2E_MODEL",), "text": ("STRING", {"default": ""})},
                "optional": {"after": ("AUDIO",)}}

    RETURN_TYPES = ("STRING",)
    OUTPUT_NODE = True  # runs even when nothing consumes its output (the run after Speak)
    FUNCTION = "run"
    CATEGORY = "testing"

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return float("nan")  # never cached, nor is anything downstream

    def run(self, model, text, after=None):
        before = snapshot()
        mm.load_models_gpu([model])
        return {"ui": {"runs": [{"before": before, "after": snapshot()}]}, "result": (text,)}


class SaveWaveform:
    """Saves the AUDIO's waveform tensor as is (torch.save), for exact comparison by the test."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"audio": ("AUDIO",), "name": ("STRING", {"default": "audio"})}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "save"
    CATEGORY = "testing"

    def save(self, audio, name):
        os.makedirs(folder_paths.get_output_directory(), exist_ok=True)
        path = os.path.join(folder_paths.get_output_directory(), f"{name}.pt")
        torch.save(audio["waveform"].detach().clone(), path)
        return {"ui": {"saved": [{"path": path}]}}


NODE_CLASS_MAPPINGS = {"MizuotoE2EStandinModel": StandinModel, "MizuotoE2EStandinRun": StandinRun,
                       "MizuotoE2ESaveWaveform": SaveWaveform}

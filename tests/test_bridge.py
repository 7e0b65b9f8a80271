"""The ComfyUI bridge, run twice with identical assertions: against a real ComfyUI (COMFYUI_PATH)
and against the in-repo stand-in of its memory API (tests/comfy_standin).

Sizes are ComfyUI's real arithmetic scaled by 1/64 ("GiB" = 16 MiB): an 8 GiB device, a 6 GiB
diffusion-like model (a real ModelPatcher on real ComfyUI) and our 3 GiB TTS component.
"""
import importlib
import os
import sys
import types

import pytest
import torch
from torch import nn

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.comfy.bridge import ComfyArbiter, apply_comfy_defaults
from comfy_standin.pretend_gpu import pretend_gpu

GiB = (1 << 30) // 64
MB = 1 << 20
FAKE = torch.device("cpu", 0)
TOTAL = 8 * GiB


def _real_comfy():
    path = os.environ.get("COMFYUI_PATH")
    if not path:
        pytest.skip("COMFYUI_PATH is not set (the stand-in variant covers the bridge)")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        import comfy.cli_args
        comfy.cli_args.args.cpu = True  # before model_management: no CUDA here
        mm = importlib.import_module("comfy.model_management")
        patcher = importlib.import_module("comfy.model_patcher")
    except ImportError as e:
        pytest.skip(f"ComfyUI at {path} cannot be imported in this environment: {e}")
    return mm, patcher.ModelPatcher


def _standin():
    from comfy_standin import model_management as mm
    from comfy_standin.model_patcher import ModelPatcher
    return mm, ModelPatcher


@pytest.fixture(params=["standin", "comfyui"])
def comfy(request, monkeypatch):
    mm, patcher_cls = _standin() if request.param == "standin" else _real_comfy()
    mm.unload_all_models()
    mm.current_loaded_models.clear()
    devices = DeviceService(simulate={str(FAKE): TOTAL}, strict=True)
    others = pretend_gpu(mm, devices, FAKE, TOTAL, 64, setattr=monkeypatch.setattr)  # ComfyUI's models on it
    yield mm, patcher_cls, devices, others
    mm.unload_all_models()
    mm.current_loaded_models.clear()


def diffusion_model(patcher_cls, others, gib=6):
    width = 1024
    n = int(gib * GiB // (width * width * 4))
    with torch.device("meta"):
        net = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(n)])
    net = net.to_empty(device="cpu")
    patcher = patcher_cls(net, load_device=FAKE, offload_device=torch.device("cpu"))
    others.add(patcher)
    return patcher


class TTS(nn.Module):
    """A 3 GiB (scaled) component: 12 units of 1024x1024 fp32 Linear layers."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, 1024)
        self.blocks = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(12))
        self.out = nn.Linear(1024, 64)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = torch.tanh(b(x))
        return self.out(x)


def tts_stack(devices, mm, settings=None):
    torch.manual_seed(0)
    model = TTS().eval()
    manager = ModelManager(devices, VramPolicy({"compute.host_copies": "on", **(settings or {})}),
                           arbiter=ComfyArbiter(mm))
    handle = manager.register(ModelHandle(model, "tts", "oneshot"), engine="test", device=FAKE)
    return model, manager, handle


X = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))


def speak(manager, handle, model):
    with manager.request() as ctx, ctx.use([handle], memory=32 * MB), torch.no_grad():
        return model(X), ctx


def our_entry(mm, handle, manager):
    patcher = manager.arbiter.patchers[handle]
    return next((lm for lm in mm.current_loaded_models if lm.model is patcher), None)


def test_eviction_goes_both_ways_through_comfyui(comfy):
    mm, patcher_cls, devices, others = comfy
    model, manager, tts = tts_stack(devices, mm)
    unit = tts.layout.units[0].nbytes
    rows = []

    ref, _ = speak(manager, tts, model)
    assert tts.loaded_bytes == tts.size_bytes and our_entry(mm, tts, manager) is not None
    rows.append(("tts speaks", tts.loaded_bytes, 0))

    diffusion = diffusion_model(patcher_cls, others)
    mm.load_models_gpu([diffusion])  # what a sampler node does
    asked, freed = manager.arbiter.patchers[tts].freed_log[-1]
    assert freed >= asked > 0
    assert (tts.size_bytes - tts.loaded_bytes - (0 if tts.loaded_bytes else tts.layout.fixed_bytes)) % unit == 0
    assert tts.loaded_bytes < tts.size_bytes  # our units went back, one unit at a time
    assert diffusion.loaded_size() > 0
    rows.append((f"diffusion loads (ComfyUI asked {asked / MB:.1f} MB, we freed {freed / MB:.1f} MB = "
                 f"{(freed - (0 if tts.loaded_bytes else tts.layout.fixed_bytes)) // unit} units)",
                 tts.loaded_bytes, diffusion.loaded_size()))

    diffusion_before = diffusion.loaded_size()
    out, ctx = speak(manager, tts, model)  # our phase takes memory back through ComfyUI
    assert torch.equal(out, ref)
    assert diffusion.loaded_size() < diffusion_before
    assert tts.loaded_bytes > 0
    rows.append(("tts speaks again", tts.loaded_bytes, diffusion.loaded_size()))

    entry = our_entry(mm, tts, manager)
    mm.free_memory(TOTAL, FAKE, keep_loaded=[entry])  # keep_loaded protects
    assert tts.loaded_bytes == rows[-1][1]

    mm.unload_all_models()  # the "Free memory" button
    assert tts.loaded_bytes == 0
    assert devices.memory(FAKE).used == ref.nbytes + out.nbytes  # only our outputs remain on the device
    rows.append(("unload_all_models", tts.loaded_bytes, diffusion.loaded_size()))
    out, _ = speak(manager, tts, model)
    assert torch.equal(out, ref)
    print("\nstep | tts loaded MB | diffusion loaded MB")
    for step, ours, theirs in rows:
        print(f"{step} | {ours / MB:.1f} | {theirs / MB:.1f}")


def test_comfyui_gives_back_only_what_our_phase_lacks(comfy):
    """ComfyUI's own load_models_gpu would free 1.1x the request plus its minimum inference memory
    (1.2 GiB, here ~19 MB); our phase asks for exactly the bytes it lacks, so the diffusion model keeps
    everything else: after the phase, the device's free memory is our working memory and reserve,
    give or take one of ComfyUI's layers."""
    mm, patcher_cls, devices, others = comfy
    model, manager, tts = tts_stack(devices, mm)
    diffusion = diffusion_model(patcher_cls, others, gib=7)
    mm.load_models_gpu([diffusion])
    before = diffusion.loaded_size()
    ref, _ = speak(manager, tts, model)
    assert tts.loaded_bytes == tts.size_bytes and 0 < diffusion.loaded_size() < before
    layer = 1024 * 1024 * 4
    slack = devices.free(FAKE) - ref.nbytes - 32 * MB - manager.reserve_bytes(FAKE)
    assert -layer < slack < layer, slack / MB


def test_partially_unload_steps_down_unit_by_unit(comfy):
    mm, patcher_cls, devices, others = comfy
    model, manager, tts = tts_stack(devices, mm)
    speak(manager, tts, model)
    patcher = manager.arbiter.patchers[tts]
    unit = tts.layout.units[0].nbytes
    for k in range(1, 4):
        before = tts.loaded_bytes
        assert patcher.partially_unload(torch.device("cpu"), 1) == unit
        assert tts.loaded_bytes == before - unit


def test_unregister_removes_our_entry(comfy):
    mm, patcher_cls, devices, others = comfy
    model, manager, tts = tts_stack(devices, mm)
    speak(manager, tts, model)
    assert our_entry(mm, tts, manager) is not None
    patcher = manager.arbiter.patchers[tts]
    manager.unregister(tts)
    assert all(lm.model is not patcher for lm in mm.current_loaded_models)
    mm.cleanup_models_gc()  # no dead entries left behind


def test_interrupt_stops_a_streamed_phase_and_the_next_request_works(comfy):
    mm, patcher_cls, devices, others = comfy
    model, manager, tts = tts_stack(devices, mm, {"compute.vram_mode": "none"})
    ref, _ = speak(manager, tts, model)
    hook = model.blocks[3].register_forward_hook(lambda *a: mm.interrupt_current_processing(True))
    with pytest.raises(mm.InterruptProcessingException):
        speak(manager, tts, model)
    hook.remove()
    assert tts.in_use == 0 and all(u.depth == 0 for u in tts.layout.units)
    out, ctx = speak(manager, tts, model)
    assert torch.equal(out, ref) and ctx.meta["memory"]["streamed_mb"] > 0


def test_comfy_command_line_maps_onto_our_settings(comfy):
    mm, *_ = comfy

    class Args:
        reserve_vram = 1.5
        gpu_only = False

    for state, mode in [("LOW_VRAM", "low"), ("NO_VRAM", "none"), ("HIGH_VRAM", "high"), ("NORMAL_VRAM", "normal")]:
        mm.vram_state = getattr(mm.VRAMState, state)
        policy = apply_comfy_defaults(VramPolicy(), mm, Args)
        assert policy.get("compute.vram_mode") == mode
        assert policy.get("compute.vram_reserve_mb") == 1536
    # the user's own setting wins over ComfyUI's flag
    policy = apply_comfy_defaults(VramPolicy({"compute.vram_mode": "normal"}), mm, Args)
    assert policy.get("compute.vram_mode") == "normal"


@pytest.mark.parametrize("comfy_device", [torch.device("cpu"), FAKE])
def test_simulated_vram_inside_comfyui_is_comfyuis_own_device(monkeypatch, comfy_device):
    """compute.simulate_vram_mb inside ComfyUI simulates ComfyUI's own device object: plain `cpu` as
    before (which ComfyUI never arbitrates), or a `cpu:0` ComfyUI reports as its GPU (the end-to-end
    eviction test's simgpu_node), so our patchers land on the device ComfyUI frees memory on."""
    from mizuoto.nodes.pack.pack_runtime import build_runtime
    mm, _ = _standin()
    monkeypatch.setattr(mm, "get_torch_device", lambda: comfy_device)
    comfy_pkg = types.ModuleType("comfy")
    comfy_pkg.model_management = mm
    comfy_pkg.cli_args = types.SimpleNamespace(args=types.SimpleNamespace(gpu_only=False, reserve_vram=None))
    for name, module in [("comfy", comfy_pkg), ("comfy.model_management", mm),
                         ("comfy.cli_args", comfy_pkg.cli_args), ("folder_paths", types.ModuleType("folder_paths"))]:
        monkeypatch.setitem(sys.modules, name, module)
    rt = build_runtime(VramPolicy({"compute.simulate_vram_mb": 8}))
    assert str(rt.device) == str(comfy_device) and list(rt.devices.simulated) == [str(comfy_device)]
    assert rt.devices.total(comfy_device) == 8 * MB and rt.manager.arbiter.mm is mm
    handle = rt.manager.register(ModelHandle(nn.Linear(4, 4), "lin", "oneshot"), engine="test", device=rt.device)
    assert rt.manager.arbiter.patchers[handle].load_device == comfy_device

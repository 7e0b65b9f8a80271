"""Stand-in for `comfy.model_patcher.ModelPatcher` (ComfyUI 0.33) around a plain nn.Module.

Only the memory side: byte accounting and the moves of whole "units" (modules whose parameters are
all their own, i.e. leaf modules with weights). No weight patches (LoRA), hooks, clones, pinning or
comfy.ops low-VRAM casting: with plain modules, units that do not fit a partial budget simply stay
on the offload device, exactly as in ComfyUI. No async offload streams either (ComfyUI has none
without CUDA), so the offload buffer is just the largest unit moved or left behind.
"""
from __future__ import annotations

import uuid

from . import model_management

_ACCOUNTING = (("model_loaded_weight_memory", 0), ("lowvram_patch_counter", 0), ("model_lowvram", False),
               ("current_weight_patches_uuid", None), ("model_offload_buffer_memory", 0))


class ModelPatcher:
    def __init__(self, model, load_device, offload_device, size=0, weight_inplace_update=False):
        self.size = size  # > 0 overrides the measured size
        self.model = model
        if getattr(model, "device", None) is None:
            model.device = offload_device
        for name, value in _ACCOUNTING:  # kept on the module, as ComfyUI does
            if not hasattr(model, name):
                setattr(model, name, value)
        self.load_device, self.offload_device = load_device, offload_device
        self.parent = None
        self.patches_uuid = uuid.uuid4()
        self.clone_base_uuid = uuid.uuid4()
        self.is_multigpu_base_clone = False
        self.model_options = {"transformer_options": {}}

    # ---- what the registry asks -----------------------------------------------------------------
    def is_dynamic(self):
        return False

    def is_clone(self, other):
        return hasattr(other, "model") and self.model is other.model  # True for itself too

    def model_patches_models(self):
        return []

    def model_patches_to(self, device):
        pass

    def model_dtype(self):
        return self.model.get_dtype() if hasattr(self.model, "get_dtype") else None

    def model_size(self):
        if self.size <= 0:
            self.size = model_management.module_size(self.model)
        return self.size

    def loaded_size(self):
        return self.model.model_loaded_weight_memory

    def loaded_ram_size(self):
        return 0

    def lowvram_patch_counter(self):
        return self.model.lowvram_patch_counter

    def current_loaded_device(self):
        return self.model.device

    # ---- moves ----------------------------------------------------------------------------------
    def _units(self):
        """(bytes, name, module) for each module that owns all of its parameters."""
        units = []
        for name, m in self.model.named_modules():
            own = dict(m.named_parameters(recurse=False))
            if own and all(n in own for n, _ in m.named_parameters()):
                units.append((model_management.module_size(m), name, m))
        return units

    def load(self, device_to=None, lowvram_model_memory=0, force_patch_weights=False, full_load=False):
        """Largest units first; a unit fits when the running total plus itself plus the offload
        buffer (the largest unit left behind, or its own size) stays under the budget."""
        counted, buffer, fitting = 0, 0, []
        for size, _, m in sorted(self._units(), key=lambda u: u[:2], reverse=True):
            if full_load or counted + size + max(buffer, size) < lowvram_model_memory:
                counted += size
                fitting.append(m)
            else:
                buffer = max(buffer, size)
        for m in fitting:
            m.comfy_patched_weights = True
            m.to(device_to)
        self.model.model_lowvram = False  # plain units are never cast at run time
        if full_load:
            self.model.to(device_to)
            counted = self.model_size()
        self.model.device = device_to
        self.model.model_loaded_weight_memory = counted
        self.model.model_offload_buffer_memory = buffer
        self.model.current_weight_patches_uuid = self.patches_uuid

    def partially_load(self, device_to, extra_memory=0, force_patch_weights=False):
        """Load `extra_memory` more bytes (negative: give some back). Returns the bytes added."""
        stale = self.model.current_weight_patches_uuid is not None and (
            force_patch_weights or self.model.current_weight_patches_uuid != self.patches_uuid)
        if stale:  # reload from scratch with the same total
            used = self.model.model_loaded_weight_memory
            self.unpatch_model(self.offload_device)
            extra_memory += used
        elif extra_memory < 0:
            self.partially_unload(self.offload_device, -extra_memory, force_patch_weights=force_patch_weights)
            return 0
        if not self.model.model_lowvram and self.model.model_loaded_weight_memory > 0:
            return 0  # a load that left no unit cast at run time is never extended
        before = self.model.model_loaded_weight_memory
        try:
            self.load(device_to, lowvram_model_memory=before + extra_memory, force_patch_weights=force_patch_weights,
                      full_load=before + extra_memory > self.model_size())
        except Exception:
            self.detach()
            raise
        return self.model.model_loaded_weight_memory - before

    def partially_unload(self, device_to, memory_to_free=0, force_patch_weights=False):
        """Move resident units back, smallest first, until MORE than asked (plus the growth of the
        offload buffer) is freed: it may free more than asked. Returns the bytes freed."""
        start = buffer = self.model.model_offload_buffer_memory
        freed = 0
        for size, _, m in sorted(self._units(), key=lambda u: u[:2]):
            if freed > memory_to_free + buffer - start:
                break
            if getattr(m, "comfy_patched_weights", False) is True:
                m.to(device_to)
                m.comfy_patched_weights = False
                freed += size
                buffer = max(buffer, size)
        self.model.model_lowvram = True
        self.model.model_loaded_weight_memory -= freed
        self.model.model_offload_buffer_memory = buffer
        return freed

    def unpatch_model(self, device_to=None, unpatch_weights=True):
        if not unpatch_weights:
            return
        self.model.model_lowvram = False
        self.model.lowvram_patch_counter = 0
        self.model.current_weight_patches_uuid = None
        if device_to is not None:
            self.model.to(device_to)
            self.model.device = device_to
        self.model.model_loaded_weight_memory = 0
        self.model.model_offload_buffer_memory = 0
        for m in self.model.modules():
            if hasattr(m, "comfy_patched_weights"):
                del m.comfy_patched_weights

    def detach(self, unpatch_all=True):
        self.model_patches_to(self.offload_device)
        if unpatch_all:
            self.unpatch_model(self.offload_device, unpatch_weights=True)
        return self.model

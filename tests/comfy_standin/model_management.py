"""Stand-in for `comfy.model_management` (ComfyUI 0.33): the registry of loaded models and its
eviction rules, on one CPU-like device. Tests replace the memory queries and globals on this module;
internal calls look them up at call time, as in ComfyUI. Left out: pinned-memory budgets
(`pins_required` only evicts *dynamic* models' pinned RAM in ComfyUI), DynamicVRAM, other backends.
"""
from __future__ import annotations

import enum
import gc
import logging
import sys
import threading
import weakref

import psutil
import torch


VRAMState = enum.Enum("VRAMState", "DISABLED NO_VRAM LOW_VRAM NORMAL_VRAM HIGH_VRAM SHARED", start=0)

vram_state = VRAMState.NORMAL_VRAM
lowvram_available = True
DISABLE_SMART_MEMORY = False  # --disable-smart-memory: evict whole models, never partially
MIN_WEIGHT_MEMORY_RATIO = 0.4  # ComfyUI uses 0.0 on NVIDIA, 0.4 elsewhere
EXTRA_RESERVED_VRAM = 400 * 1024 * 1024  # --reserve-vram; 600/700 MiB on Windows
current_loaded_models: list[LoadedModel] = []  # most recently loaded first


# ---- devices and memory queries (tests replace these) -------------------------------------------
def get_torch_device():
    return torch.device("cpu")


def get_all_torch_devices(exclude_current=False):
    return [] if exclude_current else [get_torch_device()]


def is_device_cpu(device):
    return getattr(device, "type", None) == "cpu"  # the index is ignored: cpu:0 counts as cpu


def get_total_memory(dev=None, torch_total_too=False):
    total = psutil.virtual_memory().total
    return (total, total) if torch_total_too else total


def get_free_memory(dev=None, torch_free_too=False):
    free = psutil.virtual_memory().available
    return (free, free) if torch_free_too else free


def soft_empty_cache(force=False):
    pass  # nothing is cached on a CPU device


def extra_reserved_memory():
    return EXTRA_RESERVED_VRAM


def minimum_inference_memory():
    return 0.8 * 1024 ** 3 + extra_reserved_memory()


def module_size(module):
    return sum(t.nbytes for t in module.state_dict().values())


# ---- the registry -------------------------------------------------------------------------------
class LoadedModel:
    """One entry of `current_loaded_models`. It holds weak references only: to the patcher, to the
    patcher's parent (if any: when a clone dies, the entry moves to the parent) and, once loaded,
    to `patcher.model`, whose death removes the entry (`cleanup_models`)."""

    def __init__(self, model):
        self._patcher_finalizer = None
        self._follow(model)
        self.device = model.load_device
        self.real_model = None
        self.currently_used = True
        self.model_finalizer = None

    def _follow(self, patcher):
        self._model = weakref.ref(patcher)
        if patcher.parent is not None:
            self._parent_model = weakref.ref(patcher.parent)
            self._patcher_finalizer = weakref.finalize(patcher, self._switch_parent)
            self._patcher_finalizer.atexit = False

    def _switch_parent(self):
        parent = self._parent_model()
        if parent is not None:
            self._follow(parent)
            self.device = parent.load_device

    @property
    def model(self):
        return self._model()  # the patcher, or None once it was collected

    def model_memory(self):
        return self.model.model_size()

    def model_loaded_memory(self):
        return self.model.loaded_size()

    def model_offloaded_memory(self):
        return self.model.model_size() - self.model.loaded_size()

    def model_memory_required(self, device):
        """What loading onto `device` still needs: the offloaded part if the model sits there."""
        on_device = device == self.model.current_loaded_device()
        return self.model_offloaded_memory() if on_device else self.model_memory()

    def model_load(self, lowvram_model_memory=0, force_patch_weights=False):
        self.model.model_patches_to(self.device)
        self.model.model_patches_to(self.model.model_dtype())
        extra = 1e32 if lowvram_model_memory == 0 else lowvram_model_memory  # 0 means "all of it"
        self.model_use_more_vram(extra, force_patch_weights=force_patch_weights)
        module = self.model.model
        self.real_model = weakref.ref(module)
        self.model_finalizer = weakref.finalize(module, cleanup_models)
        self.model_finalizer.atexit = False
        return module

    def model_use_more_vram(self, extra_memory, force_patch_weights=False):
        return self.model.partially_load(self.device, extra_memory, force_patch_weights=force_patch_weights)

    def model_unload(self, memory_to_free=None, unpatch_weights=True):
        """True when the model was detached (the caller drops the entry). A partial unload is tried
        first when less than the resident bytes is asked; the entry stays only if it freed enough."""
        if memory_to_free is not None and memory_to_free < self.model.loaded_size():
            if self.model.partially_unload(self.model.offload_device, memory_to_free) >= memory_to_free:
                return False
        self.model.detach(unpatch_weights)
        self.model_finalizer.detach()
        self.model_finalizer = None
        self.real_model = None
        return True

    def __eq__(self, other):
        return self.model is other.model  # the same patcher object (not merely a clone)

    def __del__(self):
        if self._patcher_finalizer is not None:
            self._patcher_finalizer.detach()

    def is_dead(self):
        """The patcher was collected while its module is still alive (a leak in ComfyUI's eyes)."""
        return self.real_model() is not None and self.model is None


def cleanup_models_gc():
    if not any(entry.is_dead() for entry in current_loaded_models):
        return
    leaked = next(e for e in current_loaded_models if e.is_dead()).real_model().__class__.__name__
    logging.info("Potential memory leak detected with model {}, doing a full garbage collect, for maximum "
                 "performance avoid circular references in the model code.".format(leaked))
    gc.collect()
    soft_empty_cache()
    for entry in current_loaded_models:
        if entry.is_dead():
            logging.warning("WARNING, memory leak with model {}. Please make sure it is not being "
                            "referenced from somewhere.".format(entry.real_model().__class__.__name__))


def cleanup_models():
    """Drop the entries whose module is gone (run by the module finalizers)."""
    for i in reversed(range(len(current_loaded_models))):
        if current_loaded_models[i].real_model() is None:
            current_loaded_models.pop(i)


def free_memory(memory_required, device, keep_loaded=[], for_dynamic=False, pins_required=0, ram_required=0):
    """Unload (partially, else whole) registered models on `device` until `memory_required` bytes are
    free. Candidates: most offloaded bytes first, then fewest references to the patcher, then the
    smallest, then the most recently loaded. Each is asked only for the shortfall left at its turn.
    Returns the entries that were dropped."""
    cleanup_models_gc()
    candidates = []
    for i in reversed(range(len(current_loaded_models))):
        entry = current_loaded_models[i]
        if (device is None or entry.device == device) and entry not in keep_loaded and not entry.is_dead():
            candidates.append((-entry.model_offloaded_memory(), sys.getrefcount(entry.model),
                               entry.model_memory(), i))
            entry.currently_used = False
    dropped = []
    for *_, i in sorted(candidates):
        entry = current_loaded_models[i]
        ask = 1e32  # --disable-smart-memory: always everything
        if not DISABLE_SMART_MEMORY or device is None:
            ask = 0 if device is None else memory_required - get_free_memory(device)
            if entry.model.is_dynamic() and for_dynamic:  # dynamic models make room on demand
                memory_required -= entry.model.loaded_size()
                ask = 0
        if ask > 0 and entry.model_unload(ask):
            dropped.append(i)
    unloaded = [current_loaded_models.pop(i) for i in sorted(dropped, reverse=True)]
    if unloaded:
        soft_empty_cache()
    elif device is not None and vram_state != VRAMState.HIGH_VRAM:
        free_total, free_torch = get_free_memory(device, torch_free_too=True)
        if free_torch > free_total * 0.25:
            soft_empty_cache()
    return unloaded


def load_models_gpu(models, memory_required=0, force_patch_weights=False, minimum_memory_required=None,
                    force_full_load=False):
    cleanup_models_gc()
    inference = minimum_inference_memory()
    extra_mem = max(inference, memory_required + extra_reserved_memory())
    if minimum_memory_required is None:
        minimum = extra_mem
    else:
        minimum = max(inference, minimum_memory_required + extra_reserved_memory())

    wanted = {}  # ordered, without duplicates: each model, then the models its patches need
    for m in models:
        wanted[m] = None
        wanted.update(dict.fromkeys(m.model_patches_models()))
    todo = list(wanted)[::-1]  # the LAST listed model is served (and budgeted) first

    entries, all_dynamic = [], True
    for patcher in todo:
        if not patcher.is_dynamic():
            all_dynamic = False
        fresh = LoadedModel(patcher)
        known = next((e for e in current_loaded_models if e == fresh), None)
        if known is not None:
            known.currently_used = True
            entries.append(known)
        else:
            if hasattr(patcher, "model"):
                logging.info("Requested to load {}".format(patcher.model.__class__.__name__))
            entries.append(fresh)

    # Every registered clone of a model to load (the model itself included) leaves the list and is
    # detached without unpatching; the model comes back at the front below.
    for entry in entries:
        clones = [i for i, other in enumerate(current_loaded_models) if entry.model.is_clone(other.model)]
        for i in reversed(clones):
            gone = current_loaded_models.pop(i)
            gone.model.detach(unpatch_all=False)
            gone.model_finalizer.detach()

    needed, pins = {}, {}
    for entry in entries:
        needed[entry.device] = needed.get(entry.device, 0) + entry.model_memory_required(entry.device)
        if not entry.model.is_dynamic():
            pins[entry.device] = pins.get(entry.device, 0) + entry.model_memory()
    host = torch.device("cpu")  # only the plain host device is exempt (cpu:0 is not)
    for device, need in needed.items():
        if device != host:
            free_memory(need * 1.1 + extra_mem, device, for_dynamic=all_dynamic, pins_required=pins.get(device, 0))
    for device in needed:
        if device != host and get_free_memory(device) < minimum:
            gone = free_memory(minimum, device, for_dynamic=all_dynamic)
            logging.info("{} models unloaded.".format(len(gone)))

    for entry in entries:
        patcher = entry.model
        state = VRAMState.DISABLED if is_device_cpu(patcher.load_device) else vram_state
        extra = 0  # 0: load everything
        if lowvram_available and state in (VRAMState.LOW_VRAM, VRAMState.NORMAL_VRAM) and not force_full_load:
            resident = entry.model_loaded_memory()
            usable = get_free_memory(patcher.load_device) + resident
            weights_floor = min(usable * MIN_WEIGHT_MEMORY_RATIO, usable - minimum_inference_memory())
            extra = max(0, usable - minimum, weights_floor) - resident  # may be negative: give back
            if extra == 0:
                extra = 0.1
        if state == VRAMState.NO_VRAM:
            extra = 0.1
        entry.model_load(extra, force_patch_weights=force_patch_weights)
        current_loaded_models.insert(0, entry)


def loaded_models(only_currently_used=False):
    """The registered patchers (None for an entry whose patcher died)."""
    return [e.model for e in current_loaded_models if e.currently_used or not only_currently_used]


def unload_all_models():
    for device in get_all_torch_devices():
        free_memory(1e30, device)


# ---- interruption -------------------------------------------------------------------------------
class InterruptProcessingException(BaseException):  # BaseException: `except Exception` lets it pass
    pass


interrupt_processing_mutex = threading.RLock()
interrupt_processing = False


def interrupt_current_processing(value=True):
    global interrupt_processing
    with interrupt_processing_mutex:
        interrupt_processing = value


def processing_interrupted():
    with interrupt_processing_mutex:
        return interrupt_processing


def throw_exception_if_processing_interrupted():
    global interrupt_processing
    with interrupt_processing_mutex:
        if interrupt_processing:
            interrupt_processing = False
            raise InterruptProcessingException()

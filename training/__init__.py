"""Training next to inference: memory presets, the host-side optimizer, estimates, resumable jobs.

No ComfyUI import here. A method (GPT-SoVITS s1, ...) describes itself with a `MethodInfo`; the job
loop in `job.py` runs its steps with the tools its preset selects (`memory.py`).
"""
from .memory import PRESETS, HostAdamW, MemoryPreset, Tools, resolve_tools
from .estimate import MethodInfo, TransformerSizes

__all__ = ["PRESETS", "HostAdamW", "MemoryPreset", "MethodInfo", "Tools", "TransformerSizes", "resolve_tools"]

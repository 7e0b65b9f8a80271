"""The VRAM runtime: a model runs whenever its minimum working set fits.

No ComfyUI import here (only in the bridge module).
"""
from .calibration import Calibration
from .devices import DeviceService, StrictDeviceError
from .handles import ModelHandle
from .manager import ModelManager
from .phases import Cancelled, RequestContext
from .policy import SettingsError, VramPolicy
from .service import RuntimeService
from .streamer import Streamer

__all__ = [
    "Calibration", "Cancelled", "DeviceService", "ModelHandle", "ModelManager", "RequestContext",
    "RuntimeService", "SettingsError", "Streamer", "StrictDeviceError", "VramPolicy",
]

"""ComfyUI nodes, one subpackage per engine; the engine-independent ones live in common/."""
from .common import folders, routes
from .common.speak import MizuotoRuntimeSettings, MizuotoSpeak
from .hibari.nodes import MizuotoLoadHibari

folders.register()
routes.register_routes()

NODE_CLASS_MAPPINGS = {
    "MizuotoLoadHibari": MizuotoLoadHibari,
    "MizuotoSpeak": MizuotoSpeak,
    "MizuotoRuntimeSettings": MizuotoRuntimeSettings,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "MizuotoLoadHibari": "Load Embedded Voice (hibari heart)",
    "MizuotoSpeak": "Speak (Mizuoto)",
    "MizuotoRuntimeSettings": "Runtime Settings (Mizuoto)",
}

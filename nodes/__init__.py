"""ComfyUI nodes, one subpackage per engine; the engine-independent ones live in common/."""
from .common import folders, routes
from .common.speak import MizuotoRuntimeSettings, MizuotoSpeak
from .hibari.nodes import MizuotoLoadHibari
from .qwen3_tts.nodes import MizuotoLoadQwen3TTS

folders.register()
routes.register_routes()

NODE_CLASS_MAPPINGS = {
    "MizuotoLoadHibari": MizuotoLoadHibari,
    "MizuotoLoadQwen3TTS": MizuotoLoadQwen3TTS,
    "MizuotoSpeak": MizuotoSpeak,
    "MizuotoRuntimeSettings": MizuotoRuntimeSettings,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "MizuotoLoadHibari": "Load Embedded Voice (hibari heart)",
    "MizuotoLoadQwen3TTS": "Load Qwen3-TTS",
    "MizuotoSpeak": "Speak (Mizuoto)",
    "MizuotoRuntimeSettings": "Runtime Settings (Mizuoto)",
}

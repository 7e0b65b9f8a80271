"""ComfyUI nodes: one loader per registered engine (each `nodes/<engine>/` declares an `ENGINE`), the
Speak node and the Runtime Settings node; model folders and the panel's route."""
from .common import folders, routes
from .common.loader_node import loader_node
from .common.registry import discover
from .common.speak import MizuotoRuntimeSettings, MizuotoSpeak

folders.register()
routes.register_routes()

ENGINES = discover()
NODE_CLASS_MAPPINGS = {spec.loader_node: loader_node(spec) for spec in ENGINES} | {
    "MizuotoSpeak": MizuotoSpeak,
    "MizuotoRuntimeSettings": MizuotoRuntimeSettings,
}
NODE_DISPLAY_NAME_MAPPINGS = {spec.loader_node: spec.loader_title for spec in ENGINES} | {
    "MizuotoSpeak": "Speak (Mizuoto)",
    "MizuotoRuntimeSettings": "Runtime Settings (Mizuoto)",
}

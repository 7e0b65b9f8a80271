"""GET /mizuoto/runtime: the loaded audio models and the last request's meta, for the web panel.

Read-only: it reports the runtime's counters and changes nothing.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from .pack_runtime import PackRuntime, get_runtime

MB = 1 << 20


def runtime_report(runtime: PackRuntime) -> dict[str, Any]:
    """Every registered component with its loaded / streamed / host / total bytes, and the last meta."""
    with runtime.manager.lock:  # a consistent view, never mid-placement
        return _report(runtime)


def _report(runtime: PackRuntime) -> dict[str, Any]:
    components = [{
        "name": h.name,
        "engine": h.engine,
        "device": str(h.device),
        "managed": h.managed,  # False on a plain CPU: the weights simply run from RAM
        "size_mb": h.size_bytes / MB,
        "loaded_mb": h.loaded_bytes / MB,
        "streamed_mb": h.streamed_bytes / MB,  # since load; the last request's is in last.memory
        "host_mb": h.host_bytes / MB,
        "partial": h.partial,
        "in_use": bool(h.in_use),
    } for h in runtime.manager.handles]
    models = [{"name": name, "components": [h.name for h in model.handles]}
              for name, model in runtime.service.models.items()]
    device = runtime.device
    return {
        "device": str(device),
        "free_mb": runtime.manager.free_bytes(device) / MB if runtime.devices.is_managed(device) else None,
        "total_mb": runtime.devices.total(device) / MB,
        "models": models,
        "components": components,
        "last": json.loads(json.dumps(runtime.last_meta, default=str)),
    }


def register_routes() -> None:
    """Add the route to ComfyUI's server (inside ComfyUI only)."""
    server = sys.modules.get("server")
    prompt_server = getattr(getattr(server, "PromptServer", None), "instance", None)
    if prompt_server is None:
        return
    from aiohttp import web

    @prompt_server.routes.get("/mizuoto/runtime")
    async def runtime_route(request):
        return web.json_response(runtime_report(get_runtime()))

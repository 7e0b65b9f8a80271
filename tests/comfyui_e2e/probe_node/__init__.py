"""Test-only ComfyUI custom node for the end-to-end tests (never shipped, never loaded by users).

It adds no node, only a read-only route showing ComfyUI's own list of loaded models
(`comfy.model_management.current_loaded_models`), so a test can see from outside the server
whether our components are registered with ComfyUI's memory management and whether `/free`
removed them.
"""
import sys

NODE_CLASS_MAPPINGS = {}


def _register() -> None:
    server = sys.modules.get("server")
    prompt_server = getattr(getattr(server, "PromptServer", None), "instance", None)
    if prompt_server is None:
        return
    from aiohttp import web

    @prompt_server.routes.get("/mizuoto_e2e/comfy_loaded_models")
    async def comfy_loaded_models(request):
        import comfy.model_management as mm

        out = []
        for lm in list(mm.current_loaded_models):
            model = lm.model  # a weak reference resolved; None when the model is gone
            handle = getattr(model, "handle", None)
            out.append({
                "patcher": type(model).__name__ if model is not None else None,
                "component": getattr(handle, "name", None),
                "device": str(lm.device),
                "size_mb": model.model_size() / 2**20 if model is not None else None,
                "loaded_mb": model.loaded_size() / 2**20 if model is not None else None,
            })
        return web.json_response(out)


_register()

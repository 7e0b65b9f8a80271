"""The ComfyUI bridge (the only part of the runtime that talks to ComfyUI)."""

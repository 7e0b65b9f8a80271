"""An in-repo stand-in for the part of ComfyUI (0.33) that the Mizuoto bridge talks to.

`comfy_standin.model_management` mirrors the memory API of `comfy.model_management` and
`comfy_standin.model_patcher` a minimal `ModelPatcher` for plain nn.Modules. Both were written from
the behaviour of the real modules (see tests/test_comfy_standin.py, which runs the same scenarios
against both when a ComfyUI checkout is available); no ComfyUI code is included. The package is
deliberately not called `comfy`, so it can live in one process with a real ComfyUI.
"""

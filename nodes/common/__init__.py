"""The earlier home of the shared modules, kept so code written against it keeps importing.

`nodes/common/` was split by responsibility (docs/architecture.md): model parts in `nodes/blocks/`, file
formats and model folders in `nodes/formats/`, the pack's layer in `nodes/pack/`. Importing
`nodes.common.pipeline` gives the very module `nodes.pack.pipeline` (one module object, so patching
either name patches both). The pack's own code never imports this package.
"""
from __future__ import annotations

import importlib
import sys

MOVED = {
    "blocks": ("bigvgan", "campplus", "conformer", "dac", "decode", "flow", "hubert", "mel", "qwen3", "sampling",
               "transformer", "vocoder", "w2v_bert"),
    "formats": ("checkpoint", "download", "folders", "onnx_graph", "onnx_reader"),
    "pack": ("audio", "engine", "loader_node", "model_docs", "pack_runtime", "pipeline", "registry", "routes",
             "segments", "silence", "speak", "text", "verify"),
}



def _alias() -> None:
    nodes = __name__.rpartition(".")[0]
    for layer, names in MOVED.items():
        for name in names:
            module = importlib.import_module(f"{nodes}.{layer}.{name}")
            sys.modules[f"{__name__}.{name}"] = module
            globals()[name] = module


_alias()

"""What an engine gives the registry-driven conformance test (tests/engines_native/test_conformance.py).

Every registered engine has `tests/<engine_id>/tiny.py` with `conformance_case(root) -> Case`: a tiny model
folder in the upstream layout (written under `root`; None for an engine without files) and one short
valid request in the engine's main mode. The test fails for an engine that has none.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from mizuoto.nodes.pack.pipeline import SpeakRequest

# Engines whose published folder holds no config file at all: their sizes come from the checkpoints'
# tensor shapes, which tests/test_hostile_checkpoints.py spoils instead. Their tiny folder must hold no
# config numbers either (a config added later is then tested like every other engine's).
NO_CONFIG = {"chatterbox": "ResembleAI/chatterbox: upstream hard-codes the sizes; the loader reads them from the shapes"}


@dataclass
class Case:
    folder: Path | None
    request: SpeakRequest
    unit_bytes: int = 16 << 10     # tiny layers: units this small, so every engine has something to stream
    instruction: str = "Speak slowly and softly."   # one the engine accepts (OmniVoice: voice-design items only)


def conformance_case(engine_id: str, root: Path) -> Case:
    """The Case of `tests/<engine_id>/tiny.py`, its tiny model written under `root`."""
    path = Path(__file__).resolve().parent / engine_id / "tiny.py"
    assert path.is_file(), f"{engine_id}: registered engines need {path} with conformance_case(root)"
    spec = importlib.util.spec_from_file_location(f"conformance_{engine_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.conformance_case(root)

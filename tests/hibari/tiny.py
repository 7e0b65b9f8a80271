"""The embedded voice for the conformance test: no folder (its weights ship in the hibari-tts wheel)."""
from conformance import Case

from mizuoto.nodes.pack.pipeline import SpeakRequest


def conformance_case(root) -> Case:
    return Case(None, SpeakRequest("Hello there. Streaming changes nothing.", seed=3, speed=1.1, language="en"))

"""Speech to the browser as it is made: each piece of a request's audio (`speak(..., on_audio=)`) sent over
ComfyUI's websocket to the client that queued the prompt, as the custom event "mizuoto.audio";
`web/mizuoto_live.js` plays the pieces in order. The node's AUDIO output is unchanged.

    live = LiveAudio.for_node(unique_id)        # None outside ComfyUI, or when no client is listening
    wav, meta = speak(model, request, on_audio=live)
    live.done()

Messages: {"node", "seq", "start", "samples", "sample_rate", "pcm"} with `pcm` the float32 little-endian
samples in base64 (exact: the page can compare them with the output), at most MESSAGE_SAMPLES per
message; then {"node", "seq", "done": true, "samples": total}.
"""
from __future__ import annotations

import base64
import sys
from typing import Any

import numpy as np
from torch import Tensor

EVENT = "mizuoto.audio"
MESSAGE_SAMPLES = 1 << 16       # ~1.4 s at 48 kHz per websocket message


class LiveAudio:
    """Sends one node's audio pieces to one ComfyUI client, in order."""

    def __init__(self, server: Any, client: str, node: str) -> None:
        self.server = server
        self.client = client
        self.node = node
        self.seq = 0
        self.sent = 0

    @classmethod
    def for_node(cls, unique_id: object) -> LiveAudio | None:
        """The sender for the node running now, inside ComfyUI with a client listening; else None."""
        server = getattr(getattr(sys.modules.get("server"), "PromptServer", None), "instance", None)
        client = getattr(server, "client_id", None)
        if server is None or client is None or unique_id is None:
            return None
        return cls(server, client, str(unique_id))

    def _send(self, data: dict[str, Any]) -> None:
        self.server.send_sync(EVENT, {"node": self.node, "seq": self.seq, **data}, self.client)
        self.seq += 1

    def __call__(self, piece: Tensor, sample_rate: int) -> None:
        samples = np.ascontiguousarray(piece.detach().reshape(-1).float().cpu().numpy(), dtype="<f4")
        for at in range(0, samples.size, MESSAGE_SAMPLES):
            part = samples[at:at + MESSAGE_SAMPLES]
            self._send({"start": self.sent, "samples": int(part.size), "sample_rate": int(sample_rate),
                        "pcm": base64.b64encode(part.tobytes()).decode("ascii")})
            self.sent += int(part.size)

    def done(self) -> None:
        self._send({"done": True, "samples": self.sent})

"""A tiny Chrome DevTools Protocol client over `--remote-debugging-pipe` (standard library only).

Chromium reads commands from fd 3 and writes replies/events to fd 4, each a JSON object ending in a
NUL byte. No websocket, no port, no extra package. Used by the end-to-end test and by
make_examples.py to drive the real ComfyUI frontend headless.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
]


def find_chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    return None


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; `evaluate` runs JS in it and returns the value."""

    def __init__(self, executable: str, width: int = 1400, height: int = 900, log_path: str | None = None) -> None:
        self.user_data_dir = tempfile.mkdtemp(prefix="mizuoto-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)   # out of the way of 3 and 4 before dup2
        b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)

        def wire_fds():  # in the child, before exec: chromium expects the pipe on fds 3 and 4
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._log = open(log_path or os.devnull, "wb")
        self.proc = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self.user_data_dir}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, close_fds=False, preexec_fn=wire_fds)
        for fd in (to_child_r, from_child_w, a, b):
            os.close(fd)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    # ---- protocol ------------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise CDPError(f"chromium closed the pipe (exit code {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    # ---- page helpers --------------------------------------------------------------------------
    def evaluate(self, expression: str, timeout: float = 60):
        """Evaluate JS (awaiting a promise) and return its JSON value; a JS exception raises CDPError."""
        res = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                             "returnByValue": True, "timeout": int(timeout * 1000)},
                        timeout=timeout + 5)
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise CDPError(f"JS: {d.get('exception', {}).get('description') or d.get('text')}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60, interval: float = 0.25):
        """Poll a JS expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression, timeout=max(1.0, deadline - time.monotonic()))
                if value:
                    return value
            except CDPError as e:
                last_error = e
            time.sleep(interval)
        detail = f" (last error: {last_error})" if last_error else ""
        raise TimeoutError(f"timed out waiting for {expression!r}{detail}")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def screenshot(self, path: str | Path, clip: dict | None = None, fmt: str = "png", quality: int = 90) -> Path:
        params: dict = {"format": fmt}
        if fmt == "jpeg":
            params["quality"] = quality
        if clip:
            params["clip"] = {**clip, "scale": clip.get("scale", 1)}
        data = self.send("Page.captureScreenshot", params)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        out = []
        for ev in self.events:
            if ev.get("method") == "Runtime.exceptionThrown":
                d = ev["params"]["exceptionDetails"]
                out.append(d.get("exception", {}).get("description") or d.get("text", ""))
            elif ev.get("method") == "Runtime.consoleAPICalled" and ev["params"].get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in ev["params"]["args"]))
        return out

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=False, timeout=5)
                except Exception:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()  # our own child, by its Popen handle
                    self.proc.wait(timeout=5)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self.user_data_dir, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

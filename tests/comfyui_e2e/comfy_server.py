"""Start a real ComfyUI server with this pack loaded, entirely inside a temporary base directory.

`--base-directory` points custom_nodes, models, input, output, temp and user at a fresh temp dir,
and `--database-url sqlite:///:memory:` keeps the asset database out of the ComfyUI checkout, so
nothing is written into COMFYUI_PATH. The pack is a symlink in that temp custom_nodes folder under
a deliberately odd name (ComfyUI imports a pack by its folder name; ours must not care).
The server listens on 127.0.0.1 only, on a free port, and is stopped by its PID.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACK_DIR_NAME = "zz-Odd.Clone_name"  # dots, dashes, mixed case: ComfyUI imports a pack by its folder name
# (no spaces: ComfyUI itself cannot serve /extensions/<name with a space>/, whatever the pack does)
SIMULATED_VRAM_MB = 10  # MB: below the acoustic model (7.3 MB) plus its working memory (~12 MB)


def comfyui_path() -> Path | None:
    value = os.environ.get("COMFYUI_PATH")
    return Path(value) if value else None


def why_not_runnable() -> str | None:
    """None when this interpreter can run the ComfyUI at COMFYUI_PATH, else the reason."""
    path = comfyui_path()
    if path is None:
        return "COMFYUI_PATH is not set (point it at a ComfyUI checkout to run the ComfyUI end-to-end tests)"
    if not (path / "main.py").is_file() or not (path / "comfy" / "model_management.py").is_file():
        return f"COMFYUI_PATH={path} is not a ComfyUI checkout (no main.py / comfy/model_management.py)"
    probe = "import aiohttp, torch, safetensors, yaml, comfyui_frontend_package, hibari"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=path, timeout=120)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        return (f"{sys.executable} cannot run ComfyUI with this pack ({last}); run the tests with the "
                f"interpreter of ComfyUI's environment, with hibari-tts installed (python install.py)")
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComfyServer:
    def __init__(self, comfy: Path, extra_custom_nodes: dict[str, Path] | None = None,
                 env: dict[str, str] | None = None, settings: dict | None = None,
                 pack_dir_name: str = PACK_DIR_NAME) -> None:
        self.comfy = comfy
        self.base = Path(tempfile.mkdtemp(prefix="mizuoto-comfy-base-"))
        nodes = self.base / "custom_nodes"
        nodes.mkdir()
        self.pack_dir_name = pack_dir_name
        (nodes / pack_dir_name).symlink_to(REPO, target_is_directory=True)
        for name, path in (extra_custom_nodes or {}).items():
            (nodes / name).symlink_to(path, target_is_directory=path.is_dir())
        settings_path = self.base / "user" / "default" / "comfy.settings.json"
        settings_path.parent.mkdir(parents=True)
        # No first-run template dialog over the canvas in the browser test.
        settings_path.write_text(json.dumps({"Comfy.TutorialCompleted": True, **(settings or {})}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.base / "comfyui.log"
        # The pack's settings and caches come only from this test: no MIZUOTO_* of the caller's shell,
        # calibration written into the temp dir, never into ~/.cache.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("MIZUOTO_")}
        self.env = {**inherited, "PYTHONUNBUFFERED": "1", "MIZUOTO_CACHE_DIR": str(self.base / "mizuoto-cache"),
                    **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> None:
        cmd = [sys.executable, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(self.port),
               "--base-directory", str(self.base), "--database-url", "sqlite:///:memory:",
               "--disable-auto-launch"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.comfy, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ComfyUI exited with {self.proc.returncode} during start:\n{self.log()[-4000:]}")
            try:
                self.get("/object_info/MizuotoSpeak", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.5)
        raise TimeoutError(f"ComfyUI did not answer /object_info within {timeout} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL), then remove the temp base dir."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=15)
        finally:
            if getattr(self, "_log", None):
                self._log.close()
            if os.environ.get("MIZUOTO_KEEP_COMFY_BASE"):
                print(f"kept ComfyUI base dir {self.base}")
            else:
                shutil.rmtree(self.base, ignore_errors=True)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ---- HTTP ------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        with urllib.request.urlopen(req, timeout=timeout) as res:
            raw = res.read()
            kind = res.headers.get("Content-Type", "")
        return json.loads(raw) if "json" in kind else raw

    def get(self, path: str, timeout: float = 30):
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body, timeout: float = 30):
        return self.request("POST", path, body, timeout=timeout)

    def run_prompt(self, prompt: dict, timeout: float = 120) -> dict:
        """POST an API-format prompt, poll /history/<id> until it completes, return its history entry."""
        queued = self.post("/prompt", {"prompt": prompt, "client_id": "mizuoto-e2e"})
        assert not queued.get("node_errors"), queued
        prompt_id = queued["prompt_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            entry = self.get(f"/history/{prompt_id}").get(prompt_id)
            if entry and "status" in entry:  # history holds a prompt only once it has finished
                return entry
            time.sleep(0.25)
        raise TimeoutError(f"prompt {prompt_id} not finished within {timeout} s:\n{self.log()[-4000:]}")

    def __enter__(self) -> ComfyServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

"""Run by ComfyUI-Manager after requirements.txt (and by the README's commands).

hibari-tts carries the embedded default voice (its ONNX weights and G2P lexicons), but declares
onnxruntime as a dependency, and installing that would replace an onnxruntime-gpu in a ComfyUI
environment. We only read its files (our own ONNX reader, our own torch model), so it is installed
without dependencies; its only other dependency, numpy, is in requirements.txt.
"""
import importlib.util
import subprocess
import sys

HIBARI = "hibari-tts==0.2.1"


def main() -> int:
    if importlib.util.find_spec("hibari") is not None:
        from importlib.metadata import version
        if version("hibari-tts") == HIBARI.split("==")[1]:
            return 0
    return subprocess.call([sys.executable, "-m", "pip", "install", "--no-deps", HIBARI])


if __name__ == "__main__":
    sys.exit(main())

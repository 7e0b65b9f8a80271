"""hibari "heart": the embedded default voice (hibari-tts 0.2.1, Apache-2.0, distilled from Kokoro-82M
af_heart), run as our own torch module from the ONNX file inside the installed wheel; see engine.py."""

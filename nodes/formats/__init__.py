"""Reading what users put on disk, safely and bounded: checkpoints (safetensors, the weights-only pickle
reader, JSON/YAML configs and their size rules), ONNX graphs without onnx or onnxruntime, verified
downloads and ComfyUI's registered model folders."""

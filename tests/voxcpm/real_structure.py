"""Write real_voxcpm2.json: every tensor name and shape of upstream's VoxCPM 2, built on the meta device
from the published config.json of openbmb/VoxCPM2 (kept in the JSON as "config"). Runs in the parity
venv (voxcpm 2.0.3, see README.md):

    python tests/voxcpm/real_structure.py            # rewrites tests/voxcpm/real_voxcpm2.json
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))


def upstream_structure(config: dict) -> dict:
    from qwen3_tts.torchaudio_shim import install
    install()
    if "librosa" not in sys.modules:
        stub = types.ModuleType("librosa")
        stub.__spec__ = importlib.machinery.ModuleSpec("librosa", None)
        sys.modules["librosa"] = stub
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

    spec = importlib.util.spec_from_file_location("voxcpm_tiny", HERE / "tiny.py")
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    with tempfile.TemporaryDirectory() as tmp:
        tiny.write_tokenizer(Path(tmp))          # a tokenizer object is needed; it holds no model tensors
        tokenizer = LlamaTokenizerFast.from_pretrained(tmp)
    cfg = VoxCPMConfig.model_validate(config)
    cfg.max_length = 8                          # upstream preallocates its KV cache (not a weight) on the CPU
    with torch.device("meta"):
        vae = AudioVAEV2(config=AudioVAEConfigV2(**config["audio_vae_config"]))
        model = VoxCPM2Model(cfg, tokenizer, vae, device="cpu")
    state = model.state_dict()
    return {
        "model.safetensors": {k: list(v.shape) for k, v in state.items() if not k.startswith("audio_vae.")},
        "audiovae.pth": {k[len("audio_vae."):]: list(v.shape) for k, v in state.items() if k.startswith("audio_vae.")},
    }


if __name__ == "__main__":
    path = HERE / "real_voxcpm2.json"
    data = json.loads(path.read_text())
    data.update(upstream_structure(data["config"]))
    path.write_text(json.dumps(data, indent=0, ensure_ascii=False) + "\n")
    print(f"{path}: {len(data['model.safetensors'])} + {len(data['audiovae.pth'])} tensors")

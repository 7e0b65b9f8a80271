"""Record the tensor names and shapes of the real-size upstream models (run in the parity venv):

    "$REF_VENV"/bin/python tests/f5_tts/real_structure.py

Builds upstream's `CFM(DiT(**arch))` from the F5TTS_v1_Base.yaml shipped in f5-tts 1.1.22 (vocabulary:
the package's infer/examples/vocab.txt, the published one) and `Vocos.from_hparams` from the
published charactr/vocos-mel-24khz config.yaml (the DiT on the meta device), and writes the state-dict names
and shapes the published files hold (`ema_model.` + the CFM's, as the EMA saves them) to
real_F5TTS_v1_Base.json and real_vocos_mel_24khz.json next to this file. test_engine.py builds our
modules on meta from the same configs and asserts exactly these names and shapes.
"""
from __future__ import annotations

import json
import sys
from importlib.resources import files
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).parent
# charactr/vocos-mel-24khz config.yaml as published
VOCOS_MEL_24KHZ = {
    "feature_extractor": {"class_path": "vocos.feature_extractors.MelSpectrogramFeatures",
                          "init_args": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "n_mels": 100,
                                        "padding": "center"}},
    "backbone": {"class_path": "vocos.models.VocosBackbone",
                 "init_args": {"input_channels": 100, "dim": 512, "intermediate_dim": 1536, "num_layers": 8}},
    "head": {"class_path": "vocos.heads.ISTFTHead",
             "init_args": {"dim": 512, "n_fft": 1024, "hop_length": 256, "padding": "same"}},
}


def main() -> None:
    sys.path.insert(0, str(HERE.parent))
    from f5_tts.upstream_stubs import install
    install()
    from f5_tts.model import CFM, DiT
    from vocos import Vocos

    cfg = yaml.safe_load((files("f5_tts") / "configs" / "F5TTS_v1_Base.yaml").read_text(encoding="utf-8"))["model"]
    vocab = (files("f5_tts") / "infer" / "examples" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    with torch.device("meta"):
        cfm = CFM(transformer=DiT(**cfg["arch"], text_num_embeds=len(vocab), mel_dim=cfg["mel_spec"]["n_mel_channels"]),
                  mel_spec_kwargs=cfg["mel_spec"])
    dit = {f"ema_model.{k}": list(v.shape) for k, v in cfm.state_dict().items()}
    (HERE / "real_F5TTS_v1_Base.json").write_text(json.dumps(
        {"arch": cfg["arch"], "mel_spec": cfg["mel_spec"], "vocab_size": len(vocab), "tensors": dit}, indent=0))
    path = HERE / "vocos_config.tmp.yaml"
    path.write_text(yaml.safe_dump(VOCOS_MEL_24KHZ))
    try:
        voc = Vocos.from_hparams(str(path))   # 13.5M parameters; torchaudio's filterbank cannot be built on meta
    finally:
        path.unlink()
    tensors = {k: list(v.shape) for k, v in voc.state_dict().items()}
    (HERE / "real_vocos_mel_24khz.json").write_text(json.dumps({"config": VOCOS_MEL_24KHZ, "tensors": tensors},
                                                               indent=0))
    print(f"F5TTS_v1_Base: {len(dit)} tensors, {sum(torch.Size(s).numel() for s in dit.values()):,} values; "
          f"vocos: {len(tensors)} tensors")


if __name__ == "__main__":
    main()

"""Record the tensor names and shapes of the published Kokoro-82M file (run in the reference venv):

    "$REF_VENV"/bin/python tests/kokoro/real_structure.py

Builds upstream's `KModel` (kokoro 0.9.4) on the meta device from hexgrad/Kokoro-82M's config.json as
published (PUBLISHED_CONFIG below: sizes and the 114-symbol vocab), with its checkpoint read replaced by an
empty one (no hub access), and writes, per part of kokoro-v1_0.pth, the names its state dict saves
(`module.` + the key, as the published file holds them; weight-normed convs as weight_g / weight_v) and
their shapes to real_kmodel.json next to this file. test_structure.py builds our KModel on meta from the
same config and asserts exactly these names and shapes.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
_SYMBOLS = {";": 1, ":": 2, ",": 3, ".": 4, "!": 5, "?": 6, "—": 9, "…": 10, "\"": 11, "(": 12, ")": 13,
            "“": 14, "”": 15, " ": 16, "\u0303": 17, "ʣ": 18, "ʥ": 19, "ʦ": 20, "ʨ": 21, "ᵝ": 22, "ꭧ": 23,
            "A": 24, "I": 25, "O": 31, "Q": 33, "S": 35, "T": 36, "W": 39, "Y": 41, "ᵊ": 42}
_LETTERS = dict(zip("abcdef", range(43, 49))) | dict(zip("hijklmnopqrstuvwxyz", range(50, 69)))
_IPA = {"ɑ": 69, "ɐ": 70, "ɒ": 71, "æ": 72, "β": 75, "ɔ": 76, "ɕ": 77, "ç": 78, "ɖ": 80, "ð": 81, "ʤ": 82,
        "ə": 83, "ɚ": 85, "ɛ": 86, "ɜ": 87, "ɟ": 90, "ɡ": 92, "ɥ": 99, "ɨ": 101, "ɪ": 102, "ʝ": 103, "ɯ": 110,
        "ɰ": 111, "ŋ": 112, "ɳ": 113, "ɲ": 114, "ɴ": 115, "ø": 116, "ɸ": 118, "θ": 119, "œ": 120, "ɹ": 123,
        "ɾ": 125, "ɻ": 126, "ʁ": 128, "ɽ": 129, "ʂ": 130, "ʃ": 131, "ʈ": 132, "ʧ": 133, "ʊ": 135, "ʋ": 136,
        "ʌ": 138, "ɣ": 139, "ɤ": 140, "χ": 142, "ʎ": 143, "ʒ": 147, "ʔ": 148, "ˈ": 156, "ˌ": 157, "ː": 158,
        "ʰ": 162, "ʲ": 164, "↓": 169, "→": 171, "↗": 172, "↘": 173, "ᵻ": 177}
# hexgrad/Kokoro-82M config.json (as published on the hub; the key order differs)
PUBLISHED_CONFIG = {
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6], "gen_istft_hop_size": 5,
                 "gen_istft_n_fft": 20, "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                 "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512},
    "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 50, "multispeaker": True,
    "n_layer": 3, "n_mels": 80, "n_token": 178, "style_dim": 128, "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
               "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1},
    "vocab": _SYMBOLS | _LETTERS | _IPA,
}


def main() -> None:
    import kokoro.model as km
    km.hf_hub_download = lambda **kw: "not-downloaded"
    load = torch.load
    torch.load = lambda path, **kw: {} if path == "not-downloaded" else load(path, **kw)
    try:
        with torch.device("meta"):
            model = km.KModel(repo_id="hexgrad/Kokoro-82M", config=PUBLISHED_CONFIG)
    finally:
        torch.load = load
    parts = {part: {f"module.{k}": list(v.shape) for k, v in getattr(model, part).state_dict().items()}
             for part in ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")}
    import kokoro
    import transformers
    (HERE / "real_kmodel.json").write_text(json.dumps(
        {"config": PUBLISHED_CONFIG, "versions": {"kokoro": kokoro.__version__, "transformers": transformers.__version__,
                                                  "torch": str(torch.__version__)},
         "parts": parts}, ensure_ascii=False, indent=0), encoding="utf-8")
    n = sum(torch.Size(s).numel() for p in parts.values() for s in p.values())
    print(f"{sum(map(len, parts.values()))} tensors, {n:,} values; vocab {len(PUBLISHED_CONFIG['vocab'])}")


if __name__ == "__main__":
    main()

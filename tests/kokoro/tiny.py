"""A tiny random Kokoro folder in hexgrad/Kokoro-82M's published layout (config.json, kokoro-v1_0.pth
with one `module.`-prefixed state dict per part and weight-norm g/v pairs, voices/<name>.pt packs
[510, 1, 256]). Widths upstream hard-codes stay (hidden_dim 512, style 128, the decoder's 1024); the rest
is small. Weights come from a seeded uniform generator, so every CPU writes the same bits."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.nodes.kokoro.model import KModel, weight_normed

PHONEMES = "ðə kwˈɪk bɹˈWn fˈɑks."
VOICES = ("af_bella", "af_sky", "bm_george")


def tiny_config() -> dict:
    symbols = ";:,.!?—…\"()“” ʣʥʦʨᵝꭧAIOQSTWYᵊabcdefhijklmnopqrstuvwxyzɑɐɒæβɔɕçɖðʤəɚɛɜɟɡɥɨɪʝɯɰŋɳɲɴøɸθœɹɾɻʁɽʂʃʈʧʊʋʌɣɤχʎʒʔˈˌːʰʲ↓→↗↘ᵻ"
    vocab = {c: i + 1 for i, c in enumerate(dict.fromkeys(symbols))}
    return {
        "istftnet": {"upsample_kernel_sizes": [4, 4], "upsample_rates": [2, 2], "gen_istft_hop_size": 2,
                     "gen_istft_n_fft": 8, "resblock_dilation_sizes": [[1, 3, 5]], "resblock_kernel_sizes": [3],
                     "upsample_initial_channel": 512},
        "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 8, "multispeaker": True,
        "n_layer": 1, "n_mels": 80, "n_token": 178, "style_dim": 128, "text_encoder_kernel_size": 5,
        "plbert": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
                   "max_position_embeddings": 64, "num_hidden_layers": 2, "dropout": 0.1},
        "vocab": vocab,
    }


def write_tiny(folder: Path, seed: int = 0, voices: tuple[str, ...] = VOICES) -> Path:
    folder = Path(folder)
    (folder / "voices").mkdir(parents=True, exist_ok=True)
    config = tiny_config()
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
    g = torch.Generator().manual_seed(seed)
    model = KModel(config)
    convs = {n for n, m in model.named_modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.ConvTranspose1d))}
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for name, p in model.state_dict().items():
        fan = p.shape[1] * (p.shape[2] if p.dim() > 2 else 1) if p.dim() > 1 else 1
        scale = 1.0 / fan ** 0.5 if p.dim() > 1 else 0.1
        if name.startswith("predictor.duration_proj"):
            scale *= 40.0                                 # spread the durations over several frame counts
        if name.startswith("decoder.generator.conv_post"):
            scale *= 0.01                                 # exp(magnitude) stays near 1
        value = (torch.rand(p.shape, generator=g) * 2 - 1) * scale
        if name.endswith(("gamma", "norm.weight", "LayerNorm.weight", "layer_norm.weight", "alpha1.0", "alpha1.1",
                          "alpha1.2", "alpha2.0", "alpha2.1", "alpha2.2")):
            value = 1.0 + value
        part, rest = name.split(".", 1)
        module = name.rsplit(".", 1)[0]
        state = parts.setdefault(part, {})
        if module in convs and name.endswith(".weight") and weight_normed(module):
            base = "module." + rest[: -len(".weight")]
            norm = value.flatten(1).norm(dim=1).view(-1, *([1] * (value.dim() - 1)))
            state[base + ".weight_g"] = norm * (torch.rand(norm.shape, generator=g) + 0.5)
            state[base + ".weight_v"] = value
        else:
            state["module." + rest] = value
    parts["bert"]["module.pooler.weight"] = torch.zeros(32, 32)      # upstream's file has the unused pooler
    parts["bert"]["module.pooler.bias"] = torch.zeros(32)
    torch.save(parts, folder / "kokoro-v1_0.pth")
    for i, name in enumerate(voices):
        pack = torch.rand((510, 1, 256), generator=torch.Generator().manual_seed(1000 + i)) * 0.6 - 0.3
        torch.save(pack, folder / "voices" / f"{name}.pt")
    return folder


def conformance_case(root) -> "Case":
    from conformance import Case

    from mizuoto.nodes.pack.pipeline import SpeakRequest
    folder = write_tiny(Path(root) / "kokoro")
    return Case(folder, SpeakRequest("The quick brown fox. It jumps.", seed=3, speed=1.1, voice="af_bella:0.7,af_sky:0.3"))


if __name__ == "__main__":                      # the folder make_fixtures.py records upstream on
    import sys
    write_tiny(Path(sys.argv[1]))

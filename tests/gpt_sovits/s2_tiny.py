"""The tiny SoVITS (s2) training case shared by make_s2_train_fixtures.py (upstream) and test_s2_train.py (ours).

The v2 (or v2Pro) tiny SoVITS of tiny.py (real HuBERT / MRTE / spectrogram widths, tiny layer counts) with upstream's
training hyperparameters (s2.json) except a 5120-sample segment (8 frames), `p_dropout` 0.1 as published,
weights from `tiny.random_state` under upstream's names (`enc_q` and the weight-norm pairs included), the
full-size MultiPeriodDiscriminator (upstream hard-codes its widths) from the same seeds, and two batches of
two clips of unequal lengths in TextAudioSpeakerCollate's layout; v2Pro's batches add 20480-wide speaker
vectors (upstream's SynthesizerTrn hard-codes `sv_emb` as Linear(20480, gin)) from a generator of their own,
so the v2 draws are unchanged. Inputs are drawn, not computed (a
spectrogram computed in float32 moves with the CPU; these are the same everywhere). The dropout / slicing
seed is set just before the first batch.
"""
from __future__ import annotations

import copy

import torch

from gpt_sovits import tiny

VERSION = "v2"
SEED = 4321                     # torch.manual_seed before the first batch: dropout masks, enc_q noise, slices
SEGMENT = 5120
CLIPS = [((14, 7), (11, 5)), ((12, 6), (12, 8))]     # per batch: (spectrogram frames, phones) of two clips
SAMPLES = 32                    # values kept per tensor in the fixture (plus its sum and absolute sum)


def config(version: str = VERSION) -> dict:
    hps = copy.deepcopy(tiny.s2_config(version))
    hps["train"].update({"log_interval": 100, "eval_interval": 500, "seed": 1234, "epochs": 100,
                         "learning_rate": 0.0001, "betas": [0.8, 0.99], "eps": 1e-09, "batch_size": 2,
                         "fp16_run": False, "lr_decay": 0.999875, "segment_size": SEGMENT, "init_lr_ratio": 1,
                         "warmup_epochs": 0, "c_mel": 45, "c_kl": 1.0, "text_low_lr_rate": 0.4, "grad_ckpt": False})
    hps["model"]["p_dropout"] = 0.1
    hps["model"]["version"] = version
    return hps


def generator_weights(version: str = VERSION) -> dict[str, torch.Tensor]:
    from mizuoto.nodes.gpt_sovits.s2_train import training_generator
    with torch.device("meta"):
        model = training_generator(tiny.sovits_config(version))
    return tiny.random_state(tiny.shapes_of(model), tiny.SEED)


def discriminator_weights(version: str = VERSION) -> dict[str, torch.Tensor]:
    from mizuoto.nodes.gpt_sovits.s2_train import MultiPeriodDiscriminator
    with torch.device("meta"):
        model = MultiPeriodDiscriminator(version)
    return tiny.random_state(tiny.shapes_of(model), tiny.SEED + 1)


def batches(seed: int = 6, version: str = VERSION) -> list[dict[str, torch.Tensor]]:
    """TextAudioSpeakerCollate's output for each batch (longest spectrogram first; spectrogram and HuBERT
    frames padded to 2 * (max // 2 + 1), audio to the longest clip, phones to the longest)."""
    g = torch.Generator().manual_seed(seed)
    g_sv = torch.Generator().manual_seed(seed + 100)
    hop, bins = 640, 1025
    out = []
    for clips in CLIPS:
        clips = sorted(clips, key=lambda c: -c[0])
        frames = 2 * (max(c[0] for c in clips) // 2 + 1)
        samples = max(c[0] for c in clips) * hop
        phones = max(c[1] for c in clips)
        b = len(clips)
        ssl, spec = torch.zeros(b, 768, frames), torch.zeros(b, bins, frames)
        wav, text = torch.zeros(b, 1, samples), torch.zeros(b, phones, dtype=torch.int64)
        for i, (n, m) in enumerate(clips):
            ssl[i, :, :n] = tiny.randn(768, n, generator=g)
            spec[i, :, :n] = tiny.randn(bins, n, generator=g).abs() * 0.5 + 0.01
            wav[i, 0, :n * hop] = torch.tanh(tiny.randn(n * hop, generator=g)) * 0.5
            text[i, :m] = torch.randint(1, 732, (m,), generator=g)
        out.append({"ssl": ssl, "ssl_lengths": torch.tensor([c[0] for c in clips]), "spec": spec,
                    "spec_lengths": torch.tensor([c[0] for c in clips]), "wav": wav,
                    "wav_lengths": torch.tensor([c[0] * hop for c in clips]), "text": text,
                    "text_lengths": torch.tensor([c[1] for c in clips])})
        if version in ("v2Pro", "v2ProPlus"):
            out[-1]["sv_emb"] = tiny.randn(b, 20480, generator=g_sv) * 0.05
    return out


def summary(t: torch.Tensor) -> torch.Tensor:
    """SAMPLES evenly spaced values of `t` (flattened, float64), then its sum and its absolute sum."""
    flat = t.detach().reshape(-1).double()
    idx = torch.linspace(0, flat.numel() - 1, min(flat.numel(), SAMPLES)).round().long()
    return torch.cat([flat[idx], flat.sum().view(1), flat.abs().sum().view(1)])


def networks(divisor: int = 16):
    """(generator, discriminator) with this case's weights; the discriminator narrowed by `divisor` (its
    weights drawn the same way) so that a CPU step takes about a second."""
    from mizuoto.nodes.gpt_sovits.s2_train import MultiPeriodDiscriminator, training_generator
    net_g = training_generator(tiny.sovits_config(VERSION))
    net_g.load_state_dict(generator_weights(), strict=True)
    net_d = MultiPeriodDiscriminator(VERSION, divisor)
    with torch.device("meta"):
        shapes = tiny.shapes_of(MultiPeriodDiscriminator(VERSION, divisor))
    net_d.load_state_dict(tiny.random_state(shapes, tiny.SEED + 1), strict=True)
    return net_g, net_d

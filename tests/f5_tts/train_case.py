"""The training-step case make_train_fixtures.py records and test_train_step.py replays (no upstream import)."""
from __future__ import annotations

import torch

from f5_tts.tiny import ARCH

# smaller than tiny.ARCH (a small golden file), every path still there: 2 blocks, one text ConvNeXt block
TRAIN_ARCH = {**ARCH, "dim": 32, "depth": 2, "heads": 2, "dim_head": 16, "text_dim": 32, "conv_layers": 1}

SEED = 1234          # torch.manual_seed and random.seed before the first step
WEIGHT_SEED = 3      # tiny.randomize of every parameter
LR = 1e-3
WARMUP = 1           # the first update at 1e-8 x LR, the second at LR
TOTAL = 4
STEPS = 2
EMA_STEP = 1199      # the base checkpoint's ema_pytorch step (initted): the second update (step 1200) lerps
TEXTS = ["Hello world, F5.", "你好世界，今天天气很好。"]


def clips() -> list[tuple[torch.Tensor, int]]:
    """Two deterministic clips [1, T]: 0.55 s at 24 kHz, 0.4 s at 16 kHz (resampled as CustomDataset does)."""
    out = []
    for seconds, rate, f0 in ((0.55, 24000, 180.0), (0.4, 16000, 230.0)):
        g = torch.Generator().manual_seed(int(f0))
        t = torch.arange(int(rate * seconds)) / rate
        wav = 0.1 * torch.sin(2 * torch.pi * f0 * t) * (1 + torch.sin(2 * torch.pi * 3 * t)) \
            + 0.01 * torch.randn(t.shape, generator=g)
        out.append((wav.to(torch.float32)[None], rate))
    return out

"""The tiny GPT (s1) training case shared by make_s1_train_fixtures.py (upstream) and test_s1_train.py (ours).

A T2S with small vocabularies (the fixture stores the trained weights in float64), weights from
`tiny.random_state` under upstream's names, nine batches of two clips of unequal lengths (so both
padding masks matter), and the dropout seed set just before the first batch. Nine batches are two
updates under upstream's step rule (batch_idx 4 and 8): the first at lr 0.01, the second at the locked
0.002, the second with ScaledAdam's momentum and bias corrections in play.
"""
from __future__ import annotations

import torch

from gpt_sovits import tiny

CONFIG = {"train": {"seed": 1234}, "data": {"max_sec": 1, "pad_val": 128},
          "model": {"vocab_size": 129, "phoneme_vocab_size": 64, "embedding_dim": 32, "hidden_dim": 32, "head": 2,
                    "linear_units": 128, "n_layer": 2, "dropout": 0, "EOS": 128, "random_bert": 0}}
DROPOUT_SEED = 4321
BATCHES = 9
LENGTHS = [((7, 5), (9, 6)), ((6, 8), (6, 8)), ((5, 4), (8, 7))]   # (phonemes, semantic) per clip pair


def weights(seed: int = tiny.SEED) -> dict[str, torch.Tensor]:
    """float32 weights under upstream's names without the `model.` prefix."""
    from mizuoto.nodes.gpt_sovits.t2s import T2SConfig, Text2Semantic
    with torch.device("meta"):
        model = Text2Semantic(T2SConfig.from_dict(CONFIG, "s1 tiny"))
    return tiny.random_state(tiny.shapes_of(model), seed)


def batches(seed: int = 5) -> list[dict[str, torch.Tensor]]:
    """Upstream's collate output for each batch: right-padded phonemes (0) and semantic ids (pad 128)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(BATCHES):
        (la, lb), (sa, sb) = LENGTHS[i % len(LENGTHS)]
        lx, ly = torch.tensor([la, lb]), torch.tensor([sa, sb])
        phones = torch.zeros(2, int(lx.max()), dtype=torch.int64)
        semantic = torch.full((2, int(ly.max())), 128, dtype=torch.int64)
        bert = torch.zeros(2, 1024, int(lx.max()))
        for row, (n, m) in enumerate(zip(lx.tolist(), ly.tolist())):
            phones[row, :n] = torch.randint(1, 64, (n,), generator=g)
            semantic[row, :m] = torch.randint(0, 128, (m,), generator=g)
            bert[row, :, :n] = tiny.randn(1024, n, generator=g)
        out.append({"phoneme_ids": phones, "phoneme_ids_len": lx, "semantic_ids": semantic, "semantic_ids_len": ly,
                    "bert_feature": bert})
    return out


def optimizer_case(seed: int = 9, steps: int = 12) -> tuple[dict[str, torch.Tensor], list[list[torch.Tensor]]]:
    """float64 parameters (two same-shape matrices, a vector, two stacked scalars, a lone scalar of
    another shape) and `steps` gradients for each, some steps large enough for the clip to act."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"a": (4, 3), "b": (4, 3), "v": (5,), "s1": (1,), "s2": (1,), "lone": (1, 1)}
    params = {k: torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float64)) for k, s in shapes.items()}
    grads = [[torch.randn(s, generator=g, dtype=torch.float64) * (8.0 if i % 5 == 4 else 1.0) for s in shapes.values()]
             for i in range(steps)]
    return params, grads

"""T3 against upstream chatterbox-tts 0.1.7: the speech tokens recorded by make_fixtures.py (same tiny
config, same weights by name, same seeds) must come out exactly."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.chatterbox.t3 import T3, Sampling, T3Config, generate

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

GOLDEN = json.loads((Path(__file__).parent / "golden_t3.json").read_text())


def tiny_t3() -> T3:
    c = tiny.TINY_LLAMA
    cfg = T3Config(hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                   num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                   num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
                   rope_scaling=dict(c["rope_scaling"]), perceiver_heads=tiny.TINY_PERCEIVER["num_attn_heads"])
    model = T3(cfg).eval()
    model.load_state_dict(tiny.fill(model.state_dict()))
    return model


def test_state_names_and_shapes_are_upstreams() -> None:
    ours = {k: list(v.shape) for k, v in tiny_t3().state_dict().items()}
    assert ours == GOLDEN["state_shapes"]


@pytest.mark.parametrize("name,exaggeration,cfg,with_prompt,seed", tiny.T3_CASES)
def test_speech_tokens_equal_upstream(name: str, exaggeration: float, cfg: float, with_prompt: bool,
                                      seed: int) -> None:
    model = tiny_t3()
    spk, prompt = tiny.conditioning_inputs()
    with torch.inference_mode():
        cond = model.conditioning(spk, prompt if with_prompt else None, exaggeration)
        tokens = generate(model, cond, torch.tensor(tiny.TEXT_TOKENS),
                          Sampling(temperature=0.8, top_p=0.95, min_p=0.05, repetition_penalty=1.2, cfg_weight=cfg,
                                   max_new_tokens=tiny.MAX_NEW_TOKENS), torch.Generator().manual_seed(seed))
    assert tokens == GOLDEN["tokens"][name]


def test_exaggeration_changes_the_conditioning() -> None:
    model = tiny_t3()
    spk, prompt = tiny.conditioning_inputs()
    with torch.inference_mode():
        a, b = model.conditioning(spk, prompt, 0.5), model.conditioning(spk, prompt, 0.9)
    assert a.shape == (1, 1 + 32 + 1, 64)
    assert torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1])


@pytest.mark.parametrize("variant,text_vocab", [("english", 704), ("multilingual", 2454)])
def test_real_size_structure_is_upstreams(variant: str, text_vocab: int) -> None:
    """Upstream's published T3 built on `meta` (recorded in real_t3.json) has exactly our names and shapes."""
    real = json.loads((Path(__file__).parent / "real_t3.json").read_text())[variant]
    with torch.device("meta"):
        model = T3(T3Config(text_tokens_dict_size=text_vocab))
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == real
    assert model.config.is_multilingual == (variant == "multilingual")


def test_eager_attention_is_hf_eager_and_records_heads() -> None:
    """blocks.transformer.Attention's eager path (the multilingual T3's): HF's eager formula, the same causal
    masks as SDPA (prefill, prefill after a cache, one new position), recorded heads of row 0."""
    from mizuoto.nodes.blocks.transformer import Attention, RotaryEmbedding
    from mizuoto.runtime.lm.cache import make_cache
    torch.manual_seed(0)
    attn = Attention(32, 4, 2, 16).eval()
    rope = RotaryEmbedding(16)
    x = torch.randn(2, 7, 32)
    sdpa_cache, eager_cache = make_cache("dynamic"), make_cache("dynamic")
    with torch.inference_mode():
        want = [attn(x[:, :5], rope(torch.arange(5), x.dtype), sdpa_cache),
                attn(x[:, 5:6], rope(torch.arange(5, 6), x.dtype), sdpa_cache),
                attn(x[:, 6:7], rope(torch.arange(6, 7), x.dtype), sdpa_cache)]
        attn.eager, attn.record_heads = True, (1, 3)
        got = [attn(x[:, :5], rope(torch.arange(5), x.dtype), eager_cache)]
        first = attn.recorded
        got += [attn(x[:, 5:6], rope(torch.arange(5, 6), x.dtype), eager_cache),
                attn(x[:, 6:7], rope(torch.arange(6, 7), x.dtype), eager_cache)]
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert first.shape == (2, 5, 5) and torch.equal(first.triu(1), torch.zeros(2, 5, 5))   # causal
    torch.testing.assert_close(first.sum(-1), torch.ones(2, 5))
    assert attn.recorded.shape == (2, 1, 7)
    with torch.inference_mode():      # after a cache: each new query sees the past and itself
        cache = make_cache("dynamic")
        attn(x[:, :3], rope(torch.arange(3), x.dtype), cache)
        attn(x[:, 3:6], rope(torch.arange(3, 6), x.dtype), cache)
    assert torch.equal(attn.recorded[0] > 0, torch.ones(3, 6, dtype=torch.bool).tril(3))

"""The S3 speech tokenizer v2 (nodes/blocks/s3tokenizer.py) against upstream s3tokenizer 0.3.0 through
chatterbox-tts 0.1.7's S3Tokenizer (golden_s3tok.json, recorded by make_fixtures.py s3tokenizer).

Tokens are integers and compared exactly: every FSQ digit of the recording sits at least
`edge_margin` (0.06) from a rounding edge of tanh(...) * 0.999, far beyond float32 GEMM differences
between CPUs (~1e-6 relative on these O(1) activations), so no CPU can round a digit the other way."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.blocks.mel import whisper_log_mel
from mizuoto.nodes.blocks.s3tokenizer import S3TokenizerConfig, S3TokenizerV2

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

GOLDEN = json.loads((Path(__file__).parent / "golden_s3tok.json").read_text())


def tokenizer() -> S3TokenizerV2:
    tok = S3TokenizerV2(S3TokenizerConfig(**tiny.TINY_S3TOK)).eval()
    tok.load_state_dict(tiny.fill(tok.state_dict(), seed=21, scale=tiny.S3TOK_SCALE))
    return tok


def test_names_and_shapes_are_upstreams() -> None:
    assert {k: list(v.shape) for k, v in tokenizer().state_dict().items()} == GOLDEN["state_shapes"]


@pytest.mark.parametrize("case,max_len", [("full", None), ("max_len_40", 40)])
def test_tokens_match_upstream(case: str, max_len: int | None) -> None:
    assert GOLDEN["edge_margin"] > 0.01
    mel = whisper_log_mel(tiny.voice_wav())[None]
    if max_len is not None:
        mel = mel[..., : max_len * 4]       # Chatterbox's S3Tokenizer.forward(max_len=...)
    with torch.inference_mode():
        ours = tokenizer()(mel)
    assert ours.shape == (1, GOLDEN[case]["len"])
    assert ours[0].tolist() == GOLDEN[case]["tokens"]


def test_bad_input_is_named() -> None:
    tok = tokenizer()
    with pytest.raises(ValueError, match="mel must be"):
        tok(torch.zeros(1, 80, 10))
    with pytest.raises(ValueError, match="exceed 3000"):
        tok(torch.zeros(1, 128, 3001))
    with pytest.raises(ValueError, match="head width"):
        S3TokenizerV2(S3TokenizerConfig(n_audio_state=96, n_audio_head=2))

"""CosyVoice's front end against upstream's (fixtures/frontend.pt from make_fixtures.py): the BPE with
upstream's added tokens, Whisper log-mel, Kaldi fbank and Matcha mel, all exact; and the text rules."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # the fixtures were recorded with one intra-op thread

from mizuoto.nodes.common.mel import kaldi_fbank, matcha_mel, whisper_log_mel
from mizuoto.nodes.cosyvoice.frontend import TextTokenizer, normalize_text

from cosyvoice.tiny import FIXTURES, TOKENIZER_TEXTS, write_tokenizer


@pytest.fixture(scope="module")
def expected():
    return torch.load(FIXTURES / "frontend.pt", weights_only=True)


@pytest.mark.parametrize("version", [2, 3])
def test_tokenizer_ids_equal_upstream(expected, tmp_path, version):
    pytest.importorskip("tokenizers")
    write_tokenizer(tmp_path)
    tok = TextTokenizer(tmp_path, version)
    for i, text in enumerate(TOKENIZER_TEXTS):
        assert tok.encode(text) == expected[f"tok.v{version}.{i}"].tolist(), text


def test_endofprompt_is_the_first_added_token(tmp_path):
    pytest.importorskip("tokenizers")
    write_tokenizer(tmp_path)
    tok = TextTokenizer(tmp_path, 3)
    assert tok.token_id("<|endofprompt|>") == tok.token_id("<|im_end|>") + 1


def test_features_equal_upstream(expected):
    assert torch.equal(whisper_log_mel(expected["wav16"][0]), expected["whisper_mel"][0])
    assert torch.equal(kaldi_fbank(expected["wav16"][0]), expected["fbank"])
    assert torch.equal(matcha_mel(expected["wav24"][0], fmax=8000), expected["matcha_mel.8000"][0])
    assert torch.equal(matcha_mel(expected["wav24"][0], fmax=None), expected["matcha_mel.None"][0])


def test_text_rules():
    assert normalize_text("  Hello world.  ") == "Hello world."
    assert normalize_text("你好 世界.（测试）x²，") == "你好世界。测试x平方。"
    assert normalize_text("<|im_start|>你好 世界.") == "<|im_start|>你好 世界."


def test_only_punctuation():
    from mizuoto.nodes.cosyvoice.frontend import only_punctuation
    assert only_punctuation("。，!?") and only_punctuation("") and not only_punctuation("a.")

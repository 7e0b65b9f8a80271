"""CosyVoice's front end against upstream's (fixtures/frontend.pt from make_fixtures.py): the BPE with
upstream's added tokens (exact); Whisper log-mel, Kaldi fbank and Matcha mel in float64 against the references'
float64 runs at golden.F64_BOUND and in float32 at the bounds below; and the text rules."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # the fixtures were recorded with one intra-op thread

import golden
from mizuoto.nodes.blocks.mel import kaldi_fbank, matcha_mel, whisper_log_mel
from mizuoto.nodes.cosyvoice.frontend import TextNormalizer, TextTokenizer

from cosyvoice.tiny import FIXTURES, TOKENIZER_TEXTS, write_tokenizer


@pytest.fixture(scope="module")
def expected():
    return torch.load(FIXTURES / "frontend.pt", weights_only=True)


# fp32 bounds (relative to the reference's max-abs), measured under every perturbation of
# tests/test_golden_travel.py: Whisper log-mel <= 1.9e-6 (MKL_CBWR=COMPATIBLE: its FFT and filterbank matmul);
# 5e-5 allows x25. Kaldi fbank <= 1.0e-5 (the log of its smallest power-spectrum bins; MKL_CBWR); 2e-4 allows
# x20. Matcha mel <= 1.6e-7; 5e-6 allows x30.
FP32_BOUNDS = {"whisper_mel": 5e-5, "fbank": 2e-4, "matcha_mel.8000": 5e-6, "matcha_mel.None": 5e-6}


@pytest.mark.golden
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


def features(wav16: torch.Tensor, wav24: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"whisper_mel": whisper_log_mel(wav16)[None], "fbank": kaldi_fbank(wav16),
            "matcha_mel.8000": matcha_mel(wav24, fmax=8000)[None], "matcha_mel.None": matcha_mel(wav24, fmax=None)[None]}


@pytest.mark.golden
def test_features_equal_upstream(expected):
    for name, ours in features(expected["wav16"][0], expected["wav24"][0]).items():
        golden.assert_close(ours, expected[name], FP32_BOUNDS[name], f"{name} (fp32)")


@pytest.mark.golden
def test_features_f64_equal_upstream(expected):
    """whisper.log_mel_spectrogram, torchaudio's kaldi.fbank and Matcha's mel_spectrogram run on the audio
    .double(): their float32 filterbank assets upcast, windows and Kaldi's mel banks made in float64."""
    for name, ours in features(expected["wav16"][0].double(), expected["wav24"][0].double()).items():
        assert ours.dtype == torch.float64, name
        golden.assert_f64(ours, expected[name + ".f64"], f"{name} (f64)")


def test_text_rules():
    normalize = TextNormalizer(len).normalize
    assert normalize("  Hello world.  ") == "Hello world."
    assert normalize("你好 世界.（测试）x²，") == "你好世界。测试x平方。"
    assert normalize("<|im_start|>你好 世界.") == "<|im_start|>你好 世界."


def test_only_punctuation():
    from mizuoto.nodes.cosyvoice.frontend import only_punctuation
    assert only_punctuation("。，!?") and only_punctuation("") and not only_punctuation("a.")

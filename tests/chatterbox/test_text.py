"""The English text front end against upstream chatterbox-tts 0.1.7 (golden_text.json): punc_norm's text and
EnTokenizer's ids, exactly."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mizuoto.nodes.chatterbox.text import EnTokenizer, punc_norm, text_tokens

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

GOLDEN = json.loads((Path(__file__).parent / "golden_text.json").read_text(encoding="utf-8"))


@pytest.fixture
def tokenizer(tmp_path: Path) -> EnTokenizer:
    path = tmp_path / "tokenizer.json"
    path.write_text(tiny.tokenizer_json())
    return EnTokenizer(path)


@pytest.mark.parametrize("text", tiny.TEXTS)
def test_normalised_text_and_ids_equal_upstream(tokenizer: EnTokenizer, text: str) -> None:
    assert punc_norm(text) == GOLDEN[text]["norm"]
    assert tokenizer.encode(punc_norm(text)) == GOLDEN[text]["ids"]
    ids = text_tokens(tokenizer, text, 255, 0)
    assert ids.tolist() == [255, *GOLDEN[text]["ids"], 0]


def test_a_tokenizer_without_start_and_stop_is_refused_by_name(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models
    path = tmp_path / "tokenizer.json"
    path.write_text(Tokenizer(models.BPE({"a": 0, "[UNK]": 1}, [], unk_token="[UNK]")).to_str())
    with pytest.raises(ValueError, match="tokenizer.json.*START"):
        EnTokenizer(path)


def test_a_broken_tokenizer_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("{not json")
    with pytest.raises(Exception, match="tokenizer.json"):
        EnTokenizer(path)

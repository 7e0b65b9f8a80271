"""Chatterbox Multilingual's text front end against upstream MTLTokenizer and punc_norm (chatterbox-tts
0.1.7, golden_mtl_text.json from `make_fixtures.py mtl_text`): lowercase + NFKD, the `[xx]` tag, Korean jamo,
Hebrew and Russian as upstream without its optional packages, Cangjie codes for Chinese characters."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mizuoto.nodes.chatterbox.text import (LANGUAGES, Cangjie, EnTokenizer, check_language, mtl_encode,
                                           mtl_punc_norm)

from chatterbox import tiny  # noqa: E402  (tests/ is on sys.path: conftest)

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden_mtl_text.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mtl_text")
    (folder / "tokenizer.json").write_text(tiny.mtl_tokenizer_json())
    (folder / "Cangjie5_TC.json").write_text(json.dumps(tiny.CANGJIE, ensure_ascii=False))
    return folder


def test_encode_matches_upstream(folder) -> None:
    tokenizer = EnTokenizer(folder / "tokenizer.json")
    assert len(GOLDEN["encode"]) == len(tiny.MTL_TEXTS)
    for case in GOLDEN["encode"]:
        assert mtl_punc_norm(case["text"]) == case["norm"], case["text"]
        assert mtl_encode(tokenizer, case["norm"], case["language"]) == case["ids"], case


def test_cangjie_matches_upstream(folder) -> None:
    cangjie = Cangjie(folder / "Cangjie5_TC.json")
    for case in GOLDEN["cangjie"]:
        assert cangjie(case["text"]) == case["out"], case["text"]
    assert cangjie("叩") == "[cj_r][cj_r][cj_1][cj_.]"    # the second glyph of a shared code: its index as a code letter


@pytest.mark.skipif(importlib.util.find_spec("pykakasi") is None, reason="Japanese needs pykakasi (pip install "
                    "pykakasi==2.3.0, upstream's pin); the error without it is tested below")
def test_japanese_matches_upstream(folder) -> None:
    from unicodedata import normalize

    from mizuoto.nodes.chatterbox.text import japanese_kana
    tokenizer = EnTokenizer(folder / "tokenizer.json")
    assert len(GOLDEN["ja"]) == len(tiny.JA_TEXTS)
    for case in GOLDEN["ja"]:
        assert japanese_kana(normalize("NFKD", case["text"].lower())) == case["kana"], case["text"]
        assert mtl_encode(tokenizer, mtl_punc_norm(case["text"]), "ja") == case["ids"], case["text"]


def test_language_errors_name_the_language_and_what_is_missing(folder, monkeypatch) -> None:
    assert len(LANGUAGES) == 23
    with pytest.raises(ValueError, match="Chatterbox Multilingual speaks .*'xx'"):
        check_language("xx")
    with pytest.raises(ValueError, match="language zh: the model folder lacks Cangjie5_TC.json"):
        check_language("zh", None)
    import sys
    monkeypatch.setitem(sys.modules, "pykakasi", None)          # import fails as when not installed
    monkeypatch.setitem(sys.modules, "spacy_pkuseg", None)
    with pytest.raises(ValueError, match="language ja: .*pykakasi"):
        check_language("ja")
    with pytest.raises(ValueError, match="language zh: .*spacy-pkuseg"):
        check_language("zh", Cangjie(folder / "Cangjie5_TC.json"))
    with pytest.raises(ValueError, match="glyph<TAB>code"):
        (folder / "bad.json").write_text("{}")
        Cangjie(folder / "bad.json")

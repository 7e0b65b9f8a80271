"""Chatterbox Multilingual's text front end against upstream MTLTokenizer and punc_norm (chatterbox-tts
0.1.7, golden_mtl_text.json from `make_fixtures.py mtl_text`): lowercase + NFKD, the `[xx]` tag, Korean jamo,
Hebrew and Russian as upstream without its optional packages, Cangjie codes for Chinese characters."""
from __future__ import annotations

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


def test_japanese_matches_upstream(folder) -> None:
    """Runs wherever the test extra is installed (pykakasi==2.3.0, upstream's pin, the version recorded with):
    a missing or other pykakasi fails here rather than skipping."""
    from importlib.metadata import version
    from unicodedata import normalize

    from mizuoto.nodes.chatterbox.text import japanese_kana
    assert version("pykakasi") == "2.3.0", "pip install -e '.[test]' (pykakasi==2.3.0, the golden's version)"
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


def test_chinese_needs_the_spacy_ontonotes_folder(folder, monkeypatch, tmp_path) -> None:
    """spacy-pkuseg installed (a module that records how it is called stands in for the package: only the
    call is checked here, not segmentation) but no spacy_ontonotes folder: the error names the folder, where
    it is looked for, the release URL and its sha256; nothing is downloaded."""
    import shutil
    import sys
    import types

    from mizuoto.nodes.chatterbox.text import PKUSEG_SHA256, PKUSEG_URL, pkuseg_model_dir
    folder = shutil.copytree(folder, tmp_path / "model")      # a folder of its own: spacy_ontonotes/ comes and goes
    built = []

    class Recorder:
        def __init__(self, **kwargs) -> None:
            built.append(kwargs)

        def cut(self, text: str) -> list[str]:
            return [text[:1], text[1:]]

    monkeypatch.setitem(sys.modules, "spacy_pkuseg", types.SimpleNamespace(pkuseg=Recorder))
    monkeypatch.setenv("PKUSEG_HOME", str(tmp_path / "pkuseg_home"))
    cangjie = Cangjie(folder / "Cangjie5_TC.json")
    with pytest.raises(ValueError, match=r"spacy_ontonotes .* not in " + str(folder / "spacy_ontonotes")) as e:
        check_language("zh", cangjie)
    assert PKUSEG_URL in str(e.value) and PKUSEG_SHA256 in str(e.value)
    assert str(tmp_path / "pkuseg_home" / "spacy_ontonotes") in str(e.value)
    with pytest.raises(ValueError, match="spacy_ontonotes"):
        cangjie.segment("你好")
    assert built == []
    # an empty folder, or one with only half of the model, is not the model
    model = folder / "spacy_ontonotes"
    model.mkdir()
    (model / "features.msgpack").write_bytes(b"")
    with pytest.raises(ValueError, match="weights.npz or model.txt"):
        pkuseg_model_dir(folder)
    (model / "weights.npz").write_bytes(b"")
    check_language("zh", cangjie)
    assert built == []                          # checking builds nothing
    assert cangjie.segment("你好") == "你 好" and built == [{"model_name": str(model)}]
    cangjie.segment("中文")
    assert len(built) == 1                      # built once, on first use
    # where upstream's own pkuseg() download leaves it, when the model folder has none
    home = tmp_path / "pkuseg_home" / "spacy_ontonotes"
    home.mkdir(parents=True)
    for name in ("features.pkl", "model.txt"):
        (home / name).write_bytes(b"")
    shutil.rmtree(model)
    assert pkuseg_model_dir(folder) == home

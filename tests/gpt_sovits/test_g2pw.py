"""G2PW (nodes/gpt_sovits/g2pw.py) against upstream's G2PWOnnxConverter, recorded by make_g2pw_fixtures.py on a
tiny random G2PW model exported from GitYCC/g2pW's torch module (fixtures/g2pw_model, upstream's folder layout)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from mizuoto.nodes.formats.checkpoint import ModelFolderError
from mizuoto.nodes.gpt_sovits import g2pw
from mizuoto.runtime.loading import CheckpointError

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = FIXTURES / "g2pw_model"
FILES = ("config.py", "POLYPHONIC_CHARS.txt", "MONOPHONIC_CHARS.txt", "bopomofo_to_pinyin_wo_tune_dict.json",
         "char_bopomofo_dict.json", "g2pW.onnx")

@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads((FIXTURES / "g2pw.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(FIXTURES / "g2pw_tokenizer" / "tokenizer.json"))


@pytest.fixture(scope="module")
def model(tokenizer) -> g2pw.G2PW:
    return g2pw.G2PW.from_folder(MODEL, tokenizer)


def _digest(model_input: dict[str, np.ndarray]) -> dict:
    upstream_names = {"attention_mask": "attention_masks", "phoneme_mask": "phoneme_masks"}
    return {upstream_names.get(k, k): [list(v.shape), hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]]
            for k, v in model_input.items()}


def _recording(model: g2pw.G2PW, monkeypatch) -> list[dict[str, np.ndarray]]:
    inputs: list[dict[str, np.ndarray]] = []
    run = model.probabilities

    def probabilities(model_input):
        inputs.append(model_input)
        return run(model_input)
    monkeypatch.setattr(model, "probabilities", probabilities)
    return inputs


@pytest.mark.golden
def test_pinyin_and_model_inputs_equal_upstream(model, recorded, monkeypatch, one_thread):
    """Every sentence alone and three batches (dedup groups across sentences, a plain padded batch): the pinyin
    lists equal upstream's, and every graph call gets byte-identical inputs (same tokens as AutoTokenizer's,
    same 16-character windows, same 512-token truncation, same padding and grouping)."""
    inputs = _recording(model, monkeypatch)
    assert len(recorded["cases"]) == 34
    gaps = []
    for case in recorded["cases"]:
        inputs.clear()
        assert model(case["sentences"]) == case["pinyin"], case["sentences"]
        assert [_digest(i) for i in inputs] == case["calls"], case["sentences"]
        gaps += [np.diff(np.sort(g2pw.G2PW.probabilities(model, i), axis=1)[:, -2:], axis=1).min() for i in inputs]
    # the readings are argmaxes of float32 probabilities: the two likeliest of every call are >= 4.8e-3 apart
    # (float32 rounding moves them by ~1e-7 on any machine; onnxruntime agrees within 1e-4), so none can flip
    assert min(gaps) > 1e-3, min(gaps)


def test_where_upstream_raises(model, recorded, one_thread):
    """Sentences where upstream reads past pypinyin's shorter list (IndexError): we read those characters
    alone with pypinyin (recorded from our port: there is no upstream result to compare)."""
    for case in recorded["upstream_index_error"]:
        got = model([case["sentence"]])
        assert got == case["ours"] and len(got[0]) == len(case["sentence"])


def test_predictions_equal_onnxruntime(model, recorded, monkeypatch, one_thread):
    """Our interpreter and onnxruntime on the same inputs (grouped and padded-batch calls): same argmax, close
    probabilities."""
    ort = pytest.importorskip("onnxruntime")   # a test dependency (the test extra)

    session = ort.InferenceSession(str(MODEL / "g2pW.onnx"), providers=["CPUExecutionProvider"])
    inputs = _recording(model, monkeypatch)
    for case in recorded["cases"][-3:]:
        model(case["sentences"])
    assert len(inputs) == 31
    for model_input in inputs:
        ours = g2pw.G2PW.probabilities(model, model_input)
        (theirs,) = session.run(None, model_input)
        assert ours.shape == theirs.shape
        assert np.array_equal(ours.argmax(1), theirs.argmax(1))
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)


def test_phoneme_labels(recorded):
    """dataset.get_phoneme_labels and get_char_phoneme_labels (config use_char_phoneme) on the tiny list."""
    rows = [tuple(line.split("\t")) for line in
            (MODEL / "POLYPHONIC_CHARS.txt").read_text(encoding="utf-8").strip().split("\n")]
    for key, char_phoneme in (("phoneme", False), ("char_phoneme", True)):
        labels, char2phonemes = g2pw.phoneme_labels(rows, char_phoneme)
        assert [labels, char2phonemes] == recorded["label_sets"][key]


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "G2PWModel"
    shutil.copytree(MODEL, folder)
    return folder


@pytest.mark.parametrize("name", FILES)
def test_missing_file_is_named(tmp_path, tokenizer, name):
    folder = _copy(tmp_path)
    (folder / name).unlink()
    with pytest.raises(ModelFolderError, match=name):
        g2pw.G2PW.from_folder(folder, tokenizer)


def test_lowercase_onnx_name(tmp_path, tokenizer, recorded, one_thread):
    folder = _copy(tmp_path)
    (folder / "g2pW.onnx").rename(folder / "g2pw.onnx")
    case = recorded["cases"][0]
    assert g2pw.G2PW.from_folder(folder, tokenizer)(case["sentences"]) == case["pinyin"]


@pytest.mark.parametrize("line, where", [
    ("use_mask = bool(1)", "field 'use_mask'"),
    ("import os", "line 1"),
    ("model_source = __import__('os').getcwd()", "field 'model_source'"),
    ("use_char_phoneme = 1", "field 'use_char_phoneme'"),
])
def test_config_not_literal_is_refused(tmp_path, tokenizer, line, where):
    """config.py is never executed: only literal assignments (and GitYCC's `root + 'name'` string sums, which
    the fixture's own config.py uses) are read."""
    folder = _copy(tmp_path)
    path = folder / "config.py"
    path.write_text(line + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(CheckpointError) as info:
        g2pw.G2PW.from_folder(folder, tokenizer)
    assert str(path) in str(info.value) and where in str(info.value)


def test_config_defaults(tmp_path):
    path = tmp_path / "config.py"
    path.write_text("'''doc'''\nroot = './x/'\nuse_mask = False\nlr = -5e-5\np = {'a': root + 'b', 'c': (1, -2)}\n",
                    encoding="utf-8")
    assert g2pw.read_config(path) == {"use_mask": False, "use_char_phoneme": False}


def test_bad_table_line_is_named(tmp_path, tokenizer):
    folder = _copy(tmp_path)
    path = folder / "POLYPHONIC_CHARS.txt"
    path.write_text(path.read_text(encoding="utf-8") + "行 ㄒㄧㄥ2\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match="POLYPHONIC_CHARS.txt line"):
        g2pw.G2PW.from_folder(folder, tokenizer)


def test_without_opencc(tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, "opencc", None)
    with pytest.raises(ImportError, match="opencc"):
        g2pw.G2PW.from_folder(MODEL, tokenizer)


def test_module_imports_without_opencc():
    code = ("import sys; sys.modules['opencc'] = None; import mizuoto.nodes.gpt_sovits.g2pw as g; "
            "assert g.G2PW")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.golden
def test_read_polyphonic_and_correct_pronunciation(recorded):
    """upstream g2pw.py read_dict() (polyphonic-fix.rep overriding polyphonic.rep; a line with double quotes,
    spaces and a trailing comma, a CRLF line) and correct_pronunciation, recorded."""
    table = g2pw.read_polyphonic(FIXTURES / "g2pw_text")
    assert table == recorded["polyphonic_table"]
    for case in recorded["correct_pronunciation"]:
        pinyins = list(case["pinyins"])
        assert g2pw.correct_pronunciation(case["word"], pinyins, table) == case["expected"]
        assert pinyins == case["pinyins"]


def test_read_polyphonic_refuses_code_and_names_files(tmp_path):
    (tmp_path / "polyphonic.rep").write_text("湖泊: ['hu2','po1']\n", encoding="utf-8")
    with pytest.raises(ModelFolderError, match="polyphonic-fix.rep"):
        g2pw.read_polyphonic(tmp_path)
    (tmp_path / "polyphonic-fix.rep").write_text("行长: ['hang2', 'zhang3']\n坏: __import__('os').getcwd()\n",
                                                 encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"polyphonic-fix.rep line 2"):
        g2pw.read_polyphonic(tmp_path)
    (tmp_path / "polyphonic-fix.rep").write_text("行长: ['hang2', 'zhang3']\n", encoding="utf-8")
    assert g2pw.read_polyphonic(tmp_path) == {"湖泊": ["hu2", "po1"], "行长": ["hang2", "zhang3"]}


def test_flatten_axis_equal_to_rank():
    """ONNX Flatten allows axis == rank ([numel, 1]); transformers' padding-mask indexing exports it (G2PW)."""
    import torch

    from mizuoto.nodes.formats.onnx_graph import OPS
    from mizuoto.nodes.formats.onnx_reader import Node
    x = torch.arange(24).reshape(2, 3, 4)
    for axis, shape in ((0, (1, 24)), (1, (2, 12)), (3, (24, 1)), (-1, (6, 4)), (-3, (1, 24))):
        (y,) = OPS["Flatten"](Node("Flatten", "f", ["x"], ["y"], {"axis": axis}), [x])
        assert y.shape == shape and torch.equal(y.reshape(-1), x.reshape(-1))


@pytest.mark.golden
def test_chinese_g2p_on_g2pw_equals_upstream(model, one_thread):
    """The whole G2PW path of the Chinese front end: chinese.clean_text with this G2PW and upstream's polyphonic
    entries equals upstream's chinese2 (`is_g2pw = True`, G2PWPinyin on the same tiny folder), as recorded by
    make_zhfront_fixtures.py in fixtures/zhfront.json."""
    from mizuoto.nodes.gpt_sovits import chinese

    recorded = json.loads((FIXTURES / "zhfront.json").read_text(encoding="utf-8"))["g2pw"]
    assert len(recorded["cases"]) == 20
    for text, want in recorded["cases"].items():
        phones, word2ph, norm = chinese.clean_text(text, model, recorded["polyphonic"])
        assert {"phones": phones, "word2ph": word2ph, "norm": norm} == want, text

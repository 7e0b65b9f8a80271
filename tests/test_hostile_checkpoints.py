"""Corrupt or hostile weight and tokenizer files: every reader refuses them with a CheckpointError (a ValueError)
naming the file and what was expected, at once, never a bare IndexError/KeyError/TypeError/RecursionError or a
library's bare Exception."""
from __future__ import annotations

import fnmatch
import random
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.formats.checkpoint import load_pickle, load_pickle_with_records
from mizuoto.nodes.pack.pipeline import synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError



def noise(seed: int, size: int = 64) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("prefix", [b"", b"\x80\x02", b"PK\x03\x04"])
def test_random_bytes_in_a_pickle_name_the_file(tmp_path, prefix):
    path = tmp_path / "model.pth"
    for seed in range(60):
        path.write_bytes(prefix + noise(seed, 1 + seed % 9 * 40))
        for read in (load_pickle, lambda p: load_pickle_with_records(p, ("utils.HParams",))):
            with pytest.raises(CheckpointError) as e:
                read(path)
            assert str(path) in str(e.value) and "checkpoint" in str(e.value), e.value


def test_a_record_called_with_arguments_is_refused_naming_the_file(tmp_path, monkeypatch):
    """`utils.HParams(1, 2)` in a pickle (REDUCE with arguments): torch.save never writes it for a record."""
    utils = types.ModuleType("utils")

    class HParams:
        def __reduce__(self):
            return HParams, (1, 2)
    HParams.__module__, HParams.__qualname__ = "utils", "HParams"
    utils.HParams = HParams
    monkeypatch.setitem(sys.modules, "utils", utils)
    path = tmp_path / "s2G.pth"
    torch.save({"config": HParams(), "weight": {"w": torch.zeros(2)}}, path)
    with pytest.raises(CheckpointError) as e:
        load_pickle_with_records(path, ("utils.HParams",))
    assert str(path) in str(e.value) and "expected none" in str(e.value), e.value


# ---- every registered engine's tiny folder, one file spoilt at a time ------------------------------------------
ENGINES = {spec.engine_id: spec for spec in discover()}
WEIGHTS = (".pth", ".pt", ".ckpt", ".bin", ".safetensors", ".onnx")
# Files a tiny folder holds in the upstream layout that no loader reads (so nothing can notice them spoilt).
UNREAD = {"omnivoice": {"tokenizer_config.json": "tokenizer.json holds the whole tokenizer",
                        "audio_tokenizer/preprocessor_config.json": "the codec's sample rate is in its config.json"}}
# Files for which an empty one is valid content: a BPE without merges; GPT-SoVITS's supplementary lexicons
# (words cmudict.rep lacks, overrides).
EMPTY_IS_VALID = ("merges.txt", "cmudict-fast.rep", "engdict-hot.rep")
SPOIL = {"random bytes": lambda data: random.Random(len(data)).randbytes(max(len(data), 64)),
         "empty": lambda data: b"",
         "truncated": lambda data: data[:len(data) // 2]}


def spoilable(engine_id: str, folder: Path, how: str) -> list[Path]:
    """The files of `folder` the loaders read, that `how` spoils detectably: random bytes every one (no text or
    weight format survives them); emptied, the text files but EMPTY_IS_VALID (an empty weight file fails where a
    truncated one does); cut in half, the weights (half a config can be a valid, shorter one)."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()
             and p.relative_to(folder).as_posix() not in UNREAD.get(engine_id, {})]
    if how == "empty":
        files = [p for p in files if p.suffix not in WEIGHTS and not p.name.endswith(EMPTY_IS_VALID)]
    if how == "truncated":
        files = [p for p in files if p.suffix in WEIGHTS]
    return files


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """Each engine's tiny folder, written once per module on first use (this module's own copy)."""
    from conformance import conformance_case
    cases: dict[str, object] = {}

    def case(engine_id: str):
        if engine_id not in cases:
            cases[engine_id] = conformance_case(engine_id, tmp_path_factory.mktemp(engine_id))
        return cases[engine_id]
    return case


@pytest.mark.parametrize("how", list(SPOIL))
@pytest.mark.parametrize("engine_id", sorted(e for e in ENGINES if e != "hibari"))   # hibari has no files
def test_a_spoilt_file_in_a_model_folder_is_an_error_naming_it(tiny_folders, engine_id, how, one_thread):
    """Every file of the engine's tiny folder in turn replaced by random bytes, emptied or cut in half: loading
    the folder and speaking once (tokenizers load on first use) fails with a ValueError naming that file, within
    a few seconds; never a bare library error, a hang or a silently wrong voice."""
    spec, case = ENGINES[engine_id], tiny_folders(engine_id)
    folder = Path(case.folder)
    files = spoilable(engine_id, folder, how)
    assert files, f"{engine_id}: nothing to spoil"
    for path in files:
        data = path.read_bytes()
        path.write_bytes(SPOIL[how](data))
        start = time.monotonic()
        try:
            with pytest.raises(ValueError) as e:
                engine = spec.build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")),
                                    ModelManager(DeviceService()))
                synthesize(engine, case.request)
        finally:
            path.write_bytes(data)
        rel = path.relative_to(folder).as_posix()
        assert rel in str(e.value), f"{engine_id}: {rel} {how}: {type(e.value).__name__}: {str(e.value)[:400]}"
        assert time.monotonic() - start < 20, f"{engine_id}: {rel} {how}: {time.monotonic() - start:.1f} s"


# ---- ONNX files (CosyVoice's CAM++ and speech tokenizer, GPT-SoVITS's G2PW, Hibari) --------------------------
def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append(v & 0x7F | (0x80 if v >> 7 else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _field(num: int, value: int | str | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    value = value.encode() if isinstance(value, str) else value
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def _onnx(graph: bytes) -> bytes:
    return _field(1, 8) + _field(7, graph) + _field(8, _field(2, 17))   # ir_version 8, opset 17


def _nested(depth: int) -> bytes:
    """An If node whose then_branch holds an If node whose then_branch ... `depth` graphs deep."""
    graph = _field(1, _field(4, "Identity"))
    for _ in range(depth):
        graph = _field(1, _field(4, "If") + _field(5, _field(1, "then_branch") + _field(6, graph)))
    return graph


HOSTILE_ONNX = {
    "nested 3000 deep": (_onnx(_nested(3000)), "nested more than"),
    "a string sent as a varint": (_onnx(_field(1, _varint(4 << 3) + _varint(7))), "expected a length-delimited"),
    "dims [2**32, 2**32]": (_onnx(_field(5, _field(1, 2**32) + _field(1, 2**32) + _field(2, 1) + _field(8, "w")
                                        + _field(9, b""))), "elements, more than"),
}


@pytest.mark.parametrize("case", list(HOSTILE_ONNX))
def test_a_hostile_onnx_file_is_an_error_naming_it(tmp_path, tiny_folders, case):
    """Straight through the reader, and through an engine's loader (CosyVoice's campplus.onnx): a format error
    naming the file, never a RecursionError, a TypeError or numpy's reshape error."""
    from mizuoto.nodes.formats.onnx_reader import read_model
    data, says = HOSTILE_ONNX[case]
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    with pytest.raises(ValueError) as e:
        read_model(path)
    assert str(path) in str(e.value) and says in str(e.value), e.value
    folder = Path(tiny_folders("cosyvoice").folder)
    campplus = folder / "campplus.onnx"
    clean = campplus.read_bytes()
    campplus.write_bytes(data)
    try:
        with pytest.raises(ValueError) as e:
            ENGINES["cosyvoice"].build(LoadRequest("tiny", folder, torch.float32, torch.device("cpu")),
                                       ModelManager(DeviceService()))
    finally:
        campplus.write_bytes(clean)
    assert str(campplus) in str(e.value) and says in str(e.value), e.value


def test_published_nesting_and_shapes_still_read():
    """A few subgraph levels and an empty [0, 4] tensor are what real models hold."""
    from mizuoto.nodes.formats.onnx_reader import parse_model
    model = parse_model(_onnx(_nested(10) + _field(5, _field(1, 0) + _field(1, 4) + _field(2, 1) + _field(8, "e")
                                                   + _field(9, b""))))
    assert model.graph.initializers["e"].shape == (0, 4) and model.graph.nodes[0].op_type == "If"


@pytest.mark.parametrize("engine", ["CosyVoice", "Qwen3-TTS"])
def test_a_merge_of_unknown_tokens_names_the_bpe_files(tmp_path, engine):
    """A merges.txt cut mid-line (or from another vocabulary) names tokens vocab.json lacks: the tokenizers
    library raised a bare Exception ("Token `x` out of vocabulary")."""
    from cosyvoice.tiny import write_tokenizer
    from mizuoto.nodes.cosyvoice.frontend import TextTokenizer as CosyTokenizer
    from mizuoto.nodes.qwen3_tts.text import TextTokenizer as QwenTokenizer
    write_tokenizer(tmp_path)
    read = (lambda: CosyTokenizer(tmp_path, 2)) if engine == "CosyVoice" else (lambda: QwenTokenizer(tmp_path))
    read()
    merges = tmp_path / "merges.txt"
    merges.write_text(merges.read_text(encoding="utf-8") + "notatoken alsonot\n", encoding="utf-8")
    with pytest.raises(CheckpointError) as e:
        read()
    assert str(merges) in str(e.value) and "BPE vocabulary and its merges" in str(e.value), e.value


def test_a_spoilt_g2pw_file_is_an_error_naming_it(tmp_path):
    """GPT-SoVITS's G2PW folder (its own ONNX model, config.py, character tables, pinyin table) and the
    polyphonic word lists: each file in turn replaced by random bytes is a ValueError naming it."""
    import shutil

    from tokenizers import Tokenizer

    from mizuoto.nodes.gpt_sovits import g2pw
    fixtures = Path(__file__).parent / "gpt_sovits" / "fixtures"
    folder = tmp_path / "G2PWModel"
    shutil.copytree(fixtures / "g2pw_model", folder)
    tokenizer = Tokenizer.from_file(str(fixtures / "g2pw_tokenizer" / "tokenizer.json"))
    text = tmp_path / "text"
    text.mkdir()
    for name in g2pw.REP_FILES:
        (text / name).write_text("行: ['xing2']\n", encoding="utf-8")
    g2pw.G2PW.from_folder(folder, tokenizer)
    g2pw.read_polyphonic(text)
    spoilt = [(p, lambda: g2pw.G2PW.from_folder(folder, tokenizer)) for p in sorted(folder.iterdir())
              if p.name != g2pw.CHAR_BOPOMOFO]          # only its presence is checked (see G2PW.from_folder)
    spoilt += [(text / name, lambda: g2pw.read_polyphonic(text)) for name in g2pw.REP_FILES]
    for path, read in spoilt:
        data = path.read_bytes()
        path.write_bytes(noise(len(data), max(len(data), 64)))
        try:
            with pytest.raises(ValueError) as e:
                read()
        finally:
            path.write_bytes(data)
        assert str(path) in str(e.value), f"{path.name}: {type(e.value).__name__}: {str(e.value)[:300]}"


def test_a_plain_python_pickle_is_named_as_such(tmp_path):
    """A .ckpt written with pickle.dump rather than torch.save (seen with re-saved GPT-SoVITS files) says so,
    instead of the weights-only unpickler's "Unsupported operand 149"."""
    import pickle

    from mizuoto.nodes.formats.checkpoint import load_pickle

    path = tmp_path / "voice-e15.ckpt"
    path.write_bytes(pickle.dumps({"weight": {"w": [1.0, 2.0]}}, protocol=4))
    with pytest.raises(CheckpointError, match=r"voice-e15.ckpt: a plain Python pickle \(pickle.dump\), not a torch.save"):
        load_pickle(path)
    torch.save({"w": torch.zeros(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert torch.equal(load_pickle(tmp_path / "legacy.pt")["w"], torch.zeros(2))   # torch's legacy format still loads


@pytest.mark.parametrize("engine_id", sorted(e for e in ENGINES if e != "hibari"))
def test_a_missing_file_is_named_by_the_folder_check(tiny_folders, engine_id):
    """The tiny folder is complete; each file whose removal makes it incomplete is named by
    missing_files (what the loader node and the command line print), and nothing else is."""
    spec, folder = ENGINES[engine_id], tiny_folders(engine_id).folder
    assert spec.missing_files(folder) == [], engine_id
    named = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        hidden = path.with_name(path.name + ".away")
        path.rename(hidden)
        try:
            missing = spec.missing_files(folder)
        finally:
            hidden.rename(path)
        if missing:
            named += 1
            assert any(path.name in m or any(fnmatch.fnmatch(path.name, w) for w in m.split()) for m in missing), \
                (engine_id, path.relative_to(folder), missing)
    assert named >= 2, f"{engine_id}: the folder check needs almost none of the model's files"

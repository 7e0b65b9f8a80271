"""Config and tokenizer files are parsed within bounds: size, nesting and (YAML) alias expansion are
checked before anything walks the data, so a 500-byte alias bomb, a 20 000-deep nesting or a JSON `null`
is a clear error naming the file, at once, instead of a hang, a RecursionError or a TypeError."""
from __future__ import annotations

import os
import time

import pytest

from mizuoto.nodes.formats.checkpoint import MAX_DATA_FILE_BYTES, check_yaml_graph, load_json, load_yaml
from mizuoto.runtime.loading import CheckpointError

# 10^9 values after expansion, 9 lines: what `yaml.safe_load` itself builds in microseconds (aliases share
# one object), and what any walk of the result (a size check, a copy resolving references) visits.
BOMB = "lol0: &l0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
    f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10))
HOSTILE_YAML = {
    "alias bomb": (BOMB, "values once its aliases are expanded"),
    "deep nesting": ("deep: " + "[" * 20000 + "]" * 20000 + "\n", "RecursionError"),
    "nested past the bound": ("deep: " + "[" * 150 + "]" * 150 + "\n", "nested more than 100 deep"),
    "recursive alias": ("loop: &r [1, *r]\n", "recursive alias"),
}


def yaml_readers():
    """Every loader's YAML reader, with the file it reads in a folder: (name, file, call)."""
    from mizuoto.nodes.blocks.vocoder import VocosConfig
    from mizuoto.nodes.cosyvoice.config import read_hyperpyyaml
    from mizuoto.nodes.f5_tts.loader import read_config as f5_config
    from mizuoto.nodes.indextts2.loader import read_config as indextts2_config
    return [("F5-TTS config.yaml", "config.yaml", lambda p: f5_config(p.parent)),
            ("Vocos config.yaml", "config.yaml", VocosConfig.from_yaml),
            ("IndexTTS 2 config.yaml", "config.yaml", indextts2_config),
            ("CosyVoice cosyvoice2.yaml", "cosyvoice2.yaml", read_hyperpyyaml)]


def guarded(call, *args):
    """Run a reader; the error it raises, and how long it took (a hang guard, not a benchmark)."""
    start = time.monotonic()
    with pytest.raises(ValueError) as e:
        call(*args)
    return e.value, time.monotonic() - start


@pytest.mark.parametrize("case", list(HOSTILE_YAML))
@pytest.mark.parametrize("reader", range(4), ids=[r[0] for r in yaml_readers()])
def test_hostile_yaml_is_refused_at_once_naming_the_file(tmp_path, reader, case):
    _, name, call = yaml_readers()[reader]
    text, says = HOSTILE_YAML[case]
    path = tmp_path / name
    path.write_text("model:\n  arch: {dim: 8}\n" + text, encoding="utf-8")
    error, seconds = guarded(call, path)
    assert str(path) in str(error) and says in str(error), error
    assert seconds < 10, f"{seconds:.1f} s"


def test_cosyvoice_ref_chains_are_bounded_like_aliases(tmp_path):
    """HyperPyYAML's `!ref <name>` copies the named value: ten references a level multiply like aliases."""
    from mizuoto.nodes.cosyvoice.config import read_hyperpyyaml
    lines = ["r0: [a, a, a, a, a, a, a, a, a, a]"] + [
        f"r{i}: [{', '.join([f'!ref <r{i - 1}>'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    error, seconds = guarded(read_hyperpyyaml, path)
    assert str(path) in str(error) and "!ref references expand to more than" in str(error)
    assert seconds < 20, f"{seconds:.1f} s"


def test_the_bounds_leave_real_configs_alone(tmp_path):
    """Published configs use a few anchors and nest a few levels; a 150 000-entry vocabulary is one level."""
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {dim: 8, heads: 2}\nmodel: {arch: *b, other: *b}\n", encoding="utf-8")
    assert load_yaml(path, "test") == {"base": {"dim": 8, "heads": 2}, "model": {"arch": {"dim": 8, "heads": 2},
                                                                                 "other": {"dim": 8, "heads": 2}}}
    vocab = tmp_path / "vocab.json"
    vocab.write_text("{" + ", ".join(f'"t{i}": {i}' for i in range(150_000)) + "}", encoding="utf-8")
    assert len(load_json(vocab, "test")) == 150_000


def test_a_node_graph_is_measured_in_linear_time():
    import yaml
    node = yaml.compose(BOMB.replace("lol9", "x9").split("x9")[0])   # 10^8 expanded values, 90 distinct nodes
    with pytest.raises(ValueError, match="values once its aliases"):
        check_yaml_graph(node)
    check_yaml_graph(node, limit_nodes=10**10)


# The 100 000-deep array is refused by load_json's own linear nesting check before json.loads sees it: json's C
# scanner is bounded only by the interpreter's recursion limit, so with that limit raised (or on a thread with a
# small stack) the same file crashed the process or raised something else than the RecursionError caught.
JSON_CASES = {"deep": ("[" * 100_000 + "]" * 100_000, "expected a config or vocabulary nested at most 100 deep"),
              "null": ("null", "expected a JSON"), "a list": ("[1, 2]", "expected a JSON"),
              "text": ("not json", "not valid JSON")}


def json_readers(tmp_path):
    """Tokenizer readers of the engines, each on a complete tiny folder: (file to spoil, call)."""
    from cosyvoice.tiny import write_tokenizer as qwen2_tokenizer
    from fish_speech.tiny import write_tokenizer as fish_tokenizer
    from mizuoto.nodes.cosyvoice.frontend import TextTokenizer as CosyTokenizer
    from mizuoto.nodes.fish_speech.tokenizer import FishTokenizer
    from mizuoto.nodes.qwen3_tts.text import TextTokenizer as QwenTokenizer
    qwen2 = tmp_path / "qwen2"
    qwen2.mkdir()
    qwen2_tokenizer(qwen2)
    fish = tmp_path / "fish"
    fish.mkdir()
    fish_tokenizer(fish)
    return {"CosyVoice vocab.json": (qwen2 / "vocab.json", lambda: CosyTokenizer(qwen2, 2)),
            "CosyVoice tokenizer_config.json": (qwen2 / "tokenizer_config.json", lambda: CosyTokenizer(qwen2, 2)),
            "Qwen3-TTS vocab.json": (qwen2 / "vocab.json", lambda: QwenTokenizer(qwen2)),
            "Qwen3-TTS tokenizer_config.json": (qwen2 / "tokenizer_config.json", lambda: QwenTokenizer(qwen2)),
            "Fish Speech special_tokens.json": (fish / "special_tokens.json", lambda: FishTokenizer.from_folder(fish))}


@pytest.mark.parametrize("case", list(JSON_CASES))
@pytest.mark.parametrize("reader", ["CosyVoice vocab.json", "CosyVoice tokenizer_config.json", "Qwen3-TTS vocab.json",
                                    "Qwen3-TTS tokenizer_config.json", "Fish Speech special_tokens.json"])
def test_hostile_json_is_a_clear_error_naming_the_file(tmp_path, reader, case):
    path, call = json_readers(tmp_path)[reader]
    call()                                   # the clean folder reads
    text, says = JSON_CASES[case]
    path.write_text(text, encoding="utf-8")
    error, _ = guarded(call)
    assert str(path) in str(error) and says in str(error), error


def test_deep_json_is_refused_whatever_the_recursion_limit(tmp_path):
    """In a fresh interpreter with the recursion limit raised to 10**6 (as a host application may), a 100 000-deep
    array is still a clear error: json.loads alone overflows the C stack there and the process dies."""
    import subprocess
    import sys
    path = tmp_path / "vocab.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code = ("import sys; sys.setrecursionlimit(10**6)\n"
            "from mizuoto.nodes.formats.checkpoint import load_json\n"
            f"try:\n    load_json({str(path)!r}, 'test')\n"
            "except ValueError as e:\n    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "nested at most 100 deep" in done.stdout, (done.returncode, done.stderr[-500:])


def test_an_oversized_data_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "config.yaml"
    with open(path, "wb") as f:              # sparse: no disk, no RAM
        f.truncate(MAX_DATA_FILE_BYTES + 1)
    for call in (lambda: load_yaml(path, "test"), lambda: load_json(path, "test")):
        with pytest.raises(CheckpointError, match="expected a config or tokenizer file under"):
            call()
    assert os.path.getsize(path) > MAX_DATA_FILE_BYTES

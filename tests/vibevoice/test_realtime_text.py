"""VibeVoice's text ids equal upstream's processor (VibeVoiceTextTokenizerFast) on a tiny Qwen2-layout tokenizer
(fixtures/tokenizer.json and tokenizer_ids.json, recorded by make_tokenizer_fixture.py): exact."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from vibevoice.realtime_tiny import HERE, LIVE, LIVE_REASON, SRC, VENV

from mizuoto.nodes.formats.checkpoint import CheckpointError
from mizuoto.nodes.vibevoice.text import TextTokenizer

FIXTURES = HERE / "fixtures"


def check(folder: Path) -> None:
    rec = json.loads((folder / "tokenizer_ids.json").read_text())
    tok = TextTokenizer(folder / "tokenizer.json")
    assert [tok.encode(t) for t in rec["texts"]] == rec["ids"] and tok.negative_id == rec["negative_id"]


def test_ids_equal_upstream() -> None:
    check(FIXTURES)


@pytest.mark.skipif(not LIVE, reason=LIVE_REASON)
def test_live_ids_equal_upstream(tmp_path: Path) -> None:
    subprocess.run([str(Path(VENV, "bin", "python")), str(HERE / "make_tokenizer_fixture.py"), str(tmp_path)],
                   check=True, env={"VIBEVOICE_SRC": SRC, "PATH": "/usr/bin:/bin"}, timeout=300, capture_output=True)
    check(tmp_path)


def test_empty_text_and_a_foreign_tokenizer(tmp_path: Path) -> None:
    tok = TextTokenizer(FIXTURES / "tokenizer.json")
    with pytest.raises(ValueError, match="nothing to speak"):
        tok.encode(" \n ")
    data = json.loads((FIXTURES / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<|image_pad|>"]
    data["model"]["vocab"].pop("<|image_pad|>", None)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"tokenizer.json has no <\|image_pad\|>"):
        TextTokenizer(tmp_path / "tokenizer.json")

"""The GPT-SoVITS list-file reader: entries as upstream reads them, every bad line named."""
from __future__ import annotations

import pytest

from mizuoto.training import datasets
from mizuoto.training.datasets import read_list


@pytest.fixture
def clips(tmp_path):
    (tmp_path / "wavs").mkdir()
    for n in ("a.wav", "b.wav"):
        (tmp_path / "wavs" / n).write_bytes(b"RIFF")
    return tmp_path


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_entries_relative_paths_crlf_and_language_codes(clips):
    lst = write(clips / "list.txt", "wavs/a.wav|spk|ZH|你好。\r\n\r\n" + str(clips / "wavs" / "b.wav") + "|spk|En|Hi there.\n")
    a, b = read_list(lst)
    assert (a.line, a.audio, a.name, a.language, a.text) == (1, clips / "wavs" / "a.wav", "a.wav", "zh", "你好。")
    assert (b.line, b.audio, b.language) == (3, clips / "wavs" / "b.wav", "en")


def test_audio_dir_takes_the_base_name_as_upstream(clips):
    lst = write(clips / "list.txt", "D:/somewhere/else/a.wav|spk|ja|こんにちは\n")
    (entry,) = read_list(lst, clips / "wavs")
    assert entry.audio == clips / "wavs" / "a.wav" and entry.language == "ja"


@pytest.mark.parametrize("line, message", [
    ("wavs/a.wav|spk|en", "line 1: 3 fields"),
    ("wavs/a.wav|spk|en|a|b", "line 1: 5 fields"),
    ("|spk|en|text", "empty clip path"),
    ("wavs/a.wav|spk|en|   ", "(a.wav): empty transcript"),
    ("wavs/a.wav|spk|fr|Bonjour", "(a.wav): language 'fr'"),
    ("wavs/missing.wav|spk|en|Hello", "(missing.wav): audio file"),
    ("wavs/a.wav|spk|en|Hello\nwavs/a.wav|spk|en|Again", "line 2 (a.wav): the same clip name as line 1"),
    ("wavs/a.wav|spk|en|" + "x" * 1001, "transcript of 1001 characters"),
])
def test_bad_lines_are_named(clips, line, message):
    lst = write(clips / "list.txt", line + "\n")
    with pytest.raises(ValueError, match="line") as e:
        read_list(lst)
    assert message in str(e.value) and str(lst) in str(e.value)


def test_bad_files_are_named(clips, monkeypatch):
    with pytest.raises(ValueError, match="not found"):
        read_list(clips / "nope.txt")
    with pytest.raises(ValueError, match="no clips"):
        read_list(write(clips / "empty.txt", "\n \n"))
    (clips / "latin1.txt").write_bytes("wavs/a.wav|s|en|caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        read_list(clips / "latin1.txt")
    monkeypatch.setattr(datasets, "MAX_LIST_BYTES", 10)
    with pytest.raises(ValueError, match="at most"):
        read_list(write(clips / "big.txt", "wavs/a.wav|spk|en|Hello\n"))
    monkeypatch.setattr(datasets, "MAX_LIST_BYTES", 1 << 20)
    monkeypatch.setattr(datasets, "MAX_CLIPS", 1)
    with pytest.raises(ValueError, match="more than 1 clips"):
        read_list(write(clips / "two.txt", "wavs/a.wav|s|en|Hi\nwavs/b.wav|s|en|Ho\n"))
    with pytest.raises(ValueError, match="not a folder"):
        read_list(write(clips / "one.txt", "wavs/a.wav|s|en|Hi\n"), clips / "no_such_dir")

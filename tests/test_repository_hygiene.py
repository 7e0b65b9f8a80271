"""No tracked file names a path of one developer's machine: recipes and scripts must work for anyone
(relative paths, environment variables, upstream URLs + commits). The patterns are built from pieces so
this file does not match itself."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_S = "/"
# a path start: not preceded by a name character, so URLs (example.com/work/...) and relative paths pass
_START = r"(?<![\w.~-])"
PATTERNS = [re.compile(p) for p in (
    _START + _S + "work" + _S,
    _START + _S + "root" + _S,
    _START + _S + "home" + _S + r"[\w.-]+" + _S,
    _START + _S + "Users" + _S + r"[\w.-]+" + _S,
    r"\b[A-Za-z]:" + r"\\" + "Users" + r"\\",
)]


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode("utf-8").split("\0") if name]


def offending_lines(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if any(p.search(line) for p in PATTERNS)]


def test_patterns_catch_machine_paths_and_spare_the_rest():
    bad = [_S + "work" + _S + "venv-f5/bin/python", "cd " + _S + "root" + _S + ".cache",
           _S + "home" + _S + "alice" + _S + "x", "'" + _S + "Users" + _S + "bob" + _S + "x'",
           "C:" + "\\" + "Users" + "\\" + "me"]
    good = ["https://example.com" + _S + "work" + _S + "x", "tests" + _S + "work" + _S + "x",
            "~" + _S + ".cache/mizuoto", "$UPSTREAM_DIR/fish_speech", _S + "home" + _S]
    assert all(offending_lines(b) for b in bad)
    assert not any(offending_lines(g) for g in good)


def test_no_tracked_file_names_a_developer_machine_path():
    found = []
    for path in tracked_files():
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:                      # binary (fixtures, weights): not text anyone follows
            continue
        for n, line in offending_lines(data.decode("utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{n}: {line[:120]}")
    assert not found, "machine-specific absolute paths:\n" + "\n".join(found)


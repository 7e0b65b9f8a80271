"""Writing a trained model folder into the models folder: a checked name, pieces of the base folder linked
(or copied) in, and the whole folder written beside its target and renamed into place at the end, so a
loader never sees a half-written model and a failure leaves nothing behind."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\- ]{0,63}$")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name) or name.endswith((".", " ")):
        raise ValueError(f"save_name {name!r}: expected 1 to 64 letters, digits, '_', '-', '.' or spaces, starting "
                         "with a letter or digit")
    return name


def link_file(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_or_copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=link_file)
    else:
        link_file(src, dst)


@contextlib.contextmanager
def new_folder(parent: Path, name: str, base_folder: Path, pieces: Iterable[str]) -> Iterator[Path]:
    """A hidden `.<name>.partial-*` folder in `parent` holding the base folder's `pieces` that exist, for the
    caller to fill; renamed to `parent/name` when the block ends, removed if it raises. An existing
    `parent/name` is refused before anything is written."""
    check_name(name)
    target = Path(parent) / name
    if target.exists():
        raise ValueError(f"save_name {name!r}: {target} already exists; choose another name")
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent))
    try:
        for piece in pieces:
            if (Path(base_folder) / piece).exists():
                link_or_copy(Path(base_folder) / piece, tmp / piece)
        yield tmp
        os.rename(tmp, target)      # atomic on one filesystem; fails (nothing replaced) if target appeared
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

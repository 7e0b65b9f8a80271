"""Model downloads into a registered model folder, verified against the hub's file hashes.

A download lands in a hidden temporary folder next to its destination and is renamed into place
only when every file is complete and matches its published hash, so an interrupted or corrupt
download never looks like a model. The hub is a `Source`: Hugging Face (through huggingface_hub,
imported only when downloading), GitHub at a pinned commit (files a model card points to there, such
as VibeVoice's voice presets) or, for tests and offline mirrors, a local folder.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
HUBS = ("huggingface", "github")


@dataclass(frozen=True)
class Download:
    """Files of one hub repository that belong to a model folder.

    `include`: glob patterns of repository paths (default every file); `strip`: a folder prefix removed
    from the paths (the files of `F5TTS_v1_Base/` land at the model folder's top); `into`: a subfolder
    of the model folder; `sha256`: pinned hashes of repository paths, checked in addition to the hub's;
    `hub`: "huggingface" or "github"; `revision`: the commit to read, required on GitHub (whose files
    carry no published sha256: the commit fixes their git blob ids, which every file is checked against).
    """

    repo: str
    include: tuple[str, ...] = ("*",)
    strip: str = ""
    into: str = ""
    sha256: dict[str, str] = field(default_factory=dict)
    hub: str = "huggingface"
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.hub not in HUBS:
            raise ValueError(f"Download {self.repo!r}: hub must be one of {HUBS}, got {self.hub!r}")
        if self.hub == "github" and not re.fullmatch(r"[0-9a-f]{40}", self.revision or ""):
            raise ValueError(f"Download {self.repo!r}: a GitHub download names its commit (40 hex digits) as "
                             f"revision, got {self.revision!r}")

    @property
    def label(self) -> str:
        """The repository as the install layout names it."""
        return f"github.com/{self.repo}@{self.revision[:7]}" if self.hub == "github" else self.repo

    @property
    def url(self) -> str:
        if self.hub == "github":
            return f"https://github.com/{self.repo}/tree/{self.revision}"
        return f"https://huggingface.co/{self.repo}" + (f"/tree/{self.revision}" if self.revision else "")

    def wants(self, name: str) -> bool:
        return not name.startswith(".") and any(fnmatch.fnmatchcase(name, p) for p in self.include)

    def destination(self, name: str) -> str:
        """The path of repository file `name` inside the model folder."""
        if self.strip and name.startswith(self.strip.rstrip("/") + "/"):
            name = name[len(self.strip.rstrip("/")) + 1:]
        return f"{self.into.strip('/')}/{name}" if self.into else name


class DownloadError(RuntimeError):
    """A download failed or a file does not match its published hash; nothing was left in place."""


@dataclass(frozen=True)
class RemoteFile:
    name: str  # path inside the repository, "/"-separated
    size: int
    sha256: str | None  # published for large (LFS) files
    git_blob: str | None = None  # the git blob id (sha1 of "blob <size>\0" + content), published by GitHub


class Source(Protocol):
    def files(self, d: Download) -> list[RemoteFile]: ...
    def fetch(self, d: Download, name: str, dest: Path, progress: Callable[[int], None]) -> None: ...


class HuggingFaceSource:
    """The Hugging Face hub through huggingface_hub (ComfyUI ships it)."""

    def files(self, d: Download) -> list[RemoteFile]:
        from huggingface_hub import HfApi

        repo = d.repo
        try:
            info = HfApi().model_info(repo, revision=d.revision, files_metadata=True)
        except Exception as e:  # network, authentication (gated repositories), missing repository
            raise DownloadError(f"Hugging Face repository {repo!r} could not be listed "
                                f"({type(e).__name__}: {str(e)[:200]})") from None
        return [RemoteFile(s.rfilename, s.size or 0, s.lfs.sha256 if s.lfs else None) for s in info.siblings]

    def fetch(self, d: Download, name: str, dest: Path, progress: Callable[[int], None]) -> None:
        from huggingface_hub import hf_hub_download

        try:
            path = Path(hf_hub_download(d.repo, name, revision=d.revision, local_dir=dest.parent.parent / ".hf-cache"))
        except Exception as e:
            raise DownloadError(f"{d.repo}/{name} could not be downloaded ({type(e).__name__}: {str(e)[:200]})") from None
        shutil.move(str(path), dest)
        progress(dest.stat().st_size)


class GitHubSource:
    """A GitHub repository at a pinned commit: listed by the REST API's recursive tree (sizes and blob ids),
    files fetched from raw.githubusercontent.com. Only the standard library: nothing to install."""

    TREE = "https://api.github.com/repos/{repo}/git/trees/{rev}?recursive=1"
    RAW = "https://raw.githubusercontent.com/{repo}/{rev}/{name}"
    MAX_LISTING = 32 << 20  # bytes of tree JSON read at most: a listing is never allowed to grow without bound

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout

    def _open(self, url: str, what: str):
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "mizuoto"}),
                                          timeout=self.timeout)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise DownloadError(f"{what} could not be downloaded from GitHub ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None

    def files(self, d: Download) -> list[RemoteFile]:
        what = f"the file list of github.com/{d.repo} at {d.revision}"
        with self._open(self.TREE.format(repo=d.repo, rev=d.revision), what) as r:
            raw = r.read(self.MAX_LISTING + 1)
        if len(raw) > self.MAX_LISTING:
            raise DownloadError(f"{what} is over {self.MAX_LISTING} bytes")
        try:
            tree = json.loads(raw)
            if tree.get("truncated"):
                raise DownloadError(f"{what} came back truncated by GitHub")
            return [RemoteFile(e["path"], int(e["size"]), None, e["sha"])
                    for e in tree["tree"] if e.get("type") == "blob"]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise DownloadError(f"{what} is not a GitHub tree listing ({type(e).__name__}: {e})") from None

    def fetch(self, d: Download, name: str, dest: Path, progress: Callable[[int], None]) -> None:
        with self._open(self.RAW.format(repo=d.repo, rev=d.revision, name=urllib.parse.quote(name)), f"{d.repo}/{name}") as r, \
                open(dest, "wb") as out:
            for block in iter(lambda: r.read(1 << 20), b""):
                out.write(block)
                progress(len(block))


class Hubs:
    """The source each Download names: Hugging Face or GitHub."""

    def __init__(self, huggingface: Source | None = None, github: Source | None = None) -> None:
        self.sources = {"huggingface": huggingface or HuggingFaceSource(), "github": github or GitHubSource()}

    def files(self, d: Download) -> list[RemoteFile]:
        return self.sources[d.hub].files(d)

    def fetch(self, d: Download, name: str, dest: Path, progress: Callable[[int], None]) -> None:
        self.sources[d.hub].fetch(d, name, dest, progress)


class LocalSource:
    """A folder holding `<repo>/...` files and `<repo>/sha256sums.json` ({name: sha256}), like a mirror."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def files(self, d: Download) -> list[RemoteFile]:
        repo = d.repo
        base = self.root / repo
        if not base.is_dir():
            raise DownloadError(f"repository {repo!r} not found in {self.root}")
        sums_file = base / "sha256sums.json"
        sums = json.loads(sums_file.read_text()) if sums_file.is_file() else {}
        return [RemoteFile(p.relative_to(base).as_posix(), p.stat().st_size, sums.get(p.relative_to(base).as_posix()))
                for p in sorted(base.rglob("*")) if p.is_file() and p != sums_file]

    def fetch(self, d: Download, name: str, dest: Path, progress: Callable[[int], None]) -> None:
        with open(self.root / d.repo / name, "rb") as src, open(dest, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                out.write(block)
                progress(len(block))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_blob_of(path: Path) -> str:
    """The id git gives the file's content: sha1 of the header `blob <size>\\0` and the bytes."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def layout(downloads: Sequence[Download], root: str = "<model>/") -> str:
    """The model folder a model's downloads make, as a plain-ASCII tree (error messages may reach a
    Windows console that cannot print box-drawing characters): each entry after its repository path.

    Entries are the `include` patterns with `strip` / `into` applied, so a pattern such as
    `qwen0.6bemo4-merge/*` stays a pattern ("every matching file"), and `*` means the whole repository.
    """
    tree: dict = {}
    for d in downloads:
        for pattern in d.include:
            *dirs, leaf = d.destination(pattern).split("/")
            node = tree
            for part in dirs:
                node = node.setdefault(part + "/", {})
            node[leaf] = f"{d.label}: {pattern}"
    lines: list[tuple[str, str]] = []

    def walk(node: dict, prefix: str) -> None:
        # folders after files, each group sorted, so the listing does not depend on declaration order
        items = sorted(node.items(), key=lambda kv: (isinstance(kv[1], dict), kv[0]))
        for i, (name, value) in enumerate(items):
            last = i == len(items) - 1
            lines.append((prefix + ("`-- " if last else "|-- ") + name, "" if isinstance(value, dict) else value))
            if isinstance(value, dict):
                walk(value, prefix + ("    " if last else "|   "))

    walk(tree, "")
    width = max(len(entry) for entry, _ in lines) if lines else 0
    return "\n".join([root] + [f"{entry.ljust(width)}  <- {src}" if src else entry for entry, src in lines])


def download_plan(downloads, source: Source) -> list:
    """The (Download, RemoteFile) pairs a model's downloads name (each repository listed once)."""
    plan = []
    for d in downloads:
        files = [f for f in source.files(d) if d.wants(f.name)]
        if not files:
            raise DownloadError(f"repository {d.label!r} has no files matching {list(d.include)}")
        plan += [(d, f) for f in files]
    return plan


def download_model(plan: list, dest: Path, source: Source, progress: Progress | None = None,
                   what: str = "model") -> Path:
    """Fetch the planned files into `dest` (a new folder) through a hidden partial folder, each checked
    against the hub's sha256 and any pinned one; renamed into place only when all are complete.
    An existing `dest` is left alone."""
    dest = Path(dest)
    if dest.exists():
        return dest
    if not plan:
        raise DownloadError(f"{what} has no files to download")
    total, done = sum(f.size for _, f in plan), 0
    partial = dest.parent / f".{dest.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        for d, f in plan:
            target = (partial / d.destination(f.name)).resolve()
            if partial.resolve() not in target.parents:
                raise DownloadError(f"repository {d.label!r} names a file outside its folder: {f.name!r}")
            target.parent.mkdir(parents=True, exist_ok=True)

            def step(n: int) -> None:
                nonlocal done
                done += n
                if progress is not None:
                    progress(done, total)

            source.fetch(d, f.name, target, step)
            for expected in {f.sha256, d.sha256.get(f.name)} - {None}:
                if (actual := sha256_of(target)) != expected:
                    raise DownloadError(f"{d.label}/{f.name}: sha256 {actual} does not match the published {expected}")
            if f.git_blob is not None and (actual := git_blob_of(target)) != f.git_blob:
                raise DownloadError(f"{d.label}/{f.name}: git blob {actual} does not match the published {f.git_blob}")
        partial.rename(dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return dest

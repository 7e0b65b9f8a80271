"""Downloads into a model folder from a local fake hub: hashes checked, nothing half-written."""
import hashlib
import json

import pytest

from mizuoto.nodes.formats.download import DownloadError, LocalSource, download_model, download_plan
from mizuoto.nodes.pack.registry import Download


def fake_repo(root, corrupt=False):
    repo = root / "Qwen" / "Tiny"
    (repo / "speech_tokenizer").mkdir(parents=True)
    files = {"config.json": b"{}", "model.safetensors": b"x" * 3_000_000, "speech_tokenizer/model.safetensors": b"y" * 10}
    for name, data in files.items():
        (repo / name).write_bytes(data)
    sums = {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if n.endswith(".safetensors")}
    if corrupt:
        sums["model.safetensors"] = "0" * 64
    (repo / "sha256sums.json").write_text(json.dumps(sums))
    return LocalSource(root)


def download(repo, dest, source, progress=None):
    """The loader node's path: every file of the repository, planned, fetched, verified."""
    return download_model(download_plan([Download(repo)], source), dest, source, progress, what=repo)


def test_download_verifies_and_reports_progress(tmp_path):
    source = fake_repo(tmp_path / "hub")
    seen = []
    dest = download("Qwen/Tiny", tmp_path / "models" / "Tiny", source, progress=lambda d, t: seen.append((d, t)))
    assert (dest / "speech_tokenizer" / "model.safetensors").read_bytes() == b"y" * 10
    assert seen[-1][0] == seen[-1][1] and len(seen) >= 3
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["Tiny"]


def test_corrupt_download_leaves_nothing(tmp_path):
    source = fake_repo(tmp_path / "hub", corrupt=True)
    with pytest.raises(DownloadError, match="model.safetensors: sha256 .* does not match"):
        download("Qwen/Tiny", tmp_path / "models" / "Tiny", source)
    assert list((tmp_path / "models").iterdir()) == []


def test_unknown_repository(tmp_path):
    (tmp_path / "hub").mkdir()
    with pytest.raises(DownloadError, match="not found"):
        download("Qwen/None", tmp_path / "models" / "None", LocalSource(tmp_path / "hub"))

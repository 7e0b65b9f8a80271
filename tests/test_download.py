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


def github_repo(root, blobs=None, truncated=False):
    """A fake GitHub: the tree listing the REST API returns and raw files, served as file:// URLs."""
    from mizuoto.nodes.formats.download import GitHubSource
    files = {"demo/voices/a.pt": b"a" * 1000, "demo/voices/b.pt": b"b" * 10, "README.md": b"hi"}
    repo = root / "owner" / "repo"
    for name, data in files.items():
        (repo / REV / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / REV / name).write_bytes(data)
    blobs = blobs or {n: hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest() for n, d in files.items()}
    tree = [{"path": "demo", "type": "tree", "sha": "0" * 40}] + [
        {"path": n, "type": "blob", "size": len(d), "sha": blobs[n]} for n, d in files.items()]
    (repo / f"{REV}.json").write_text(json.dumps({"sha": REV, "tree": tree, "truncated": truncated}))
    source = GitHubSource()
    source.TREE = f"file://{root}/{{repo}}/{{rev}}.json"
    source.RAW = f"file://{root}/{{repo}}/{{rev}}/{{name}}"
    return source


REV = "04d19f8352a43ec0ea566ffa009c2e39d0c203a7"
VOICES = Download("owner/repo", ("demo/voices/*.pt",), strip="demo/voices", into="voices", hub="github", revision=REV)


def test_github_download_at_a_commit_checks_each_git_blob_id(tmp_path):
    from mizuoto.nodes.formats.download import Hubs
    source = Hubs(huggingface=fake_repo(tmp_path / "hub"), github=github_repo(tmp_path / "gh"))
    plan = download_plan([Download("Qwen/Tiny", ("config.json",)), VOICES], source)
    dest = download_model(plan, tmp_path / "models" / "V", source)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == \
        ["config.json", "voices/a.pt", "voices/b.pt"]
    assert (dest / "voices" / "a.pt").read_bytes() == b"a" * 1000


def test_github_file_whose_blob_id_differs_leaves_nothing(tmp_path):
    blobs = {"demo/voices/a.pt": "1" * 40, "demo/voices/b.pt": "2" * 40, "README.md": "3" * 40}
    source = github_repo(tmp_path / "gh", blobs=blobs)
    with pytest.raises(DownloadError, match="a.pt: git blob .* does not match the published 1111"):
        download_model(download_plan([VOICES], source), tmp_path / "models" / "V", source)
    assert list((tmp_path / "models").iterdir()) == []


def test_github_listing_truncated_or_without_a_commit_is_an_error(tmp_path):
    with pytest.raises(DownloadError, match="came back truncated"):
        download_plan([VOICES], github_repo(tmp_path / "gh", truncated=True))
    with pytest.raises(ValueError, match="names its commit"):
        Download("owner/repo", hub="github", revision="main")
    with pytest.raises(ValueError, match="hub must be one of"):
        Download("owner/repo", hub="gitlab")

"""The manual-install layout (download.layout): derived from every engine's Download entries, it must
name each file where the downloader puts it (strip / into applied), and reach the loader's error."""
import re

import pytest

from mizuoto.nodes.pack import loader_node
from mizuoto.nodes.formats.download import DownloadError, layout
from mizuoto.nodes.pack.registry import discover

MODELS = [(spec, name) for spec in discover() for name in spec.models]


def parse(tree: str) -> set[tuple[str, str]]:
    """(path inside the model folder, "repo: pattern") for each file line of a layout tree."""
    lines = tree.splitlines()[1:]
    stack: list[str] = []
    files = set()
    for line in lines:
        m = re.match(r"^((?:\|   |    )*)(?:\|-- |`-- )(\S+)\s*(?:<- (.+))?$", line)
        assert m, f"not a tree line: {line!r}"
        depth = len(m.group(1)) // 4
        del stack[depth:]
        if m.group(2).endswith("/"):
            assert m.group(3) is None, line
            stack.append(m.group(2))
        else:
            files.add(("".join(stack) + m.group(2), m.group(3)))
    return files


@pytest.mark.parametrize("spec,name", MODELS, ids=[f"{s.engine_id}/{n}" for s, n in MODELS])
def test_layout_lists_every_file_where_the_downloader_puts_it(spec, name):
    downloads = spec.models[name]
    tree = layout(downloads, f"{name}/")
    assert tree.splitlines()[0] == f"{name}/"
    assert parse(tree) == {(d.destination(p), f"{d.label}: {p}") for d in downloads for p in d.include}
    for d in downloads:
        if d.into:
            assert re.search(rf"^[|` ]*-- {re.escape(d.into.strip('/'))}/$", tree, re.M), d.into
    tree.encode("ascii")          # error messages may reach a console without box-drawing characters


def test_multi_repository_models_name_their_subfolders():
    specs = {s.engine_id: s for s in discover()}
    f5 = layout(specs["f5_tts"].models["F5TTS_v1_Base"])
    assert re.search(r"^`-- vocos/$", f5, re.M)
    assert re.search(r"^\|-- model_1250000\.safetensors +<- SWivid/F5-TTS: F5TTS_v1_Base/", f5, re.M)  # stripped
    index = layout(specs["indextts2"].models["IndexTTS-2"])
    for folder in ("campplus", "bigvgan", "w2v-bert-2.0"):
        assert re.search(rf"^[|`]-- {re.escape(folder)}/$", index, re.M), folder


def test_failed_download_message_shows_the_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(tmp_path / "empty-mirror"))   # no repositories: fails
    spec = next(s for s in discover() if s.engine_id == "f5_tts")
    with pytest.raises(DownloadError) as e:
        loader_node.model_folder(spec, "F5TTS_v1_Base")
    dest = tmp_path / "models" / "f5_tts" / "F5TTS_v1_Base"
    assert layout(spec.models["F5TTS_v1_Base"], f"{dest}/") in str(e.value)

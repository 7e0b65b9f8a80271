"""docs/models.md is generated from the registry (nodes/pack/model_docs.py) and must match it, so it
cannot go stale; the hand-written notes a new user needs must be in it."""
from pathlib import Path

from mizuoto.nodes.pack import model_docs
from mizuoto.nodes.formats.download import layout
from mizuoto.nodes.pack.registry import discover
from mizuoto.nodes.gpt_sovits.english import CMU_FILES
from mizuoto.nodes.gpt_sovits.g2pw import REP_FILES

ROOT = Path(__file__).resolve().parents[1]


def section(text: str, engine_id: str) -> str:
    start = next(i for i, part in enumerate(text.split("\n## ")) if part.split("\n", 1)[0].endswith(f"(`{engine_id}`)"))
    return text.split("\n## ")[start]


def test_committed_page_is_what_the_registry_produces():
    committed = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    assert committed == model_docs.render(), "docs/models.md is stale: run python -m mizuoto.nodes.pack.model_docs"
    assert model_docs.main(["--check"]) == 0


def test_check_mode_reports_a_stale_page(tmp_path):
    stale = tmp_path / "models.md"
    stale.write_text(model_docs.render().replace("IndexTTS-2", "IndexTTS-3"), encoding="utf-8")
    assert model_docs.main(["--check", "--output", str(stale)]) == 1
    assert model_docs.main(["--output", str(stale)]) == 0 and stale.read_text(encoding="utf-8") == model_docs.render()


def test_every_engine_model_repository_and_licence_is_listed():
    text = model_docs.render()
    specs = discover()
    assert set(model_docs.NOTES) <= {s.engine_id for s in specs}      # no note for an engine that left
    for spec in specs:
        part = section(text, spec.engine_id)
        assert spec.license in part
        for name, downloads in spec.models.items():
            assert f"### {name}\n" in part
            assert layout(downloads, f"models/TTS/{spec.engine_id}/{name}/") in part
            for d in downloads:
                assert f"({d.url})" in part


def test_default_folder_stated_is_the_one_folders_uses(monkeypatch):
    from mizuoto.nodes.formats import folders
    monkeypatch.delenv("MIZUOTO_MODELS_DIR", raising=False)
    default = folders.roots()[0].relative_to(Path.home()).as_posix()
    assert f"`~/{default}/`" in model_docs.render()


def test_notes_a_new_user_needs():
    text = model_docs.render()
    fish = section(text, "fish_speech")
    assert "gated" in fish and "HF_TOKEN" in fish and "login" in fish
    gpt = section(text, "gpt_sovits")
    assert "https://github.com/RVC-Boss/GPT-SoVITS" in gpt and "GPT_SoVITS/text/" in gpt
    for name in (*CMU_FILES, *REP_FILES):           # the files the front ends actually open
        assert name in gpt, name
    assert "$MIZUOTO_MODELS_DIR" in text


def test_readme_points_new_users_at_the_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/models.md" in readme
    assert "MIZUOTO_MODELS_DIR" in readme and "models/TTS/<engine>/<model>/" in readme


def test_every_engine_has_its_test_readme():
    """The README says each engine's tests/<engine>/README.md has its parity table or recipe."""
    missing = [s.engine_id for s in discover() if not (ROOT / "tests" / s.engine_id / "README.md").is_file()]
    assert not missing


def test_the_pkuseg_model_named_in_the_docs_is_the_one_chatterbox_reads():
    from mizuoto.nodes.chatterbox import text
    from mizuoto.nodes.pack import model_docs
    assert (model_docs.PKUSEG_URL, model_docs.PKUSEG_SHA256) == (text.PKUSEG_URL, text.PKUSEG_SHA256)

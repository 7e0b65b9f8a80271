"""Calibration factors: learning, persistence, and files that must be ignored, never fatal."""
from __future__ import annotations

import json
import logging

import pytest

from mizuoto.runtime.calibration import Calibration


def test_observe_and_round_trip(tmp_path):
    path = tmp_path / "memory" / "calibration.json"
    cal = Calibration(path)
    assert cal.factor("demo:talker") == 1.0
    assert cal.observe("demo:talker", 100, 90) is None                    # within the estimate
    assert cal.observe("demo:talker", 100, 200) == pytest.approx(2.2)
    assert cal.observe("demo:talker", 100, 150) is None                   # never lowers a factor
    assert cal.factor("demo:talker") == pytest.approx(2.2)
    cal.save()
    assert json.loads(path.read_text()) == {"version": 2, "factors": {"demo:talker": pytest.approx(2.2)}}
    assert Calibration(path).factor("demo:talker") == pytest.approx(2.2)
    assert [p.name for p in path.parent.iterdir()] == ["calibration.json"]   # no temporary left


def test_capped_at_16(tmp_path):
    cal = Calibration(tmp_path / "c.json")
    assert cal.observe("demo:vocoder", 10, 1000) == 16.0
    assert cal.observe("demo:vocoder", 10, 10_000) is None
    assert cal.observe("demo:codec", 0, 5) == 16.0                        # no estimate at all


def test_default_path_under_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MIZUOTO_CACHE_DIR", str(tmp_path))
    assert Calibration().path == tmp_path / "memory" / "calibration.json"


@pytest.mark.parametrize("content", [
    json.dumps({"version": 1, "factors": {"demo:talker": 3.0}}),
    json.dumps({"factors": {"demo:talker": 3.0}}),
    json.dumps({"version": 2, "factors": {"demo:talker": "big"}}),
    json.dumps({"version": 2, "factors": [3.0]}),
    json.dumps([2, {"demo:talker": 3.0}]),
    "{not json",
    "\xff\xfe",
])
def test_other_versions_and_malformed_files_ignored(tmp_path, caplog, content):
    path = tmp_path / "calibration.json"
    path.write_text(content, encoding="latin-1")
    with caplog.at_level(logging.WARNING, logger="mizuoto.runtime.calibration"):
        cal = Calibration(path)
    assert cal.factor("demo:talker") == 1.0
    assert "ignoring memory calibration" in caplog.text


def test_factor_from_file_capped(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"version": 2, "factors": {"demo:talker": 40}}))
    assert Calibration(path).factor("demo:talker") == 16.0


def test_unwritable_location_only_warns(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cal = Calibration(blocker / "memory" / "calibration.json")
    cal.observe("demo:talker", 1, 2)
    with caplog.at_level(logging.WARNING, logger="mizuoto.runtime.calibration"):
        cal.save()
    assert "not saved" in caplog.text

"""Chinese tone sandhi and text normalisation against upstream's ToneSandhi / TextNormalizer
(fixtures/zhnorm.json, recorded by make_zhnorm_fixtures.py in the reference venv)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mizuoto.nodes.gpt_sovits import tone_sandhi, zh_normalize

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "zhnorm.json").read_text(encoding="utf-8"))
SANDHI = FIXTURE["tone_sandhi"]


@pytest.mark.golden
def test_pre_merge_for_modify_equals_upstream():
    got = [[list(p) for p in tone_sandhi.pre_merge_for_modify([tuple(p) for p in c["seg"]])]
           for c in SANDHI["pre_merge_for_modify"]]
    assert got == [c["merged"] for c in SANDHI["pre_merge_for_modify"]]


@pytest.mark.golden
def test_modified_tone_equals_upstream():
    cases = SANDHI["modified_tone"]
    assert len(cases) > 300
    for c in cases:
        finals = list(c["finals"])
        assert tone_sandhi.modified_tone(c["word"], c["pos"], finals) == c["out"], c
        assert finals == c["finals"]  # arguments are not modified


def test_sandhi_examples():
    """A few readings spelled out, so a wrong fixture cannot hide a wrong rule."""
    assert tone_sandhi.modified_tone("一段", "m", ["i1", "uan4"]) == ["i2", "uan4"]
    assert tone_sandhi.modified_tone("一天", "m", ["i1", "ian1"]) == ["i4", "ian1"]
    assert tone_sandhi.modified_tone("不怕", "d", ["u4", "a4"]) == ["u2", "a4"]
    assert tone_sandhi.modified_tone("你好", "l", ["i3", "ao3"]) == ["i2", "ao3"]
    assert tone_sandhi.pre_merge_for_modify([("听", "v"), ("一", "m"), ("听", "v")]) == [("听一听", "v")]


@pytest.mark.golden
def test_normalize_equals_upstream():
    cases = FIXTURE["normalize"]["texts"]
    assert len(cases) > 300
    different = [(text, want, zh_normalize.normalize(text)) for text, want in cases
                 if zh_normalize.normalize(text) != want]
    assert not different, different[:5]


def test_normalize_examples():
    """Readings spelled out, so a wrong fixture cannot hide a wrong rule."""
    assert zh_normalize.normalize("2024年3月1日，-3°C。") == ["二零二四年三月一日，", "零下三度。"]
    assert zh_normalize.normalize("1/3和95%") == ["三分之一和百分之九十五"]
    assert zh_normalize.normalize("12:30:45") == ["十二点半四十五秒"]
    assert zh_normalize.num2str("3.20") == "三点二零" and zh_normalize.num2str("105") == "一百零五"
    assert zh_normalize.verbalize_cardinal("100000001") == "一亿零一"

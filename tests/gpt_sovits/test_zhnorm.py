"""Chinese tone sandhi and text normalisation against upstream's ToneSandhi / TextNormalizer
(fixtures/zhnorm.json, recorded by make_zhnorm_fixtures.py in the reference venv)."""
from __future__ import annotations

import json
from pathlib import Path

from mizuoto.nodes.gpt_sovits import tone_sandhi

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "zhnorm.json").read_text(encoding="utf-8"))
SANDHI = FIXTURE["tone_sandhi"]


def test_pre_merge_for_modify_equals_upstream():
    got = [[list(p) for p in tone_sandhi.pre_merge_for_modify([tuple(p) for p in c["seg"]])]
           for c in SANDHI["pre_merge_for_modify"]]
    assert got == [c["merged"] for c in SANDHI["pre_merge_for_modify"]]


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

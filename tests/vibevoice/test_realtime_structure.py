"""At the published 0.5B size, our Realtime model has exactly upstream's parameters (names and shapes), less the
parts it never reads: fixtures/realtime_0.5b_structure.json was recorded from the repository's classes on meta
by make_realtime_structure.py (live rerun when the reference venv is present)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from vibevoice.realtime_tiny import HERE, LIVE, LIVE_REASON, SRC, VENV

from mizuoto.nodes.vibevoice.model import UNUSED_PREFIXES, RealtimeConfig, VibeVoiceRealtime

RECORD = HERE / "fixtures" / "realtime_0.5b_structure.json"


def ours(config: dict) -> dict[str, list[int]]:
    with torch.device("meta"):
        model = VibeVoiceRealtime(RealtimeConfig.from_dict(config))
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def check(record: dict) -> None:
    theirs = {k: v for k, v in record["shapes"].items() if not k.startswith(UNUSED_PREFIXES)}
    mine = ours(record["config"])
    assert sorted(set(theirs) - set(mine)) == [] and sorted(set(mine) - set(theirs)) == []
    assert {k: v for k, v in mine.items() if theirs[k] != v} == {}
    params = sum(torch.Size(v).numel() for v in mine.values())
    # 0.88 B read: the LM (0.49 B with its embedding), the diffusion head and the σ-VAE decoder (2048 channels
    # in its deepest stage); the "0.5B" of the name is the LM
    assert 0.87e9 < params < 0.89e9, params


def test_structure_equals_upstream_at_0_5b() -> None:
    check(json.loads(RECORD.read_text()))


@pytest.mark.skipif(not LIVE, reason=LIVE_REASON)
def test_live_structure(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    subprocess.run([str(Path(VENV, "bin", "python")), str(HERE / "make_realtime_structure.py"), str(out)], check=True,
                   env={"VIBEVOICE_SRC": SRC, "PATH": "/usr/bin:/bin"}, timeout=600, capture_output=True)
    check(json.loads(out.read_text()))

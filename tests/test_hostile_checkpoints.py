"""Corrupt or hostile weight and tokenizer files: every reader refuses them with a CheckpointError (a ValueError)
naming the file and what was expected, at once, never a bare IndexError/KeyError/TypeError/RecursionError or a
library's bare Exception."""
from __future__ import annotations

import random
import sys
import types

import pytest
import torch

from mizuoto.nodes.common.checkpoint import load_pickle, load_pickle_with_records
from mizuoto.runtime.loading import CheckpointError



def noise(seed: int, size: int = 64) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("prefix", [b"", b"\x80\x02", b"PK\x03\x04"])
def test_random_bytes_in_a_pickle_name_the_file(tmp_path, prefix):
    path = tmp_path / "model.pth"
    for seed in range(60):
        path.write_bytes(prefix + noise(seed, 1 + seed % 9 * 40))
        for read in (load_pickle, lambda p: load_pickle_with_records(p, ("utils.HParams",))):
            with pytest.raises(CheckpointError) as e:
                read(path)
            assert str(path) in str(e.value) and "checkpoint" in str(e.value), e.value


def test_a_record_called_with_arguments_is_refused_naming_the_file(tmp_path, monkeypatch):
    """`utils.HParams(1, 2)` in a pickle (REDUCE with arguments): torch.save never writes it for a record."""
    utils = types.ModuleType("utils")

    class HParams:
        def __reduce__(self):
            return HParams, (1, 2)
    HParams.__module__, HParams.__qualname__ = "utils", "HParams"
    utils.HParams = HParams
    monkeypatch.setitem(sys.modules, "utils", utils)
    path = tmp_path / "s2G.pth"
    torch.save({"config": HParams(), "weight": {"w": torch.zeros(2)}}, path)
    with pytest.raises(CheckpointError) as e:
        load_pickle_with_records(path, ("utils.HParams",))
    assert str(path) in str(e.value) and "expected none" in str(e.value), e.value

"""Audio handed over as it is made (issue 31): `segments.Pieces` under every join upstreams use — the
pieces concatenate to the joined audio exactly, and a piece is never changed by a later segment."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.pack.segments import Join, Pieces, join_waves

JOINS = [Join(), Join(silence_ms=200), Join(silence_ms=300, fade_ms=50), Join(crossfade_s=0.15)]


@pytest.mark.parametrize("join", JOINS, ids=["plain", "silence", "fade", "crossfade"])
def test_pieces_concatenate_to_the_joined_audio_and_only_final_samples_are_handed_over(join):
    g = torch.Generator().manual_seed(0)
    rate = 8000
    # segments of every size relative to the fade: longer, shorter, a single sample, empty
    lengths = [4000, 300, 1, 0, 2500, 90, 6000]
    waves = [torch.rand(n, generator=g) - 0.5 for n in lengths]
    stream = Pieces(join, rate)
    pieces = []
    for k, wav in enumerate(waves, 1):
        pieces.append(stream.add(wav))
        so_far = torch.cat(pieces)
        assert torch.equal(so_far, join_waves(waves, join, rate)[:so_far.numel()]), f"after segment {k}"
    whole = join_waves(waves, join, rate)
    pieces.append(stream.rest(whole))
    assert torch.equal(torch.cat(pieces), whole)


def test_an_engine_that_post_processes_the_whole_hands_it_over_at_the_end():
    stream = Pieces(Join(silence_ms=100), 8000, hold_all=True)
    assert stream.add(torch.ones(100)).numel() == 0 and stream.add(torch.ones(50)).numel() == 0
    final = torch.arange(10.0)
    assert torch.equal(stream.rest(final), final)

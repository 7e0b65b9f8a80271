"""Audio handed over as it is made (issue 31): `segments.Pieces` under every join upstreams use — the
pieces concatenate to the joined audio exactly, and a piece is never changed by a later segment."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.pack.segments import ChunkPieces, Join, Pieces, join_waves

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


@pytest.mark.parametrize("join", JOINS, ids=["plain", "silence", "fade", "crossfade"])
def test_segments_handed_over_while_they_are_made_concatenate_to_the_joined_audio(join):
    """Each segment arrives as growing prefixes of every size (`partial`), then whole (`add`): every
    handed-over sample is the joined audio's, whatever the fades and however short the segments."""
    g = torch.Generator().manual_seed(1)
    rate = 8000
    waves = [torch.rand(n, generator=g) - 0.5 for n in [4000, 300, 1, 0, 2500, 90, 6000, 5000]]
    whole = join_waves(waves, join, rate)
    stream = Pieces(join, rate)
    pieces = []
    for wav in waves:
        cut = 0
        while cut < wav.numel():
            cut += int(torch.randint(1, 700, (), generator=g))
            pieces.append(stream.partial(wav[:cut]))
            assert torch.equal(torch.cat(pieces), whole[:stream.sent])
        pieces.append(stream.add(wav))
        assert torch.equal(torch.cat(pieces), whole[:stream.sent])
    pieces.append(stream.rest(whole))
    assert torch.equal(torch.cat(pieces), whole)


def test_pieces_that_are_not_the_final_audio_are_refused_at_the_end():
    stream = Pieces(Join(), 8000)
    stream.partial(torch.ones(10))
    with pytest.raises(RuntimeError, match="not the start of the final audio"):
        stream.rest(torch.zeros(20))


def test_a_chunks_samples_emitted_again_are_dropped_and_gaps_or_changes_refused():
    got = []
    emit = ChunkPieces(Pieces(Join(), 8000), got.append, "engine: chunk 1 of 1")
    emit(torch.arange(4.0), 0)
    emit(torch.arange(6.0), 0)           # a retried phase starts over: only samples 4 and 5 are new
    emit(torch.arange(6.0, 9.0), 6)
    assert torch.equal(torch.cat(got), torch.arange(9.0))
    with pytest.raises(RuntimeError, match="emitted again differ"):
        emit(torch.zeros(3), 2)
    with pytest.raises(RuntimeError, match="without gaps"):
        emit(torch.zeros(3), 10)
    with pytest.raises(FloatingPointError, match="chunk 1 of 1"):
        emit(torch.tensor([float("nan")]), 9)

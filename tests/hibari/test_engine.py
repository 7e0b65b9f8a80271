"""HibariVoice end to end on the CPU: determinism, input validation, long-text chunking, a plausible
waveform, and the weight-access contract the streaming runtime relies on."""
from __future__ import annotations

import math
import time

import pytest
import torch

from mizuoto.nodes.blocks.int8 import Int8Linear
from mizuoto.nodes.hibari.g2p import MAX_PHONEMES, split_phonemes

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore.",
    "A journey of a thousand miles begins with a single step.",
    "Numbers like 42 and 1,250 are read out in full.",
    "Why would anyone paint the garden fence purple?",
]


def test_same_seed_same_samples_different_seed_different(voice):
    a, sr = voice.synthesize("Hello there, this is a test.", seed=3)
    b, _ = voice.synthesize("Hello there, this is a test.", seed=3)
    c, _ = voice.synthesize("Hello there, this is a test.", seed=4)
    assert sr == 24000 and torch.equal(a, b)
    assert a.shape == c.shape and not torch.equal(a, c)


def test_seed_advances_per_chunk(voice):
    first, second = "Good morning.", "The weather is fine today."
    both, _ = voice.synthesize(f"{first} {second}", seed=7)
    one, _ = voice.synthesize(first, seed=7)
    two, _ = voice.synthesize(second, seed=8)
    assert torch.equal(both, torch.cat([one, two]))


def test_plausible_waveform(voice):
    text = " ".join(SENTENCES)
    wav, sr = voice.synthesize(text)
    assert sr == 24000 and wav.dtype == torch.float32 and wav.dim() == 1
    assert torch.isfinite(wav).all()
    seconds = wav.numel() / sr
    assert 0.03 < seconds / len(text) < 0.15                  # ~15 characters per second of speech
    assert wav.pow(2).mean().sqrt() > 0.01 and wav.abs().max() < 1.5
    fast, _ = voice.synthesize(SENTENCES[0], speed=2.0)
    slow, _ = voice.synthesize(SENTENCES[0], speed=0.5)
    assert 2.5 < slow.numel() / fast.numel() < 5.5


@pytest.mark.parametrize("text, error, match", [
    ("", ValueError, "text: empty"),
    ("   \n\t ", ValueError, "text: empty"),
    ("... !? —", ValueError, "text: nothing speakable"),
    ("“”()", ValueError, "text: nothing speakable"),
    (123, TypeError, "text: expected a str, got int"),
    (None, TypeError, "text: expected a str, got NoneType"),
    (b"bytes", TypeError, "text: expected a str, got bytes"),
])
def test_bad_text(voice, text, error, match):
    with pytest.raises(error, match=match):
        voice.synthesize(text)


@pytest.mark.parametrize("speed", [0, 0.0, 10, -1.0, 0.2, 4.5, math.nan, math.inf, "fast", None, True])
def test_bad_speed(voice, speed):
    with pytest.raises(ValueError, match=r"speed: expected a number in \[0.25, 4.0\]"):
        voice.synthesize("Hello.", speed=speed)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", None, 2**64])
def test_bad_seed(voice, seed):
    with pytest.raises(ValueError, match="seed: expected an int"):
        voice.synthesize("Hello.", seed=seed)


def test_speed_limits_accepted(voice):
    for speed in (0.25, 4.0):
        wav, _ = voice.synthesize("Hi.", speed=speed)
        assert wav.numel() > 0


def _words(chunks: list[str]) -> list[str]:
    return " ".join(chunks).split()


def test_long_text_chunks_keep_every_word(voice):
    paragraph = " ".join(SENTENCES * 8) + "\n\n" + "and then " * 120 + "the end."      # one 1,000-char sentence
    chunks = voice.chunks(paragraph)
    assert all(len(c) <= MAX_PHONEMES for c in chunks) and len(chunks) > 40
    per_sentence = [voice.g2p.phonemes(s) for s in voice.g2p.sentences(paragraph)]
    assert _words(chunks) == _words(per_sentence)
    long_sentence = "and then " * 50 + "the end."                     # ~500 phonemes: cut at a word boundary
    assert len(voice.chunks(long_sentence)) == 2
    wav, _ = voice.synthesize(f"{SENTENCES[0]} {long_sentence}")
    assert torch.isfinite(wav).all() and wav.numel() > 24000 * 10


def test_100k_characters_chunk_without_loss(voice):
    """Chunking only: all of it would be ~2 hours of audio (minutes of CPU time)."""
    text = " ".join(SENTENCES * 400)
    text = text + " " + "word " * ((100_000 - len(text)) // 5)
    assert len(text) >= 99_000
    t = time.perf_counter()
    chunks = voice.chunks(text)
    assert time.perf_counter() - t < 30
    assert all(0 < len(c) <= MAX_PHONEMES for c in chunks)
    sentences = voice.g2p.sentences(text)
    assert " ".join(sentences).split() == text.split()          # the sentence splitter drops no word
    assert _words(chunks) == _words([voice.g2p.phonemes(s) for s in sentences])


def test_split_phonemes_clauses_then_words_then_hard():
    clause = "wˈʌn, " * 100
    assert split_phonemes("ʃˈɔɹt.") == ["ʃˈɔɹt."]
    pieces = split_phonemes(clause.strip())
    assert all(len(p) <= MAX_PHONEMES for p in pieces) and " ".join(pieces).split() == clause.split()
    words = " ".join(["tˈu"] * 300)
    pieces = split_phonemes(words)
    assert all(len(p) <= MAX_PHONEMES for p in pieces) and " ".join(pieces) == words
    giant = "a" * 1000
    assert "".join(split_phonemes(giant)) == giant and max(map(len, split_phonemes(giant))) == MAX_PHONEMES


def test_acoustic_and_vocode_are_separate_phases(voice):
    ids = voice.ids(voice.chunks("Testing one two three.")[0])
    parts = voice.acoustic(ids, 1.0)
    assert set(parts) == {"lh", "theta", "ln", "lr", "phi", "f0"}
    frames = parts["f0"].shape[-1]
    assert all(parts[k].shape == (1, 601, frames) for k in ("lh", "theta", "ln", "lr", "phi"))
    wav = voice.vocode(parts, torch.Generator().manual_seed(0))
    assert wav.shape == (frames * 300,)


def test_weights_are_read_only_inside_their_owners_forward(voice):
    """Poison every parameter outside its owner's forward (as a streaming runtime would leave it on
    `meta`): the output must still equal the plain run bit for bit."""
    model = voice.model
    ids = voice.ids(voice.chunks("Streaming layers one by one.")[0])
    with torch.inference_mode():
        ref = model(ids, 1.0)
    real = {}
    handles = []

    def swap_in(module, args):
        for name, p in module.named_parameters(recurse=False):
            p.data = real[(id(module), name)]

    def swap_out(module, args, out):
        for name, p in module.named_parameters(recurse=False):        # NaN, or 0 for the int8 weights
            p.data = torch.full_like(p.data, math.nan if p.is_floating_point() else 0)

    try:
        for module in model.modules():
            params = list(module.named_parameters(recurse=False))
            if not params:
                continue
            for name, p in params:
                real[(id(module), name)] = p.data
            swap_out(module, None, None)
            handles += [module.register_forward_pre_hook(swap_in), module.register_forward_hook(swap_out)]
        kinds = {type(m).__name__ for m in model.modules() if list(m.parameters(recurse=False))}
        assert kinds == {"Int8Linear", "Conv1d", "Embedding", "LayerNorm", "ConvNeXtBlock"}   # block: its gamma
        with torch.inference_mode():
            out = model(ids, 1.0)
    finally:
        for h in handles:
            h.remove()
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                p.data = real[(id(module), name)]
    assert all(torch.equal(ref[k], out[k]) for k in ref)


def test_model_structure(voice):
    model = voice.model
    modules = list(model.modules())
    assert sum(isinstance(m, Int8Linear) for m in modules) == 45
    assert sum(isinstance(m, torch.nn.Conv1d) for m in modules) == 23
    assert sum(isinstance(m, torch.nn.Embedding) for m in modules) == 2
    assert len(model.decoder.dec) == 8 and len(model.prosody.pro) == 6
    assert model.prosody.text.repeats == 6 and model.decoder.text.repeats == 4
    assert sum(p.numel() for p in model.parameters()) == 6_152_898          # "6.15 M" in hibari's model card

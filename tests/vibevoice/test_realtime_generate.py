"""VibeVoice-Realtime's windowed streaming generation against upstream's `generate` on the tiny random model and
a voice preset upstream prefilled (fixtures/realtime.safetensors): a text of three windows, one run stopping
on EOS and one at the context length, seeded.

Golden: the stop (frame count, sequence length, which stop) exactly; audio in float32 within BOUND = 1e-5 of
its largest magnitude. Why that holds on any x86 CPU: each frame's latent feeds the next LM step, so a
kernel's reassociation error (~4e-7 relative per pass here, test_realtime_lm.py) travels through up to 43
frames of LM + diffusion steps + decoder. The tiny model's weights have a gain below 1 per layer
(make_realtime_fixtures.py), so that loop contracts instead of amplifying: measured under scalar ATen /
MKL-compatible / no-oneDNN kernels and under AVX2 with two threads (what tests/test_golden_travel.py
perturbs): 7.5e-7 at most after 43 frames, BOUND leaves 13x. (With gains above 1 the same perturbation grew
to 100 % by frame 43: a chaotic loop cannot carry a float golden.) Every EOS decision is at least EOS_MARGIN
= 0.05 from the threshold in logit (measured 0.071, moved 1e-7 by the perturbations), so the stop frame
cannot move. The live test (reference venv present) demands torch.equal.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from vibevoice.realtime_tiny import GOLDEN, LIVE, LIVE_REASON, model_from, preset_from, read, record_live

from mizuoto.nodes.vibevoice.generate import SPEECH_WINDOW, TEXT_WINDOW, generate

BOUND = 1e-5
EOS_MARGIN = 0.05


def run(tensors: dict[str, torch.Tensor], meta: dict[str, str], tag: str):
    model = model_from(tensors, meta)
    r = json.loads(meta["runs"])[tag]
    if tag == "max":
        model.tts_eos_classifier.fc2.bias.data.fill_(-1e4)
    text = torch.tensor(json.loads(meta["text"]))
    return generate(model, preset_from(tensors), text, cfg_scale=r["cfg"], steps=r["steps"],
                    generator=torch.Generator().manual_seed(r["seed"]), max_new_tokens=r["max_new"])


def check(tensors: dict[str, torch.Tensor], meta: dict[str, str], exact: bool) -> None:
    for tag, stop in (("eos", "eos"), ("max", "max_length")):
        g = run(tensors, meta, tag)
        ref = tensors[f"generate.{tag}.audio"]
        assert g.stopped == stop and bool(tensors[f"generate.{tag}.reached_max"].item()) == (stop == "max_length")
        # upstream finishes the speech window after EOS (frames it drops); we stop at EOS
        after_eos = SPEECH_WINDOW - 1 - (g.frames - 1) % SPEECH_WINDOW if stop == "eos" else 0
        assert g.positions + after_eos == tensors[f"generate.{tag}.sequence_length"].item()
        assert g.audio.shape == ref.shape, (tag, g.audio.shape, ref.shape)
        if tag == "eos":    # EOS after all three text windows; the other run fills the context
            windows = -(-len(json.loads(meta["text"])) // TEXT_WINDOW)
            assert g.frames > (windows - 1) * SPEECH_WINDOW
        else:
            assert g.positions == json.loads(meta["config"])["decoder_config"]["max_position_embeddings"] + 1
        if exact:
            assert torch.equal(g.audio, ref), f"{tag}: {(g.audio - ref).abs().max().item():.3g}"
        else:
            err = (g.audio - ref).abs().max().item() / ref.abs().max().item()
            assert err <= BOUND, (tag, err)
            if tag == "eos":
                assert len(g.eos_logits) == g.frames and min(abs(x) for x in g.eos_logits) >= EOS_MARGIN, g.eos_logits


@pytest.mark.golden
def test_golden_generate() -> None:
    tensors, meta = read(GOLDEN)
    check(tensors, meta, exact=False)


@pytest.mark.skipif(not LIVE, reason=LIVE_REASON)
def test_live_equal_to_upstream(tmp_path: Path) -> None:
    tensors, meta = read(record_live(tmp_path))
    check(tensors, meta, exact=True)


def test_streamed_chunks_are_the_audio() -> None:
    tensors, meta = read(GOLDEN)
    got: list[torch.Tensor] = []
    model = model_from(tensors, meta)
    g = generate(model, preset_from(tensors), torch.tensor(json.loads(meta["text"])), cfg_scale=1.5, steps=2,
                 generator=torch.Generator().manual_seed(0), on_audio=got.append)
    assert len(got) == g.frames and torch.equal(torch.cat(got, -1), g.audio)


@pytest.mark.parametrize("kwargs,match", [
    (dict(text_ids=torch.tensor([])), "text_ids"),
    (dict(text_ids=torch.tensor([[1, 2]])), "text_ids"),
    (dict(cfg_scale=0.0), "cfg_scale"),
    (dict(steps=0), "diffusion steps"),
])
def test_bad_requests_are_refused(kwargs: dict, match: str) -> None:
    tensors, meta = read(GOLDEN)
    args = dict(text_ids=torch.tensor([1, 2, 3]), cfg_scale=1.5, steps=2, generator=torch.Generator())
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate(model_from(tensors, meta), preset_from(tensors), **args)


def test_a_preset_of_another_model_is_refused() -> None:
    tensors, meta = read(GOLDEN)
    p = preset_from(tensors)
    short = type(p)(p.lm, type(p.tts_lm)(p.tts_lm.last_hidden_state, p.tts_lm.keys[:1], p.tts_lm.values[:1]),
                    p.neg_lm, p.neg_tts_lm)
    with pytest.raises(ValueError, match="voice preset 'tts_lm'"):
        generate(model_from(tensors, meta), short, torch.tensor([1]), cfg_scale=1.5, steps=2,
                 generator=torch.Generator())


def test_a_bfloat16_preset_runs_like_its_float32_copy() -> None:
    """Published presets are bfloat16: cast to the compute dtype up front, as upstream's first cat promotes them."""
    tensors, meta = read(GOLDEN)
    p = preset_from(tensors)
    half = type(p)(*(type(x)(x.last_hidden_state.bfloat16(), tuple(k.bfloat16() for k in x.keys),
                             tuple(v.bfloat16() for v in x.values)) for x in (p.lm, p.tts_lm, p.neg_lm, p.neg_tts_lm)))
    back = type(p)(*(type(x)(x.last_hidden_state.float(), tuple(k.float() for k in x.keys),
                             tuple(v.float() for v in x.values)) for x in (half.lm, half.tts_lm, half.neg_lm, half.neg_tts_lm)))
    model = model_from(tensors, meta)
    text = torch.tensor(json.loads(meta["text"]))[:6]
    a = generate(model, half, text, cfg_scale=1.5, steps=2, generator=torch.Generator().manual_seed(1), max_new_tokens=20)
    b = generate(model, back, text, cfg_scale=1.5, steps=2, generator=torch.Generator().manual_seed(1), max_new_tokens=20,
                 device="cpu", dtype=torch.float32)
    assert a.audio.dtype == torch.float32 and torch.equal(a.audio, b.audio) and a.frames == b.frames

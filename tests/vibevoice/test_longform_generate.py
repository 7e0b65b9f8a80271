"""VibeVoice 1.5B / Large long-form generation against transformers' `VibeVoiceForConditionalGeneration.generate`
and `VibeVoiceProcessor` on a tiny random model (fixtures/longform.safetensors, recorded by
make_longform_fixtures.py): one speaker (runs to max_new_tokens, 40 frames) and two speakers with voice clips of
different lengths (ends on <|endoftext|> after 10 frames).

Checked: the prompt ids exactly (ours built piece by piece as upstream's processor does; transformers' from the
same prompt string), the padded, normalised clips, the tokens the LM picks, every frame's latent and the audio.
Golden bound: float32 within 1e-4 of each tensor's largest magnitude (longform_tiny.GENERATION_BOUND: why,
and what was measured under other kernels); the prompt ids and the picked tokens exactly.
Within one machine the live test (VIBEVOICE_HF_VENV: transformers >= 5.3 and diffusers) demands torch.equal.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from vibevoice.longform_tiny import GENERATION_BOUND, GOLDEN, TOKENIZER, model_from, read

from mizuoto.nodes.vibevoice.longform_generate import generate_longform
from mizuoto.nodes.vibevoice.script import ScriptTokenizer, parse_script

HERE = Path(__file__).parent
VENV = os.environ.get("VIBEVOICE_HF_VENV", "")
LIVE = bool(VENV and Path(VENV, "bin", "python").is_file())
BOUND = GENERATION_BOUND
CASES = ("one", "two")


def ours(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> dict[str, torch.Tensor]:
    model = model_from(tensors, meta)
    tok = ScriptTokenizer(TOKENIZER)
    out: dict[str, torch.Tensor] = {}
    for tag in CASES:
        case = json.loads(meta[f"{tag}.case"])
        clips = [tensors[f"{tag}.clip{i}"] for i in range(len(case["clips"]))]
        prompt = tok.prompt(case["script"], clips, model.config.hop_length)
        out[f"{tag}.input_ids"] = prompt.ids
        out[f"{tag}.input_values"] = prompt.audio
        g = generate_longform(model, tok, prompt, cfg_scale=case["cfg"], steps=case["steps"],
                              generator=torch.Generator().manual_seed(case["seed"]),
                              max_new_tokens=case["max_new_tokens"])
        out[f"{tag}.tokens"] = g.tokens
        out[f"{tag}.latents"] = g.latents[0]
        out[f"{tag}.audio"] = g.audio
        out[f"{tag}.stopped"] = torch.tensor(int(g.stopped == "eos"))
    return out


def compare(mine: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], exact: bool) -> None:
    for tag in CASES:
        assert torch.equal(mine[f"{tag}.input_ids"], ref[f"{tag}.input_ids"]), tag
        assert torch.equal(mine[f"{tag}.tokens"], ref[f"{tag}.tokens"]), (tag, mine[f"{tag}.tokens"].tolist())
        for k in ("input_values", "latents", "audio"):
            a, b = mine[f"{tag}.{k}"], ref[f"{tag}.{k}"]
            assert a.shape == b.shape, (tag, k, a.shape, b.shape)
            if exact:
                assert torch.equal(a, b), f"{tag}.{k}: {(a - b).abs().max().item():.3g}"
            else:
                bound = BOUND * max(1.0, b.abs().max().item())
                assert (a - b).abs().max().item() <= bound, (tag, k, (a - b).abs().max().item())


@pytest.mark.golden
def test_golden_one_and_two_speakers() -> None:
    tensors, meta = read(GOLDEN)
    mine = ours(tensors, meta)
    compare(mine, tensors, exact=False)
    # the recorded runs cover both ends: max_new_tokens (one speaker) and <|endoftext|> (two speakers)
    assert mine["one.stopped"].item() == 0 and mine["one.latents"].shape[0] == 40
    assert mine["two.stopped"].item() == 1 and mine["two.latents"].shape[0] == 10


@pytest.mark.skipif(not LIVE, reason="live parity needs VIBEVOICE_HF_VENV (transformers >= 5.3 and diffusers)")
def test_live_equal_to_transformers(tmp_path: Path) -> None:
    out = tmp_path / "longform.safetensors"
    subprocess.run([str(Path(VENV, "bin", "python")), str(HERE / "make_longform_fixtures.py"), str(out)],
                   check=True, timeout=600, capture_output=True)
    tensors, meta = read(out)
    compare(ours(tensors, meta), tensors, exact=True)


def test_script_parsing_as_upstream() -> None:
    assert parse_script("Speaker 1: Hi.\n\n  speaker 2 :  there  \nSpeaker 1:ok") == [(0, " Hi."), (1, " there"),
                                                                                    (0, " ok")]
    assert parse_script("Speaker 0: a\nSpeaker 1: b") == [(0, " a"), (1, " b")]   # already from 0: kept
    assert parse_script("Just some text.\nA second line.") == [(0, " Just some text."), (0, " A second line.")]
    with pytest.raises(ValueError, match="text line 2 'no speaker here'"):
        parse_script("Speaker 1: a\nno speaker here")
    with pytest.raises(ValueError, match="nothing to speak"):
        parse_script("  \n ")


def test_voices_must_match_the_speakers() -> None:
    tok = ScriptTokenizer(TOKENIZER)
    clip = torch.sin(torch.arange(30) * 0.3)
    with pytest.raises(ValueError, match="need 2 voices, one each, 1 given"):
        tok.prompt("Speaker 1: a\nSpeaker 2: b", [clip], 6)
    with pytest.raises(ValueError, match="5 given, expected 1 to 4 reference clips"):
        tok.prompt("Speaker 1: a", [clip] * 5, 6)
    with pytest.raises(ValueError, match="voice 1: expected a non-empty finite mono clip"):
        tok.prompt("Speaker 1: a", [torch.full((12,), float("nan"))], 6)
    p = tok.prompt("Speaker 1: a", [clip], 6)
    assert p.frames == [5] and int(p.speech_mask.sum()) == 5 and p.audio.shape == (1, 1, 30)

"""Our CosyVoice 2 / 3 against golden fixtures recorded from the upstream repository (make_fixtures.py).

Tiny upstream-layout files are regenerated from the recorded upstream key lists (tiny.write_folder),
loaded through our loader, and run on the recorded inputs and seeds: LM tokens equal, flow mel and
HiFT audio `torch.equal` in float32.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # the fixtures were recorded with one intra-op thread

from mizuoto.nodes.cosyvoice.loader import CosyVoiceBundle, load_cosyvoice
from mizuoto.nodes.common.sampling import ras_sample

from cosyvoice.tiny import FIXTURES, write_folder


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def loaded(request, tmp_path_factory) -> tuple[CosyVoiceBundle, dict]:
    folder = write_folder(tmp_path_factory.mktemp(f"cosyvoice{request.param}"), request.param)
    expected = torch.load(FIXTURES / f"outputs_v{request.param}.pt", weights_only=True)
    return load_cosyvoice(folder, torch.float32), expected


@pytest.mark.parametrize("case", ["zero_shot", "no_prompt"])
@pytest.mark.parametrize("seed", [0, 7])
def test_lm_tokens_equal_upstream(loaded, case, seed):
    bundle, expected = loaded
    c = bundle.lm_config
    g = torch.Generator().manual_seed(seed)
    tokens = bundle.llm.generate(expected[f"lm.{case}.text"].long(), expected[f"lm.{case}.prompt_text"].long(),
                                 expected[f"lm.{case}.prompt_speech"].long(),
                                 lambda logp, done: ras_sample(logp, done, g, top_p=c.top_p, top_k=c.top_k,
                                                               win_size=c.win_size, tau_r=c.tau_r))
    assert tokens == expected[f"lm.{case}.{seed}"].tolist()


def test_flow_mel_equals_upstream(loaded):
    bundle, e = loaded
    mel = bundle.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"],
                          e["flow.embedding"], torch.Generator().manual_seed(0))
    assert mel.dtype == torch.float32
    assert torch.equal(mel, e["flow.mel"])


def test_hift_audio_equals_upstream(loaded):
    bundle, e = loaded
    wav = bundle.hift(e["hift.mel"], torch.Generator().manual_seed(int(e["hift.seed"])))
    assert torch.equal(wav, e["hift.speech"])


def test_other_seed_changes_flow_noise(loaded):
    bundle, e = loaded
    mel = bundle.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"],
                          e["flow.embedding"], torch.Generator().manual_seed(1))
    assert not torch.equal(mel, e["flow.mel"])

"""The shared DAC-family blocks (nodes/blocks/dac.py): weight-norm folding is exact for both layouts,
causal blocks never look ahead, shapes follow the strides, and the residual quantizer's codes decode to
its own quantized sum. Parity with descript-audio-codec itself: tests/fish_speech/test_parity.py."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations, weight_norm

from mizuoto.nodes.blocks.dac import (CausalConv1d, CausalConvTranspose1d, Decoder, Encoder, ResidualVectorQuantize,
                                      Snake1d, fold_weight_norm)

pytestmark = pytest.mark.usefixtures("one_thread")


def _random(module: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.rand(p.shape, generator=g) + 0.5 if name.endswith("alpha")
                    else torch.randn(p.shape, generator=g) * 0.3)
    return module


@pytest.mark.parametrize("layout", ["old", "parametrizations"])
@pytest.mark.parametrize("cls", [nn.Conv1d, nn.ConvTranspose1d])
def test_fold_weight_norm_is_bit_exact(layout, cls):
    conv = _random(cls(6, 4, 5, stride=2), 1)
    wn = weight_norm(conv) if layout == "old" else parametrizations.weight_norm(conv)
    x = torch.randn(2, 6, 33)
    with torch.no_grad():
        ref = wn(x)
    state = fold_weight_norm({f"block.{k}": v for k, v in wn.state_dict().items()})
    assert sorted(state) == ["block.bias", "block.weight"]
    plain = cls(6, 4, 5, stride=2)
    plain.load_state_dict({k[len("block."):]: v for k, v in state.items()})
    with torch.no_grad():
        assert torch.equal(plain(x), ref)


def test_fold_leaves_half_pairs_and_other_keys():
    state = {"a.weight_g": torch.ones(2, 1, 1), "b.weight": torch.zeros(3)}
    assert set(fold_weight_norm(state)) == {"a.weight_g", "b.weight"}


def test_snake():
    s = _random(Snake1d(3))
    x = torch.randn(2, 3, 10)
    a = s.alpha
    assert torch.equal(s(x), x + (a + 1e-9).reciprocal() * torch.sin(a * x).pow(2))


def test_causal_convs_do_not_look_ahead_and_keep_frames():
    conv = _random(CausalConv1d(2, 3, 7, dilation=3))
    up = _random(CausalConvTranspose1d(3, 2, 8, stride=4))
    x = torch.randn(1, 2, 40)
    y = conv(x)
    assert y.shape == (1, 3, 40)
    x2 = x.clone()
    x2[..., 30:] += 1
    assert torch.equal(conv(x2)[..., :30], y[..., :30])
    assert up(y).shape == (1, 2, 160)


@pytest.mark.parametrize("causal", [True, False])
def test_encoder_decoder_shapes_and_causality(causal):
    enc = _random(Encoder(4, (2, 4), 16, causal=causal), 2).eval()
    dec = _random(Decoder(16, 32, (4, 2), causal=causal), 3).eval()
    x = torch.randn(1, 1, 8 * 20)
    with torch.no_grad():
        z = enc(x)
        assert z.shape == (1, 16, 20)
        y = dec(z)
        assert y.shape == (1, 1, 160)
        if causal:
            x2 = x.clone()
            x2[..., 120:] = 0
            assert torch.equal(enc(x2)[..., :15], z[..., :15])


def test_residual_quantizer_codes_decode_to_its_sum():
    rvq = _random(ResidualVectorQuantize(16, 3, 32, 4), 4).eval()
    z = torch.randn(2, 16, 9)
    with torch.no_grad():
        codes, z_q = rvq(z)
        assert codes.shape == (2, 3, 9) and codes.dtype == torch.long
        assert torch.allclose(rvq.from_codes(codes), z_q, atol=1e-5)
        codes1, _ = rvq(z, n_quantizers=1)
    assert torch.equal(codes1, codes[:, :1])

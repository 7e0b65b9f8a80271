"""The v2Pro speaker embedding: Kaldi fbank features and ERes2NetV2 (3D-Speaker), as upstream `sv.py` runs them.

    feats = fbank(wav16k)                        # [frames, 80], torchaudio.compliance.kaldi.fbank (dither 0)
    emb = ERes2NetV2()(feats[None])              # forward3: [1, 20480] (fused stage-3/4 map, mean over time)

`fbank` is the copy upstream ships (`eres2net/kaldi.py`, torchaudio's) with its defaults, povey window,
pre-emphasis 0.97, 512-point FFT power spectrum, 80 mel bins from 20 Hz, log; same operations. The network
names are the `sv/pretrained_eres2netv2w24s4ep4.ckpt` state dict (baseWidth 24, scale 4, expansion 4);
`seg_1` is loaded as upstream loads it, though `forward3` stops before it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.mel import kaldi_fbank

SAMPLE_RATE = 16000


def fbank(wav: Tensor, num_mel_bins: int = 80, sample_frequency: float = SAMPLE_RATE) -> Tensor:
    """Log mel filterbank [frames, num_mel_bins] of a mono waveform [n] (upstream's copy of torchaudio's
    kaldi.fbank: the shared `kaldi_fbank`); a reference shorter than one frame is an error here."""
    size = int(sample_frequency * 0.025)
    if wav.numel() < size:
        raise ValueError(f"speaker embedding: the reference is shorter than one {size}-sample frame")
    return kaldi_fbank(wav, num_mel_bins, sample_frequency)


class ReLU20(nn.Hardtanh):
    """3D-Speaker's ReLU: clipped at 20."""

    def __init__(self) -> None:
        super().__init__(0, 20)


class AFF(nn.Module):
    """Attentional feature fusion of two maps."""

    def __init__(self, channels: int, r: int = 4) -> None:
        super().__init__()
        inter = channels // r
        self.local_att = nn.Sequential(nn.Conv2d(channels * 2, inter, 1), nn.BatchNorm2d(inter), nn.SiLU(),
                                       nn.Conv2d(inter, channels, 1), nn.BatchNorm2d(channels))

    def forward(self, x: Tensor, ds_y: Tensor) -> Tensor:
        att = 1.0 + torch.tanh(self.local_att(torch.cat((x, ds_y), dim=1)))
        return torch.mul(x, att) + torch.mul(ds_y, 2.0 - att)


class Block(nn.Module):
    """BasicBlockERes2NetV2 (fuse=False: sums the splits) or BasicBlockERes2NetV2AFF (fuse=True)."""

    def __init__(self, cin: int, planes: int, stride: int, base_width: int, scale: int, expansion: int,
                 fuse: bool) -> None:
        super().__init__()
        width = int(math.floor(planes * (base_width / 64.0)))
        self.width, self.scale = width, scale
        self.conv1 = nn.Conv2d(cin, width * scale, 1, stride=stride, bias=False)
        self.bn1 = nn.BatchNorm2d(width * scale)
        self.convs = nn.ModuleList(nn.Conv2d(width, width, 3, padding=1, bias=False) for _ in range(scale))
        self.bns = nn.ModuleList(nn.BatchNorm2d(width) for _ in range(scale))
        if fuse:
            self.fuse_models = nn.ModuleList(AFF(width, 4) for _ in range(scale - 1))
        self.relu = ReLU20()
        self.conv3 = nn.Conv2d(width * scale, planes * expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * expansion)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != expansion * planes:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, expansion * planes, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(expansion * planes))

    def forward(self, x: Tensor) -> Tensor:
        spx = torch.split(self.relu(self.bn1(self.conv1(x))), self.width, 1)
        outs = []
        sp = spx[0]
        for i in range(self.scale):
            if i > 0:
                sp = self.fuse_models[i - 1](sp, spx[i]) if hasattr(self, "fuse_models") else sp + spx[i]
            sp = self.relu(self.bns[i](self.convs[i](sp)))
            outs.append(sp)
        out = self.bn3(self.conv3(torch.cat(outs, 1)))
        return self.relu(out + self.shortcut(x))


class ERes2NetV2(nn.Module):
    def __init__(self, base_width: int = 24, scale: int = 4, expansion: int = 4, m_channels: int = 64,
                 num_blocks: tuple[int, ...] = (3, 4, 6, 3), feat_dim: int = 80, embedding_size: int = 192) -> None:
        super().__init__()
        self.in_planes = m_channels
        self.out_dim = m_channels * 8 * expansion * int(feat_dim / 8)
        stats_dim = int(feat_dim / 8) * m_channels * 8
        self.conv1 = nn.Conv2d(1, m_channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m_channels)
        layers = []
        for i, (n, stride) in enumerate(zip(num_blocks, (1, 2, 2, 2))):
            planes, blocks = m_channels * 2 ** i, []
            for s in [stride] + [1] * (n - 1):
                blocks.append(Block(self.in_planes, planes, s, base_width, scale, expansion, fuse=i >= 2))
                self.in_planes = planes * expansion
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.layer3_ds = nn.Conv2d(m_channels * 4 * expansion, m_channels * 8 * expansion, 3, padding=1, stride=2,
                                   bias=False)
        self.fuse34 = AFF(m_channels * 8 * expansion, 4)
        self.seg_1 = nn.Linear(stats_dim * expansion * 2, embedding_size)

    def forward(self, feats: Tensor) -> Tensor:
        """fbank features [B, frames, 80] -> [B, 20480] (upstream `forward3`)."""
        out = F.relu(self.bn1(self.conv1(feats.permute(0, 2, 1).unsqueeze(1))))
        out3 = self.layer3(self.layer2(self.layer1(out)))
        fused = self.fuse34(self.layer4(out3), self.layer3_ds(out3))
        return fused.flatten(start_dim=1, end_dim=2).mean(-1)

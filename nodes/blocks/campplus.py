"""CAM++ speaker embedding (3D-Speaker / FunASR `CAMPPlus`) in plain torch, under upstream's names.

    model = CAMPPlus(feat_dim=80, embedding_size=192)
    emb = model(fbank)          # (B, T, 80) Kaldi fbank, mean-normalised over time -> (B, 192)

`campplus_cn_common.bin` (a torch state dict) loads unchanged. The widths are parameters so tests can
build a small one; the depth (12, 24, 16 dense layers) is fixed, as upstream's.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _named(**modules: nn.Module) -> OrderedDict[str, nn.Module]:
    return OrderedDict(modules)


def _bn_relu(channels: int) -> nn.Sequential:
    return nn.Sequential(_named(batchnorm=nn.BatchNorm1d(channels), relu=nn.ReLU()))


class BasicResBlock(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, planes, 1, stride=(stride, 1), bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        out += self.shortcut(x)
        return F.relu(out)


class FCM(nn.Module):
    def __init__(self, feat_dim: int, m_channels: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, m_channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m_channels)
        self.layer1 = nn.Sequential(BasicResBlock(m_channels, m_channels, 2), BasicResBlock(m_channels, m_channels, 1))
        self.layer2 = nn.Sequential(BasicResBlock(m_channels, m_channels, 2), BasicResBlock(m_channels, m_channels, 1))
        self.conv2 = nn.Conv2d(m_channels, m_channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(m_channels)
        self.out_channels = m_channels * (feat_dim // 8)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(out)))))
        return out.reshape(out.shape[0], out.shape[1] * out.shape[2], out.shape[3])


class TDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, bias=False)
        self.nonlinear = _bn_relu(cout)

    def forward(self, x: Tensor) -> Tensor:
        return self.nonlinear(self.linear(x))


class CAMLayer(nn.Module):
    def __init__(self, bn_channels: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(bn_channels, cout, kernel, padding=(kernel - 1) // 2 * dilation,
                                      dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(bn_channels, bn_channels // 2, 1)
        self.linear2 = nn.Conv1d(bn_channels // 2, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.linear_local(x)
        context = x.mean(-1, keepdim=True) + self.seg_pooling(x)
        m = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return y * m

    @staticmethod
    def seg_pooling(x: Tensor, seg_len: int = 100) -> Tensor:
        seg = F.avg_pool1d(x, kernel_size=seg_len, stride=seg_len, ceil_mode=True)
        shape = seg.shape
        seg = seg.unsqueeze(-1).expand(*shape, seg_len).reshape(*shape[:-1], -1)
        return seg[..., :x.shape[-1]]


class CAMDenseTDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, bn_channels: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(cin)
        self.linear1 = nn.Conv1d(cin, bn_channels, 1, bias=False)
        self.nonlinear2 = _bn_relu(bn_channels)
        self.cam_layer = CAMLayer(bn_channels, cout, kernel, dilation)

    def forward(self, x: Tensor) -> Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.ModuleDict):
    def __init__(self, layers: int, cin: int, growth: int, bn_channels: int, kernel: int, dilation: int) -> None:
        super().__init__({f"tdnnd{i + 1}": CAMDenseTDNNLayer(cin + i * growth, growth, bn_channels, kernel, dilation)
                          for i in range(layers)})

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.values():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.nonlinear(x))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)
        self.nonlinear = nn.Sequential(_named(batchnorm=nn.BatchNorm1d(cout, affine=False)))

    def forward(self, x: Tensor) -> Tensor:
        return self.nonlinear(self.linear(x.unsqueeze(dim=-1)).squeeze(dim=-1))


class StatsPool(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x.mean(dim=-1), x.std(dim=-1, unbiased=True)], dim=-1)


class CAMPPlus(nn.Module):
    def __init__(self, feat_dim: int = 80, embedding_size: int = 192, growth_rate: int = 32, bn_size: int = 4,
                 init_channels: int = 128) -> None:
        super().__init__()
        self.head = FCM(feat_dim)
        xvector = _named(tdnn=TDNNLayer(self.head.out_channels, init_channels, 5, 2))
        channels = init_channels
        for i, (layers, kernel, dilation) in enumerate(zip((12, 24, 16), (3, 3, 3), (1, 2, 2))):
            xvector[f"block{i + 1}"] = CAMDenseTDNNBlock(layers, channels, growth_rate, bn_size * growth_rate,
                                                         kernel, dilation)
            channels += layers * growth_rate
            xvector[f"transit{i + 1}"] = TransitLayer(channels, channels // 2)
            channels //= 2
        xvector["out_nonlinear"] = _bn_relu(channels)
        xvector["stats"] = StatsPool()
        xvector["dense"] = DenseLayer(channels * 2, embedding_size)
        self.xvector = nn.Sequential(xvector)

    def forward(self, fbank: Tensor) -> Tensor:
        return self.xvector(self.head(fbank.permute(0, 2, 1)))

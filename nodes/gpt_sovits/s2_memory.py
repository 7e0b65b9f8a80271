"""Peak device memory of a SoVITS (s2) training step, from the two networks' structure and the batch's shape.

    parameters   float32 weights of G and D (the s2 stage never halves them), gradients of the trainable ones,
                 AdamW's two float32 moments (none with the host optimizer: they live on the host), the
                 weight-normed convolutions' recomputed `weight` (G once; D twice: its real and fake forwards
                 both keep theirs for backward), and under autocast a half copy of the leaf weights
    activations  the tensors the forward keeps for backward, counted per op from the modules' widths (elements
                 below are per sample and frame / sample point):
      frame rate   each WaveNet layer (enc_q: 16 at hidden 192; each flow coupling: 4) keeps its input, the
                   gate's tanh and sigmoid and their product: 4 x hidden, plus 2 x hidden at its ends; each text
                   encoder layer (relative attention + FFN with dropouts): 11 x hidden + 4 x filter + 2.5 x heads
                   x length (probabilities, their dropout and its mask); MRTE (512 wide) 6 x 512 a frame + 3 x 512
                   a phone + 2 x heads x phones; the style encoder 704 bins + 30 x 128 + 3 x heads x frames
      audio rate   HiFi-GAN on the `segment_size` slice: each upsampling keeps its leaky-ReLU input and output,
                   each residual block 4 tensors per dilation pair at that stage's channels and length (walked
                   over the ConvTranspose1d geometry); the generated audio's mel (STFT: 5 x bins x frames);
                   the discriminator's feature maps (each conv's pre- and post-activation, from the convs'
                   strides and paddings) for real AND fake, and feature matching's differences
      checkpointed WaveNets, residual blocks and sub-discriminators keep only their inputs (the discriminators'
                   feature maps stay: the losses hold them), plus the largest of them recomputed in backward
    precision    4 bytes an element, 2 under autocast (bf16 halves them) except the losses' side, which upcasts
                 to float32 (feature matching's differences, the generated audio's STFT and mel)
    total        parameters + activations, plus a tenth (backward's transient gradients, allocator rounding)
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ...training.memory import Tools
from .s2_train import S2Hparams

MB = 1 << 20
STYLE_BINS, STYLE_HIDDEN, STYLE_HEADS = 704, 128, 2
MRTE_HEADS = 4


@dataclass(frozen=True)
class S2Shape:
    """One batch as the estimate sees it: clips, spectrogram frames of the longest, phones of the longest."""

    batch: int
    frames: int
    phones: int


def _conv_out(conv: nn.Module, length: int, dim: int = 0) -> int:
    """Output length of a Conv1d / Conv2d (along kernel dimension `dim`) / ConvTranspose1d."""
    k, s, p, d = conv.kernel_size[dim], conv.stride[dim], conv.padding[dim], conv.dilation[dim]
    if isinstance(conv, nn.ConvTranspose1d):
        return (length - 1) * s - 2 * p + d * (k - 1) + conv.output_padding[0] + 1
    return (length + 2 * p - d * (k - 1) - 1) // s + 1


def _wavenet(wn: nn.Module) -> int:
    """Elements a WaveNet keeps a frame: 4 x hidden a layer, 2 x hidden at its input and output masks."""
    return (4 * len(wn.in_layers) + 2) * wn.hidden


def _encoder_layer(hidden: int, filters: int, heads: int, length: int) -> float:
    return 11 * hidden + 4 * filters + 2.5 * heads * length


def _generator_audio(dec: nn.Module, segment_frames: int) -> tuple[int, int, int]:
    """(kept elements without checkpointing, kept with it, the largest residual block's) per sample."""
    length, ch = segment_frames, dec.conv_pre.out_channels
    full = ckpt = 2 * ch * length                        # conv_pre + cond sum, its leaky ReLU
    largest = 0
    kernels = len(dec.resblocks) // len(dec.ups)
    for i, up in enumerate(dec.ups):
        full += ch * length                              # the leaky ReLU's output (the upsampling's input)
        ckpt += ch * length
        length, ch = _conv_out(up, length), up.out_channels
        block = max(4 * len(r.convs1) * ch * length for r in dec.resblocks[i * kernels:(i + 1) * kernels])
        full += sum(4 * len(r.convs1) * ch * length for r in dec.resblocks[i * kernels:(i + 1) * kernels])
        ckpt += (1 + kernels) * ch * length              # the blocks' input, their outputs summed
        full += (1 + kernels) * ch * length
        largest = max(largest, block)
    post = 3 * ch * length                               # leaky ReLU, conv_post's input, tanh's output
    return full + post, ckpt + post, largest


def _sub_discriminator(d: nn.Module, samples: int) -> int:
    """Sum of the feature maps (post-activation elements of each conv and conv_post) a sample."""
    convs = [*d.convs, d.conv_post]
    if hasattr(d, "period"):
        p = d.period
        h = -(-samples // p)
        total = 0
        for conv in convs:
            h = _conv_out(conv, h)
            total += conv.out_channels * h * p
        return total
    total, length = 0, samples
    for conv in convs:
        length = _conv_out(conv, length)
        total += conv.out_channels * length
    return total


def activation_elements(net_g: nn.Module, net_d: nn.Module, hp: S2Hparams, shape: S2Shape,
                        checkpointing: bool) -> tuple[float, float]:
    """Elements the step keeps for backward at its peak (the generator step's backward), per the module
    docstring, for the whole batch: (those in the compute dtype, those always in float32: the losses' side,
    which upcasts (feature matching's differences, the STFT and mel of the generated audio))."""
    cfg = net_g.cfg
    t, ph, b = shape.frames, shape.phones, shape.batch
    h, inter = cfg.hidden_channels, cfg.inter_channels
    wavenets = [net_g.enc_q.enc, *(f.enc for f in net_g.flow.flows if hasattr(f, "enc"))]
    if checkpointing:
        frame = sum(wn.hidden for wn in wavenets) + max(_wavenet(wn) for wn in wavenets)
    else:
        frame = sum(_wavenet(wn) for wn in wavenets)
    frame += 3 * h + 8 * inter                                                     # enc_q's pre, proj, sampling
    frame += sum(2 * h + 4 * inter for f in net_g.flow.flows if hasattr(f, "enc"))  # couplings' pre, post, cat
    enc = net_g.enc_p
    heads, filters = cfg.n_heads, cfg.filter_channels
    text = sum(_encoder_layer(h, filters, heads, t) * t for _ in enc.encoder_ssl.attn_layers)
    text += sum(_encoder_layer(h, filters, heads, t) * t for _ in enc.encoder2.attn_layers)
    text += sum(_encoder_layer(h, filters, heads, ph) * ph for _ in enc.encoder_text.attn_layers)
    m = enc.mrte.c_pre.out_channels
    text += 6 * m * t + 3 * m * ph + 2 * MRTE_HEADS * t * ph + 4 * inter * t
    style = (STYLE_BINS + 30 * STYLE_HIDDEN + 3 * STYLE_HEADS * t) * t
    seg_frames = hp.segment_size // cfg.hop_length
    full, ckpt, largest = _generator_audio(net_g.dec, seg_frames)
    audio = (ckpt + largest) if checkpointing else full
    bins = cfg.filter_length // 2 + 1
    mel = 5 * bins * (seg_frames + 1) + 2 * hp.segment_size + 2 * hp.n_mel_channels * (seg_frames + 1)
    fmaps = [_sub_discriminator(d, hp.segment_size) for d in net_d.discriminators]
    # real and fake: without checkpointing each keeps pre- and post-activations (2), with it the feature maps the
    # losses hold (1) plus the largest sub-discriminator recomputed; feature matching's |r - g| differences (1,
    # float32: the losses upcast)
    disc = (2 * sum(fmaps) + 2 * max(fmaps)) if checkpointing else 4 * sum(fmaps)
    disc += 4 * hp.segment_size * len(fmaps)                                      # inputs (reflect-padded)
    return b * (t * frame + text + style + audio + disc), b * (mel + sum(fmaps))


def parameter_bytes(net_g: nn.Module, net_d: nn.Module, tools: Tools) -> int:
    params = [*net_g.parameters(), *net_d.parameters()]
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    normed_g = sum(p.numel() for n, p in net_g.named_parameters() if n.endswith("weight_v"))
    normed_d = sum(p.numel() for n, p in net_d.named_parameters() if n.endswith("weight_v"))
    out = 4 * total + 4 * trainable + 4 * (normed_g + 2 * normed_d)
    if not tools.host_optimizer:
        out += 8 * trainable
    if tools.mixed_precision is not None:
        out += 2 * (trainable - normed_g - normed_d)        # autocast's cached half copies of leaf weights
    return out


def memory_bytes(net_g: nn.Module, net_d: nn.Module, hp: S2Hparams, tools: Tools, shape: S2Shape) -> int:
    """The step's estimated peak in bytes (see the module docstring); `tools` as the stage runs them."""
    if shape.batch < 1:
        raise ValueError(f"batch_size = {shape.batch}; expected at least 1")
    act = 2 if tools.mixed_precision is not None else 4
    compute, fp32 = activation_elements(net_g, net_d, hp, shape, tools.gradient_checkpointing)
    acts = compute * act + fp32 * 4
    return int(1.1 * (parameter_bytes(net_g, net_d, tools) + acts))

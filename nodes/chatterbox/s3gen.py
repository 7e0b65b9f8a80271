"""Chatterbox's S3Gen (upstream `S3Token2Wav`, Resemble AI, MIT): speech tokens -> 24 kHz audio, from the
shared CosyVoice 2 blocks under upstream's names (`s3gen.safetensors` loads with weight norm folded).

    tokenizer        blocks.s3tokenizer.S3TokenizerV2 (the reference's prompt tokens, 16 kHz)
    speaker_encoder  blocks.campplus.CAMPPlus (192-d x-vector, Kaldi fbank at 16 kHz)
    flow             blocks.s3gen_flow.Flow, version 2 (conformer encoder + causal UNet estimator), with
                     Chatterbox's noise (`randn_like(mu)` drawn from the request's generator) and Euler
                     clock (t and dt from the grid)
    mel2wav          blocks.hift.HiFT with CosyVoice 1's SineGen (`sine_gen=1`)

What is Chatterbox's own: the reference path of `embed_ref` (24 kHz matcha mel for the flow's prompt,
torchaudio's sinc resampler to 16 kHz for CAM++ and the tokenizer, tokens cut to half the mel frames)
and the output's trim fade (first 20 ms zeroed, the next 20 ms a raised-cosine fade-in).

Chatterbox publishes no configuration for S3Gen: its sizes are read from the checkpoint's tensor shapes
(`s3gen_config`), with the published model's fixed choices (head width 64, HiFT rates 8-5-3) kept.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..blocks.campplus import CAMPPlus
from ..blocks.hift import HiFT, HiFTConfig
from ..blocks.mel import kaldi_fbank, matcha_mel, whisper_log_mel
from ..blocks.s3gen_flow import Flow, FlowConfig
from ..blocks.s3tokenizer import S3TokenizerConfig, S3TokenizerV2
from ..pack.audio import resample

SAMPLE_RATE = 24000          # S3GEN_SR
TOKENIZER_RATE = 16000       # S3_SR
HEAD_WIDTH = 64              # attention head width of the published flow estimator and tokenizer
TRIM = SAMPLE_RATE // 50     # 20 ms


@dataclass(frozen=True)
class CAMPPlusConfig:
    embedding_size: int = 192
    growth_rate: int = 32
    bn_size: int = 4
    init_channels: int = 128


@dataclass(frozen=True)
class S3GenConfig:
    flow: FlowConfig
    hift: HiFTConfig
    campplus: CAMPPlusConfig
    tokenizer: S3TokenizerConfig


def _count(shapes: Mapping[str, Sequence[int]], prefix: str) -> int:
    """How many `prefix.N.` entries the checkpoint has (N = 0, 1, ...)."""
    n = 0
    while any(k.startswith(f"{prefix}.{n}.") for k in shapes):
        n += 1
    return n


def s3gen_config(shapes: Mapping[str, Sequence[int]], source: str = "s3gen.safetensors") -> S3GenConfig:
    """The sizes of an S3Gen checkpoint from its tensor shapes (upstream names, weight norm unfolded or
    folded). A tensor this needs and the file lacks is a ValueError naming it; a file whose other shapes
    disagree is caught by the strict load that follows."""

    def dim(key: str, axis: int) -> int:
        for k in (key, key.replace(".weight", ".parametrizations.weight.original1")):
            if k in shapes and len(shapes[k]) > axis:
                return int(shapes[k][axis])
        raise ValueError(f"Chatterbox: {source} has no tensor {key!r} (not an S3Gen checkpoint?)")

    est = "flow.decoder.estimator"
    enc_size = dim("flow.encoder_proj.weight", 1)
    mid = _count(shapes, f"{est}.mid_blocks")
    channels = tuple(dim(f"{est}.down_blocks.{i}.0.block1.block.0.weight", 0)
                     for i in range(_count(shapes, f"{est}.down_blocks")))
    if not channels:
        raise ValueError(f"Chatterbox: {source} has no flow.decoder.estimator.down_blocks (not an S3Gen checkpoint?)")
    inner = dim(f"{est}.down_blocks.0.1.0.attn1.to_q.weight", 0)
    flow = FlowConfig(
        version=2, clock="grid", vocab_size=dim("flow.input_embedding.weight", 0),
        input_size=dim("flow.input_embedding.weight", 1), output_size=dim("flow.encoder_proj.weight", 0),
        spk_embed_dim=dim("flow.spk_embed_affine_layer.weight", 1), encoder_size=enc_size,
        encoder_heads=dim("flow.encoder.encoders.0.self_attn.pos_bias_u", 0),
        encoder_units=dim("flow.encoder.encoders.0.feed_forward.w_1.weight", 0),
        encoder_blocks=_count(shapes, "flow.encoder.encoders"), up_blocks=_count(shapes, "flow.encoder.up_encoders"),
        in_channels=dim(f"{est}.down_blocks.0.0.block1.block.0.weight", 1), channels=channels,
        attention_head_dim=HEAD_WIDTH, num_heads=max(1, inner // HEAD_WIDTH),
        n_blocks=_count(shapes, f"{est}.down_blocks.0.1"), num_mid_blocks=mid)
    hift = HiFTConfig(sine_gen=1, base_channels=dim("mel2wav.conv_pre.weight", 0),
                      f0_cond_channels=dim("mel2wav.f0_predictor.condnet.0.weight", 0),
                      in_channels=dim("mel2wav.conv_pre.weight", 1))
    growth = dim("speaker_encoder.xvector.block1.tdnnd1.cam_layer.linear_local.weight", 0)
    campplus = CAMPPlusConfig(embedding_size=dim("speaker_encoder.xvector.dense.linear.weight", 0), growth_rate=growth,
                              bn_size=max(1, dim("speaker_encoder.xvector.block1.tdnnd1.linear1.weight", 0) // growth),
                              init_channels=dim("speaker_encoder.xvector.tdnn.linear.weight", 0))
    state = dim("tokenizer.encoder.conv1.weight", 0)
    tokenizer = S3TokenizerConfig(n_mels=dim("tokenizer.encoder.conv1.weight", 1), n_audio_state=state,
                                  n_audio_head=max(1, state // HEAD_WIDTH),
                                  n_audio_layer=_count(shapes, "tokenizer.encoder.blocks"))
    return S3GenConfig(flow, hift, campplus, tokenizer)


class S3Gen(nn.Module):
    """Upstream `S3Token2Wav`'s modules under its names (its `trim_fade` is not a stored tensor)."""

    def __init__(self, c: S3GenConfig) -> None:
        super().__init__()
        self.config = c
        self.tokenizer = S3TokenizerV2(c.tokenizer)
        self.speaker_encoder = CAMPPlus(embedding_size=c.campplus.embedding_size, growth_rate=c.campplus.growth_rate,
                                        bn_size=c.campplus.bn_size, init_channels=c.campplus.init_channels)
        self.flow = Flow(c.flow)
        self.mel2wav = HiFT(c.hift)


@dataclass
class S3GenReference:
    """Upstream's `ref_dict`: prompt tokens [1, N], prompt mel [1, T, 80], x-vector [1, 192]."""
    prompt_token: Tensor
    prompt_feat: Tensor
    embedding: Tensor


def reference_mel(wav24: Tensor) -> Tensor:
    """The flow's prompt: upstream `mel_spectrogram` (matcha, n_fft 1920, hop 480, fmax 8000) of 24 kHz
    audio [T] -> [1, frames, 80]."""
    return matcha_mel(wav24).transpose(0, 1)[None]


def embed_ref(model: S3Gen, wav24: Tensor, run: Callable[[str, Callable[[], Tensor]], Tensor] | None = None
              ) -> S3GenReference:
    """Upstream `embed_ref(wav, 24000)` on 24 kHz mono float32 [T]: the mel at 24 kHz; torchaudio's sinc
    resampler (transforms.Resample) to 16 kHz for CAM++ and the tokenizer; tokens cut to half the mel's
    frames when they disagree. `run(name, fn)` runs the speaker encoder ("speaker encoder") and the
    tokenizer ("speech tokenizer") where the caller places them (default: directly)."""
    if wav24.dim() != 1:
        raise ValueError(f"S3Gen reference: expected mono audio [T], got shape {tuple(wav24.shape)}")
    run = run or (lambda name, fn: fn())
    mel = reference_mel(wav24)
    wav16 = resample(wav24, SAMPLE_RATE, TOKENIZER_RATE, "torchaudio_sinc")

    def xvector() -> Tensor:
        fbank = kaldi_fbank(wav16)
        fbank = fbank - fbank.mean(dim=0, keepdim=True)
        w = next(model.speaker_encoder.parameters())
        return model.speaker_encoder(fbank[None].to(w.device, w.dtype)).float().cpu()

    def tokens() -> Tensor:
        w = next(model.tokenizer.parameters())
        return model.tokenizer(whisper_log_mel(wav16)[None].to(w.device, w.dtype)).long().cpu()

    embedding = run("speaker encoder", xvector)
    token = run("speech tokenizer", tokens)
    if mel.shape[1] != 2 * token.shape[1]:
        token = token[:, : mel.shape[1] // 2]
    return S3GenReference(token, mel, embedding)


def flow_noise(model: S3Gen, prompt_tokens: int, tokens: int, generator: torch.Generator | None) -> Tensor:
    """Upstream's `randn_like(mu)`: [1, 80, 2 * (prompt tokens + tokens)] from `generator` (on the CPU)."""
    c = model.flow.config
    return torch.randn((1, c.output_size, (prompt_tokens + tokens) * c.token_mel_ratio), generator=generator)


def trim_fade(wav: Tensor) -> Tensor:
    """Upstream's `trim_fade` on [1, T]: the first 20 ms zeroed, the next 20 ms faded in by
    (cos(linspace(pi, 0)) + 1) / 2."""
    fade = torch.zeros(2 * TRIM)
    fade[TRIM:] = (torch.cos(torch.linspace(torch.pi, 0, TRIM)) + 1) / 2
    n = min(wav.shape[-1], fade.numel())
    wav = wav.clone()
    wav[..., :n] *= fade[:n].to(wav.device, wav.dtype)
    return wav

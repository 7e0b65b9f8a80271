"""The S3 speech tokenizer v2 (25 Hz, FSQ codebook of 3**8 = 6561) in plain torch, under upstream's names.

    tok = S3TokenizerV2(S3TokenizerConfig())      # s3tokenizer's `speech_tokenizer_v2_25hz` sizes
    tokens = tok(whisper_log_mel(wav16k)[None])   # [1, 128, T] log-mel (blocks.mel) -> [1, ceil(T / 4)] ids

Parameter names follow `s3tokenizer.model_v2.S3TokenizerV2` (Chatterbox's `s3gen.safetensors` stores it
under `tokenizer.`):

    encoder.conv1 / conv2            Conv1d k=3, stride 2 each (100 Hz mel -> 25 Hz)
    encoder.blocks.N.attn_ln         LayerNorm
    encoder.blocks.N.attn            query / key (no bias) / value / out, fsmn_block (depthwise conv, k=31)
    encoder.blocks.N.mlp_ln, mlp.0, mlp.2
    quantizer._codebook.project_down Linear(n_state -> 8), tanh, round: base-3 digits

One utterance at a time, as Chatterbox calls it: its padding masks are all ones (upstream's additive
bias is then zeros and its mask multiplications are by one), so they are left out. Upstream's long-audio
path (over 30 s of mel, windowed with overlap) is not reached by Chatterbox (references are cut to 10 s);
longer input is refused by name.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MAX_FRAMES = 3000          # upstream quantize(): longer mel goes through its windowed long-audio path
ROPE_DIM, ROPE_POSITIONS = 64, 2048


@dataclass(frozen=True)
class S3TokenizerConfig:
    n_mels: int = 128
    n_audio_state: int = 1280
    n_audio_head: int = 20
    n_audio_layer: int = 6
    fsmn_kernel: int = 31


def rope_tables(dim: int = ROPE_DIM, end: int = ROPE_POSITIONS, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """Upstream precompute_freqs_cis (float32 angles, through torch.polar), as cos/sin tables [end, dim]."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(torch.arange(end), freqs).float()
    cis = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    cos, sin = cis[..., 0], cis[..., 1]
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, T, H, D] with upstream's half-split rotation."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[None, :, None].to(x.dtype) + rotated * sin[None, :, None].to(x.dtype)


class FSMNAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int, kernel: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)
        self.fsmn_block = nn.Conv1d(n_state, n_state, kernel, groups=n_state, bias=False)
        self.left = (kernel - 1) // 2
        self.right = kernel - 1 - self.left

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (m(x).view(b, t, self.n_head, -1) for m in (self.query, self.key, self.value))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        flat = v.reshape(b, t, d)
        memory = self.fsmn_block(F.pad(flat.transpose(1, 2), (self.left, self.right))).transpose(1, 2) + flat
        scale = (d // self.n_head) ** -0.25
        qk = (q.permute(0, 2, 1, 3) * scale) @ (k.permute(0, 2, 3, 1) * scale)
        w = torch.softmax(qk.float(), dim=-1).to(q.dtype)
        wv = (w @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3).flatten(start_dim=2)
        return self.out(wv) + memory


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, kernel: int) -> None:
        super().__init__()
        self.attn = FSMNAttention(n_state, n_head, kernel)
        self.attn_ln = nn.LayerNorm(n_state, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(n_state, n_state * 4), nn.GELU(), nn.Linear(n_state * 4, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.attn(self.attn_ln(x), cos, sin)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoderV2(nn.Module):
    def __init__(self, c: S3TokenizerConfig) -> None:
        super().__init__()
        if c.n_audio_state // c.n_audio_head != ROPE_DIM:
            raise ValueError(f"S3 tokenizer: head width {c.n_audio_state // c.n_audio_head} must be {ROPE_DIM} "
                             f"(upstream's rotary table)")
        self.conv1 = nn.Conv1d(c.n_mels, c.n_audio_state, 3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(c.n_audio_state, c.n_audio_state, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(ResidualAttentionBlock(c.n_audio_state, c.n_audio_head, c.fsmn_kernel)
                                    for _ in range(c.n_audio_layer))

    def forward(self, mel: Tensor) -> Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        cos, sin = rope_tables()
        cos, sin = cos[: x.shape[1]].to(x.device), sin[: x.shape[1]].to(x.device)
        for block in self.blocks:
            x = block(x, cos, sin)
        return x


class FSQCodebook(nn.Module):
    def __init__(self, dim: int, level: int = 3) -> None:
        super().__init__()
        self.project_down = nn.Linear(dim, 8)
        self.level = level

    def forward(self, x: Tensor) -> Tensor:
        h = self.project_down(x).float().tanh() * 0.9990000128746033
        h = h.round() + 1
        powers = torch.pow(self.level, torch.arange(2 ** self.level, device=x.device, dtype=h.dtype))
        return torch.sum(h * powers, dim=-1).int()


class FSQVectorQuantization(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self._codebook = FSQCodebook(dim)


class S3TokenizerV2(nn.Module):
    def __init__(self, config: S3TokenizerConfig | None = None) -> None:
        super().__init__()
        self.config = config or S3TokenizerConfig()
        self.encoder = AudioEncoderV2(self.config)
        self.quantizer = FSQVectorQuantization(self.config.n_audio_state)

    def forward(self, mel: Tensor) -> Tensor:
        """Log-mel [1, n_mels, T] (T <= 3000) -> speech tokens [1, ceil(T / 4)] (int64)."""
        if mel.dim() != 3 or mel.shape[0] != 1 or mel.shape[1] != self.config.n_mels:
            raise ValueError(f"S3 tokenizer: mel must be [1, {self.config.n_mels}, T], got {list(mel.shape)}")
        if mel.shape[2] > MAX_FRAMES:
            raise ValueError(f"S3 tokenizer: {mel.shape[2]} mel frames exceed {MAX_FRAMES} (30 s); "
                             f"cut the reference shorter")
        return self.quantizer._codebook(self.encoder(mel)).long()

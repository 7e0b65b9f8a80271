"""VoxCPM 2's generation: the prompt sequence of each mode, and the decode loop.

    prompt = build_prompt(ids(text), feats=...)                          # zero-shot / reference / continuation
    latents, frames = generate_latents(model, prompt, Sampling(), generator, target_tokens=n)
    wav = decode_latents(vae, latents, prompt.context, patch_size)

The loop is upstream's `VoxCPM2Model._inference`, step for step, on the shared AR skeleton
(nodes/blocks/decode.py): a prefill of both LMs over the prompt, then per frame the LocDiT flow head (CFG-Zero*, Euler; nodes/blocks/flow.py) draws one latent patch
conditioned on both LMs' last hidden states and the previous patch, LocEnc embeds it, the stop head
reads the base LM's state, and both LMs advance one position. Every module is called normally (the
runtime's streaming hooks fire) and the KV caches grow with the request (runtime.lm.cache) instead of
upstream's `forward_step` over a preallocated 8192-position cache.

`kv_cache="static"` (opt-in, `compute.kv_cache`) keeps zero-filled buffers grown in blocks and reads them
whole under a mask, which is what upstream's preallocated cache computes: on the CPU it reproduces
upstream's attention sums bit for bit (attention over a different number of keys sums in another order).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ...runtime.lm.cache import BufferCache, make_cache
from ..blocks.decode import autoregress
from ..blocks.flow import cfg_zero_star, guided, noise, solve, sway_sampling
from .audiovae import AudioVAE
from .model import VoxCPM2

AUDIO_START, AUDIO_END, REF_AUDIO_START, REF_AUDIO_END = 101, 102, 103, 104
ATTENTION_BLOCK = 512    # keys per block of PyTorch's CPU flash attention (its kv split size)


@dataclass
class Sampling:
    """Upstream's generation options (VoxCPM.generate defaults)."""

    inference_timesteps: int = 10
    cfg_value: float = 2.0
    min_len: int = 2
    max_len: int = 4096
    retry_badcase: bool = True
    retry_badcase_max_times: int = 3
    retry_badcase_ratio_threshold: float = 6.0

    def validate(self) -> None:
        if not 1 <= self.inference_timesteps <= 100:
            raise ValueError(f"inference_timesteps: expected 1..100, got {self.inference_timesteps}")
        if not 0.1 <= self.cfg_value <= 10.0:
            raise ValueError(f"cfg_value: expected 0.1..10, got {self.cfg_value}")
        if self.min_len < 0 or self.max_len < 1:
            raise ValueError(f"min_len / max_len: expected >= 0 / >= 1, got {self.min_len} / {self.max_len}")
        if self.retry_badcase_max_times < 1 or self.retry_badcase_ratio_threshold <= 0:
            raise ValueError("retry_badcase_max_times / retry_badcase_ratio_threshold: expected >= 1 / > 0")

    def frame_limit(self, target_tokens: int) -> int:
        """Frames one attempt may generate (upstream: ratio x the target's tokens + 10, at most max_len)."""
        return min(int(target_tokens * self.retry_badcase_ratio_threshold + 10), self.max_len)


@dataclass
class Prompt:
    """The base LM's input sequence: a token or a latent patch per position."""

    tokens: Tensor         # [T] int64 (0 where the position is audio)
    text_mask: Tensor      # [T] float32, 1 at text positions
    audio_mask: Tensor     # [T] float32, 1 at audio positions
    feats: Tensor          # [T, P, D] float32 latent patches (zeros at text positions)
    context: int = 0       # trailing prompt patches decoded ahead of the generated ones (continuation)

    def __len__(self) -> int:
        return self.tokens.numel()


def build_prompt(text_ids: list[int], patch_size: int, feat_dim: int, *, reference: Tensor | None = None,
                 continuation: Tensor | None = None, prefix_len: int = 4) -> Prompt:
    """Upstream's sequence layout (`_generate_with_prompt_cache`).

    text_ids: the tokens of the text read (with the continuation's transcript in front when `continuation`);
    reference: latent patches [R, P, D] of a voice reference, isolated by ref-audio start/end tokens;
    continuation: latent patches [C, P, D] of audio the speech continues from (its transcript leads the text).
    """
    parts: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []   # tokens, text mask, audio mask, feats

    def add(tokens: list[int] | Tensor, text: float, feats: Tensor | None = None) -> None:
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        n = tokens.numel()
        feats = feats if feats is not None else torch.zeros(n, patch_size, feat_dim)
        parts.append((tokens, torch.full((n,), text), torch.full((n,), 1.0 - text), feats.float()))

    if reference is not None:
        add([REF_AUDIO_START], 1.0)
        add(torch.zeros(reference.shape[0], dtype=torch.long), 0.0, reference)
        add([REF_AUDIO_END], 1.0)
    add(list(text_ids) + [AUDIO_START], 1.0)
    context = 0
    if continuation is not None and continuation.shape[0]:
        add(torch.zeros(continuation.shape[0], dtype=torch.long), 0.0, continuation)
        context = min(prefix_len - 1, continuation.shape[0])
    tokens, tmask, amask, feats = (torch.cat(x) for x in zip(*parts))
    return Prompt(tokens, tmask, amask, feats, context)


@dataclass
class Frame:
    """One generated step: the latent patch [B, P, D], its LocEnc embedding [B, 1, H], the stop decision."""

    patch: Tensor
    embedded: Tensor
    stop: bool


def kv_cache(kind: str, max_length: int):
    """The cache for `compute.kv_cache`: "dynamic", or "static" read whole with a mask as upstream's
    preallocated cache is (runtime.lm.cache)."""
    if kind == "static":
        return BufferCache(min(ATTENTION_BLOCK, max_length), whole=True)
    return make_cache(kind)


def sample_patch(model: VoxCPM2, mu: Tensor, cond: Tensor, s: Sampling, generator: torch.Generator | None) -> Tensor:
    """One latent patch [B, D, P] from the flow head: noise -> Euler down a sway-warped 1 -> 0 grid with an
    accumulating clock (upstream's UnifiedCFM.solve_euler: t = t - dt), the LocDiT velocity guided by
    CFG-Zero* (conditional: mu; unconditional: zeros); the first steps use a zero velocity (zero-init)."""
    b, patch = mu.shape[0], model.config.patch_size
    x0 = noise((b, model.config.feat_dim, patch), generator, device=mu.device, dtype=mu.dtype)
    times = sway_sampling(torch.linspace(1, 0, s.inference_timesteps + 1, device=mu.device, dtype=mu.dtype), 1.0)
    zero_steps = max(1, int(times.numel() * 0.04))
    head = model.feat_decoder
    calls = [0]

    def both(x: Tensor, t: Tensor) -> Tensor:     # [cond; uncond] in one batch
        n = x.shape[0]
        return head(torch.cat((x, x)), torch.cat((mu, torch.zeros_like(mu))), t.expand(2 * n).contiguous(),
                    torch.cat((cond, cond)), torch.zeros(2 * n, device=x.device, dtype=x.dtype))

    velocity = guided(both, s.cfg_value, cfg_zero_star)

    def field(x: Tensor, t: Tensor) -> Tensor:
        calls[0] += 1
        return torch.zeros_like(x) if calls[0] <= zero_steps else velocity(x, t)

    return solve(field, x0, times, clock="accumulate")


@torch.inference_mode()
def generate_latents(model: VoxCPM2, prompt: Prompt, s: Sampling, generator: torch.Generator | None,
                     limit: int, kv: str = "dynamic", device: torch.device | str = "cpu",
                     check: Callable[[], None] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> tuple[Tensor, int]:
    """One attempt on `device`: latents [1, D, (context + frames) * P] (float32, CPU) and the generated frames."""
    c = model.config
    dtype = model.stop_head.weight.dtype
    feats = prompt.feats[None].to(device, dtype)
    text_mask = prompt.text_mask[None, :, None].to(device, dtype)
    audio_mask = prompt.audio_mask[None, :, None].to(device, dtype)
    feat_embed = model.encode_patches(feats)
    embed = model.base_lm.embed_tokens
    text_embed = model.embed_text(prompt.tokens[None].to(embed.weight.device)).to(device)
    combined = text_mask * text_embed + audio_mask * feat_embed
    patches = list(feats[:, len(prompt) - prompt.context:].split(1, dim=1)) if prompt.context else []
    base_cache, res_cache = kv_cache(kv, c.max_length), kv_cache(kv, c.max_length)

    enc = model.base_lm(combined, base_cache)
    enc = model.fsq_layer(enc) * audio_mask + enc * text_mask
    res = model.residual_lm(model.fusion_concat_proj(torch.cat((enc, audio_mask * feat_embed), dim=-1)), res_cache)

    def choose(hidden: tuple[Tensor, Tensor], history: list[Frame]) -> Frame:
        """The next patch from both LMs' states; it ends the speech when the stop head says so past min_len."""
        lm_hidden, res_hidden = hidden
        prev = history[-1].patch if history else feats[:, -1]
        mu = torch.cat((model.lm_to_dit_proj(lm_hidden), model.res_to_dit_proj(res_hidden)), dim=-1)
        patch = sample_patch(model, mu, prev.transpose(1, 2).contiguous(), s, generator).transpose(1, 2)
        stop = len(history) > s.min_len and model.stop_logits(lm_hidden).argmax(dim=-1)[0].item() == 1
        return Frame(patch, model.encode_patches(patch.unsqueeze(1)), stop)

    def step(frame: Frame, _: int) -> tuple[Tensor, Tensor]:
        """Both LMs one position on: the patch's LocEnc embedding, FSQ, the fused residual input."""
        lm_hidden = model.fsq_layer(model.base_lm(frame.embedded, base_cache)[:, 0])
        fused = model.fusion_concat_proj(torch.cat((lm_hidden, frame.embedded[:, 0]), dim=-1))
        return lm_hidden, model.residual_lm(fused[:, None], res_cache)[:, 0]

    generated = autoregress((enc[:, -1], res[:, -1]), choose, step, stop=lambda f: f.stop, max_new_tokens=limit,
                            check=check, progress=progress, keep_stop=True)   # the stopping frame is speech too
    patches += [f.patch.unsqueeze(1) for f in generated]
    frames = len(generated)
    seq = torch.cat(patches, dim=1)                                   # [1, T, P, D]
    latents = seq.permute(0, 3, 1, 2).reshape(1, c.feat_dim, -1)     # b t p d -> b d (t p)
    return latents.float().cpu(), frames


def generate(model: VoxCPM2, prompt: Prompt, s: Sampling, generator: torch.Generator | None, target_tokens: int,
             kv: str = "dynamic", device: torch.device | str = "cpu", check: Callable[[], None] | None = None,
             progress: Callable[[int, int], None] | None = None) -> tuple[Tensor, int]:
    """Upstream's retry loop around `generate_latents`: an attempt whose length reaches ratio x the target's
    tokens (a "bad case": it did not stop) is drawn again, up to `retry_badcase_max_times` attempts."""
    s.validate()
    limit = s.frame_limit(target_tokens)
    room = model.config.max_length - len(prompt)
    if room < 1:
        raise ValueError(f"the prompt has {len(prompt)} positions; the model reads at most "
                         f"{model.config.max_length} (config max_length): shorten the text or the reference")
    limit = min(limit, room)
    attempts = s.retry_badcase_max_times if s.retry_badcase else 1
    for _ in range(attempts):
        latents, frames = generate_latents(model, prompt, s, generator, limit, kv, device, check, progress)
        if not (s.retry_badcase and frames >= target_tokens * s.retry_badcase_ratio_threshold):
            break
    return latents, frames


@torch.inference_mode()
def encode_audio(vae: AudioVAE, wav: Tensor, patch_size: int, pad_left: bool,
                 device: torch.device | str = "cpu") -> Tensor:
    """Mono audio [S] at the VAE's input rate -> latent patches [T, P, D], padded to whole patches on the
    left (a continuation: the speech goes on right after it) or the right (a reference)."""
    patch_len = patch_size * vae.config.hop_length
    pad = (-wav.numel()) % patch_len
    audio = torch.nn.functional.pad(wav[None].float(), (pad, 0) if pad_left else (0, pad)).to(device)
    feat = vae.encode(audio).cpu()
    return feat.view(vae.config.latent_dim, -1, patch_size).permute(1, 2, 0)


@torch.inference_mode()
def decode_latents(vae: AudioVAE, latents: Tensor, context: int, patch_size: int,
                   device: torch.device | str = "cpu") -> Tensor:
    """Latents [1, D, L] -> mono float32 audio [N] at the output rate, the `context` prompt patches cut."""
    audio = vae.decode(latents.to(device, torch.float32))
    if context > 0:
        audio = audio[..., patch_size * vae.config.decode_hop_length * context:]
    return audio.reshape(-1).float().cpu()

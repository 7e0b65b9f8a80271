"""Qwen3-TTS inference as plain functions of the modules (no runtime): prompt, talker loop, voice prompt.

    prompt = build_prompt(model, request, device)              # talker input embeddings
    codes = generate_codes(model.talker, prompt, sampling, generator)     # [frames, 16]
    wav = codec.decode(codes)

The prompt is assembled exactly as upstream's `Qwen3TTSForConditionalGeneration.generate` does for one
request (same projections, same order of sums); the loop reproduces Hugging Face `generate` with
upstream's settings: repetition penalty over the generated first codebook, no end token before the
third frame, the codec control tokens suppressed, then temperature / top-k / top-p when sampling. A
frame's first code is fed back through the code predictor (codebooks 1..15, its own cache reset every
frame) and the sum of the frame's 16 code embeddings plus the next text embedding is the next input.
Sampling draws from a CPU `torch.Generator`, so a seed gives the same codes on any device.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from ...runtime.lm.cache import DynamicCache, make_cache
from ..blocks.decode import autoregress
from ..blocks.sampling import check_sampling, repetition_penalty, select
from .model import Qwen3TTS, Talker

SPECIAL_CODEC_TOKENS = 1024   # the last 1024 ids of the codec vocabulary are control tokens (suppressed)
MIN_NEW_TOKENS = 2


@dataclass
class Sampling:
    do_sample: bool = True
    top_k: int = 50
    top_p: float = 1.0
    temperature: float = 0.9
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    subtalker_temperature: float = 0.9
    max_new_tokens: int = 2048

    @classmethod
    def merged(cls, defaults: dict[str, Any] | None = None, **user: Any) -> Sampling:
        """User values, else the model's generation_config.json, else upstream's hard defaults."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(user) - names)
        if unknown:
            raise TypeError(f"unknown sampling options {unknown}; expected some of {sorted(names)}")
        values = {k: v for k, v in (defaults or {}).items() if k in names}
        values.update({k: v for k, v in user.items() if v is not None})
        s = cls(**values)
        s.validate()
        return s

    def validate(self) -> None:
        for prefix in ("", "subtalker_"):
            check_sampling(*(getattr(self, prefix + n) for n in ("temperature", "top_k", "top_p")), prefix=prefix)
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty: expected > 0, got {self.repetition_penalty}")
        if int(self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens: expected >= 1, got {self.max_new_tokens}")


def first_code_logits(logits: Tensor, history: list[int], s: Sampling, eos: int, suppress: Tensor) -> Tensor:
    """Repetition penalty over the generated first codes, no end token before MIN_NEW_TOKENS, control
    tokens suppressed (upstream's `generate` settings)."""
    scores = repetition_penalty(logits, history, s.repetition_penalty)
    if len(history) < MIN_NEW_TOKENS:
        scores[eos] = float("-inf")
    return scores.masked_fill(suppress, float("-inf"))


def suppress_mask(vocab: int, eos: int) -> Tensor:
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[max(0, vocab - SPECIAL_CODEC_TOKENS):] = True
    mask[eos] = False
    return mask


# ---- prompt ---------------------------------------------------------------------------------------------


@dataclass
class Request:
    """One synthesis request, tokenized. `text_ids` / `ref_ids` / `instruct_ids` are the templated ids
    (see text.py); `ref_code` [T, 16] and `spk_embedding` [D] come from the voice prompt phase."""
    text_ids: Tensor
    language: str = "auto"
    speaker: str | None = None
    instruct_ids: Tensor | None = None
    spk_embedding: Tensor | None = None
    ref_code: Tensor | None = None
    ref_ids: Tensor | None = None
    non_streaming: bool = True

    @property
    def icl(self) -> bool:
        return self.ref_code is not None


@dataclass
class Prompt:
    embeds: Tensor      # [1, L, D] talker input
    trailing: Tensor    # [1, T, D] text fed one position per generated frame
    pad: Tensor         # [1, 1, D] fed once the text is used up


def _codec(talker: Talker, ids: list[list[int]], device) -> Tensor:
    return talker.model.codec_embedding(torch.tensor(ids, dtype=torch.long, device=device))


def _icl_prompt(talker: Talker, text_id: Tensor, ref_id: Tensor, ref_code: Tensor, pad: Tensor, eos: Tensor,
                non_streaming: bool, bos_id: int, pad_id: int, device) -> tuple[Tensor, Tensor]:
    text = talker.embed_text(torch.cat([ref_id, text_id], dim=-1), device)
    text = torch.cat([text, eos], dim=1)
    cp_tables = talker.code_predictor.model.codec_embedding
    groups = talker.config.num_code_groups
    ref_code = ref_code.to(device)
    codec = [talker.model.codec_embedding(ref_code[:, :1])] + [cp_tables[i - 1](ref_code[:, i:i + 1])
                                                               for i in range(1, groups)]
    codec = torch.cat(codec, dim=1).sum(1).unsqueeze(0)
    codec = torch.cat([_codec(talker, [[bos_id]], device), codec], dim=1)
    t, c = text.shape[1], codec.shape[1]
    if non_streaming:
        icl = text + _codec(talker, [[pad_id] * t], device)
        return torch.cat([icl, codec + pad], dim=1), pad
    if t > c:
        return text[:, :c] + codec, text[:, c:]
    text = torch.cat([text] + [pad] * (c - t), dim=1)
    return text + codec, pad


def build_prompt(model: Qwen3TTS, req: Request, device: torch.device | str) -> Prompt:
    """The talker's input embeddings for one request (upstream's generate, batch of one)."""
    cfg, tc = model.config, model.config.talker
    talker = model.talker
    device = torch.device(device)
    ids = req.text_ids.reshape(1, -1)
    if ids.shape[1] < 9:
        raise ValueError("text_ids: expected the assistant template around the text (at least 9 tokens)")
    lang = (req.language or "auto").lower()
    language_id = None if lang == "auto" else tc.codec_language_id[lang]
    speaker = req.speaker.lower() if req.speaker else None
    if speaker is not None and lang in ("chinese", "auto") and tc.spk_is_dialect.get(speaker, False) is not False:
        language_id = tc.codec_language_id[tc.spk_is_dialect[speaker]]

    bos, eos, pad = talker.embed_text(torch.tensor([[cfg.tts_bos_token_id, cfg.tts_eos_token_id,
                                                     cfg.tts_pad_token_id]]), device).chunk(3, dim=1)
    if language_id is None:
        prefill = [[tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]]
    else:
        prefill = [[tc.codec_think_id, tc.codec_think_bos_id, language_id, tc.codec_think_eos_id]]
    codec0 = _codec(talker, prefill, device)
    codec1 = _codec(talker, [[tc.codec_pad_id, tc.codec_bos_id]], device)
    if req.spk_embedding is not None:
        spk = req.spk_embedding.to(device, codec0.dtype).view(1, 1, -1)
    elif speaker is not None:
        spk = talker.model.codec_embedding(torch.tensor(tc.spk_id[speaker], device=device)).view(1, 1, -1)
    else:
        spk = None
    codec = torch.cat([codec0, codec1] if spk is None else [codec0, spk, codec1], dim=1)
    role = talker.embed_text(ids[:, :3], device)
    head = torch.cat((pad.expand(-1, codec.shape[1] - 2, -1), bos), dim=1) + codec[:, :-1]
    embeds = torch.cat((role, head), dim=1)

    if req.icl:
        icl, trailing = _icl_prompt(talker, ids[:, 3:-5], req.ref_ids.reshape(1, -1)[:, 3:-2], req.ref_code, pad, eos,
                                    req.non_streaming, tc.codec_bos_id, tc.codec_pad_id, device)
        embeds = torch.cat([embeds, icl], dim=1)
    else:
        embeds = torch.cat([embeds, talker.embed_text(ids[:, 3:4], device) + codec[:, -1:]], dim=1)
        if req.non_streaming:
            n = ids[:, 3:-5].shape[1]
            body = torch.cat((talker.embed_text(ids[:, 3:-5], device), eos), dim=1) \
                + _codec(talker, [[tc.codec_pad_id] * (n + 1)], device)
            embeds = torch.cat([embeds[:, :-1], body, pad + _codec(talker, [[tc.codec_bos_id]], device)], dim=1)
            trailing = pad
        else:
            trailing = torch.cat((talker.embed_text(ids[:, 4:-5], device), eos), dim=1)
    if req.instruct_ids is not None:
        embeds = torch.cat([talker.embed_text(req.instruct_ids.reshape(1, -1), device), embeds], dim=1)
    return Prompt(embeds, trailing, pad)


# ---- the talker loop -----------------------------------------------------------------------------------


def predict_frame(talker: Talker, past_hidden: Tensor, first: Tensor, s: Sampling,
                  generator: torch.Generator | None) -> list[int]:
    """Codebooks 1..G-1 of a frame: [talker hidden, embed(code 0)] prefill, then one code per step."""
    cp = talker.code_predictor
    groups = talker.config.num_code_groups
    cache = DynamicCache()
    x = cp.small_to_mtp_projection(torch.cat((past_hidden, first), dim=1))
    h = cp.model(x, cache, 0)
    logits = cp.lm_head[0](h)
    codes: list[int] = []
    for g in range(1, groups):
        c = select(logits[0, -1].float().cpu(), s.subtalker_dosample, s.subtalker_temperature,
                   s.subtalker_top_k, s.subtalker_top_p, generator)
        codes.append(c)
        if g == groups - 1:
            break
        x = cp.small_to_mtp_projection(cp.model.codec_embedding[g - 1](torch.tensor([[c]], device=h.device)))
        h = cp.model(x, cache, g + 1)
        logits = cp.lm_head[g](h)
    return codes


def generate_codes(talker: Talker, prompt: Prompt, s: Sampling, generator: torch.Generator | None,
                   cache_kind: str = "dynamic", check: Callable[[], None] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   on_frame: Callable[[list[list[int]]], None] | None = None) -> Tensor:
    """Talker + code predictor until the end token (or max_new_tokens): codes [frames, G] (int64, CPU).
    `on_frame(frames)` sees the frames so far each time one is added (the codec decodes while we go on)."""
    tc = talker.config
    eos = tc.codec_eos_token_id
    suppress = suppress_mask(tc.vocab_size, eos)
    device = prompt.embeds.device
    cache = make_cache(cache_kind)
    h = talker.model(prompt.embeds, cache, 0)
    state = {"past_hidden": h[:, -1:], "pos": prompt.embeds.shape[1]}
    frames: list[list[int]] = []
    cp_tables = talker.code_predictor.model.codec_embedding

    def choose(logits: Tensor, history: list[int]) -> int:
        scores = first_code_logits(logits[0, -1], history, s, eos, suppress)
        return select(scores, s.do_sample, s.temperature, s.top_k, s.top_p, generator)

    def step(tok: int, i: int) -> Tensor:
        first = talker.model.codec_embedding(torch.tensor([[tok]], device=device))
        rest = predict_frame(talker, state["past_hidden"], first, s, generator)
        frames.append([tok, *rest])
        if on_frame is not None:
            on_frame(frames)
        hiddens = [first] + [cp_tables[j](torch.tensor([[c]], device=device)) for j, c in enumerate(rest)]
        x = torch.cat(hiddens, dim=1).sum(1, keepdim=True)
        x = x + (prompt.trailing[:, i].unsqueeze(1) if i < prompt.trailing.shape[1] else prompt.pad)
        h = talker.model(x, cache, state["pos"])
        state["pos"] += 1
        state["past_hidden"] = h[:, -1:]
        return talker.codec_head(h)

    autoregress(talker.codec_head(h), choose, step, lambda tok: tok == eos, s.max_new_tokens,
                check=check, progress=progress)
    return torch.tensor(frames, dtype=torch.long).reshape(-1, tc.num_code_groups)


# ---- voice prompt ----------------------------------------------------------------------------------------


def speaker_embedding(model: Qwen3TTS, wav24k: Tensor) -> Tensor:
    """x-vector [D] of a mono 24 kHz waveform (upstream's extract_speaker_embedding)."""
    from .audio import log_mel
    enc = model.speaker_encoder
    if enc is None:
        raise ValueError("this Qwen3-TTS model has no speaker encoder: voice cloning needs a Base model")
    p = next(enc.parameters())
    mels = log_mel(wav24k.to(p.device), model.config.speaker_encoder.sample_rate)
    return enc(mels.to(p.dtype))[0]

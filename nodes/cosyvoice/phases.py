"""CosyVoice 2 / 3 on the runtime: five components, four phases per chunk.

    engine = CosyVoiceEngine(load_cosyvoice(folder), manager, device="cuda")
    # the Speak pipeline calls engine.speak_chunk(ctx, chunk) per segment (split_text: upstream's text_normalize)

Phases:
- "prompt" (oneshot, once per voice; the result is kept in `chunk.prompts`): the reference's S3 speech
  tokens (Whisper log-mel at 16 kHz), its CAM++ x-vector (Kaldi fbank at 16 kHz) and its 80-bin mel at
  24 kHz (the flow's prompt); tokens and mel are cut to a 1:2 ratio as upstream does.
- "llm" (sequence): Qwen2 over [sos, prompt text + text, task, prompt speech tokens], RAS sampling from
  the request's generator; the 151936-row text embedding stays on the CPU (only looked-up rows move).
- "flow" (oneshot, the estimator marked hot: it runs 2 x 10 times per chunk): tokens -> mel.
- "vocoder" (oneshot): HiFT, mel -> 24 kHz waveform.

Modes (upstream's names): a reference with its transcript is zero-shot cloning; a reference without a
transcript is cross-lingual (the LM gets no prompt, the flow still clones the voice); an instruction with
a reference is `instruct2` (the instruction replaces the transcript in the LM prompt); a built-in voice
from spk2info.pt is `sft` (or zero-shot when the entry carries a prompt). CosyVoice 3 needs
`<|endofprompt|>` in the LM text: its system prompt is added the way upstream's examples write it.
Estimates come from the request (text tokens, reference seconds, mel frames).

Option `upstream_stream` (default off): upstream's `inference_zero_shot(..., stream=True)`, which makes
other audio than the plain run (named in meta["applied"]). The speech tokens are cut into hops (25 tokens
first, plus what pads the prompt's tokens to a multiple of it, then twice as many per hop up to 100; the
hop length carries over to the request's next segment as upstream's model attribute does); each hop's flow
runs over the prompt and every token so far with upstream's chunk masks and the last pre_lookahead_len
tokens as look-ahead only (`finalize=False`), the remaining tokens in one full-context call at the end.
CosyVoice 2's HiFT keeps the last 8 mel frames, their source and audio and cross-fades (Hamming window)
the next hop's audio into them; CosyVoice 3's causal HiFT runs over all the mel so far with its
look-ahead frames and hands over only the samples past what it handed before. Each hop's audio is one
piece (`Chunk.emit`); speak_chunk returns their concatenation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...runtime import DeviceService, ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..pack.audio import resample
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Segment
from ..blocks.transformer import kv_position_bytes
from ..blocks.mel import kaldi_fbank, matcha_mel, whisper_log_mel
from .frontend import ENDOFPROMPT, V3_SYSTEM, TextNormalizer, TextTokenizer, only_punctuation
from .loader import QWEN_DIR, CosyVoiceBundle
from ..blocks.sampling import ras_sample

SAMPLE_RATE = 24000
MAX_TOKEN_TEXT_RATIO, MIN_TOKEN_TEXT_RATIO = 20.0, 2.0
SILENT_TOKENS_V3 = frozenset((1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323))
MAX_SILENT = 5          # v3: longer runs of silent/breath tokens are dropped (upstream llm_job)
MB = 1 << 20
# upstream CosyVoice2Model / CosyVoice3Model (cli/model.py), stream=True
STREAM_HOP = 25             # token_hop_len: the flow's training chunk (static_chunk_size)
STREAM_MAX_HOP = 4 * STREAM_HOP
STREAM_SCALE = 2            # stream_scale_factor: each hop's length doubles
MEL_CACHE = 8               # v2 mel_cache_len: frames HiFT sees again; their audio is cross-faded
HOP_KEY = "cosyvoice.stream_hop"    # Chunk.cache: the hop length the request's next segment starts at


@dataclass
class StreamState:
    """What upstream's hift_cache_dict holds between one segment's hops: v2 the last MEL_CACHE mel
    frames, their source and audio; v3 all the mel so far and how many samples were handed over."""

    mel: Tensor | None = None
    source: Tensor | None = None
    speech: Tensor | None = None
    offset: int = 0


def fade_in_out(fade_in: Tensor, fade_out: Tensor, window: Tensor) -> Tensor:
    """Upstream's fade_in_out: the first half-window of `fade_in` mixed with the last of `fade_out`, in
    float64 (the window is numpy's float64 Hamming), written back as float32."""
    n = window.shape[0] // 2
    out = fade_in.clone()
    out[..., :n] = (fade_in[..., :n].double() * window[:n] + fade_out[..., -n:].double() * window[n:]).to(out.dtype)
    return out


class CosyVoiceEngine(Engine):
    engine_id = "cosyvoice"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=("auto",), cloning="optional",
                                transcript="optional", instruction=True, speed=(0.5, 2.0),
                                reference_seconds=(0.5, 30.0), resampler="torchaudio_sinc")
    PHASED = True
    # Upstream's webui seeds once (set_all_random_seed) and every segment's RAS sampling and (v2) HiFT noise
    # continue that stream; the flow's noise is a buffer drawn once with seed 0 when the model is built, and
    # so is v3's HiFT noise (CosyVoiceBundle.hift_noise_state).
    ONE_STREAM = True
    FLOW_NOISE_SEED = 0
    options = {"upstream_stream": Option(bool, False)}

    def __init__(self, bundle: CosyVoiceBundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None) -> None:
        self.bundle = bundle
        voices = tuple(sorted(bundle.speakers))
        # pieces (Chunk.emit) only with upstream_stream: the first hop's audio is 25 tokens' worth
        first_piece = STREAM_HOP * bundle.flow_config.token_mel_ratio * bundle.hift_config.upsample_scale
        self.capabilities = replace(type(self).capabilities, voices=voices,
                                    cloning="optional" if voices else "required", piece_samples=first_piece)
        DeviceService.pin_to_cpu(bundle.llm.decoder.embed_tokens)
        unit = {"min_unit_bytes": min_unit_bytes}
        llm = ModelHandle(bundle.llm, name="llm", kind="sequence", **unit)
        flow = ModelHandle(bundle.flow, name="flow", kind="oneshot", **unit)
        flow.mark(bundle.flow.decoder.estimator, "hot")     # 2 x 10 estimator calls per chunk
        hift = ModelHandle(bundle.hift, name="vocoder", kind="oneshot", **unit)
        handles = [llm, flow, hift]
        self.prompt_handles: list[ModelHandle] = []
        for module, label in ((bundle.speech_tokenizer, "speech tokenizer"), (bundle.campplus, "speaker encoder")):
            if module is not None:
                self.prompt_handles.append(ModelHandle(module, name=label, kind="oneshot", **unit))
        super().__init__(manager, handles + self.prompt_handles, device, name)
        self.llm_handle, self.flow_handle, self.hift_handle = llm, flow, hift
        self._tokenizer: TextTokenizer | None = None
        self._normalizer: TextNormalizer | None = None

    @property
    def version(self) -> int:
        return self.bundle.version

    @property
    def tokenizer(self) -> TextTokenizer:
        if self._tokenizer is None:
            self._tokenizer = TextTokenizer(self.bundle.folder / QWEN_DIR, self.version)
        return self._tokenizer

    @property
    def normalizer(self) -> TextNormalizer:
        """Upstream's text_normalize (wetext + inflect), built on first use: its graphs load once per engine."""
        if self._normalizer is None:
            self._normalizer = TextNormalizer(self.tokenizer.encode)
        return self._normalizer

    def ids(self, text: str) -> Tensor:
        return torch.tensor([self.tokenizer.encode(text)], dtype=torch.long)

    # ---- estimates ------------------------------------------------------------------------------------------
    def prompt_memory(self, seconds: float) -> int:
        """S3 tokenizer (Whisper-style encoder over 25 Hz positions) and CAM++ (2-D convs over the fbank)."""
        frames = int(seconds * 100) + 1
        positions = frames // 4 + 1
        tok = self.bundle.speech_tokenizer
        width = tok.width if tok is not None else 1280
        heads = tok.heads if tok is not None else 20
        encoder = positions * width * 4 * 8 + heads * positions * positions * 4 * 3
        campplus = frames * 80 * 32 * 4 * 6 + frames * 512 * 4 * 8
        return encoder + campplus + 128 * frames * 4 * 4 + MB

    def llm_memory(self, prompt_tokens: int, text_tokens: int) -> int:
        q = self.bundle.lm_config.qwen
        dtype = next(self.bundle.llm.llm_decoder.parameters()).dtype
        size = torch.empty((), dtype=dtype).element_size()
        positions = prompt_tokens + int(text_tokens * MAX_TOKEN_TEXT_RATIO)
        kv = peak_bytes(kv_position_bytes(q.num_key_value_heads, q.head_dim, dtype), q.num_hidden_layers, positions)
        prefill = prompt_tokens * (q.intermediate_size * 3 + q.hidden_size * 6) * size
        scores = q.num_attention_heads * prompt_tokens * prompt_tokens * 4
        logits = self.bundle.llm.llm_decoder.out_features * 4 * 4
        return kv + prefill + scores + logits + MB

    def flow_memory(self, frames: int) -> int:
        """Batch of 2 through the estimator at `frames` mel frames (plus the encoder once)."""
        c = self.bundle.flow_config
        if c.version == 2:
            width = max(max(c.channels) * 4, c.in_channels) * 2
            heads = c.num_heads
            encoder = frames * c.encoder_units * 4 * 4 + c.encoder_heads * frames * frames * 2 * 4 * 3
        else:
            width = c.dit_dim * max(c.dit_ff_mult, 3) * 2
            heads = c.dit_heads
            encoder = frames * c.pre_lookahead_channels * 4 * 2
        estimator = 2 * frames * width * 4 * 6 + 2 * heads * frames * frames * 4 * 2
        return encoder + estimator + 80 * 15000 * 4 + MB

    def vocoder_memory(self, frames: int) -> int:
        return self.bundle.hift_config.working_memory(frames)

    # ---- phases ---------------------------------------------------------------------------------------------
    def prompt(self, ctx: RequestContext, wav: Tensor, sample_rate: int) -> dict[str, Tensor]:
        """Reference -> speech tokens [1, N], prompt mel [1, 2N, 80], x-vector [1, 192] (the "prompt" phase)."""
        b = self.bundle
        if b.speech_tokenizer is None or b.campplus is None:
            raise ValueError(f"CosyVoice: cloning needs campplus.onnx and speech_tokenizer_v{self.version}.onnx "
                             f"in {b.folder}")
        wav = wav.float()
        # upstream's load_wav: torchaudio's sinc resampler from the file's rate to each model's rate
        wav16 = resample(wav, sample_rate, 16000, self.capabilities.resampler)
        wav24 = resample(wav, sample_rate, SAMPLE_RATE, self.capabilities.resampler)
        if wav16.numel() / 16000 > 30:
            raise ValueError("CosyVoice: the reference is longer than 30 s; upstream's speech tokenizer takes at most 30 s")

        def run() -> dict[str, Tensor]:
            with torch.inference_mode():
                dev = self.prompt_handles[0].device
                mel = whisper_log_mel(wav16)
                tokens = b.speech_tokenizer(mel[None].to(dev)).cpu()
                fbank = kaldi_fbank(wav16)
                fbank = fbank - fbank.mean(dim=0, keepdim=True)
                embedding = b.campplus(fbank[None].to(dev)).float().cpu()
                feat = matcha_mel(wav24, **b.feat_params).transpose(0, 1)[None]
                n = min(feat.shape[1] // 2, tokens.shape[1])
                return {"speech_tokens": tokens[:, :n].long(), "speech_feat": feat[:, :2 * n].float(),
                        "embedding": embedding}

        return ctx.run("prompt", self.prompt_handles, run, memory=self.prompt_memory(wav16.numel() / 16000))

    def speech_tokens(self, ctx: RequestContext, text: Tensor, prompt_text: Tensor, prompt_speech: Tensor,
                      progress: Any = None) -> list[int]:
        c = self.bundle.lm_config
        llm = self.bundle.llm

        def step(done: int, total: int) -> None:
            ctx.check_cancelled()
            if progress is not None:
                progress(done, total)

        def run() -> list[int]:
            dev = self.llm_handle.device
            g = ctx.generator
            return llm.generate(text.to(dev), prompt_text.to(dev), prompt_speech.to(dev),
                                lambda logp, done: ras_sample(logp, done, g, top_p=c.top_p, top_k=c.top_k,
                                                              win_size=c.win_size, tau_r=c.tau_r),
                                min_ratio=MIN_TOKEN_TEXT_RATIO, max_ratio=MAX_TOKEN_TEXT_RATIO,
                                endofprompt=self.tokenizer.token_id(ENDOFPROMPT), on_token=step)

        prompt_len = 2 + text.shape[1] + prompt_text.shape[1] + prompt_speech.shape[1]
        tokens = ctx.run("llm", [self.llm_handle], run, memory=self.llm_memory(prompt_len, text.shape[1]),
                         generators=(ctx.generator,))
        if self.version == 3:
            tokens = drop_long_silences(tokens)
        return tokens

    def mel(self, ctx: RequestContext, tokens: list[int], prompt_tokens: Tensor, prompt_feat: Tensor,
            embedding: Tensor) -> Tensor:
        flow = self.bundle.flow

        def run() -> Tensor:
            dev = self.flow_handle.device
            dtype = next(flow.decoder.parameters()).dtype
            with torch.inference_mode():
                mel = flow.mel(torch.tensor([tokens], device=dev), prompt_tokens.to(dev),
                               prompt_feat.to(dev, dtype), embedding.to(dev, dtype),
                               torch.Generator().manual_seed(self.FLOW_NOISE_SEED),
                               callback=lambda *_: ctx.check_cancelled())
            return mel.float().cpu()

        frames = (prompt_tokens.shape[1] + len(tokens)) * self.bundle.flow_config.token_mel_ratio
        return ctx.run("flow", [self.flow_handle], run, memory=self.flow_memory(frames))

    def vocode(self, ctx: RequestContext, mel: Tensor) -> Tensor:
        hift = self.bundle.hift

        # v2 draws its noise from the request's stream (upstream: the global RNG at the call); v3 from buffers
        # upstream draws once when the model is built, the same for every request (loader.causal_hift_noise_state)
        state = self.bundle.hift_noise_state

        def run() -> Tensor:
            dev = self.hift_handle.device
            dtype = hift.conv_pre.weight.dtype
            generator = ctx.generator if state is None else torch.Generator().set_state(state)   # per attempt
            with torch.inference_mode():
                return hift(mel.to(dev, dtype), generator).float().cpu()[0]

        return ctx.run("vocoder", [self.hift_handle], run, memory=self.vocoder_memory(mel.shape[2]))

    # ---- upstream's stream=True --------------------------------------------------------------------------------
    def stream_mel(self, ctx: RequestContext, tokens: list[int], offset: int, prompt: dict[str, Tensor],
                   finalize: bool) -> Tensor:
        """One hop's mel (upstream token2wav's flow.inference): over the prompt and tokens [0, n), with the
        chunk masks and look-ahead context when not `finalize` (the last call is full-context), the frames
        from token `offset` on."""
        flow, ratio = self.bundle.flow, self.bundle.flow_config.token_mel_ratio
        prompt_tokens, prompt_feat, embedding = prompt["speech_tokens"], prompt["speech_feat"], prompt["embedding"]

        def run() -> Tensor:
            dev = self.flow_handle.device
            dtype = next(flow.decoder.parameters()).dtype
            with torch.inference_mode():
                mel = flow.mel(torch.tensor([tokens], device=dev), prompt_tokens.to(dev),
                               prompt_feat.to(dev, dtype), embedding.to(dev, dtype),
                               torch.Generator().manual_seed(self.FLOW_NOISE_SEED),
                               callback=lambda *_: ctx.check_cancelled(), streaming=not finalize, finalize=finalize)
            return mel.float().cpu()[:, :, offset * ratio:]

        frames = (prompt_tokens.shape[1] + len(tokens)) * ratio
        return ctx.run("flow", [self.flow_handle], run, memory=self.flow_memory(frames))

    def stream_vocode(self, ctx: RequestContext, mel: Tensor, state: StreamState, finalize: bool) -> Tensor:
        """One hop's audio [T] (upstream token2wav's HiFT part); `state` is updated once the phase is done
        (a retried phase starts from the same state and, for v2, the same generator state)."""
        hift, c = self.bundle.hift, self.bundle.hift_config
        noise = self.bundle.hift_noise_state
        if self.version == 3:
            mel = mel if state.mel is None else torch.cat([state.mel, mel], dim=2)
            source = None
        else:
            if state.mel is not None:
                mel = torch.cat([state.mel, mel], dim=2)
            source = state.source

        def run() -> tuple[Tensor, Tensor]:
            dev = self.hift_handle.device
            dtype = hift.conv_pre.weight.dtype
            generator = ctx.generator if noise is None else torch.Generator().set_state(noise)
            with torch.inference_mode():
                wav, s = hift.stream(mel.to(dev, dtype), generator,
                                     None if source is None else source.to(dev, dtype),
                                     finalize=finalize or self.version == 2)
            return wav.float().cpu(), s.float().cpu()

        speech, s = ctx.run("vocoder", [self.hift_handle], run, memory=self.vocoder_memory(mel.shape[2]))
        if self.version == 3:
            state.mel = mel
            speech = speech[:, state.offset:]
            state.offset += speech.shape[1]
            return speech[0]
        cached = MEL_CACHE * c.upsample_scale            # upstream's source_cache_len
        if state.speech is not None:
            speech = fade_in_out(speech, state.speech, torch.from_numpy(np.hamming(2 * cached)))
        if not finalize:
            state.mel, state.source, state.speech = mel[:, :, -MEL_CACHE:], s[:, :, -cached:], speech[:, -cached:]
            speech = speech[:, :-cached]
        return speech[0]

    def stream_chunk(self, ctx: RequestContext, chunk: Chunk, tokens: list[int], prompt: dict[str, Tensor]) -> Tensor:
        """Upstream CosyVoice2Model.tts(stream=True)'s hops over the segment's tokens (all made: the LM
        phase runs first, as upstream's does when its LM thread is ahead of the hops), each hop's audio
        emitted as one piece; returns their concatenation."""
        ahead = self.bundle.flow_config.pre_lookahead_len
        hop = chunk.cache.get(HOP_KEY, STREAM_HOP)
        prompt_tokens = prompt["speech_tokens"].shape[1]
        pad = int(math.ceil(prompt_tokens / hop) * hop - prompt_tokens)   # the first hop ends on a chunk edge
        state, pieces, offset, at = StreamState(), [], 0, 0

        def hand(piece: Tensor) -> None:
            nonlocal at
            pieces.append(piece)
            if chunk.emit is not None:
                chunk.emit(piece, at)
            at += piece.numel()

        while True:
            this = hop + pad if offset == 0 else hop
            if len(tokens) - offset < this + ahead:
                break
            mel = self.stream_mel(ctx, tokens[:offset + this + ahead], offset, prompt, finalize=False)
            hand(self.stream_vocode(ctx, mel, state, finalize=False))
            offset += this
            hop = min(STREAM_MAX_HOP, hop * STREAM_SCALE)
        mel = self.stream_mel(ctx, tokens, offset, prompt, finalize=True)
        hand(self.stream_vocode(ctx, mel, state, finalize=True))
        chunk.cache[HOP_KEY] = hop
        return torch.cat(pieces)

    # ---- one chunk -------------------------------------------------------------------------------------------
    def lm_text(self, chunk: Chunk) -> str:
        """The chunk's text as the LM reads it: split_text's segments are normalised already (normalising
        twice would strip a segment's leading space or turn its final "、" into "。")."""
        return chunk.text if chunk.segmented else self.normalizer.normalize(chunk.text)

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream's text_normalize(split=True): normalised (wetext, inflect), then split_paragraph (80/60/20)."""
        return list(self.normalizer.segments(text))

    def llm_texts(self, chunk: Chunk, has_prompt_speech: bool) -> tuple[str, str, bool]:
        """(text, prompt text, use the prompt's speech tokens in the LM) for the chunk's mode."""
        text = self.lm_text(chunk)
        v3 = self.version == 3
        if chunk.instruction:
            instruction = chunk.instruction.strip()
            if ENDOFPROMPT not in instruction:
                instruction = (f"{V3_SYSTEM} {instruction}" if v3 else instruction) + ENDOFPROMPT
            return text, instruction, False
        if chunk.reference_text and has_prompt_speech:
            transcript = chunk.reference_text
            if v3 and ENDOFPROMPT not in transcript:
                # upstream's v3 prompt text carries the system prompt's <|endofprompt|>, so text_normalize
                # leaves it as written: the transcript is not normalised either
                transcript = f"{V3_SYSTEM}{ENDOFPROMPT}{transcript}"
            else:
                transcript = self.normalizer.normalize(transcript)   # text_normalize(prompt_text, split=False)
            return text, transcript, True
        if v3 and ENDOFPROMPT not in text:
            text = f"{V3_SYSTEM}{ENDOFPROMPT}{text}"
        return text, "", False

    def voice_prompt(self, ctx: RequestContext, chunk: Chunk) -> dict[str, Tensor]:
        if chunk.reference is not None:
            if "prompt" not in chunk.prompts:
                chunk.prompts["prompt"] = self.prompt(ctx, chunk.reference.wav, chunk.reference.sample_rate)
            return chunk.prompts["prompt"]
        if chunk.voice is None:
            raise ValueError("CosyVoice: give reference audio or a voice")
        name = next(k for k in self.bundle.speakers if k.lower() == chunk.voice.lower())   # checked by the pipeline
        info = self.bundle.speakers[name]
        out = {"embedding": info.get("flow_embedding", info.get("embedding")).reshape(1, -1).float()}
        if "flow_prompt_speech_token" in info and "prompt_speech_feat" in info:
            out["speech_tokens"] = info["flow_prompt_speech_token"].reshape(1, -1).long()
            out["speech_feat"] = info["prompt_speech_feat"].reshape(1, -1, 80).float()
            if "prompt_text" in info and "llm_prompt_speech_token" in info:
                out["prompt_text_ids"] = info["prompt_text"].reshape(1, -1).long()
        else:
            out["speech_tokens"] = torch.zeros(1, 0, dtype=torch.long)
            out["speech_feat"] = torch.zeros(1, 0, 80)
        return out

    def phase_components(self) -> list[list[ModelHandle]]:
        return [self.prompt_handles, [self.llm_handle], [self.flow_handle], [self.hift_handle]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        stream = self.option(chunk, "upstream_stream")
        if stream:
            if chunk.speed != 1.0:
                raise ValueError(f"speed: upstream_stream needs speed 1 (upstream changes speed only without "
                                 f"stream), got {chunk.speed:g}")
            ctx.meta["applied"]["upstream_stream"] = "upstream's stream=True token hops (other audio than stream off)"
        prompt = self.voice_prompt(ctx, chunk)
        if only_punctuation(self.lm_text(chunk)):
            return torch.zeros(0)          # upstream drops chunks that are only punctuation
        text, prompt_text, use_speech = self.llm_texts(chunk, chunk.reference is not None)
        text_ids = self.ids(text)
        prompt_ids = self.ids(prompt_text) if prompt_text else torch.zeros(1, 0, dtype=torch.long)
        if "prompt_text_ids" in prompt and not chunk.instruction:
            prompt_ids, use_speech = prompt["prompt_text_ids"], True       # a zero-shot speaker of spk2info.pt
        speech = prompt["speech_tokens"] if use_speech else torch.zeros(1, 0, dtype=torch.long)
        tokens = self.speech_tokens(ctx, text_ids, prompt_ids, speech, chunk.progress)
        if not tokens:
            return torch.zeros(0)
        if stream:
            return self.stream_chunk(ctx, chunk, tokens, prompt)
        mel = self.mel(ctx, tokens, prompt["speech_tokens"], prompt["speech_feat"], prompt["embedding"])
        if chunk.speed != 1.0:
            mel = F.interpolate(mel, size=max(1, int(mel.shape[2] / chunk.speed)), mode="linear")
        return self.vocode(ctx, mel)


def drop_long_silences(tokens: list[int]) -> list[int]:
    """Upstream CosyVoice 3: after 5 consecutive silent/breath tokens, further ones are dropped."""
    out, run = [], 0
    for t in tokens:
        if t in SILENT_TOKENS_V3:
            run += 1
            if run > MAX_SILENT:
                continue
        else:
            run = 0
        out.append(t)
    return out


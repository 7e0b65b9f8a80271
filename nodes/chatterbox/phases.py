"""Chatterbox (Resemble AI, MIT) on the runtime: upstream `ChatterboxTTS.generate`, four phases per chunk.

    engine = ChatterboxEngine(load_chatterbox(folder), manager, device="cuda")

Phases:
- "conditioning" (once per voice, kept in `chunk.prompts`): for a reference, upstream's
  `prepare_conditionals`: the 24 kHz reference (the pipeline's soxr-HQ resampling = librosa.load(sr=24000))
  and its 16 kHz copy (soxr HQ = librosa.resample); T3's prompt tokens from the first 6 s at 16 kHz (150
  tokens at most), the voice encoder's speaker embedding from all of it, and S3Gen's `embed_ref` on the
  first 10 s at 24 kHz. Without a reference, the built-in voice of conds.pt.
- "t3" (sequence): the Llama over [conditioning, text, BOS], conditioned and unconditioned rows as a batch
  of 2 with CFG, repetition penalty, temperature, min-p, top-p; the exaggeration is the emotion scalar.
- "flow" (oneshot, the estimator hot: 2 x 10 calls): tokens -> mel, noise drawn after T3's draws.
- "vocoder" (oneshot): HiFT, then the trim fade.

Random numbers come from one generator seeded with the chunk's seed, in upstream's order (T3's draws, the
flow's noise, HiFT's phases and noise), as upstream draws from torch's global generator after
`torch.manual_seed(seed)`. Upstream's output is watermarked by resemble-perth; this engine's is not.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..blocks.mel import whisper_log_mel
from ..blocks.transformer import kv_position_bytes
from ..pack.audio import resample
from ..pack.engine import Capabilities, Chunk, Engine, Option
from .loader import SPEECH_VOCAB, ChatterboxBundle
from .s3gen import SAMPLE_RATE, TOKENIZER_RATE, S3GenReference, embed_ref, flow_noise, trim_fade
from .t3 import Sampling, generate
from .text import LANGUAGES, Cangjie, mtl_text_tokens, text_tokens
from .voice_encoder import speaker_embedding

ENC_COND_SECONDS, DEC_COND_SECONDS = 6, 10        # upstream ENC_COND_LEN / DEC_COND_LEN
PROMPT_TOKENS = 150                               # T3Config.speech_cond_prompt_len
MB = 1 << 20


class ChatterboxEngine(Engine):
    engine_id = "chatterbox"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=("auto", "en"), cloning="optional",
                                reference_seconds=(0.5, 60.0), reference_rate=SAMPLE_RATE, resampler="soxr_hq")
    options = {
        "exaggeration": Option(float, 0.5, 0.0, 2.0),
        "cfg_weight": Option(float, 0.5, 0.0, 5.0),
        "temperature": Option(float, 0.8, 0.0, 5.0, low_open=True),
        "top_p": Option(float, 1.0, 0.0, 1.0, low_open=True),
        "min_p": Option(float, 0.05, 0.0, 1.0, high_open=True),
        "repetition_penalty": Option(float, 1.2, 1.0, 5.0),
        "max_new_tokens": Option(int, 1000, 1, 4000),
    }
    UPSTREAM_KV_CACHE = "dynamic"

    def __init__(self, bundle: ChatterboxBundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None) -> None:
        self.bundle = bundle
        self.capabilities = replace(type(self).capabilities,
                                    cloning="optional" if bundle.voice is not None else "required")
        self.cangjie = None
        if bundle.multilingual:
            # "auto": no language tag, as upstream's generate(language_id=None); its repetition penalty is 2.0
            self.capabilities = replace(self.capabilities, languages=("auto",) + LANGUAGES)
            self.options = {**type(self).options, "repetition_penalty": Option(float, 2.0, 1.0, 5.0)}
            self.cangjie = Cangjie(bundle.cangjie) if bundle.cangjie is not None else None
        unit = {"min_unit_bytes": min_unit_bytes}
        s3 = bundle.s3gen
        self.t3_handle = ModelHandle(bundle.t3, name="t3", kind="sequence", **unit)
        self.flow_handle = ModelHandle(s3.flow, name="flow", kind="oneshot", **unit)
        self.flow_handle.mark(s3.flow.decoder.estimator, "hot")      # 2 x 10 estimator calls per chunk
        self.vocoder_handle = ModelHandle(s3.mel2wav, name="vocoder", kind="oneshot", **unit)
        self.ve_handle = ModelHandle(bundle.ve, name="voice encoder", kind="oneshot", **unit)
        self.tokenizer_handle = ModelHandle(s3.tokenizer, name="speech tokenizer", kind="oneshot", **unit)
        self.campplus_handle = ModelHandle(s3.speaker_encoder, name="speaker encoder", kind="oneshot", **unit)
        self.prompt_handles = [self.ve_handle, self.tokenizer_handle, self.campplus_handle]
        super().__init__(manager, [self.t3_handle, self.flow_handle, self.vocoder_handle] + self.prompt_handles,
                         device, name or ("Chatterbox Multilingual" if bundle.multilingual else "Chatterbox"))

    # ---- estimates ------------------------------------------------------------------------------------------
    def conditioning_memory(self, seconds: float) -> int:
        """S3 tokenizer over 25 Hz positions, CAM++ over the 100 Hz fbank, the voice encoder's LSTM."""
        frames = int(seconds * 100) + 1
        positions = frames // 4 + 1
        tok = self.bundle.s3gen.config.tokenizer
        encoder = positions * tok.n_audio_state * 4 * 8 + tok.n_audio_head * positions * positions * 4 * 3
        campplus = frames * 80 * 32 * 4 * 6 + frames * 512 * 4 * 8
        voice_encoder = frames * 40 * 4 * 8 + 3 * 256 * 160 * 4 * 16
        return encoder + campplus + voice_encoder + 128 * frames * 4 * 4 + MB

    def t3_memory(self, prompt_len: int, new_tokens: int) -> int:
        c = self.bundle.t3.config
        dtype = self.bundle.t3.speech_emb.weight.dtype
        size = torch.empty((), dtype=dtype).element_size()
        positions = prompt_len + new_tokens
        kv = peak_bytes(kv_position_bytes(c.num_key_value_heads, c.head_dim, dtype), c.num_hidden_layers, positions,
                        rows=2)
        width = max(c.intermediate_size * 3, c.num_attention_heads * c.head_dim * 3 + c.hidden_size * 4)
        prefill = 2 * prompt_len * (width + c.hidden_size * 4) * size
        scores = 2 * c.num_attention_heads * prompt_len * positions * 4
        logits = 2 * c.speech_tokens_dict_size * 4 * 8
        return kv + prefill + scores + logits + MB

    def flow_memory(self, frames: int) -> int:
        """Batch of 2 through the UNet estimator at `frames` mel frames (plus the conformer encoder once)."""
        c = self.bundle.s3gen.config.flow
        width = max(max(c.channels) * 4, c.in_channels, c.num_heads * c.attention_head_dim * 3) * 2
        encoder = frames * max(c.encoder_units, c.encoder_size * 4) * 4 * 4 \
            + c.encoder_heads * frames * frames * 2 * 4 * 3
        estimator = 2 * frames * width * 4 * 6 + 2 * c.num_heads * frames * frames * 4 * 2
        return encoder + estimator + 2 * c.output_size * frames * 4 * 8 + MB

    def vocoder_memory(self, frames: int) -> int:
        return self.bundle.s3gen.config.hift.working_memory(frames)

    # ---- phases ---------------------------------------------------------------------------------------------
    def conditioning(self, ctx: RequestContext, wav24: Tensor) -> dict[str, Any]:
        """A 24 kHz reference -> T3's speaker embedding and prompt tokens, S3Gen's reference (upstream
        `prepare_conditionals`)."""
        b = self.bundle
        wav24 = wav24.float()
        wav16 = resample(wav24, SAMPLE_RATE, TOKENIZER_RATE, "soxr_hq")      # librosa.resample's default

        def run() -> dict[str, Any]:
            with torch.inference_mode():
                gen = embed_ref(b.s3gen, wav24[: DEC_COND_SECONDS * SAMPLE_RATE])
                w = next(b.s3gen.tokenizer.parameters())
                mel = whisper_log_mel(wav16[: ENC_COND_SECONDS * TOKENIZER_RATE])[None][..., : PROMPT_TOKENS * 4]
                prompt = b.s3gen.tokenizer(mel.to(w.device, w.dtype)).long().cpu()
                speaker = speaker_embedding(b.ve, wav16)
            return {"speaker_emb": speaker, "prompt_tokens": prompt, "gen_prompt_token": gen.prompt_token,
                    "gen_prompt_feat": gen.prompt_feat, "gen_embedding": gen.embedding}   # plain tensors: cacheable

        return ctx.run("conditioning", self.prompt_handles, run,
                       memory=self.conditioning_memory(wav16.numel() / TOKENIZER_RATE))

    def voice_prompt(self, ctx: RequestContext, chunk: Chunk) -> dict[str, Any]:
        if chunk.reference is not None:
            if "conditioning" not in chunk.prompts:
                chunk.prompts["conditioning"] = self.conditioning(ctx, chunk.reference.wav)
            return chunk.prompts["conditioning"]
        voice = self.bundle.voice
        if voice is None:
            raise ValueError(f"Chatterbox: {self.bundle.folder} has no conds.pt (the built-in voice): give reference "
                             "audio")
        return {"speaker_emb": voice.speaker_emb, "prompt_tokens": voice.prompt_tokens,
                "gen_prompt_token": voice.gen.prompt_token, "gen_prompt_feat": voice.gen.prompt_feat,
                "gen_embedding": voice.gen.embedding}

    def text_ids(self, chunk: Chunk) -> Tensor:
        """T3's text ids for the chunk (upstream `generate`'s punc_norm and tokenizer; the multilingual
        model's per-language preprocessing and `[xx]` tag)."""
        c = self.bundle.t3.config
        if not self.bundle.multilingual:
            return text_tokens(self.bundle.tokenizer, chunk.text, c.start_text_token, c.stop_text_token)
        language = None if chunk.language == "auto" else chunk.language
        return mtl_text_tokens(self.bundle.tokenizer, chunk.text, language, c.start_text_token, c.stop_text_token,
                               self.cangjie)

    def speech_tokens(self, ctx: RequestContext, chunk: Chunk, prompt: dict[str, Any],
                      ids: Tensor | None = None) -> list[int]:
        t3 = self.bundle.t3
        c = t3.config
        ids = self.text_ids(chunk) if ids is None else ids
        if ids.numel() > c.max_text_tokens:
            raise ValueError(f"text: {ids.numel()} text tokens in one chunk; Chatterbox reads at most {c.max_text_tokens}")
        s = Sampling(temperature=self.option(chunk, "temperature"), top_p=self.option(chunk, "top_p"),
                     min_p=self.option(chunk, "min_p"), repetition_penalty=self.option(chunk, "repetition_penalty"),
                     cfg_weight=self.option(chunk, "cfg_weight"),
                     max_new_tokens=min(self.option(chunk, "max_new_tokens"), c.max_speech_tokens))
        exaggeration = self.option(chunk, "exaggeration")
        kind = self.kv_cache(ctx)

        def run() -> list[int]:
            with torch.inference_mode():
                cond = t3.conditioning(prompt["speaker_emb"], prompt["prompt_tokens"], exaggeration)
                tokens = generate(t3, cond, ids, s, ctx.generator, cache_kind=kind,
                                  on_token=lambda *_: ctx.check_cancelled())
            return tokens

        prompt_tokens = prompt["prompt_tokens"]
        cond_len = 2 + (c.perceiver_queries if prompt_tokens is not None and prompt_tokens.numel() else 0)
        tokens = ctx.run("t3", [self.t3_handle], run, memory=self.t3_memory(cond_len + ids.numel() + 2, s.max_new_tokens),
                         generators=(ctx.generator,))
        return drop_invalid_tokens(tokens, c.start_speech_token, c.stop_speech_token)

    def mel(self, ctx: RequestContext, tokens: list[int], gen: S3GenReference) -> Tensor:
        s3 = self.bundle.s3gen

        def run() -> Tensor:
            dev = self.flow_handle.device
            dtype = next(s3.flow.decoder.parameters()).dtype
            noise = flow_noise(s3, gen.prompt_token.shape[1], len(tokens), ctx.generator)
            with torch.inference_mode():
                mel = s3.flow.mel(torch.tensor([tokens], device=dev), gen.prompt_token.to(dev),
                                  gen.prompt_feat.to(dev, dtype), gen.embedding.to(dev, dtype), None,
                                  callback=lambda *_: ctx.check_cancelled(), noise=noise)
            return mel.float().cpu()

        frames = (gen.prompt_token.shape[1] + len(tokens)) * s3.flow.config.token_mel_ratio
        return ctx.run("flow", [self.flow_handle], run, memory=self.flow_memory(frames), generators=(ctx.generator,))

    def vocode(self, ctx: RequestContext, mel: Tensor) -> Tensor:
        hift = self.bundle.s3gen.mel2wav

        def run() -> Tensor:
            dev = self.vocoder_handle.device
            dtype = hift.conv_pre.weight.dtype
            with torch.inference_mode():
                wav = hift(mel.to(dev, dtype), ctx.generator).float().cpu()
            return trim_fade(wav)[0]

        return ctx.run("vocoder", [self.vocoder_handle], run, memory=self.vocoder_memory(mel.shape[2]),
                       generators=(ctx.generator,))

    def phase_components(self) -> list[list[ModelHandle]]:
        return [self.prompt_handles, [self.t3_handle], [self.flow_handle], [self.vocoder_handle]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        ids = self.text_ids(chunk)      # a missing package or file for the language fails before the models run
        prompt = self.voice_prompt(ctx, chunk)
        tokens = self.speech_tokens(ctx, chunk, prompt, ids)
        if not tokens:
            return torch.zeros(0)
        gen = S3GenReference(prompt["gen_prompt_token"], prompt["gen_prompt_feat"], prompt["gen_embedding"])
        return self.vocode(ctx, self.mel(ctx, tokens, gen))


def drop_invalid_tokens(tokens: list[int], sos: int, eos: int) -> list[int]:
    """Upstream's `drop_invalid_tokens` then `tokens[tokens < 6561]`: what follows a drawn start-of-speech
    token (the first one; upstream fails on two) up to the stop token, without the other non-speech ids."""
    start = tokens.index(sos) + 1 if sos in tokens else 0
    end = tokens.index(eos) if eos in tokens else len(tokens)
    return [t for t in tokens[start:end] if t < SPEECH_VOCAB]

"""IndexTTS 2 on the runtime: seven components, four phases per chunk.

    engine = IndexTTS2Engine(load_indextts2(folder), manager, device="cuda")
    # the Speak pipeline calls engine.speak_chunk(ctx, chunk) per segment (split_text: upstream's 120-token segments)

Phases:
- "conditioning" (once per voice, kept in `chunk.prompts`; per request with `emotion_text`): the reference at 22.05 kHz (soxr, cut to
  15 s, as upstream's librosa load) resampled to 16 kHz with torchaudio's sinc, and, as its own emotion
  reference, the reference at 16 kHz straight from its own rate (soxr, 15 s: upstream's second load); w2v-bert-2.0 hidden state 17, normalised by
  wav2vec2bert_stats.pt; the semantic codec's quantized reference (S_ref); CAM++ on the Kaldi fbank (the
  style vector); the reference mel; the GPT's conformer + perceiver speaker latents and emotion vector.
- "gpt" (sequence): beam sampling of mel codes from the request's generator (upstream's settings), then
  one pass over [cond][text][codes] for the latents.
- "s2mel" (the DiT marked hot: 2 x 25 estimator calls): codec embedding of the codes + projected
  latents -> length regulator (1.72 frames per code) -> CFM with the reference mel as prompt; the noise
  from the request's generator.
- "vocoder": BigVGAN v2, 22.05 kHz.

Modes: cloning from the speaker reference (its own emotion); emotion from a second reference audio
(option `emotion_reference`, a ComfyUI AUDIO dict; resampled to 16 kHz with soxr as upstream's librosa
load, cut to 15 s), blended by `emotion_alpha` (upstream's `emo_alpha`); emotion from a vector of eight
weights (options happy ... calm, upstream's `emo_vector`, scaled by `emotion_alpha`), mixed with the
speaker's emotion through feat1.pt / feat2.pt (the vector wins over an emotion reference, as upstream).
Emotion from text (option `emotion_text`): the Qwen3-0.6B emotion model of qwen0.6bemo4-merge/ reads it
(Qwen3 chat prompt, sampling as its generation_config.json, the request's generator) and
upstream's parsing turns the reply into the eight weights, which then act as above (text wins over given
weights, as upstream's use_emo_text). Upstream's infer_v2 exposes no duration control; none is offered.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import peak_bytes
from ..pack.audio import check_level, check_rate, check_samples, resample, to_mono
from ..blocks.decode import frames_estimate
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Join, Segment
from ..blocks.w2v_bert import seamless_features
from ..blocks.mel import kaldi_fbank, matcha_mel
from .emotion import after_thinking, chat_prompt, emotion_vector, generate
from .generate import Sampling, generate_codes
from .loader import IndexTTS2Bundle
from .text import MAX_SEGMENT_TOKENS, TextNormalizer, TextTokenizer, split_segments

SAMPLE_RATE = 22050
MAX_REFERENCE_SECONDS = 15.0            # upstream's _load_and_cut_audio
CODE_TO_FRAMES = 1.72                   # mel frames per semantic code (upstream's target_lengths)
EMOTIONS = ("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm")
CODES_PER_TEXT_TOKEN = 12               # estimate: ~0.5 s of 25 Hz codes per BPE piece, generous
EMOTION_MAX_TOKENS = 256               # the emotion model's reply (a short JSON object); upstream allows 32768
MB = 1 << 20


class IndexTTS2Engine(Engine):
    engine_id = "indextts2"
    capabilities = Capabilities(sample_rate=SAMPLE_RATE, languages=("auto", "en", "zh"), cloning="required",
                                reference_seconds=(0.5, 60.0))   # kept at its own rate: see conditioning
    PHASED = True
    join = Join(silence_ms=200)          # infer_v2's interval_silence default between segments
    ONE_STREAM = True                    # upstream draws every segment's sampling and noise from one stream
    max_segment_tokens = MAX_SEGMENT_TOKENS   # infer_v2's max_text_tokens_per_segment default
    # upstream's defaults (generate.Sampling, infer_v2); ranges about its web UI's sliders (emotion weights
    # 0-1, beams 1-10 (2 at least here: beam sampling), temperature 0.1-2, top_k 0-100, repetition penalty
    # 0.1-20, max_mel_tokens up to the checkpoints' 1815), widened where a larger value costs no more work
    options = {**{name: Option(float, None, 0.0, 2.0) for name in EMOTIONS},
               "emotion_alpha": Option(float, 1.0, 0.0, 1.0),
               "emotion_reference": Option(dict, None, 0.5, 600.0),     # seconds; upstream keeps the first 15
               "emotion_text": Option(str, None, max_chars=2000),
               "num_beams": Option(int, Sampling.num_beams, 2, 10),
               "temperature": Option(float, Sampling.temperature, 0.0, 2.0, low_open=True),
               "top_p": Option(float, Sampling.top_p, 0.0, 1.0, low_open=True),
               "top_k": Option(int, Sampling.top_k, 0, 1 << 20),
               "repetition_penalty": Option(float, Sampling.repetition_penalty, 0.0, 20.0, low_open=True),
               "max_mel_tokens": Option(int, Sampling.max_mel_tokens, 1, 1815),
               "diffusion_steps": Option(int, 25, 1, 200),
               "cfg_rate": Option(float, 0.7, 0.0, 10.0)}

    def __init__(self, bundle: IndexTTS2Bundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None) -> None:
        self.bundle = bundle
        unit = {"min_unit_bytes": min_unit_bytes}
        self.w2v = ModelHandle(bundle.w2v_bert, name="w2v-bert", kind="oneshot", **unit)
        self.codec = ModelHandle(bundle.codec, name="semantic codec", kind="oneshot", **unit)
        self.campplus = ModelHandle(bundle.campplus, name="speaker encoder", kind="oneshot", **unit)
        self.gpt = ModelHandle(bundle.gpt, name="gpt", kind="sequence", **unit)
        self.s2mel = ModelHandle(bundle.s2mel, name="s2mel", kind="oneshot", **unit)
        self.s2mel.mark(bundle.s2mel.cfm.estimator, "hot")
        self.vocoder = ModelHandle(bundle.bigvgan, name="vocoder", kind="oneshot", **unit)
        handles = [self.gpt, self.s2mel, self.vocoder, self.w2v, self.codec, self.campplus]
        self.emotion = None
        if bundle.emotion_model is not None:
            self.emotion = ModelHandle(bundle.emotion_model.lm, name="emotion model", kind="sequence", **unit)
            handles.append(self.emotion)
        super().__init__(manager, handles, device, name)
        self._tokenizer: TextTokenizer | None = None

    @property
    def tokenizer(self) -> TextTokenizer:
        if self._tokenizer is None:
            folder = self.bundle.folder
            self._tokenizer = TextTokenizer(folder / "bpe.model",
                                            TextNormalizer.from_glossary_file(folder / "glossary.yaml"))
        return self._tokenizer

    # ---- estimates ------------------------------------------------------------------------------------------
    def features_memory(self, seconds: float) -> int:
        """w2v-bert, the codec, CAM++ on the Kaldi fbank and the reference mel."""
        b = self.bundle
        w = b.w2v_bert.config
        frames = int(seconds * 50) + 2                  # w2v-bert positions (stride-2 stacked 10 ms frames)
        w2v = frames * (w.hidden_size * 16 + w.intermediate_size * 3) * 4 + w.num_attention_heads * frames ** 2 * 4 * 4
        codec = frames * (b.codec.config.vocos_intermediate_dim * 3 + w.hidden_size * 6) * 4
        fbank = int(seconds * 100) + 2
        campplus = int(fbank * 80 * 32 * 4 * 2.5) + fbank * 512 * 4 * 2
        mel = int(seconds * SAMPLE_RATE / 256 + 2) * (b.mel["n_fft"] + 2) * 4 * 4
        return max(w2v, codec, campplus) + mel + frames * 160 * 4 * 4 + MB // 2

    def conditioners_memory(self, seconds: float) -> int:
        """The GPT's conformers (conv2d subsampling over the 1024-wide features) and perceivers."""
        g = self.bundle.gpt.config
        frames = int(seconds * 50) + 2
        peak = 0
        for c in (g.condition, g.emo_condition):
            sub = (frames // 2 + 1) * ((g.semantic_dim - 1) // 2) * c.output_size * 4 * 3
            peak = max(peak, sub + frames * c.linear_units * 4 * 4 + c.attention_heads * frames ** 2 * 4 * 4)
        return peak + frames * g.model_dim * 4 * 8 + MB // 2

    def gpt_memory(self, prompt: int, codes: int, beams: int) -> int:
        g = self.bundle.gpt.config
        dtype = self.bundle.gpt.mel_head.weight.dtype
        size = torch.empty((), dtype=dtype).element_size()
        positions = prompt + 1 + codes
        kv = peak_bytes(2 * g.model_dim * size, g.layers, positions, rows=beams) * 2   # reorders copy the cache
        prefill = beams * (prompt + 1) * g.model_dim * 12 * size + beams * g.heads * (prompt + 1) ** 2 * 4 * 2
        latent = (positions + 2) * g.model_dim * 12 * size + g.heads * (positions + 2) ** 2 * 4 * 2
        logits = beams * g.number_mel_codes * 4 * 4
        return kv + prefill + latent + logits + MB

    def s2mel_memory(self, frames: int) -> int:
        c = self.bundle.s2mel.config
        dit = 2 * frames * (c.hidden_dim * 8 + c.in_channels * 6 + c.style_dim) * 4
        attention = 2 * c.num_heads * frames * frames * 4 * 3 + 2 * frames * frames * 2
        wavenet = 2 * frames * c.wavenet_hidden * (c.wavenet_layers + 6) * 4
        regulator = frames * (c.regulator_channels * 8 + c.regulator_in * 3) * 4
        return dit + attention + wavenet + regulator + MB // 2

    def vocoder_memory(self, frames: int) -> int:
        c = self.bundle.bigvgan.config
        t, ch = frames, c.upsample_initial_channel
        widest = ch * t
        for r in c.upsample_rates:
            t *= r
            ch //= 2
            widest = max(widest, ch * t)
        return widest * 4 * 12 + MB // 2

    # ---- phases ---------------------------------------------------------------------------------------------
    def layerdrop_draws(self, generator: torch.Generator, forwards: int) -> None:
        """Upstream's w2v-bert (transformers' Wav2Vec2BertModel) draws LayerDrop numbers it does not use in
        eval mode (`torch.rand([])` per encoder and adapter layer): the draws the request's stream takes for
        `forwards` forward passes, so what follows draws as upstream's does."""
        for _ in range(forwards * self.bundle.w2v_bert.config.layerdrop_draws):
            torch.rand((), generator=generator)

    def conditioning(self, ctx: RequestContext, reference: Reference, chunk: Chunk) -> dict[str, Tensor]:
        """Upstream loads the speaker file twice: librosa at 22.05 kHz (then torchaudio to 16 kHz for the
        semantic and style features) and, as the emotion reference when none is given (also in vector
        and text-emotion mode), librosa at 16 kHz straight from the file; each cut to 15 s."""
        b = self.bundle
        original = reference.wav.float()
        wav22 = resample(original, reference.sample_rate, SAMPLE_RATE, "soxr_hq")[: int(MAX_REFERENCE_SECONDS * SAMPLE_RATE)]
        wav16 = resample(wav22, SAMPLE_RATE, 16000, "torchaudio_sinc")
        weights = self.emotion_weights(chunk, self.text_emotion(ctx, chunk))

        def semantic(wav: Tensor) -> Tensor:
            self.layerdrop_draws(ctx.generator, 1)
            feats, mask = seamless_features(wav)
            dev, dtype = self.w2v.device, b.w2v_bert.feature_projection.projection.weight.dtype
            hidden = b.w2v_bert(feats.to(dev, dtype), mask.to(dev)).float()
            return (hidden - b.semantic_mean.to(hidden.device)) / b.semantic_std.to(hidden.device)

        def features() -> dict[str, Tensor]:
            with torch.inference_mode():
                spk = semantic(wav16)
                emo = semantic(emo16).cpu()
                _, s_ref = b.codec.quantize(spk.to(self.codec.device))
                fbank = kaldi_fbank(wav16)
                fbank = fbank - fbank.mean(dim=0, keepdim=True)
                style = b.campplus(fbank[None].to(self.campplus.device)).float().cpu()
                return {"spk": spk.cpu(), "emo": emo, "s_ref": s_ref.float().cpu(), "style": style,
                        "ref_mel": matcha_mel(wav22, **b.mel)[None].float()}

        def conditioners(spk: Tensor, emo: Tensor, style: Tensor) -> dict[str, Tensor]:
            with torch.inference_mode():
                dev, dtype = self.gpt.device, b.gpt.mel_head.weight.dtype
                x = spk.to(dev, dtype)
                lengths = torch.tensor([x.shape[1]], device=dev)
                latents = b.gpt.speaker_latents(x, lengths)
                e = emo.to(dev, dtype)
                emovec = b.gpt.merge_emotion(x, lengths, e, torch.tensor([e.shape[1]], device=dev), alpha)
                emovec = emovec.float().cpu()
                if weights is not None:
                    emovec = self.mix_emotion(emovec, style, weights)
                return {"latents": latents.cpu(), "emovec": emovec}

        emo16 = None if weights is not None else self.emotion_reference(chunk)
        alpha = float(self.option(chunk, "emotion_alpha"))
        if emo16 is None:       # the speaker is its own emotion reference, alpha 1 (upstream)
            emo16, alpha = resample(original, reference.sample_rate, 16000, "soxr_hq")[: int(MAX_REFERENCE_SECONDS * 16000)], 1.0
        seconds = max(wav22.numel() / SAMPLE_RATE, emo16.numel() / 16000)
        out = ctx.run("conditioning", [self.w2v, self.codec, self.campplus], features,
                      memory=self.features_memory(seconds))
        out.update(ctx.run("conditioning", [self.gpt],
                           lambda: conditioners(out["spk"], out["emo"], out["style"]),
                           memory=self.conditioners_memory(seconds)))
        del out["spk"], out["emo"]      # only after success: a retried phase reads them again
        return out

    @staticmethod
    def emotion_reference(chunk: Chunk) -> Tensor | None:
        """The option `emotion_reference` ({"waveform", "sample_rate"}) as upstream loads it: 16 kHz, 15 s."""
        ref = chunk.options.get("emotion_reference")
        if ref is None:
            return None
        what = "options: emotion_reference"
        if not isinstance(ref, dict) or "waveform" not in ref or "sample_rate" not in ref:
            raise ValueError(f"{what}: expected an AUDIO dict with 'waveform' and 'sample_rate'")
        rate = check_rate(ref["sample_rate"], f"{what} sample_rate")
        wav = check_level(check_samples(to_mono(ref["waveform"], what), rate, (0.5, 600.0), what), what)
        return resample(wav, rate, 16000, "soxr_hq")[: int(MAX_REFERENCE_SECONDS * 16000)]

    def text_emotion(self, ctx: RequestContext, chunk: Chunk) -> dict[str, float] | None:
        """The emotion model's eight weights for the option `emotion_text` (upstream's use_emo_text)."""
        text = chunk.options.get("emotion_text")
        if text is None:
            return None
        if not text.strip():
            raise ValueError("options: emotion_text is empty")
        em = self.bundle.emotion_model
        if em is None or self.emotion is None:
            raise ValueError(f"IndexTTS 2: emotion_text needs the emotion model in "
                             f"{self.bundle.folder / 'qwen0.6bemo4-merge'}")
        ids = em.tokenizer.encode(chat_prompt(text))

        def run() -> list[int]:
            with torch.inference_mode():
                return generate(em.lm, ids, em.settings, ctx.generator, EMOTION_MAX_TOKENS, check=ctx.check_cancelled)

        out = ctx.run("conditioning", [self.emotion], run, memory=self.emotion_memory(len(ids)))
        return dict(zip(EMOTIONS, emotion_vector(em.tokenizer.decode(after_thinking(out)), text)))

    def emotion_memory(self, prompt: int) -> int:
        c = self.bundle.emotion_model.lm.config
        dtype = self.bundle.emotion_model.lm.lm_head.weight.dtype
        size = torch.empty((), dtype=dtype).element_size()
        kv = peak_bytes(2 * c.num_key_value_heads * c.head_dim * size, c.num_hidden_layers, prompt + EMOTION_MAX_TOKENS)
        prefill = prompt * (c.intermediate_size * 3 + c.hidden_size * 6) * size
        prefill += c.num_attention_heads * prompt ** 2 * 4 * 2
        return kv + prefill + c.vocab_size * 4 * 4 + MB // 2

    def emotion_weights(self, chunk: Chunk, detected: dict[str, float] | None = None) -> Tensor | None:
        """Upstream's emo_vector (from `detected` text emotion, else the eight options), scaled by
        emotion_alpha as upstream does."""
        given = detected or {k: float(chunk.options[k]) for k in EMOTIONS if k in chunk.options}
        if not given:
            return None
        if self.bundle.emo_matrix is None:
            raise ValueError(f"IndexTTS 2: emotion weights need feat1.pt and feat2.pt in {self.bundle.folder}")
        vec = [given.get(k, 0.0) for k in EMOTIONS]
        if any(not math.isfinite(v) or v < 0 for v in vec):
            raise ValueError(f"IndexTTS 2: emotion weights must be finite and >= 0, got {given}")
        scale = float(self.option(chunk, "emotion_alpha"))
        if scale != 1.0:
            vec = [int(x * scale * 10000) / 10000 for x in vec]
        return torch.tensor(vec)

    def mix_emotion(self, emovec: Tensor, style: Tensor, weights: Tensor) -> Tensor:
        """emovec_mat + (1 - sum(w)) emovec, the matrix rows picked by cosine similarity to the style."""
        b = self.bundle
        rows = []
        for emo, spk in zip(b.emo_matrix, b.spk_matrix):
            index = torch.argmax(F.cosine_similarity(style.float(), spk.float(), dim=1))
            rows.append(emo[index].unsqueeze(0))
        mat = torch.sum(weights.unsqueeze(1) * torch.cat(rows, 0), 0).unsqueeze(0)
        return mat + (1 - torch.sum(weights)) * emovec

    def sampling(self, chunk: Chunk) -> Sampling:
        names = ("num_beams", "temperature", "top_p", "top_k", "repetition_penalty", "max_mel_tokens")
        return Sampling(**{name: self.option(chunk, name) for name in names})    # checked: options

    def codes(self, ctx: RequestContext, cond: dict[str, Tensor], text: Tensor, s: Sampling,
              progress: Any) -> tuple[list[int], Tensor]:
        gpt = self.bundle.gpt
        kind = self.kv_cache(ctx)

        def step(done: int, total: int) -> None:
            ctx.check_cancelled()
            if progress is not None:
                progress(done, total)

        def run() -> tuple[list[int], Tensor]:
            with torch.inference_mode():
                dev, dtype = self.gpt.device, gpt.mel_head.weight.dtype
                conds = gpt.conditioning(cond["latents"].to(dev, dtype), cond["emovec"].to(dev, dtype))
                ids = text.to(dev)
                codes, _ = generate_codes(gpt, gpt.prompt(conds, ids), s, ctx.generator,
                                          cache_kind="static" if kind == "static" else "dynamic",
                                          check=ctx.check_cancelled, progress=step)
                if not codes:
                    return codes, torch.zeros(1, 0, gpt.config.model_dim)
                latent = gpt.latent(conds, ids, torch.tensor(codes, dtype=torch.long, device=dev))
                return codes, latent.float().cpu()

        prompt = cond["latents"].shape[1] + 2 + text.numel() + 2
        expected = frames_estimate(text.numel(), CODES_PER_TEXT_TOKEN, s.max_mel_tokens)
        return ctx.run("gpt", [self.gpt], run, memory=self.gpt_memory(prompt, expected, s.num_beams),
                       generators=(ctx.generator,))

    def mel(self, ctx: RequestContext, cond: dict[str, Tensor], codes: list[int], latent: Tensor,
            chunk: Chunk) -> Tensor:
        b = self.bundle
        steps, rate = self.option(chunk, "diffusion_steps"), self.option(chunk, "cfg_rate")   # checked: options
        ref_frames = cond["ref_mel"].shape[2]
        target = int(len(codes) * CODE_TO_FRAMES)
        noise = torch.randn(1, b.s2mel.config.in_channels, ref_frames + target, generator=ctx.generator)

        def run() -> Tensor:
            with torch.inference_mode():
                dev = self.s2mel.device
                s = b.codec.vq2emb(torch.tensor([codes], device=self.codec.device)).to(dev)
                s = s + b.s2mel.gpt_layer(latent.to(dev))
                lr = b.s2mel.length_regulator
                cond_mu = lr(s, (torch.tensor([len(codes)], device=dev) * CODE_TO_FRAMES).long())
                prompt = lr(cond["s_ref"].to(dev), torch.tensor([ref_frames], device=dev))
                mu = torch.cat([prompt, cond_mu], dim=1)
                out = b.s2mel.cfm(mu, cond["ref_mel"].to(dev), cond["style"].to(dev), noise.to(dev), steps=steps,
                                  cfg_rate=rate, callback=lambda *_: ctx.check_cancelled())
                return out[:, :, ref_frames:].float().cpu()

        return ctx.run("s2mel", [self.s2mel, self.codec], run, memory=self.s2mel_memory(ref_frames + target))

    def vocode(self, ctx: RequestContext, mel: Tensor) -> Tensor:
        def run() -> Tensor:
            with torch.inference_mode():
                return self.bundle.bigvgan(mel.to(self.vocoder.device)).float().cpu()[0, 0]

        return ctx.run("vocoder", [self.vocoder], run, memory=self.vocoder_memory(mel.shape[2]))

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream's segments: the whole text tokenized, the pieces cut by split_segments (at most 120
        per segment by default); the model reads each segment's pieces as they are."""
        return [Segment(self.tokenizer.sp.DecodePieces(pieces), tuple(pieces))
                for pieces in split_segments(self.tokenizer.tokenize(text), self.max_segment_tokens)]

    # ---- one chunk -------------------------------------------------------------------------------------------
    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.emotion] if self.emotion else [], [self.w2v, self.codec, self.campplus], [self.gpt], [self.s2mel, self.codec], [self.vocoder]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        if chunk.reference is None:
            raise ValueError("IndexTTS 2 needs reference audio")
        # emotion_text is read by the emotion model with the request's seed: that conditioning is the
        # request's own, the rest depends on the voice alone
        kept = chunk.cache if chunk.options.get("emotion_text") is not None else chunk.prompts
        if "cond" not in kept:
            kept["cond"] = self.conditioning(ctx, chunk.reference, chunk)
        elif chunk.index == 0:      # as if derived again (speaker and emotion reference), as a fresh upstream does
            self.layerdrop_draws(ctx.generator, 2)
        cond = kept["cond"]
        ids = self.tokenizer.ids(chunk.tokens) if chunk.tokens is not None else self.tokenizer.encode(chunk.text)
        if not ids:
            return torch.zeros(0)
        n = self.bundle.gpt.config.number_text_tokens
        if max(ids) > n:
            raise ValueError(f"IndexTTS 2: bpe.model ids exceed the GPT's text vocabulary ({n})")
        codes, latent = self.codes(ctx, cond, torch.tensor(ids, dtype=torch.long), self.sampling(chunk),
                                   chunk.progress)
        if not codes:
            return torch.zeros(0)
        return self.vocode(ctx, self.mel(ctx, cond, codes, latent, chunk))

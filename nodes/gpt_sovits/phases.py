"""GPT-SoVITS (v2, v2Pro, v2ProPlus) on the runtime, as TTS_infer_pack/TTS.py runs it.

    engine = GPTSoVITSEngine(load_gpt_sovits(folder), manager, device="cuda")

Phases per chunk:
- "reference" (oneshot, once per request): chinese-hubert on the reference at 16 kHz plus upstream's
  0.3 x 32000 zero samples -> SoVITS `extract_latent` -> the prompt's semantic tokens; for v2Pro the
  ERes2NetV2 speaker embedding of the reference at 16 kHz; the reference's linear spectrogram (CPU);
- "t2s" (sequence): reference transcript + chunk phones with their BERT features (zeros for English),
  the prompt tokens, then the autoregressive decode (upstream's sampling order, EOS rules, limits);
- "bert" (oneshot, Chinese text only): chinese-roberta's features of the transcript's and the chunk's
  Chinese pieces (English pieces read zeros, as upstream);
- "sovits" (oneshot): style vector from the reference spectrogram (+ speaker embedding), the decoder on
  the new tokens and the chunk's phones (not the transcript's), prior noise x 0.5 from the request's
  generator, speed by interpolating the encoder output; then peak-normalised if above 1 and followed by
  upstream's 0.3 s fragment interval.
The reference is resampled by the pipeline to 32 kHz with torchaudio's sinc (as upstream reads it for the
spectrogram); the 16 kHz copies are made here (soxr HQ from the reference's own rate for HuBERT, as
librosa.load; sinc from 32 kHz for the speaker model, as upstream).

Text (frontend.py): language "en" reads English (english.py); "zh" reads Chinese with English words
(upstream's "all_zh": chinese.py, with G2PW when the model folder has it, else upstream's pypinyin path).
The transcript is read as "zh" when it holds Chinese characters, else as English, so a Chinese voice can
speak English and the other way round (upstream asks for the prompt's language separately).
"""
from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.lm.cache import make_cache, peak_bytes
from ..pack.audio import resample, to_mono
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Segment
from . import chinese, english, frontend
from .g2pw import G2PW, read_polyphonic
from .loader import BERT_DIR, GPTSoVITS
from .sovits import linear_spectrogram
from .speaker import fbank
from .cut import SPLITS, pre_seg_text
from .t2s import HZ, MAX_TOKENS, T2SSampling, generate

SAMPLE_RATE = 32000
CJK = re.compile(r"[\u4e00-\u9fff]")
FRAGMENT_INTERVAL = 0.3
MB = 1 << 20


def hubert_input(ref: Reference) -> Tensor:
    """The reference at 16 kHz as upstream's librosa.load(sr=16000) reads it: soxr HQ from the file's own
    rate (from the 32 kHz copy it would differ by ~5e-3 of full scale for a 44.1 kHz reference)."""
    if ref.source is None:
        return resample(ref.wav.float(), ref.sample_rate, 16000, "soxr_hq")
    channels, rate = ref.source
    return resample(to_mono(channels), rate, 16000, "soxr_hq")           # librosa's to_mono: the mean


class GPTSoVITSEngine(Engine):
    engine_id = "gpt_sovits"
    capabilities = Capabilities(
        sample_rate=SAMPLE_RATE, languages=("en", "zh"), cloning="required", transcript="required",
        speed=(0.6, 1.65),                  # upstream's WebUI slider
        reference_seconds=(3.0, 10.0),   # upstream refuses references outside 3-10 s
        reference_rate=SAMPLE_RATE, resampler="torchaudio_sinc")
    PHASED = True
    # TTS.run seeds once (set_seed) and every segment's sampling and prior noise continue that stream, in
    # split_bucket's order (segment_order)
    ONE_STREAM = True
    # upstream's defaults (T2SSampling); ranges a little past its web UI's sliders (top_k 1-100, top_p and
    # temperature 0-1, repetition_penalty 0-2): top_k past the vocabulary filters nothing, costs nothing
    options = {"top_k": Option(int, T2SSampling.top_k, 1, 1 << 20),
               "top_p": Option(float, T2SSampling.top_p, 0.0, 1.0, low_open=True),
               "temperature": Option(float, T2SSampling.temperature, 0.0, 2.0, low_open=True),
               "repetition_penalty": Option(float, T2SSampling.repetition_penalty, 0.0, 10.0, low_open=True)}

    def __init__(self, bundle: GPTSoVITS, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None, lexicon: dict | None = None) -> None:
        self.bundle = bundle
        self.lexicon = lexicon
        self.g2pw: G2PW | None = None               # read on the first Chinese text
        self.polyphonic: dict[str, list[str]] | None = None
        unit = {"min_unit_bytes": min_unit_bytes}
        self.t2s = ModelHandle(bundle.t2s, name="t2s", kind="sequence", **unit)
        self.sovits = ModelHandle(bundle.sovits, name="sovits", kind="oneshot", **unit)
        self.sovits.mark(bundle.sovits.quantizer, "fixed")     # extract_latent reads the codebook in `encode`
        self.hubert = ModelHandle(bundle.hubert, name="hubert", kind="oneshot", **unit)
        handles = [self.t2s, self.sovits, self.hubert]
        self.speaker = None
        if bundle.speaker is not None:
            self.speaker = ModelHandle(bundle.speaker, name="speaker", kind="oneshot", **unit)
            handles.append(self.speaker)
        self.bert = None
        if bundle.bert is not None:
            self.bert = ModelHandle(bundle.bert, name="bert", kind="oneshot", **unit)
            handles.append(self.bert)
        super().__init__(manager, handles, device, name)

    # ---- estimates (from the request) ---------------------------------------------------------------------
    def size(self) -> int:
        return torch.empty((), dtype=self.bundle.dtype).element_size()

    def reference_memory(self, samples16k: int) -> int:
        """HuBERT over the reference (the conv stack's first maps at 16 kHz / 5, the transformer's widest
        activations, the attention scores), the speaker model's feature maps (channels x 80 bins x frames),
        the prompt's projection and quantizer distances."""
        size = self.size()
        h = self.bundle.hubert.config
        frames = self.bundle.hubert.frames(samples16k)
        conv = samples16k // 5 * max(h.conv_dim) * size * 3
        body = frames * (6 * h.hidden_size + 2 * h.intermediate_size) * size
        scores = h.num_attention_heads * frames * frames * size * 2
        latent = frames * (2 * 768 + 2 * 1024) * size
        sv = 0
        if self.bundle.speaker is not None:
            m = self.bundle.speaker.conv1.out_channels
            sv = (samples16k // 160 + 1) * 80 * m * size * 12
        return conv + body + scores + latent + sv + MB

    def t2s_memory(self, text_ids: int, prompt: int, tokens: int) -> int:
        c = self.bundle.t2s.cfg
        size = self.size()
        positions = text_ids + prompt + tokens
        cache = peak_bytes(2 * c.hidden_dim * size, c.layers, positions)
        prefill = (text_ids + prompt) * (8 * c.hidden_dim * size) + c.heads * (text_ids + prompt) ** 2 * 4
        return cache + prefill + 1024 * c.hidden_dim * 4 + MB

    def sovits_memory(self, tokens: int, phones: int, spec_frames: int, speed: float) -> int:
        s = self.bundle.sovits.cfg
        size = self.size()
        frames = int(2 * tokens / speed) + 2
        enc = frames * (s.hidden_channels * 8 + 512 * 6 + s.filter_channels * 2) * size
        attn = (s.n_heads * frames * frames + 4 * frames * phones) * size * 3
        style = spec_frames * (s.spec_channels + 128 * 6) * 4
        samples = frames * s.samples_per_token // 2
        dec = samples * (s.upsample_initial_channel // 2 ** len(s.upsample_rates)) * 2 * 6 * size
        up = 0
        length = frames
        for i, rate in enumerate(s.upsample_rates):
            length *= rate
            up = max(up, length * (s.upsample_initial_channel // 2 ** (i + 1)) * 5 * size)
        flow = frames * s.hidden_channels * 12 * size
        return enc + attn + style + dec + up + flow + samples * 4 * 2 + MB

    def bert_memory(self, tokens: int) -> int:
        c = self.bundle.bert.cfg
        return (tokens * (6 * c.hidden_size + 2 * c.intermediate_size) + 3 * c.num_attention_heads * tokens * tokens) \
            * self.size() + MB

    # ---- text ---------------------------------------------------------------------------------------------
    def lexicon_for(self) -> dict:
        if self.lexicon is None:
            self.lexicon = english.read_lexicon(self.bundle.text_dir)
        return self.lexicon

    def g2pw_for(self) -> tuple[G2PW | None, dict[str, list[str]] | None]:
        """G2PW and upstream's polyphone table when the model folder has G2PWModel/ (else upstream's pypinyin
        path: both None), read on the first Chinese text."""
        if self.bundle.g2pw_dir is not None and self.g2pw is None:
            self.polyphonic = read_polyphonic(self.bundle.text_dir)
            self.g2pw = G2PW.from_folder(self.bundle.g2pw_dir, self.bundle.tokenizer)
        return self.g2pw, self.polyphonic

    def segments(self, text: str, language: str, what: str) -> list[frontend.Segment]:
        if language not in ("en", "zh"):
            raise ValueError(f"GPT-SoVITS: language {language!r}: this engine reads en and zh")
        if language == "zh" and self.bundle.bert is None:
            raise ValueError(f"GPT-SoVITS: {what} is Chinese, which needs {BERT_DIR}/ (its BERT features) in "
                             f"pretrained_models/ beside the voice folder (or inside it); none was found")
        lexicon = self.lexicon_for() if language == "en" or re.search("[A-Za-z]", text) else None
        g2pw, polyphonic = self.g2pw_for() if language == "zh" else (None, None)
        return frontend.phones_and_bert_inputs(text, language, lexicon, g2pw, polyphonic)

    @staticmethod
    def readable(segments: list[frontend.Segment]) -> bool:
        """Anything but pauses: upstream's pre_seg_text skips pieces without word characters."""
        pauses = {english.symbols()[p] for p in (*chinese.PUNCTUATION, "UNK")}
        return any(i not in pauses for s in segments for i in s.phone_ids)

    @staticmethod
    def nothing_to_read(what: str, text: str, language: str) -> ValueError:
        return ValueError(f"GPT-SoVITS: {what} {text!r} has nothing to read as {language} (only punctuation or "
                          f"characters the {language} front end drops)")

    def features(self, ctx: RequestContext, segments: list[frontend.Segment]) -> Tensor:
        """[1024, phones]: BERT features of the Chinese pieces (phase "bert"), zeros for English ones."""
        chinese = [len(s.norm_text) + 2 for s in segments if s.language == "zh" and s.phone_ids]
        if not chinese:
            return frontend.bert_features(segments, None, None)
        limit = self.bundle.bert.cfg.max_position_embeddings
        if max(chinese) > limit:
            raise ValueError(f"GPT-SoVITS: a Chinese piece of {max(chinese) - 2} characters after normalisation; "
                             f"its BERT reads at most {limit - 2} at once (shorten the sentence)")

        def run() -> Tensor:
            with torch.inference_mode():
                return frontend.bert_features(segments, self.bundle.tokenizer,
                                              lambda ids: self.bundle.bert(ids.to(self.bert.device)))

        return ctx.run("bert", [self.bert], run, memory=self.bert_memory(max(chinese)))

    # ---- the phases ---------------------------------------------------------------------------------------
    def prompt(self, ctx: RequestContext, chunk: Chunk) -> dict[str, Any]:
        cached = chunk.prompts.get("gpt_sovits_prompt")
        if cached is not None:
            return cached
        ref = chunk.reference
        if ref is None or not chunk.reference_text or not chunk.reference_text.strip():
            raise ValueError("GPT-SoVITS clones a voice: give reference audio and its transcript")
        if ref.sample_rate != SAMPLE_RATE:
            raise ValueError(f"reference: {ref.sample_rate} Hz; the engine expects {SAMPLE_RATE} Hz (the pipeline resamples)")
        wav32 = ref.wav.float()[None]
        peak = wav32.abs().max()
        if peak > 1:
            wav32 = wav32 / min(2, float(peak))
        spec = linear_spectrogram(wav32, 2048, 640, 2048)
        hub16 = hubert_input(ref)
        if not 48000 <= hub16.numel() <= 160000:
            raise ValueError("reference audio: GPT-SoVITS needs 3 to 10 seconds")
        hub16 = torch.cat([hub16, torch.zeros(int(SAMPLE_RATE * 0.3))])
        sv16 = resample(wav32[0], SAMPLE_RATE, 16000, "torchaudio_sinc") if self.speaker is not None else None
        handles = [self.hubert, self.sovits] + ([self.speaker] if self.speaker is not None else [])

        def run() -> tuple[Tensor, Tensor | None]:
            with torch.inference_mode():
                dev, dt = self.hubert.device, self.bundle.dtype
                feats = self.bundle.hubert(hub16[None].to(dev, dt))[-1]
                tokens = self.bundle.sovits.extract_latent(feats.transpose(1, 2))[0].cpu()
                emb = None
                if sv16 is not None:
                    emb = self.bundle.speaker(fbank(sv16)[None].to(self.speaker.device, dt)).float().cpu()
                return tokens, emb

        tokens, emb = ctx.run("reference", handles, run, memory=self.reference_memory(hub16.numel()))
        text = chunk.reference_text.strip("\n")
        language = "zh" if CJK.search(text) else "en"
        if text[-1] not in SPLITS:
            text += "." if language == "en" else "。"
        segments = self.segments(text, language, "the reference transcript")
        if not self.readable(segments):
            raise self.nothing_to_read("the reference transcript", text, language)
        prompt = {"tokens": tokens, "sv": emb, "spec": spec, "ids": [i for s in segments for i in s.phone_ids],
                  "bert": self.features(ctx, segments)}
        chunk.prompts["gpt_sovits_prompt"] = prompt
        return prompt

    def sampling(self, chunk: Chunk) -> T2SSampling:
        return T2SSampling(**{name: self.option(chunk, name) for name in self.options})   # checked: options

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream's segments: TextPreprocessor.preprocess's (a run of the marks !?…,.- kept as its first)
        then pre_seg_text with api_v2's default method, cut5 (its empty segments dropped: upstream's
        preprocess skips a segment with no normalised text)."""
        text = chinese.replace_consecutive_punctuation(text)          # TextPreprocessor.preprocess first
        segments = [s for s in pre_seg_text(text, language) if s]
        if not segments:                            # upstream's filter_text raises too
            raise GPTSoVITSEngine.nothing_to_read("the text", text, language)
        return segments

    def text_segments(self, text: str, language: str, cache: dict[str, Any]) -> list[frontend.Segment]:
        """`segments` of one split_text segment, read once per request (segment_order reads them first)."""
        key = f"gpt_sovits_text:{language}:{text}"
        if key not in cache:
            cache[key] = self.segments(text, language, "the text")
        return cache[key]

    def segment_order(self, texts: list[str], language: str, speed: float, cache: dict[str, Any]) -> list[int]:
        """TTS.run's split_bucket (on by default, off when speed_factor != 1): the segments sorted by the
        length of their normalised text (a stable sort) and run in that order, one batch each at api_v2's
        default batch_size 1; the audio is put back in the text's order."""
        if speed != 1.0:
            return list(range(len(texts)))
        lengths = [len("".join(s.norm_text for s in self.text_segments(t, language, cache))) for t in texts]
        return sorted(range(len(texts)), key=lambda i: lengths[i])

    def chunk_text(self, chunk: Chunk) -> str:
        """A split_text segment as it is; other text (speak_chunk called directly) as pre_seg_text ends
        one segment: a leading stop for a short first sentence, a final stop."""
        if chunk.segmented:
            return chunk.text
        text = chunk.text.strip("\n")
        first = re.split("[" + "".join(re.escape(c) for c in SPLITS) + "]", text)[0].strip()
        stop = "." if chunk.language == "en" else "。"
        if chunk.index == 0 and text[0] not in SPLITS and len(first) < 4:
            text = stop + text
        if text[-1] not in SPLITS:
            text += stop
        return text

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[h for h in (self.hubert, self.sovits, self.speaker) if h is not None], [self.bert] if self.bert else [], [self.t2s], [self.sovits]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        p = self.prompt(ctx, chunk)
        segments = self.text_segments(self.chunk_text(chunk), chunk.language, chunk.cache)
        if not self.readable(segments):
            if chunk.count == 1:
                raise self.nothing_to_read("the text", chunk.text, chunk.language)
            return torch.zeros(0)                   # a chunk of only symbols among others: skipped, as upstream
        ids = [i for s in segments for i in s.phone_ids]
        all_ids = torch.tensor([p["ids"] + ids], dtype=torch.long)
        bert = torch.cat([p["bert"], self.features(ctx, segments)], dim=1)[None]
        prompt = p["tokens"][None]
        s = self.sampling(chunk)
        c = self.bundle.t2s.cfg
        expected = min(MAX_TOKENS, HZ * c.max_sec, max(16, 4 * len(ids)))
        # Upstream reads the reference with transformers' HubertModel (it pins transformers < 5), whose encoder
        # draws LayerDrop's torch.rand([]) for every layer even in eval, after set_seed and before any
        # segment. Drawn once per request whether or not the voice prompt came from the cache (a cached
        # prompt gives the audio of a fresh one): upstream's first request with a reference; its later ones
        # in the same process skip chinese-hubert and these draws.
        hubert_draws = 0 if chunk.cache.get("gpt_sovits_hubert_drawn") else \
            self.bundle.hubert.config.num_hidden_layers

        def decode() -> Tensor:
            with torch.inference_mode():
                for _ in range(hubert_draws):       # inside the retried call: its generator state is restored
                    torch.rand((), generator=ctx.generator)
                dev, dt = self.t2s.device, self.bundle.dtype
                return generate(self.bundle.t2s, all_ids.to(dev), bert.to(dev, dt), prompt.to(dev), s, ctx.generator,
                                make_cache(), check=ctx.check_cancelled, progress=chunk.progress)

        tokens = ctx.run("t2s", [self.t2s], decode,
                         memory=self.t2s_memory(all_ids.shape[1], prompt.shape[1], expected))
        chunk.cache["gpt_sovits_hubert_drawn"] = True
        if tokens.numel() == 0:
            tokens = torch.zeros(1, dtype=torch.long)         # upstream's "bad zero prediction" fallback

        phones = torch.tensor([ids], dtype=torch.long)

        def synth() -> Tensor:
            with torch.inference_mode():
                dev, dt = self.sovits.device, self.bundle.dtype
                model = self.bundle.sovits
                sv = None if p["sv"] is None else p["sv"].to(dev, dt)
                ge = model.style(p["spec"].to(dev, dt), sv)
                wav = model(tokens[None].to(dev), phones.to(dev), ge, speed=chunk.speed, generator=ctx.generator)
                return wav.float().cpu()[0, 0]

        wav = ctx.run("sovits", [self.sovits], synth,
                      memory=self.sovits_memory(tokens.numel(), len(ids), p["spec"].shape[-1], chunk.speed))
        peak = wav.abs().max()
        if peak > 1:
            wav = wav / peak
        return torch.cat([wav, torch.zeros(int(SAMPLE_RATE * FRAGMENT_INTERVAL))])

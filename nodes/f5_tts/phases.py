"""F5-TTS v1 on the runtime: two components, two phases per chunk.

    engine = F5TTSEngine(load_f5_tts(folder), manager, device="cuda")
    with manager.request(seed=0) as ctx:
        wav = engine.speak_chunk(ctx, Chunk("Hello there.", seed=0, reference=Reference(ref, 24000),
                                            reference_text="Some call me nature."))

Phases:
- "flow" (oneshot): the DiT integrates the ODE, 32 evaluations of the doubled (guided) batch per
  chunk; the modules every step runs are marked hot (placed first, yielded last), the text
  embedding (once per chunk) streams like any unit;
- "vocoder" (oneshot): Vocos turns the new mel frames into 24 kHz audio; with `compute.oom_fallback`,
  after the exact retries, in crossfaded 256-frame tiles (`runtime.fallbacks.tiled_1d`, named in
  `applied.fallbacks`).
Upstream's inference rules (f5_tts.infer.utils_infer): the reference is scaled up to RMS 0.1 when
quieter (and the output scaled back), its transcript gets ". " appended, the frame count is the
reference's plus its frames-per-UTF-8-byte times the new text's bytes over the speed (speed 0.3 for
texts under 10 bytes), the first reference frame count (`samples // hop`) is cut from the output.
Noise comes from the request's generator (seeded with the chunk's seed by the pipeline), so a seed
gives the same audio however much was streamed or retried.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...runtime import ModelHandle, ModelManager, RequestContext
from ...runtime.fallbacks import tiled_1d
from ..pack.audio import resample
from ..pack.engine import Capabilities, Chunk, Engine, Option, Reference
from ..pack.segments import Join, Segment
from .loader import F5Bundle
from .reference import prompt_audio
from .sample import FlowSettings, sample, total_frames
from .text import batch_bytes, chunk_text, reference_prompt

TARGET_RMS = 0.1
SHORT_TEXT_BYTES = 10     # upstream reads texts shorter than this at speed 0.3
SHORT_TEXT_SPEED = 0.3
MB = 1 << 20
VOCODER_TILE, VOCODER_OVERLAP = 256, 32     # the OOM fallback's tiles (ComfyUI's tiled audio VAE decode)


def frames_for(ref_samples: int, ref_text: str, text: str, speed: float, hop: int) -> int:
    """Upstream's duration rule: reference frames + its frames per UTF-8 byte x the text's bytes / speed."""
    ref_frames = ref_samples // hop
    if len(text.encode("utf-8")) < SHORT_TEXT_BYTES:
        speed = SHORT_TEXT_SPEED
    return ref_frames + int(ref_frames / len(ref_text.encode("utf-8")) * len(text.encode("utf-8")) / speed)


class F5TTSEngine(Engine):
    engine_id = "f5_tts"
    capabilities = Capabilities(
        sample_rate=24000, languages=("auto", "en", "zh"), cloning="required", transcript="required",
        speed=(0.3, 2.0),                   # upstream's Gradio slider
        reference_seconds=(0.5, 60.0),      # reference.py keeps ~12 s of speech, as upstream clips
        reference_rate=None)                # read at its own rate, resampled after the loudness rule
    PHASED = True
    # upstream's defaults (FlowSettings); sway_sampling_coef in [-1, 1], the paper's range (past it the
    # time grid leaves [0, 1] and is no longer monotonic)
    options = {"steps": Option(int, FlowSettings.steps, 1, 256),
               "cfg_strength": Option(float, FlowSettings.cfg_strength, 0.0, 20.0),
               "sway_sampling_coef": Option(float, FlowSettings.sway_sampling_coef, -1.0, 1.0),
               "method": Option(str, FlowSettings.method, choices=("euler", "midpoint"))}
    join = Join(crossfade_s=0.15)       # infer_batch_process's cross_fade_duration default
    ONE_STREAM = True                   # F5TTS.infer seeds once; each batch's noise continues the stream

    def split_text(self, text: str, reference: Reference | None = None,
                   reference_text: str | None = None, language: str = "auto",
                   speed: float = 1.0) -> list[str | Segment]:
        """Upstream's batches (infer_process): chunk_text with a byte budget from the prepared reference's
        length (reference.py) and transcript and the speed; without a reference, chunk_text's default
        (135 bytes)."""
        if reference is None or not reference_text:
            return list(chunk_text(text))
        wav, rate = prompt_audio(reference)
        return list(chunk_text(text, batch_bytes(reference_text, wav.shape[-1] / rate, speed)))

    def __init__(self, bundle: F5Bundle, manager: ModelManager, device: torch.device | str = "cpu",
                 name: str | None = None, min_unit_bytes: int | None = None) -> None:
        self.bundle = bundle
        self.dit = ModelHandle(bundle.dit, name="dit", kind="oneshot", min_unit_bytes=min_unit_bytes)
        for module in bundle.dit.step_modules():      # run every ODE step: keep them resident first
            self.dit.mark(module, "hot")
        self.vocoder = ModelHandle(bundle.vocoder, name="vocoder", kind="oneshot", min_unit_bytes=min_unit_bytes)
        super().__init__(manager, [self.dit, self.vocoder], device, name)

    # ---- estimates (from the request) ---------------------------------------------------------------------
    def flow_memory(self, frames: int, cfg: bool = True) -> int:
        """One DiT evaluation on [2, frames] (the guided batch): the residual stream and a block's
        temporaries (q, k, v, attention output, the feed-forward's inner width, adaLN outputs), the
        attention scores where the kernel materialises them, plus the ODE state (x, conditioning,
        text embeddings, noise, velocity) which live for the whole phase."""
        c = self.bundle.config
        size = torch.empty((), dtype=self.bundle.dtype).element_size()
        rows = 2 if cfg else 1
        inner = int(c.dim * c.ff_mult)
        block = rows * frames * (8 * c.dim + 2 * inner + 2 * c.mel_dim * 2 + c.text_dim) * size
        scores = rows * c.heads * frames * frames * 4
        text = 2 * frames * (c.text_dim * 2 * 4 + c.text_dim) * size          # text blocks: 2x inner width
        state = frames * c.mel_dim * size * 12 + 2 * frames * c.text_dim * size
        return block + scores + text + state + MB

    def vocoder_memory(self, frames: int) -> int:
        """Vocos on `frames` frames: the backbone's widest activations, the complex spectrum, the inverse
        FFT frames and the overlap-add buffers, in float32."""
        v = self.bundle.vocoder.config
        bins = v.head_n_fft // 2 + 1
        backbone = frames * (3 * v.dim + 2 * v.intermediate_dim) * 4
        head = frames * ((v.head_n_fft + 2) * 4 + bins * 8 * 3 + v.head_n_fft * 4 * 2)
        wave = (frames + 4) * v.head_hop_length * 4 * 3
        return backbone + head + wave + MB

    # ---- the phases ------------------------------------------------------------------------------------------
    def prompt(self, chunk: Chunk) -> dict[str, Any]:
        """The reference as upstream prepares it (RMS, log-mel on the CPU in float32), once per request."""
        cached = chunk.prompts.get("f5_prompt")
        if cached is not None:
            return cached
        ref = chunk.reference
        if ref is None or not chunk.reference_text or not chunk.reference_text.strip():
            raise ValueError("F5-TTS clones a voice: give reference audio and its transcript")
        # infer_batch_process: the loudness at the reference's own rate, then Resample to 24 kHz
        wav, rate = prompt_audio(ref)
        rms = torch.sqrt(torch.mean(torch.square(wav)))
        if rms < TARGET_RMS:
            wav = wav * TARGET_RMS / rms
        if rate != self.bundle.mel_config.sample_rate:
            wav = resample(wav[0], rate, self.bundle.mel_config.sample_rate, "torchaudio_sinc")[None]
        with torch.inference_mode():
            mel = self.bundle.mel(wav).permute(0, 2, 1)
        prompt = {"wav": wav, "rms": rms, "mel": mel, "text": reference_prompt(chunk.reference_text)}
        chunk.prompts["f5_prompt"] = prompt
        return prompt

    def settings(self, chunk: Chunk) -> FlowSettings:
        return FlowSettings(**{name: self.option(chunk, name) for name in self.options})

    def flow(self, ctx: RequestContext, mel: Tensor, ids: Tensor, duration: int, settings: FlowSettings,
             progress: Callable[[int, int], None] | None = None) -> Tensor:
        """The "flow" phase: reference mel + ids -> the whole mel [1, frames, mel] (float32, CPU)."""
        frames = total_frames(ids.shape[1], mel.shape[1], duration)

        def step(done: int, total: int) -> None:
            ctx.check_cancelled()
            if progress is not None:
                progress(done, total)

        def run() -> Tensor:
            with torch.inference_mode():
                device, dtype = self.dit.device, self.bundle.dtype
                out = sample(self.bundle.dit, mel.to(device, dtype), ids.to(device), duration,
                             generator=ctx.generator, settings=settings, callback=step)
                return out.float().cpu()

        return ctx.run("flow", [self.dit], run, memory=self.flow_memory(frames, settings.cfg_strength >= 1e-5))

    def decode(self, ctx: RequestContext, mel: Tensor) -> Tensor:
        """The "vocoder" phase: mel [1, mel, frames] -> waveform [frames * hop] (float32, CPU). With
        `compute.oom_fallback`, after the exact retries: tiles of VOCODER_TILE frames crossfaded over
        VOCODER_OVERLAP (Vocos is non-causal and stateless, so tiles only differ at their seams)."""
        def run(tiled: bool) -> Tensor:
            with torch.inference_mode():
                x = mel.to(self.vocoder.device)
                vocode = self.bundle.vocoder.decode
                out = tiled_1d(vocode, x, VOCODER_TILE, VOCODER_OVERLAP) if tiled else vocode(x)
                return out.float().cpu()[0]
        frames = mel.shape[-1]
        fallback = (f"vocoder in {VOCODER_TILE}-frame tiles", lambda: run(True),
                    self.vocoder_memory(min(frames, VOCODER_TILE)) + frames * self.bundle.vocoder.hop_length * 4)
        return ctx.run("vocoder", [self.vocoder], lambda: run(False), memory=self.vocoder_memory(frames),
                       fallback=fallback)

    def phase_components(self) -> list[list[ModelHandle]]:
        return [[self.dit], [self.vocoder]]

    def speak_chunk(self, ctx: RequestContext, chunk: Chunk) -> Tensor:
        p = self.prompt(chunk)
        hop = self.bundle.mel_config.hop_length
        ref_samples = p["wav"].shape[-1]
        duration = frames_for(ref_samples, p["text"], chunk.text, chunk.speed, hop)
        ids = torch.tensor([self.bundle.tokenizer.encode(p["text"] + chunk.text)], dtype=torch.long)
        mel = self.flow(ctx, p["mel"], ids, duration, self.settings(chunk), chunk.progress)
        new = mel[:, ref_samples // hop:, :].permute(0, 2, 1)
        wav = self.decode(ctx, new)
        if p["rms"] < TARGET_RMS:
            wav = wav * p["rms"] / TARGET_RMS
        return wav

"""Qwen3-TTS (tiny random checkpoint in the upstream layout) streamed, half-resident and resident on the
strict simulated device gives codes and audio equal to a plain CPU run; the talker's working-memory
estimate covers what it really allocates."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.qwen3_tts.generate import Request, Sampling, build_prompt, generate_codes, speaker_embedding
from mizuoto.nodes.qwen3_tts.loader import load_qwen3_tts
from mizuoto.nodes.qwen3_tts.phases import Qwen3TTSEngine
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from qwen3_tts.tiny import template_ids, write_tiny_checkpoint
from runtime_helpers import residency_capacity

SEED = 11
UNIT = 64 << 10          # tiny layers: every layer of the tiny config is a unit
SAMPLING = dict(max_new_tokens=10, temperature=0.9, top_k=20, top_p=0.9, subtalker_top_k=20)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: one thread is faster


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny-base", "base", seed=3)


def reference_wave() -> tuple[torch.Tensor, int]:
    t = torch.arange(int(16000 * 0.7)) / 16000
    return (0.3 * torch.sin(2 * torch.pi * 220 * t) * torch.sin(2 * torch.pi * 3 * t)), 16000


def tokens():
    return {"text_ids": template_ids(6, 1), "ref_ids": template_ids(4, 2, "ref"), "instruct_ids": None}


@pytest.fixture(scope="module")
def plain(folder):
    """The plain CPU run: the same functions, no runtime."""
    from mizuoto.nodes.pack.audio import resample
    torch.set_num_threads(1)
    b = load_qwen3_tts(folder, dtype=torch.float32)
    wav, sr = reference_wave()
    wav = resample(wav, sr, 24000)
    ids = tokens()
    with torch.inference_mode():
        ref_code = b.codec.encode(wav)
        spk = speaker_embedding(b.model, wav)
        req = Request(ids["text_ids"], "english", spk_embedding=spk, ref_code=ref_code, ref_ids=ids["ref_ids"],
                      non_streaming=False)
        s = Sampling.merged(b.generate_defaults, **SAMPLING)
        codes = generate_codes(b.model.talker, build_prompt(b.model, req, "cpu"), s, torch.Generator().manual_seed(SEED))
        full = torch.cat([ref_code, codes])
        audio = b.codec.decode(full)
        audio = audio[int(ref_code.shape[0] / full.shape[0] * audio.shape[0]):]
    return codes, audio


def _engine(folder, capacity=None, mode="normal"):
    devices = DeviceService(simulate={"cpu": capacity or (1 << 30)}, strict=capacity is not None)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    return Qwen3TTSEngine(load_qwen3_tts(folder, dtype=torch.float32), manager, min_unit_bytes=UNIT)


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = _engine(folder)
    working = probe.talker_memory(tokens()["text_ids"].numel() + 8 + 9 + 12, 6, SAMPLING["max_new_tokens"])
    mode, capacity = residency_capacity(probe.talker, residency, working=working)
    if residency != "half":                  # room for the largest component, whichever phase runs
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    engine = _engine(folder, capacity, mode)
    seen = {}
    real_codes = engine.codes

    def codes(ctx, request, sampling, progress=None, stream=None):
        seen["codes"] = real_codes(ctx, request, sampling, progress, stream)
        return seen["codes"]

    engine.codes = codes
    with engine.manager.request(seed=SEED) as ctx:
        audio = engine.speak(ctx, "tiny", language="english", ref_audio=reference_wave(), ref_text="ref",
                             tokens=tokens(), **SAMPLING)
    ref_codes, ref_audio = plain
    assert torch.equal(seen["codes"], ref_codes)
    assert torch.equal(audio, ref_audio)
    assert ctx.meta["applied"]["oom_retries"] == 0
    talker = engine.talker
    if residency == "full":
        assert ctx.meta["memory"]["streamed_mb"] == 0 and talker.hook_count == 0
    else:
        assert ctx.meta["memory"]["streamed_mb"] > 0
        assert talker.streamed_bytes > 0


def test_fixed_part_and_units(folder):
    engine = _engine(folder)
    talker = engine.talker.layout
    model = engine.bundle.model.talker
    fixed = {id(t) for t in talker.fixed}
    assert id(model.model.codec_embedding.weight) in fixed
    assert all(id(e.weight) in fixed for e in model.code_predictor.model.codec_embedding)
    unit_params = {id(p) for u in talker.units for p in u.params}
    assert id(model.model.text_embedding.weight) not in fixed | unit_params      # pinned to the CPU
    names = {u.name for u in talker.units}
    assert {f"model.layers.{i}" for i in range(len(model.model.layers))} <= names
    assert {f"code_predictor.model.layers.{i}" for i in range(len(model.code_predictor.model.layers))} <= names
    assert "codec_head" in names          # the tiny predictor heads (< 64 KB) stay in the fixed part
    decoder = engine.decoder.layout
    fixed = {id(t) for t in decoder.fixed}
    snakes = [m for m in engine.bundle.codec.decoder.modules() if type(m).__name__ == "SnakeBeta"]
    assert snakes and all(id(m.alpha) in fixed and id(m.beta) in fixed for m in snakes)
    books = [m for m in engine.bundle.codec.decoder.modules() if type(m).__name__ == "Codebook"]
    assert books and all(id(m.embedding_sum) in fixed for m in books)
    assert engine.talker.kind == "sequence"


@pytest.mark.parametrize("text_tokens", [4, 16, 48])
def test_talker_estimate_covers_measured_working_memory(folder, text_tokens):
    engine = _engine(folder, 1 << 30)
    devices = engine.manager.devices
    ids = {"text_ids": template_ids(text_tokens, 5), "instruct_ids": None, "ref_ids": None}
    request = Request(ids["text_ids"], "english", spk_embedding=torch.randn(128), non_streaming=True)
    s = Sampling.merged(engine.bundle.generate_defaults, max_new_tokens=3 * text_tokens, do_sample=True)
    prompt_tokens = ids["text_ids"].numel() + 8
    estimate = engine.talker_memory(prompt_tokens, text_tokens - 0, s.max_new_tokens)
    with engine.manager.request(seed=1) as ctx, ctx.use([engine.talker], estimate), devices.tracking("cpu") as tr:
        with torch.inference_mode():
            codes = generate_codes(engine.bundle.model.talker, build_prompt(engine.bundle.model, request, "cpu"), s,
                                   ctx.generator)
    measured = tr.peak_bytes
    print(f"text tokens {text_tokens}: frames {codes.shape[0]}, estimate {estimate / 2**20:.2f} MiB, "
          f"measured {measured / 2**20:.2f} MiB")
    assert measured <= estimate
    assert estimate - (1 << 20) <= 4 * measured      # and not a worst case: within 4x plus the 1 MiB floor


def test_codec_decoder_oom_fallback_on_the_strict_device(folder):
    """A device too small for the exact decode (300-frame chunks) but big enough for 50-frame ones:
    without `compute.oom_fallback` a clear OOM after the exact retries; with it, upstream's left-context
    chunking at 50 frames, named in `applied`, bit-identical to that decode run plainly, close to the exact one."""
    frames, chunk = 160, 50                  # four fallback chunks: seams at 50, 100, 150
    codes = torch.randint(0, 64, (frames, 16), generator=torch.Generator().manual_seed(0))
    plain = load_qwen3_tts(folder, dtype=torch.float32).codec
    with torch.inference_mode():
        exact, chunked = plain.decode(codes), plain.decode(codes, chunk)

    probe = _engine(folder, 1 << 30)
    peaks = {}
    for n in (300, chunk):
        with probe.manager.request() as ctx, ctx.use([probe.decoder]), probe.manager.devices.tracking("cpu") as tr:
            with torch.inference_mode():
                probe.bundle.codec.decode(codes, n)
        peaks[n] = tr.peak_bytes
    assert peaks[chunk] < peaks[300]
    capacity = probe.decoder.size_bytes + (peaks[chunk] + peaks[300]) // 2

    engine = _engine(folder, capacity)
    with pytest.raises(torch.OutOfMemoryError, match="codec decoder: out of memory after 2 retries"):
        with engine.manager.request(seed=0) as ctx:
            engine.decode(ctx, codes)
    assert ctx.meta["applied"]["fallbacks"] == [] and ctx.meta["applied"]["oom_retries"] == 2

    with engine.manager.request(seed=0, settings={"compute.oom_fallback": True}) as ctx:
        audio = engine.decode(ctx, codes)
    assert ctx.meta["applied"]["fallbacks"] == ["codec decoder in 50-frame chunks"]
    assert ctx.meta["applied"]["oom_retries"] == 2
    assert audio.shape == exact.shape == (frames * 1920,)
    assert torch.equal(audio, chunked)                 # the runtime changes nothing but the chunking
    assert not torch.equal(audio, exact)               # the seams see 25 frames of context, not all
    assert (audio - exact).abs().max() < 1e-3 * exact.abs().max()
    assert engine.decoder.in_use == 0
    with engine.manager.request(seed=0, settings={"compute.oom_fallback": True}) as ctx:   # what fits stays exact
        short = engine.decode(ctx, codes[:40])
    assert ctx.meta["applied"] == {"oom_retries": 0, "fallbacks": []}
    with torch.inference_mode():
        assert torch.equal(short, plain.decode(codes[:40]))



@pytest.fixture(scope="module")
def clone_folder(tmp_path_factory):
    """The Base checkpoint with a tokenizer and a budget of 10 frames: a voice clone through the pipeline."""
    import json
    from qwen3_tts.tiny import GENERATION, write_tokenizer
    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny-base", "base", seed=3)
    write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({**GENERATION, "max_new_tokens": 10}))
    return folder


def _clone(folder, transcript: str | None, capacity: int | None = None, mode: str = "normal"):
    from mizuoto.nodes.pack.pipeline import SpeakRequest
    wav, rate = reference_wave()
    req = SpeakRequest("Hello there, fox.", seed=SEED, language="en", reference={"waveform": wav[None, None],
                       "sample_rate": rate}, reference_text=transcript)
    devices = DeviceService(simulate={"cpu": capacity}, strict=True) if capacity else DeviceService()
    engine = Qwen3TTSEngine(load_qwen3_tts(folder, dtype=torch.float32),
                            ModelManager(devices, VramPolicy({"compute.vram_mode": mode})),
                            min_unit_bytes=UNIT, decode_chunk=3)
    return engine, req


def _pieces(engine, req, **kw):
    """The request's audio, its pieces and, per piece, whether the talker was still generating."""
    from mizuoto.nodes.pack.pipeline import synthesize
    got, talking = [], []
    audio, meta = synthesize(engine, req, on_audio=lambda piece, r: (got.append(piece),
                                                                     talking.append(engine.talker.in_use > 0)), **kw)
    return audio, meta, got, talking


def test_audio_is_handed_over_while_the_talker_generates(clone_folder):
    """With 3-frame decode chunks a 10-frame x-vector clone decodes each chunk beside the talker as soon
    as its codes exist and hands it over then: its three pieces before the talker is done; they join torch.equal to the plain run (the decoder placed after the talker)."""
    from mizuoto.nodes.pack.pipeline import synthesize
    engine, req = _clone(clone_folder, None)
    assert engine.capabilities.piece_samples == 3 * 1920
    plain, meta = synthesize(engine, req)
    assert plain.numel() >= 3 * engine.capabilities.piece_samples and meta["chunks"] == 1
    audio, meta, got, talking = _pieces(engine, req)
    assert torch.equal(audio, plain) and torch.equal(torch.cat(got), plain)
    assert plain.numel() == 9 * 1920 and talking == [True, True, True], talking      # frames 3, 6 and 9
    assert meta["memory"]["plan"] == "followed"


def test_a_voice_clone_is_handed_over_once_its_reference_is_cut(clone_folder):
    """A clone with a transcript decodes its 9 reference frames and the first chunks beside the talker;
    where upstream cuts the reference depends on how many frames follow (float arithmetic: its frames,
    or one sample less), so the audio is handed over once the talker is done: pieces torch.equal to
    the plain run (here all of it at once: the talker's last frame completes the last chunk)."""
    from mizuoto.nodes.pack.pipeline import synthesize
    engine, req = _clone(clone_folder, "A reference.")
    plain, _ = synthesize(engine, req)
    beside = []
    hook = engine.bundle.codec.decoder.register_forward_pre_hook(lambda *_: beside.append(engine.talker.in_use > 0))
    audio, meta, got, talking = _pieces(engine, req)
    hook.remove()
    assert torch.equal(audio, plain) and torch.equal(torch.cat(got), plain)
    assert plain.numel() == 9 * 1920 and beside == [True] * 6      # 9 + 9 frames: six chunks beside the talker
    assert got and not any(talking)


# ~10-25 s each (the strict device's accounting is slow on a whole request); by default the
# conformance test runs this phase on the strict device (300-frame chunks) and the decode-level test
# below the OOM retry of emitted chunks
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["normal", "none"])
def test_decoding_beside_the_talker_is_exact_streamed_and_after_an_oom(clone_folder, monkeypatch, mode):
    """On the strict device (resident; "none": every unit of both components streamed) the talker phase
    holding the decoder hands over its chunks while it generates, torch.equal to the plain run; an OOM
    injected in the middle of that phase (after a piece was handed over) is retried exactly: the retry
    hands over nothing twice (the pipeline would refuse other samples) and the pieces still join to
    the plain run."""
    from mizuoto.nodes.pack.pipeline import synthesize
    from mizuoto.nodes.pack.verify import FaultInjector
    monkeypatch.setattr(ModelHandle, "TINY_UNIT_BYTES", 16 << 10)      # the tiny decoder's layers are units
    plain, _ = synthesize(*_clone(clone_folder, None))
    engine, req = _clone(clone_folder, None, capacity=1 << 30, mode=mode)
    memory = engine.manager.devices.memory("cpu")
    with FaultInjector(memory) as faults:
        start = faults.count
        audio, meta, got, talking = _pieces(engine, req)
        streamed = engine.decoder.streamed_bytes > 0 and engine.talker.streamed_bytes > 0
        assert streamed == (mode == "none") and meta["memory"]["plan"] == "followed"
        assert torch.equal(audio, plain) and torch.equal(torch.cat(got), plain) and talking == [True] * 3
        failed = faults.count + faults.points(start, faults.count)["talker"]["middle"]
        faults.fail = {failed}
        when = []
        audio, meta = synthesize(engine, req, on_audio=lambda piece, r: (got.append(piece), when.append(faults.count)))
    assert meta["applied"] == {"oom_retries": 1, "fallbacks": []}
    assert when[0] < failed < when[-1], (when, failed)
    assert torch.equal(audio, plain) and torch.equal(torch.cat(got[3:]), plain)


def test_a_talker_without_room_for_the_decoder_beside_it_runs_alone(clone_folder):
    """If the talker phase with the decoder stays out of memory after its retries, the talker runs
    alone and the chunks decode after it: the same audio, handed over later."""
    from mizuoto.nodes.pack.pipeline import synthesize
    engine, req = _clone(clone_folder, None)
    plain, _ = synthesize(engine, req)

    def short(*_):
        if engine.talker.in_use:
            raise torch.OutOfMemoryError("no room for the decoder beside the talker")
    hook = engine.bundle.codec.decoder.register_forward_pre_hook(short)
    audio, meta, got, talking = _pieces(engine, req)
    hook.remove()
    assert meta["applied"]["oom_retries"] == 2 and meta["memory"]["plan"] == "followed"
    assert torch.equal(audio, plain) and torch.equal(torch.cat(got), plain) and not any(talking)


def test_decode_chunks_are_emitted_exactly_when_streamed_and_after_an_oom(folder, monkeypatch):
    """The "codec decoder" phase with `emit`, past a cut that falls inside a chunk (a voice clone's
    reference): one emission per chunk from the cut on, in order and without gaps, joining torch.equal
    to the plain decode at that chunking; the same on the strict device with every unit streamed, and
    with an OOM injected in the middle of the decode (after a chunk was emitted), whose retry goes on
    from the chunk that failed and emits nothing twice."""
    from mizuoto.nodes.pack.verify import FaultInjector
    frames, chunk, skip = 11, 3, 4 * 1920 + 7          # chunks 0-3 (cut), 3-6 (from the cut), 6-9, 9-11
    codes = torch.randint(0, 64, (frames, 16), generator=torch.Generator().manual_seed(1))
    codec = load_qwen3_tts(folder, dtype=torch.float32).codec
    with torch.inference_mode():
        plain = codec.decode(codes, chunk)
        assert not torch.equal(plain, codec.decode(codes))       # 3-frame chunks are not upstream's 300
    monkeypatch.setattr(ModelHandle, "TINY_UNIT_BYTES", 16 << 10)      # the tiny decoder's layers are units
    devices = DeviceService(simulate={"cpu": 1 << 30}, strict=True)
    engine = Qwen3TTSEngine(load_qwen3_tts(folder, dtype=torch.float32),
                            ModelManager(devices, VramPolicy({"compute.vram_mode": "none"})),
                            min_unit_bytes=UNIT, decode_chunk=chunk)

    def decode(when=lambda: 0):
        emitted = []
        with engine.manager.request(seed=0) as ctx:
            wav = engine.decode(ctx, codes, lambda samples, start: emitted.append((start, samples, when())), skip)
        assert torch.equal(wav, plain)
        assert [s for s, _, _ in emitted] == [0] + [c * 1920 * chunk - skip for c in range(2, 4)]
        assert torch.equal(torch.cat([p for _, p, _ in emitted]), plain[skip:])
        return emitted, ctx.meta

    with FaultInjector(devices.memory("cpu")) as faults:     # counting the allocations of a clean run
        start = faults.count
        _, meta = decode()
        assert meta["memory"]["streamed_mb"] > 0 and meta["applied"]["oom_retries"] == 0
        failed = faults.count + faults.points(start, faults.count)["codec decoder"]["middle"]
        faults.fail = {failed}
        emitted, meta = decode(lambda: faults.count)
    assert meta["applied"] == {"oom_retries": 1, "fallbacks": []}
    assert emitted[0][2] < failed < emitted[-1][2]

"""Every registered engine, through the Speak pipeline, on a tiny model (`tests/<engine>/tiny.py`):

- all units streamed, half-resident and fully resident on the strict simulated device give audio
  `torch.equal` to a plain CPU run (and streaming really happened where it should);
- every phase's working-memory estimate covers what the phase really allocated (nothing calibrated);
- an interrupt in the middle of a chunk leaves the runtime clean (no component in use, no copy left on
  the device) and the next request equals a clean run;
- every declared capability is honoured and every undeclared input is a clear ValueError naming it;
- the engine's phase plan (`phase_components`) names its phases in the order it runs them.

A new engine gets all of this by registering its EngineSpec and writing `conformance_case`.
"""
from __future__ import annotations

import dataclasses
import re
import threading

import pytest
import torch

from mizuoto.nodes.pack.caches import ByteCache
from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.nodes.pack import verify as verify_module
from mizuoto.nodes.pack.verify import FaultInjector
from mizuoto.runtime import Cancelled, DeviceService, ModelHandle, ModelManager, VramPolicy

from conformance import NO_CONFIG, conformance_case

ENGINES = {spec.engine_id: spec for spec in discover()}
MB = 1 << 20

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=sorted(ENGINES))
def engine_case(request, tmp_path_factory):
    spec = ENGINES[request.param]
    case = conformance_case(spec.engine_id, tmp_path_factory.mktemp(spec.engine_id))
    patch = pytest.MonkeyPatch()
    patch.setattr(ModelHandle, "MIN_UNIT_BYTES", case.unit_bytes)
    patch.setattr(ModelHandle, "TINY_UNIT_BYTES", case.unit_bytes // 4)
    torch.set_num_threads(1)
    load = LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu"))
    plain, _ = synthesize(spec.build(load, ModelManager(DeviceService())), case.request)
    probe = spec.build(load, ModelManager(DeviceService(simulate={"cpu": 1 << 34})))
    sizes = [(h.size_bytes, h.min_working_set) for h in probe.handles]
    yield spec, case, load, plain, sizes
    patch.undo()


def build(spec, load, capacity: int, mode: str = "normal"):
    devices = DeviceService(simulate={"cpu": capacity}, strict=True)
    return spec.build(load, ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))), devices


def test_streamed_half_and_resident_equal_the_plain_run_and_estimates_cover_the_peak(engine_case):
    """`verify` (the user's `python -m mizuoto verify`) on the tiny model: resident, half-resident and all
    streamed on the strict device give audio torch.equal to each other, every phase's estimate covers its
    measured working memory; and the resident run equals the plain CPU run (no runtime)."""
    spec, case, load, plain, sizes = engine_case
    seen = {}
    real = verify_module.first_difference

    def keep(a, b):         # the resident run's audio, which the report compares the others with
        seen["resident"] = b
        return real(a, b)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verify_module, "first_difference", keep)
        report = verify_module.verify(spec, load, case.request, oom_points=())
    assert report.ok, report.table()
    assert [r.mode for r in report.runs] == ["resident", "half-resident", "all streamed"]
    assert torch.equal(seen["resident"], plain), f"{spec.engine_id}: resident differs from the plain run"
    resident, half, streamed = report.runs
    assert resident.streamed_mb == 0 and half.streamed_mb > 0 and streamed.streamed_mb > 0
    assert report.phases and all(p["estimate_mb"] >= p["measured_mb"] for p in report.phases.values())
    if load.folder is not None:      # the report names the exact model: every file's size and hash
        assert report.files and all(len(f["sha256"]) == 64 for f in report.files.values())


def test_an_interrupt_mid_chunk_leaves_the_runtime_clean(engine_case):
    spec, case, load, plain, sizes = engine_case
    engine, devices = build(spec, load, 4 * sum(s for s, _ in sizes) + 256 * MB, mode="none")
    cancel = threading.Event()
    # the main model's largest unit: it runs again (streamed) after the cancel, whose next copy sees it
    unit = max(engine.handles[0].layout.units, key=lambda u: u.nbytes)
    hook = unit.module.register_forward_pre_hook(lambda *_: cancel.set())   # cancelled inside a forward
    with pytest.raises(Cancelled):
        synthesize(engine, case.request, cancel=cancel)
    hook.remove()
    assert all(h.in_use == 0 for h in engine.handles)
    assert all(u.depth == 0 for h in engine.handles for u in h.layout.units)
    assert devices.memory("cpu").used == sum(h.loaded_bytes for h in engine.handles), "a streamed copy was left"
    again, _ = synthesize(engine, case.request)
    assert torch.equal(again, plain)


def test_a_voice_prompt_from_the_cache_gives_the_audio_of_a_fresh_one(engine_case):
    """What an engine derives from a voice (`Chunk.prompts`), kept by the pack's prompt cache (a host
    copy) and handed to a later request with another seed, gives audio torch.equal to that
    request run cold, and the engine recomputes nothing of it."""
    spec, case, load, plain, sizes = engine_case
    engine = spec.build(load, ModelManager(DeviceService()))
    caps = engine.capabilities
    req = case.request
    if caps.cloning == "none":
        synthesize(engine, req, prompts=(derived := {}))
        assert derived == {}, "an engine without cloning derived a voice prompt"
        return
    if req.reference is None:
        rate = caps.reference_rate or caps.sample_rate
        seconds = caps.reference_seconds[0]            # tiny models read few positions
        noise = 0.1 * torch.randn(1, 1, int(rate * seconds), generator=torch.Generator().manual_seed(3))
        req = dataclasses.replace(req, reference={"waveform": noise, "sample_rate": rate},
                                  reference_text="A reference." if caps.transcript == "required" else None,
                                  instruction=None)   # a style instruction and a transcript exclude each other in some
    synthesize(engine, req, prompts=(first := {}))
    assert first, f"{spec.engine_id}: nothing derived from the reference reached Chunk.prompts"
    cache = ByteCache(1 << 30)
    assert cache.put("voice", first)
    other = dataclasses.replace(req, seed=req.seed + 7)
    cold, _ = synthesize(engine, other)
    kept = cache.get("voice")
    warm, _ = synthesize(engine, other, prompts=kept)
    assert torch.equal(warm, cold), f"{spec.engine_id}: a cached voice prompt changed the audio"
    assert set(kept) == set(first), f"{spec.engine_id}: the engine derived more than it kept the first time"


def test_the_phase_plan_names_the_phases_in_the_order_they_run(engine_case):
    """A plan the engine does not follow is voided (placement then ignores it): the engine's declared
    phases must match what its requests really place, or its spent components never yield first."""
    spec, case, load, plain, sizes = engine_case
    engine, _ = build(spec, load, 4 * sum(s for s, _ in sizes) + 256 * MB)
    _, meta = synthesize(engine, case.request)
    assert meta["memory"].get("plan") == "followed", f"{spec.engine_id}: phase_components() is not what it runs"


def test_audio_handed_over_as_it_is_made_concatenates_to_the_request_audio(engine_case):
    """`on_audio` pieces, on the strict device with every unit streamed and with an OOM injected at the
    last allocation of the last phase (its retry hands nothing over twice), concatenate to audio
    torch.equal to the plain run; with a text of several segments too, where the engine cuts one."""
    spec, case, load, plain, sizes = engine_case
    engine, devices = build(spec, load, 4 * sum(s for s, _ in sizes) + 256 * MB, mode="none")
    got: list[torch.Tensor] = []
    wav, meta = synthesize(engine, case.request, on_audio=lambda piece, rate: got.append(piece))
    assert torch.equal(wav, plain) and torch.equal(torch.cat(got), plain), f"{spec.engine_id}: pieces differ"
    assert 0 < meta["timing"]["first_audio_s"] <= meta["timing"]["total_s"]
    piece = engine.capabilities.piece_samples
    if piece and meta["chunks"] == 1 and plain.numel() >= 3 * piece:     # it hands over a chunk while making it
        assert len(got) >= 2, f"{spec.engine_id}: declares pieces of {piece} samples but handed over {len(got)}"
    with FaultInjector(devices.memory("cpu")) as faults:
        start = faults.count
        # counted as the run below takes its audio: an engine handing over pieces may run other phases then
        synthesize(engine, case.request, on_audio=lambda piece, rate: None)
        last = list(faults.points(start, faults.count).values())[-1]
        faults.fail = {faults.count + last["last"]}
        got.clear()
        wav, meta = synthesize(engine, case.request, on_audio=lambda piece, rate: got.append(piece))
    assert meta["applied"]["oom_retries"] >= 1 and torch.equal(torch.cat(got), plain)
    longer = dataclasses.replace(case.request, text=f"{case.request.text} {case.request.text}")
    got.clear()
    try:
        wav, meta = synthesize(engine, longer, on_audio=lambda piece, rate: got.append(piece))
    except ValueError:          # a tiny model's context cannot hold twice the text: the single case stands
        return
    assert torch.equal(torch.cat(got), wav), f"{spec.engine_id}: pieces of {meta['chunks']} segments differ"


def undeclared(caps, request: SpeakRequest) -> list[tuple[dict, str]]:
    """Inputs outside the declaration, each with the input name its error must give."""
    reference = {"waveform": 0.1 * torch.randn(1, 1, 24000), "sample_rate": 24000}
    cases = [(dict(speed=caps.speed[1] + 0.5), "speed"), (dict(speed=caps.speed[0] / 2), "speed"),
             (dict(voice="no-such-voice"), "voice"), (dict(text="   "), "text"), (dict(seed=-1), "seed"),
             (dict(language="xx"), "language")]
    cases += [(dict(language=code), "language") for code in ("en", "zh", "ja", "de") if code not in caps.languages][:1]
    if not caps.instruction:
        cases.append((dict(instruction="whisper"), "instruction"))
    if caps.cloning == "none":
        cases.append((dict(reference=reference), "reference_audio"))
    if caps.cloning == "required":
        cases.append((dict(reference=None, reference_text=None), "reference_audio"))
        cases.append((dict(reference={"waveform": torch.full((1, 1, 24000), float("nan")), "sample_rate": 24000}),
                      "reference_audio"))
        cases.append((dict(reference={"waveform": torch.zeros(1, 1, 24000), "sample_rate": 10**9}), "sample_rate"))
    if caps.transcript == "none":
        cases.append((dict(reference_text="hello"), "reference_text"))
    if caps.voice_required:
        cases.append((dict(voice=None), "voice"))
    if not caps.dialogue_speakers:
        cases.append((dict(speakers=((reference, "hello"),)), "speakers"))
    cases.append((dict(options={"no_such_option": 1}), "options"))
    return cases


def test_declared_capabilities_are_honoured_and_the_rest_refused(engine_case):
    spec, case, load, plain, sizes = engine_case
    engine = spec.build(load, ModelManager(DeviceService()))
    caps = engine.capabilities
    assert set(caps.languages) <= set(spec.languages), "the spec must declare every language its models speak"
    for change, name in undeclared(caps, case.request):
        with pytest.raises(ValueError, match=name):
            synthesize(engine, dataclasses.replace(case.request, **change))
    wav, meta = synthesize(engine, case.request)
    assert meta["sample_rate"] == caps.sample_rate and wav.dtype == torch.float32 and wav.numel() > 0
    if caps.speed[0] < 1.0 < caps.speed[1]:
        slow, _ = synthesize(engine, dataclasses.replace(case.request, speed=max(caps.speed[0], 0.5)))
        assert slow.numel() != wav.numel(), "the declared speed range does not change the pace"
    if caps.instruction:
        styled, _ = synthesize(engine, dataclasses.replace(case.request, instruction=case.instruction))
        assert styled.numel() > 0


WIDTH = re.compile(r'^(\s*"?)(hidden_size|dim|hidden_dim|d_model|output_size|llm_input_size)("?\s*:\s*)(\d+)', re.M)


def test_a_config_that_does_not_fit_the_weights_names_the_file_and_field(tmp_path):
    """Every engine: the first width field (hidden_size, dim, ...) of each config file doubled -> the load fails
    with an error naming that file and that field (compared with the checkpoint's header before any weight is
    read), never a bare shape mismatch or an allocation of the wrong size. Edited as text: HyperPyYAML's
    tags do not survive a YAML round trip."""
    from mizuoto.runtime.loading import CheckpointError
    checked = []
    for engine_id, spec in sorted(ENGINES.items()):
        case = conformance_case(engine_id, tmp_path / engine_id)
        if case.folder is None:
            continue
        configs = sorted(p for p in case.folder.rglob("*") if p.name == "config.json" or p.suffix == ".yaml")
        for path in configs:
            text = path.read_text()
            m = WIDTH.search(text)
            if m is None:
                continue
            path.write_text(text[:m.start(4)] + str(2 * int(m[4])) + text[m.end(4):])
            try:
                with pytest.raises(CheckpointError) as e:
                    spec.build(LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu")),
                               ModelManager(DeviceService()))
            finally:
                path.write_text(text)
            assert path.name in str(e.value) and m[2] in str(e.value), \
                f"{engine_id}: {path.relative_to(case.folder)} {m[2]} doubled: {str(e.value)[:300]}"
            checked.append(f"{engine_id}:{path.relative_to(case.folder)}:{m[2]}")
    engines = {c.split(":")[0] for c in checked}
    assert engines == {e for e in ENGINES if e != "hibari" and e not in NO_CONFIG}, checked



def assert_clean(engine, devices, what: str) -> None:
    assert all(h.in_use == 0 for h in engine.handles), f"{what}: a component is still in use"
    assert all(u.depth == 0 for h in engine.handles for u in h.layout.units), f"{what}: a unit is still entered"
    assert devices.memory("cpu").used == sum(h.loaded_bytes for h in engine.handles), f"{what}: a copy was left"


def test_an_oom_in_any_phase_is_retried_exactly_and_a_persistent_one_leaves_the_runtime_clean(engine_case):
    """In vram_mode low (half resident: placed and streamed units both run), one OOM at the first and the
    last allocation of every phase: the exact retry gives audio `torch.equal` to the plain run (phase
    functions are re-runnable, no engine code swallows the OOM). An OOM from a phase's middle on: the
    request fails with the OOM, nothing stays in use or on the device. Afterwards clean requests equal
    the plain run, and within a few of them the weights are as resident as before the OOMs."""
    spec, case, load, plain, sizes = engine_case
    engine, devices = build(spec, load, 4 * sum(s for s, _ in sizes) + 256 * MB, mode="low")
    with FaultInjector(devices.memory("cpu")) as faults:
        check_oom_faults(spec, case, engine, devices, plain, faults)


def check_oom_faults(spec, case, engine, devices, plain, faults) -> None:
    synthesize(engine, case.request)
    loaded = [h.loaded_bytes for h in engine.handles]
    start = faults.count
    synthesize(engine, case.request)
    phases = faults.points(start, faults.count)
    assert phases, f"{spec.engine_id}: no phase allocated on the device"
    for phase, points in phases.items():
        for k in sorted({points["first"], points["last"]}):    # the middle one starts the persistent shortage below
            faults.fail = {faults.count + k}
            out, meta = synthesize(engine, case.request)
            what = f"{spec.engine_id}: an OOM at allocation {k} (phase {phase})"
            assert meta["applied"]["oom_retries"] >= 1, f"{what} was not retried"
            assert torch.equal(out, plain), f"{what}: the retried output differs"
            assert_clean(engine, devices, what)
        faults.from_ = faults.count + points["middle"]
        with pytest.raises(torch.OutOfMemoryError):
            synthesize(engine, case.request)
        faults.from_ = None
        assert_clean(engine, devices, f"{spec.engine_id}: a persistent OOM from phase {phase}")
    for _ in range(6):      # each phase run doubles an OOM's cap: a few clean requests restore residency
        again, meta = synthesize(engine, case.request)
        assert torch.equal(again, plain) and meta["applied"]["oom_retries"] == 0
        if [h.loaded_bytes for h in engine.handles] == loaded:
            break
    assert [h.loaded_bytes for h in engine.handles] == loaded, f"{spec.engine_id}: residency stays lowered after OOMs"
    assert all(engine.manager.calibration.factor(engine.manager.calibration_key(h)) == 1.0 for h in engine.handles), \
        f"{spec.engine_id}: an OOM raised a calibration factor"

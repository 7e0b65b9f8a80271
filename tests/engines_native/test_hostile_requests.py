"""Requests that ask for unbounded work and references that are not speech, for every registered engine
(the tiny models of tests/<engine>/tiny.py, as in test_conformance.py):

- every declared option has a finite range; NaN, infinities, values far past the range and values of
  the wrong kind are ValueErrors naming the option, raised before the engine runs at all;
- a silent or NaN reference is a ValueError naming reference_audio before any work; a reference of
  amplitude 1e30 is scaled to full scale (what the engine sees equals the reference at peak 1.0) and
  gives finite audio;
- a 100 000-character reference_text is refused naming reference_text, a 140 000-character instruction
  naming instruction (every chunk reads them whole);
- after all of it, a clean request equals the first clean run.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import re
import time
from collections.abc import Iterator

import pytest
import torch

from mizuoto.nodes.pack.audio import SILENT_PEAK, check_level
from mizuoto.nodes.pack.engine import Engine, Option
from mizuoto.nodes.pack.pipeline import SpeakRequest, reference_audio, synthesize
from mizuoto.nodes.pack.registry import LoadRequest, discover
from mizuoto.runtime import DeviceService, ModelManager

from conformance import conformance_case

ENGINES = {spec.engine_id: spec for spec in discover()}
HUGE = 1e30

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=sorted(ENGINES))
def engine_case(request, tmp_path_factory):
    """One tiny engine per registered spec, its case, and the audio of its first clean run."""
    spec = ENGINES[request.param]
    case = conformance_case(spec.engine_id, tmp_path_factory.mktemp(spec.engine_id))
    torch.set_num_threads(1)
    engine = spec.build(LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu")),
                        ModelManager(DeviceService()))
    clean, _ = synthesize(engine, case.request)
    return engine, case, clean


class WorkStarted(Exception):
    """Raised by an engine whose work began although its request should have been refused."""


@pytest.fixture
def idle(engine_case, monkeypatch):
    """The engine with `speak_chunk` replaced: a request that reaches it raises WorkStarted, not ValueError."""
    engine, case, _ = engine_case

    def refused_too_late(ctx, chunk):
        raise WorkStarted(f"{engine.engine_id}: the request reached speak_chunk")

    monkeypatch.setattr(engine, "speak_chunk", refused_too_late)
    return engine, case


def engine_classes() -> Iterator[type[Engine]]:
    """Every Engine subclass of the pack's engines (variants such as Fish S2 included)."""
    for spec in ENGINES.values():
        importlib.import_module(f"mizuoto.nodes.{spec.engine_id}.phases")
    todo = list(Engine.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("mizuoto.nodes."):
            yield cls


def bad_values(option: Option) -> list[object]:
    """NaN, infinities, far past either end of the range, and the wrong kind, for one option."""
    if option.kind is bool:
        return [1, "true", float("nan")]
    if option.kind is str:
        return ["no-such-choice" if option.choices else "x" * (option.max_chars + 1), "x" * 100_000, 3]
    if option.kind is dict:
        silent = {"waveform": torch.zeros(1, 1, 16000), "sample_rate": 16000}
        nan = {"waveform": torch.full((1, 1, 16000), float("nan")), "sample_rate": 16000}
        long = {"waveform": 0.1 * torch.ones(1, 1, int(4000 * (option.high + 1))), "sample_rate": 4000}
        return [silent, nan, long, {"waveform": torch.zeros(1, 1, 16000)}, "ref.wav"]
    far = 10 ** 9 + 1000 * (option.high - option.low)
    values: list[object] = [float("nan"), float("inf"), -float("inf"), option.high + far, option.low - far, "1", True]
    if option.kind is int:
        values += [int(option.high + far), int(option.low - far), 2 ** 80, float(option.low)]
    return values


def test_every_option_is_declared_with_a_finite_range_and_a_valid_default():
    count = 0
    for cls in engine_classes():
        for name, option in cls.options.items():
            assert isinstance(option, Option), f"{cls.__name__}.options[{name!r}]: declare an Option, not {option!r}"
            if option.kind in (int, float, dict):
                assert math.isfinite(option.low) and math.isfinite(option.high)
            if option.default is not None and option.kind is not dict:
                assert option.check(name, option.default) == option.default
            count += 1
    assert count >= 50, f"only {count} options declared over the engines"


def test_bad_option_values_are_refused_naming_the_option_before_any_work(idle):
    engine, case = idle
    start = time.monotonic()
    for name, option in engine.options.items():
        for value in bad_values(option):
            request = dataclasses.replace(case.request, options={**case.request.options, name: value})
            with pytest.raises(ValueError, match=re.escape(f"options: {name}")):
                synthesize(engine, request)
    assert time.monotonic() - start < 10, "bad options must be refused at once"
    with pytest.raises(ValueError, match="options"):
        synthesize(engine, dataclasses.replace(case.request, options=["steps", 10 ** 9]))


def test_declared_defaults_are_accepted(idle):
    engine, case = idle
    defaults = {name: o.default for name, o in engine.options.items() if o.default is not None}
    with pytest.raises(WorkStarted):        # accepted: the request reaches the engine
        synthesize(engine, dataclasses.replace(case.request, options=defaults))


def with_reference(engine: Engine, request: SpeakRequest, scale: float | None = None,
                   fill: float | None = None) -> SpeakRequest:
    """`request` with its reference (or a 1 s tone for an engine whose case has none) scaled or filled."""
    ref = request.reference or {"waveform": 0.3 * torch.sin(torch.arange(16000) / 8.0)[None, None],
                                "sample_rate": 16000}
    wav = ref["waveform"]
    wav = wav * scale if scale is not None else torch.full_like(wav, fill)
    change = {"reference": {"waveform": wav, "sample_rate": ref["sample_rate"]}}
    if engine.capabilities.transcript == "required" and not request.reference_text:
        change["reference_text"] = "Some words."
    return dataclasses.replace(request, **change)


def test_a_reference_that_is_not_speech_is_refused_before_any_work(idle):
    engine, case = idle          # an engine that does not clone refuses every reference, naming it too
    for bad in (dict(fill=0.0), dict(scale=SILENT_PEAK / 10), dict(fill=float("nan")), dict(fill=float("inf"))):
        with pytest.raises(ValueError, match="reference_audio"):
            synthesize(engine, with_reference(engine, case.request, **bad))


def test_a_huge_transcript_is_refused_naming_reference_text(idle):
    engine, case = idle
    request = case.request if case.request.reference is not None or engine.capabilities.cloning == "none" \
        else with_reference(engine, case.request, scale=1.0)
    limit = engine.capabilities.max_transcript_chars
    for text in ("x" * 100_000, "word " * (limit // 5 + 1)):
        with pytest.raises(ValueError, match="reference_text"):
            synthesize(engine, dataclasses.replace(request, reference_text=text))


def test_a_huge_instruction_is_refused_naming_instruction(idle):
    engine, case = idle
    with pytest.raises(ValueError, match="instruction"):
        synthesize(engine, dataclasses.replace(case.request, instruction="softly " * 20_000))


def test_a_huge_reference_is_scaled_to_full_scale_and_the_next_clean_run_is_exact(engine_case):
    engine, case, clean = engine_case
    if engine.capabilities.cloning != "none":
        huge = with_reference(engine, case.request, scale=HUGE)
        wav, _ = synthesize(engine, huge)         # unscaled: NaN audio or an IndexError in several engines
        assert wav.numel() > 0 and bool(torch.isfinite(wav).all())
        unit = with_reference(engine, case.request, scale=1.0).reference
        seen = reference_audio(huge.reference, engine.capabilities).wav
        full = {**unit, "waveform": unit["waveform"] / unit["waveform"].abs().max()}
        torch.testing.assert_close(seen, reference_audio(full, engine.capabilities).wav, rtol=1e-6, atol=1e-6)
    again, _ = synthesize(engine, case.request)
    assert torch.equal(again, clean), f"{engine.engine_id}: a clean request after hostile ones differs"


def test_check_level_leaves_ordinary_audio_alone_and_refuses_silence():
    wav = 0.5 * torch.sin(torch.arange(8000) / 5.0)
    assert check_level(wav) is wav                              # within full scale: untouched (parity)
    quiet = wav * (4 * SILENT_PEAK)                              # -74 dBFS: quiet, still a signal
    assert check_level(quiet) is quiet
    loud = check_level(wav * 3e38)                               # near float32's limit: no overflow
    assert float(loud.abs().max()) == 1.0 and bool(torch.isfinite(loud).all())
    for silent in (torch.zeros(8000), wav * SILENT_PEAK):
        with pytest.raises(ValueError, match=r"reference_audio: silent"):
            check_level(silent)

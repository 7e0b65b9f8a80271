"""VibeVoice-Realtime's engine on the runtime (nodes/vibevoice/phases.py), on the tiny model upstream was recorded
on (fixtures/realtime.safetensors, see test_realtime_generate.py for its parity with upstream's generate):

- a SpeakRequest through the Speak pipeline gives the audio of `generate` itself for the same text ids, seed,
  steps and cfg_scale (torch.equal: the same ops; the engine only splits decoding into its own phase), also
  and resident or with every weight streamed on the strict simulated device the same audio as each other;
- decoding the latents afterwards equals decoding them inline;
- a caller taking the audio as it is made (on_audio) gets each frame's samples while the chunk is generated, in
  one "stream" phase, joining to the plain run's audio exactly, also all streamed on the strict simulated
  device and after an injected OOM retry;
- the estimates grow with the request and cover what the phases allocate; the phase plan is the run order;
- bad options and voices are refused by name.
The text tokenizer here is a character-level BPE inside the tiny model's 96 ids (Qwen2.5's parity is
test_realtime_text.py's).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.verify import FaultInjector
from mizuoto.nodes.vibevoice.generate import decode_latents, generate
from mizuoto.nodes.vibevoice.phases import DEFAULT_CFG, DEFAULT_STEPS, VibeVoiceEngine, default_first
from mizuoto.nodes.vibevoice.text import NEGATIVE_TOKEN, TextTokenizer
from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from vibevoice.realtime_tiny import GOLDEN, model_from, preset_from, read

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "Hi there."
CHARS = "abcdefghijklmnopqrstuvwxyzHIT .,!?'\"\n"


def char_tokenizer(path: Path) -> Path:
    """A tokenizer.json whose ids are single characters (BPE without merges), <|image_pad|> included."""
    from tokenizers import Tokenizer, models
    vocab = {"<unk>": 0, NEGATIVE_TOKEN: 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens([NEGATIVE_TOKEN])
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    tensors, meta = read(GOLDEN)
    tok = TextTokenizer(char_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json"))
    return tensors, meta, tok


def engine_on(parts, capacity: int | None = None, mode: str = "normal") -> tuple[VibeVoiceEngine, DeviceService]:
    tensors, meta, tok = parts
    devices = DeviceService(simulate={"cpu": capacity}, strict=True) if capacity else DeviceService()
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    voices = {"en-Alice_woman": preset_from(tensors), "en-Wayne_man": preset_from(tensors)}
    return VibeVoiceEngine(model_from(tensors, meta), voices, tok, manager), devices


def direct(parts, seed: int, steps: int = DEFAULT_STEPS, cfg: float = DEFAULT_CFG) -> torch.Tensor:
    tensors, meta, tok = parts
    ids = torch.tensor(tok.encode(TEXT))
    g = generate(model_from(tensors, meta), preset_from(tensors), ids, cfg_scale=cfg, steps=steps,
                 generator=torch.Generator().manual_seed(seed))
    return g.audio[0]


def test_the_speak_pipeline_gives_generates_audio(parts) -> None:
    engine, _ = engine_on(parts)
    wav, meta = synthesize(engine, SpeakRequest(TEXT, seed=4))
    assert torch.equal(wav, direct(parts, 4))
    wav, _ = synthesize(engine, SpeakRequest(TEXT, seed=4, voice="en-Alice_woman", options={"steps": 2, "cfg_scale": 2.0}))
    assert torch.equal(wav, direct(parts, 4, steps=2, cfg=2.0))


def test_every_weight_streamed_gives_the_same_audio_and_the_estimates_cover_it(parts, monkeypatch) -> None:
    """Resident and all streamed on the strict simulated device (every op under its allocation-tracking dispatch
    mode) give the plain CPU run's audio, torch.equal; each phase's estimate covers what it measured."""
    plain, _ = synthesize(engine_on(parts)[0], SpeakRequest(TEXT, seed=2))
    assert plain.numel() > 12           # this seed speaks several frames before EOS
    monkeypatch.setattr(ModelHandle, "MIN_UNIT_BYTES", 16 << 10)
    monkeypatch.setattr(ModelHandle, "TINY_UNIT_BYTES", 4 << 10)
    total = sum(h.size_bytes for h in engine_on(parts)[0].handles)
    runs = {}
    for mode in ("normal", "none"):
        engine, _ = engine_on(parts, capacity=total + 256 * (1 << 20), mode=mode)
        wav, meta = synthesize(engine, SpeakRequest(TEXT, seed=2))
        runs[mode] = wav
        assert torch.equal(wav, plain), mode
        streamed = [h.streamed_bytes for h in engine.handles]
        assert all(streamed) if mode == "none" else not any(streamed), (mode, streamed)
        phases = meta["memory"]["phases"]
        assert list(phases) == ["generate", "decode"] and meta["memory"]["plan"] == "followed"
        assert all(p["estimate_mb"] >= p["measured_mb"] for p in phases.values()), phases
    assert torch.equal(runs["normal"], runs["none"])


def test_frames_are_handed_over_as_they_are_made_and_join_to_the_plain_run(parts, monkeypatch) -> None:
    """on_audio on the strict simulated device with every weight streamed: one "stream" phase (the plan followed,
    its estimate covering it) hands over each frame's hop_length samples before the chunk returns, joining to the
    plain run's audio torch.equal; an OOM injected in the middle of the phase retries it and hands nothing over
    twice."""
    plain, _ = synthesize(engine_on(parts)[0], SpeakRequest(TEXT, seed=2))
    monkeypatch.setattr(ModelHandle, "MIN_UNIT_BYTES", 16 << 10)
    monkeypatch.setattr(ModelHandle, "TINY_UNIT_BYTES", 4 << 10)
    total = sum(h.size_bytes for h in engine_on(parts)[0].handles)
    engine, devices = engine_on(parts, capacity=total + 256 * (1 << 20), mode="none")
    hop = engine.model.config.acoustic.hop_length
    assert engine.capabilities.piece_samples == hop
    got: list[torch.Tensor] = []
    before_return: list[int] = []
    speak_chunk = engine.speak_chunk

    def counted(ctx, chunk):
        wav = speak_chunk(ctx, chunk)
        before_return.append(len(got))
        return wav
    monkeypatch.setattr(engine, "speak_chunk", counted)
    wav, meta = synthesize(engine, SpeakRequest(TEXT, seed=2), on_audio=lambda piece, rate: got.append(piece))
    assert torch.equal(wav, plain) and torch.equal(torch.cat(got), plain)
    assert before_return == [plain.numel() // hop] and before_return[0] >= 2 and {p.numel() for p in got} == {hop}
    assert all(h.streamed_bytes for h in engine.handles)
    phases = meta["memory"]["phases"]
    assert list(phases) == ["stream"] and meta["memory"]["plan"] == "followed"
    assert phases["stream"]["estimate_mb"] >= phases["stream"]["measured_mb"], phases
    with FaultInjector(devices.memory("cpu")) as faults:
        start = faults.count
        synthesize(engine, SpeakRequest(TEXT, seed=2), on_audio=lambda piece, rate: None)
        middle = faults.points(start, faults.count)["stream"]["middle"]
        faults.fail = {faults.count + middle}
        got.clear()
        wav, meta = synthesize(engine, SpeakRequest(TEXT, seed=2), on_audio=lambda piece, rate: got.append(piece))
    assert meta["applied"]["oom_retries"] == 1 and torch.equal(wav, plain) and torch.equal(torch.cat(got), plain)


def test_decoding_afterwards_equals_decoding_inline(parts) -> None:
    tensors, meta, _ = parts
    model, ids = model_from(tensors, meta), torch.tensor(json.loads(meta["text"]))
    run = dict(cfg_scale=1.5, steps=2)
    inline = generate(model, preset_from(tensors), ids, generator=torch.Generator().manual_seed(0), **run)
    later = generate(model, preset_from(tensors), ids, generator=torch.Generator().manual_seed(0), decode=False, **run)
    assert later.audio is None and torch.equal(later.latents, inline.latents)
    pieces: list[torch.Tensor] = []
    assert torch.equal(decode_latents(model, later.latents, pieces.append), inline.audio)
    assert len(pieces) == inline.frames == later.latents.shape[1]
    with pytest.raises(ValueError, match=r"latents \(1, 0, "):
        decode_latents(model, later.latents[:, :0])


def test_estimates_follow_the_request_and_the_plan_is_the_run_order(parts) -> None:
    engine, _ = engine_on(parts)
    preset = engine.presets["en-Wayne_man"]
    assert engine.generate_memory(preset, 20, 5) > engine.generate_memory(preset, 5, 5)
    assert engine.generate_memory(preset, 5, 20) > engine.generate_memory(preset, 5, 5)
    assert engine.decode_memory(40) > engine.decode_memory(4)
    # the context (64 positions here) bounds the frames planned for
    assert engine.expected_frames(preset, 40) == 64 - preset.tts_lm.length - 40
    assert engine.stream_memory(preset, 5, 5) == engine.generate_memory(preset, 5, 5) + \
        engine.decode_memory(engine.expected_frames(preset, 5))
    # streamed to the caller: one phase holding all three; otherwise generate, then decode (the two tests above
    # check that requests follow it both ways)
    assert engine.phase_components() == [[engine.lm, engine.tts, engine.decoder], [engine.lm, engine.tts],
                                         [engine.decoder]]
    assert engine.tts.layout is not None and [h.kind for h in engine.handles] == ["sequence", "sequence", "oneshot"]


def test_the_default_voice_is_upstreams_and_bad_input_is_named(parts) -> None:
    assert default_first(["en-Carter_man", "en-Wayne_man", "de-Spk0_man"])[0] == "en-Wayne_man"
    assert default_first(["b", "a"]) == ("a", "b")
    engine, _ = engine_on(parts)
    assert engine.capabilities.voices == ("en-Wayne_man", "en-Alice_woman")
    for options, name in (({"steps": 0}, "steps"), ({"cfg_scale": 0}, "cfg_scale"), ({"cfg_scale": "x"}, "cfg_scale")):
        with pytest.raises(ValueError, match=name):
            synthesize(engine, SpeakRequest(TEXT, options=options))
    with pytest.raises(ValueError, match="voice"):
        synthesize(engine, SpeakRequest(TEXT, voice="en-Nobody"))
    with pytest.raises(ValueError, match="voices"):
        VibeVoiceEngine(engine.model, {}, engine.tokenizer, engine.manager)

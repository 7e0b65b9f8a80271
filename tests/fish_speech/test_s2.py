"""Fish Audio S2 (fish-speech's repository head): a config variant of the S1 engine.

Against golden_s2.pt, written by s2_golden.py running the head's own classes on the same tiny checkpoint
(tiny.write_tiny_s2, regenerated here from the same seed): tokenisation (transformers' AutoTokenizer
there, `tokenizers` here), the chat prompts, greedy and sampled codes with and without a reference
(Repetition Aware Sampling firing in one of them), the codec's reference codes and audio in float32:
integers equal, audio within a stated bound (tests/golden.py: a recording travels to other CPUs). Plus the loader's S2 layout (sharded safetensors under S2's names) and its
errors, and the engine speaking through the registry."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from fish_speech import s2_golden
from golden import assert_close
from fish_speech.tiny import write_tiny_s2
from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.fish_speech import ENGINE
from mizuoto.nodes.fish_speech import generate as gen
from mizuoto.nodes.fish_speech.generate import S2Sampling, build_chat_prompt, generate_codes, speaker_turns
from mizuoto.nodes.fish_speech.loader import ModelFolderError, is_model_folder, load_fish_speech
from mizuoto.nodes.fish_speech.phases import FishS2Engine
from mizuoto.nodes.pack.registry import LoadRequest
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")
GOLDEN = torch.load(Path(__file__).parent / "golden_s2.pt", weights_only=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_s2(tmp_path_factory.mktemp("fish_s2") / "tiny_s2", seed=4)


@pytest.fixture(scope="module")
def bundle(folder):
    return load_fish_speech(folder, torch.float32)


@pytest.mark.golden
def test_tokenisation_equals_the_heads(bundle):
    tok = bundle.tokenizer
    assert bundle.is_s2
    assert (tok.semantic_begin_id, tok.semantic_end_id) == tuple(GOLDEN["semantic"])
    assert bundle.im_end_id == GOLDEN["im_end"]
    for text, ids in zip(GOLDEN["texts"], GOLDEN["ids"]):
        assert tok.encode(text) == ids, text


# Codes are integers out of fp32 logits (greedy argmax, or a draw against their cumulative sum), kept exact:
# equal under every kernel perturbation of tests/test_golden_travel.py and on an AMD EPYC, where fp32 outputs
# of the other engines moved by up to 9e-4; a flip would need two logits of a step within ~1e-6 of each other.
@pytest.mark.golden
@pytest.mark.parametrize("name", sorted(s2_golden.CASES))
def test_prompt_and_codes_equal_the_heads(bundle, name):
    text, clone, options, seed = s2_golden.CASES[name]
    case = GOLDEN["cases"][name]
    ref_codes = bundle.codec.encode(s2_golden.reference_wave()) if clone else None
    if clone:
        assert torch.equal(ref_codes, GOLDEN["reference_codes"])
    prompt = build_chat_prompt(bundle.tokenizer, text, 4, s2_golden.REF_TEXT if clone else None, ref_codes)
    assert torch.equal(prompt, case["prompt"])
    if options == {"top_k": 1}:          # upstream's greedy: top-k 1
        s = S2Sampling(do_sample=False, max_new_tokens=s2_golden.MAX_NEW)
    else:
        s = S2Sampling(**options, max_new_tokens=s2_golden.MAX_NEW)
    with torch.inference_mode():
        codes = generate_codes(bundle.model, prompt, s, torch.Generator().manual_seed(seed), bundle.im_end_id)
    assert codes.shape[1] > 0
    assert torch.equal(codes, case["codes"])


def test_repetition_aware_sampling_fired(bundle, monkeypatch):
    """The cold case only matches upstream with RAS: a different fallback draw changes its codes."""
    text, _, options, seed = s2_golden.CASES["clone_cold"]
    prompt = GOLDEN["cases"]["clone_cold"]["prompt"]
    monkeypatch.setattr(gen, "RAS_TOP_P", 1e-6)       # the fallback becomes the top token
    with torch.inference_mode():
        codes = generate_codes(bundle.model, prompt, S2Sampling(**options, max_new_tokens=s2_golden.MAX_NEW),
                               torch.Generator().manual_seed(seed), bundle.im_end_id)
    assert not torch.equal(codes, GOLDEN["cases"]["clone_cold"]["codes"])


@pytest.mark.golden
def test_codec_audio_equals_the_heads(bundle):
    codes = GOLDEN["cases"]["clone_sampled"]["codes"][:, : s2_golden.AUDIO_FRAMES]
    with torch.inference_mode():
        audio = bundle.codec.decode(codes)
    # fp32 against the head's fp32: bit-equal under every perturbation measured here; 1e-5 of the signal's
    # scale leaves other CPUs' reassociation room (fp32 error of a decoder this deep is ~1e-6) while a
    # wrong op or constant moves the audio by >= 1e-4.
    assert_close(audio, GOLDEN["audio"], 1e-5, "codec audio")


def test_speaker_turns_as_upstream_batches_them():
    assert speaker_turns("plain text, no tags") == "plain text, no tags"
    assert speaker_turns("lost <|speaker:0|>Hi.  <|speaker:1|> Yes ") == "<|speaker:0|>Hi.\n<|speaker:1|> Yes"


def test_s2_folder_and_errors_name_the_file(folder, tmp_path):
    assert is_model_folder(folder)
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "tokenizer.json").unlink()
    with pytest.raises(ModelFolderError, match="tokenizer.json"):
        load_fish_speech(broken)
    shutil.copy(folder / "tokenizer.json", broken)
    cfg = json.loads((folder / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "audio_decoder_config"}))
    with pytest.raises(CheckpointError, match=r"config\.json.*audio_decoder_config"):
        load_fish_speech(broken)
    (broken / "config.json").write_text(json.dumps({**cfg, "text_config": {**cfg["text_config"], "n_layer": 3}}))
    with pytest.raises(CheckpointError, match=r"config\.json: text_config\.n_layer = 3 .*model\.safetensors\.index\.json "
                                              r"does not match.*missing keys.*layers\.2"):
        load_fish_speech(broken)
    (broken / "config.json").write_text(json.dumps({**cfg, "text_config": {**cfg["text_config"], "dim": 96}}))
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_fish_speech(broken)
    shutil.copy(folder / "config.json", broken)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["text_model.model.extra.weight"] = "model-00001-of-00002.safetensors"
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="does not hold it"):
        load_fish_speech(broken)


def test_engine_speaks_through_the_registry(folder):
    """The registry builds the S2 engine for an S2 folder; TTS and cloning, a seed repeats the audio."""
    e = ENGINE.build(LoadRequest("s2-pro", folder, torch.float32, torch.device("cpu")),
                     ModelManager(DeviceService()))
    assert isinstance(e, FishS2Engine)
    t = torch.arange(int(44100 * 0.8)) / 44100
    ref = Reference(0.3 * torch.sin(2 * torch.pi * 180 * t), 44100)
    outs = []
    for reference in (None, ref, ref):
        with e.manager.request(seed=3) as ctx:
            ctx.generator.manual_seed(3)
            chunk = Chunk("<|speaker:0|>Hello [whisper] there!", seed=3, options={"max_new_tokens": 6, "top_k": 20},
                          reference=reference, reference_text="Reference words." if reference else None)
            outs.append(e.speak_chunk(ctx, chunk))
    assert all(o.numel() > 0 and torch.isfinite(o).all() for o in outs)
    assert torch.equal(outs[1], outs[2]) and not torch.equal(outs[0], outs[1])
    with pytest.raises(ValueError, match="top_k"):
        with e.manager.request(seed=0) as ctx:
            e.speak_chunk(ctx, Chunk("Hi", seed=0, options={"top_k": 0}))


# ---- the registry-driven conformance checks, on the S2 variant's case ---------------------------------------
@pytest.fixture(scope="module")
def engine_case(tmp_path_factory):
    """test_conformance.py's fixture for the fish_speech engine, with the S2 folder (conformance_case_s2)."""
    from fish_speech.tiny import conformance_case_s2
    from mizuoto.nodes.pack.pipeline import synthesize
    from mizuoto.runtime import ModelHandle
    case = conformance_case_s2(tmp_path_factory.mktemp("fish_s2_conformance"))
    patch = pytest.MonkeyPatch()
    patch.setattr(ModelHandle, "MIN_UNIT_BYTES", case.unit_bytes)
    patch.setattr(ModelHandle, "TINY_UNIT_BYTES", case.unit_bytes // 4)
    torch.set_num_threads(1)
    load = LoadRequest("tiny_s2", case.folder, torch.float32, torch.device("cpu"))
    plain, _ = synthesize(ENGINE.build(load, ModelManager(DeviceService())), case.request)
    probe = ENGINE.build(load, ModelManager(DeviceService(simulate={"cpu": 1 << 34})))
    assert isinstance(probe, FishS2Engine)
    yield ENGINE, case, load, plain, [(h.size_bytes, h.min_working_set) for h in probe.handles]
    patch.undo()


from engines_native.test_conformance import (  # noqa: E402  (run here with the S2 case above)
    test_an_interrupt_mid_chunk_leaves_the_runtime_clean as test_s2_conformance_interrupt,
    test_declared_capabilities_are_honoured_and_the_rest_refused as test_s2_conformance_capabilities,
    test_streamed_half_and_resident_equal_the_plain_run_and_estimates_cover_the_peak as test_s2_conformance_streaming,
)


@pytest.mark.golden
@pytest.mark.parametrize("name", sorted(s2_golden.BATCHED))
def test_more_than_five_speakers_equal_the_heads_batches(folder, bundle, name):
    """Speaker-tagged text of more than 5 turns through the Speak pipeline: one segment per upstream batch, each
    later batch's prompt carrying the earlier batches' text and generated codes as earlier conversation turns,
    every batch drawn on from the one seeded stream; prompts and codes equal the head's, the audio is the
    codec's decode of those codes joined as upstream concatenates them."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    text, clone, options, seed, max_new = s2_golden.BATCHED[name]
    golden = GOLDEN["batched"][name]
    engine = FishS2Engine(bundle, ModelManager(DeviceService()))
    assert engine.split_text(text) == golden["batches"]
    seen = []
    real = engine.codes

    def spy(ctx, prompt, *args, **kw):
        codes = real(ctx, prompt, *args, **kw)
        seen.append((prompt, codes))
        return codes
    engine.codes = spy
    ref = {"waveform": s2_golden.reference_wave()[None, None], "sample_rate": 44100} if clone else None
    wav, meta = synthesize(engine, SpeakRequest(text=text, seed=seed, reference=ref,
                                                reference_text=s2_golden.REF_TEXT if clone else None,
                                                options={**options, "max_new_tokens": max_new}))
    assert meta["chunks"] == len(golden["batches"]) == len(seen)
    for i, ((prompt, codes), up_prompt, up_codes) in enumerate(zip(seen, golden["prompts"], golden["codes"])):
        assert torch.equal(prompt, up_prompt), f"batch {i}: prompt"
        assert torch.equal(codes, up_codes), f"batch {i}: codes"
    with torch.inference_mode():
        expected = torch.cat([bundle.codec.decode(c) for c in golden["codes"]])
    assert torch.equal(wav, expected)


def test_batches_follow_upstreams_grouping():
    from mizuoto.nodes.fish_speech.generate import group_batches, split_turns
    turns = [f"<|speaker:{i % 2}|>t{i}" for i in range(11)]
    assert [b.count("\n") + 1 for b in group_batches(turns)] == [5, 5, 1]
    assert group_batches(["<|speaker:0|>" + "x" * 300, "<|speaker:1|>" + "y" * 300]) == \
        ["<|speaker:0|>" + "x" * 300, "<|speaker:1|>" + "y" * 300]          # past 512 bytes: a new batch
    assert split_turns("no tags") == [] and FishS2Engine.split_text(None, "no tags") == ["no tags"]

"""Fish Speech engine on a tiny random checkpoint in the upstream layout (no fish-speech, no tiktoken):
loading, errors naming the file, tokenizer pieces, speaking with and without a reference, seeds."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from fish_speech.tiny import write_tiny_checkpoint
from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.fish_speech.loader import ModelFolderError, is_model_folder, load_fish_speech
from mizuoto.nodes.fish_speech.phases import FishSpeechEngine
from mizuoto.nodes.fish_speech.tokenizer import pretokenize
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = {"max_new_tokens": 8}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("fish") / "tiny", seed=5)


def engine(folder, dtype=torch.float32):
    return FishSpeechEngine(load_fish_speech(folder, dtype), ModelManager(DeviceService()), min_unit_bytes=16 << 10)


def reference() -> Reference:
    t = torch.arange(int(44100 * 1.2)) / 44100
    return Reference(0.3 * torch.sin(2 * torch.pi * 180 * t) * torch.sin(2 * torch.pi * 2 * t), 44100)


def speak(e, text="(excited) Hello there!", seed=0, **kw):
    with e.manager.request(seed=seed) as ctx:
        ctx.generator.manual_seed(seed)
        return e.speak_chunk(ctx, Chunk(text, seed=seed, options={**FAST, **kw.pop("options", {})}, **kw)), ctx


def test_folder_and_errors_name_the_file(folder, tmp_path):
    assert is_model_folder(folder) and not is_model_folder(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "codec.pth").unlink()
    with pytest.raises(ModelFolderError, match="codec.pth"):
        load_fish_speech(broken)
    shutil.copy(folder / "codec.pth", broken)
    data = (broken / "model.pth").read_bytes()
    (broken / "model.pth").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.pth"):
        load_fish_speech(broken)
    shutil.copy(folder / "model.pth", broken)
    cfg = json.loads((folder / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, "n_layer": 3}))
    with pytest.raises(CheckpointError, match=r"model\.pth does not match.*missing keys.*layers\.2"):
        load_fish_speech(broken)
    (broken / "config.json").write_text(json.dumps({**cfg, "dim": 96}))
    with pytest.raises(CheckpointError, match=r"model\.pth does not match.*shape mismatch"):
        load_fish_speech(broken)
    (broken / "config.json").write_text(json.dumps({**cfg, "model_type": "naive"}))
    with pytest.raises(CheckpointError, match=r"config\.json.*model_type 'naive'"):
        load_fish_speech(broken)
    (broken / "config.json").write_text(json.dumps({**cfg, "n_layers": 2}))
    with pytest.raises(CheckpointError, match=r"config\.json.*unknown fields \['n_layers'\]"):
        load_fish_speech(broken)
    shutil.copy(folder / "config.json", broken)
    state = torch.load(folder / "codec.pth", weights_only=True)
    state["decoder.extra.weight"] = torch.zeros(1)
    torch.save(state, broken / "codec.pth")
    with pytest.raises(CheckpointError, match=r"codec\.pth does not match.*unexpected keys.*decoder\.extra"):
        load_fish_speech(broken)


def test_separate_wq_wk_wv_and_prefixes_load_like_fused(folder, tmp_path):
    alt = tmp_path / "alt"
    shutil.copytree(folder, alt)
    state = torch.load(folder / "model.pth", weights_only=True)
    split = {}
    c = json.loads((folder / "config.json").read_text())
    for k, v in state.items():
        if k.endswith("attention.wqkv.weight") and k.startswith("layers."):
            q = c["n_head"] * c["head_dim"]
            kv = c["n_local_heads"] * c["head_dim"]
            for n, part in zip(("wq", "wk", "wv"), v.split([q, kv, kv])):
                split["model." + k.replace("wqkv", n)] = part
        else:
            split["model." + k] = v
    torch.save({"state_dict": split}, alt / "model.pth")
    a, b = load_fish_speech(folder, torch.float32), load_fish_speech(alt, torch.float32)
    for (n, p), (_, q) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(p, q), n


def test_bf16_lm_float32_codec(folder):
    b = load_fish_speech(folder, torch.bfloat16)
    assert {p.dtype for p in b.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in b.codec.parameters()} == {torch.float32}


def test_pretokenizer_pieces():
    assert pretokenize("Hello, world! It's") == ["Hello", ",", " world", "!", " It", "'s"]
    assert pretokenize("a  b\n\n c") == ["a", "  ", "b", "\n\n", " c"]
    assert pretokenize("x  ?!y") == ["x", "  ?!y"]      # upstream's literal "?!" alternative
    assert "".join(pretokenize("你好，世界 123 $9.99")) == "你好，世界 123 $9.99"


def test_speaks_tts_and_clone_deterministically(folder):
    e = engine(folder)
    a, ctx = speak(e, seed=3)
    assert a.dtype == torch.float32 and a.dim() == 1 and a.numel() % 2048 == 0 and a.numel() > 0
    assert torch.equal(a, speak(e, seed=3)[0])
    assert not torch.equal(a, speak(e, seed=4)[0])
    c, _ = speak(e, seed=3, reference=reference(), reference_text="A reference.")
    assert c.numel() > 0 and not torch.equal(c[: a.numel()], a)
    g, _ = speak(e, seed=3, options={"do_sample": False})
    assert torch.equal(g, speak(e, seed=9, options={"do_sample": False})[0])      # greedy: no seed dependence
    with pytest.raises(ValueError, match="temperature"):
        speak(e, options={"temperature": 0})


def test_fixed_part_and_units(folder):
    e = engine(folder)
    lm = e.lm.layout
    model = e.bundle.model
    fixed = {id(t) for t in lm.fixed}
    assert id(model.embeddings.weight) in fixed                      # the tied head reads it
    assert id(model.codebook_embeddings.weight) in fixed and id(model.fast_embeddings.weight) in fixed
    names = {u.name for u in lm.units}
    assert {f"layers.{i}" for i in range(len(model.layers))} <= names
    assert {f"fast_layers.{i}" for i in range(len(model.fast_layers))} <= names
    codec = e.codec.layout
    fixed = {id(t) for t in codec.fixed}
    books = [m.codebook.weight for m in e.bundle.codec.modules() if type(m).__name__ == "VectorQuantize"]
    assert books and all(id(w) in fixed for w in books)
    assert e.lm.kind == "sequence" and e.codec.kind == "oneshot"


def test_speak_pipeline_chunks_resamples_and_checks(folder):
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    e = engine(folder)
    t = torch.arange(22050) / 22050
    ref = {"waveform": (0.3 * torch.sin(2 * torch.pi * 200 * t))[None, None], "sample_rate": 22050}
    req = SpeakRequest(text="(excited) First sentence here. And a second one!", seed=5, reference=ref,
                       reference_text="Some words.", options={"max_new_tokens": 6})
    wav, meta = synthesize(e, req)
    assert wav.dim() == 1 and wav.numel() > 0 and wav.numel() % 2048 == 0
    assert torch.equal(wav, synthesize(e, req)[0])
    with pytest.raises(ValueError, match="reference_text"):
        synthesize(e, SpeakRequest(text="Hi.", reference=ref))
    with pytest.raises(ValueError, match="options"):
        synthesize(e, SpeakRequest(text="Hi.", options={"top_k": 5}))


def test_a_prompt_past_upstreams_room_for_speech_is_refused_before_generating(tmp_path):
    """generate_long keeps 2048 positions of max_seq_len for the speech and refuses a longer prompt."""
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    e = engine(write_tiny_checkpoint(tmp_path / "short", seed=5, max_seq_len=2048 + 40))
    calls = []
    e.bundle.model.layers[0].register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match=r"the prompt is \d+ tokens, more than this model's max_seq_len - 2048 = 40"):
        synthesize(e, SpeakRequest(text="A sentence long enough to need more than forty prompt tokens of room. " * 2,
                                   options=FAST))
    assert calls == []  # nothing generated
    wav, _ = synthesize(e, SpeakRequest(text="Hi.", options=FAST))
    assert wav.numel() > 0 and calls  # a short prompt generates

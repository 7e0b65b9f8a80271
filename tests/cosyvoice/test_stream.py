"""CosyVoice 2 / 3 with the engine option `upstream_stream` through the Speak pipeline against upstream's
`inference_zero_shot(..., stream=True)` (fixtures/stream_v2.pt, stream_v3.pt, recorded by
make_stream_fixtures.py on the tiny folders of test_pipeline.py, the same reference, transcripts and seeds).

Compared: the segments and prompt text the LM read and each segment's speech tokens (exact), the number of
pieces `on_audio` receives and each one's length (exact: one per upstream hop), and each piece against
upstream's (fp32 against fp32, relative to the piece's max-abs, at AUDIO_BOUND). The fixtures hold
several hops per segment: the first of 25 tokens plus the prompt's padding, then 50, and the hop length
carried over to the second segment (100: its tokens fit no hop, so it is one full-context piece).
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")   # recorded with one intra-op thread

import golden
from mizuoto.nodes.pack.pipeline import SpeakRequest, speak
from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine

from cosyvoice.tiny import FIXTURES, stereo_reference
from cosyvoice.test_pipeline import END_BIAS, load_tiny

STREAM = {2: torch.load(FIXTURES / "stream_v2.pt", weights_only=True),
          3: torch.load(FIXTURES / "stream_v3.pt", weights_only=True)}
PLAIN = {2: torch.load(FIXTURES / "pipeline_v2.pt", weights_only=True),
         3: torch.load(FIXTURES / "pipeline_v3.pt", weights_only=True)}
# Each piece relative to upstream's max-abs. Measured (fp32, one thread) v2 8.6e-5 / 5.4e-5 (zh_date) and
# <= 4.6e-4 (en_numbers, stored in float16), v3 <= 2.7e-4 (zh_date) / <= 4.1e-4 (en_numbers), both float16:
# the non-streamed pipeline's fp32 error (test_pipeline.AUDIO_BOUND, 1e-2, the same reasoning). Streaming
# wrongly (no chunk masks, zeros for the look-ahead, no cross-fade) moves pieces by 2.0 / 6.7e-2 / 1.8 (below).
AUDIO_BOUND = 1e-2
CASES = [(2, "zh_date"), (2, "en_numbers"), (3, "zh_date"), (3, "en_numbers")]


@pytest.fixture(scope="module")
def model_v2(tmp_path_factory):
    yield from load_tiny(tmp_path_factory, 2, end_bias=END_BIAS)


@pytest.fixture(scope="module")
def model_v3(tmp_path_factory):
    yield from load_tiny(tmp_path_factory, 3, real_ids=True)


@pytest.fixture
def models(request):
    """{version: loaded model}, each loaded once per module and only when a test needs it."""
    class Lazy(dict):
        def __missing__(self, version):
            return request.getfixturevalue(f"model_v{version}")
    return Lazy()


def streamed(model, monkeypatch, case: dict, **options) -> tuple[torch.Tensor, list[torch.Tensor], list, list]:
    """speak() with upstream_stream on: (waveform, on_audio pieces, LM texts, speech tokens)."""
    texts, tokens = [], []
    llm_texts, speech_tokens = CosyVoiceEngine.llm_texts, CosyVoiceEngine.speech_tokens

    def record_texts(self, chunk, has_prompt_speech):
        out = llm_texts(self, chunk, has_prompt_speech)
        texts.append(out[:2])
        return out

    def record_tokens(self, *args, **kwargs):
        tokens.append(speech_tokens(self, *args, **kwargs))
        return tokens[-1]

    monkeypatch.setattr(CosyVoiceEngine, "llm_texts", record_texts)
    monkeypatch.setattr(CosyVoiceEngine, "speech_tokens", record_tokens)
    pieces: list[torch.Tensor] = []
    reference = {"waveform": stereo_reference()[None], "sample_rate": 44100}
    wav, meta = speak(model, SpeakRequest(case["text"], seed=case["seed"], reference=reference,
                                          reference_text=case["reference_text"],
                                          options={"upstream_stream": True, **options}),
                      on_audio=lambda piece, rate: pieces.append(piece))
    assert "upstream_stream" in meta["applied"]
    return wav, pieces, texts, tokens


@pytest.mark.golden
@pytest.mark.parametrize("version,name", CASES)
def test_pieces_equal_upstreams_stream_true_pieces(models, monkeypatch, version, name):
    case = STREAM[version][name]
    wav, pieces, texts, tokens = streamed(models[version], monkeypatch, case)
    assert [t for t, _ in texts] == case["segments"]
    assert {p for _, p in texts} == {case["prompt_text"]}
    assert tokens == [t.tolist() for t in case["tokens"]]
    expected = [p.float() for segment in case["pieces"] for p in segment]
    assert [p.numel() for p in pieces] == [p.numel() for p in expected]
    assert len(expected) > len(case["segments"])            # the fixture has hops, not only final pieces
    for k, (got, want) in enumerate(zip(pieces, expected)):
        golden.assert_close(got, want, AUDIO_BOUND, f"v{version} {name} piece {k}")
    assert torch.equal(torch.cat(pieces), wav)


def test_the_fixtures_hold_hops_of_25_then_50_and_the_hop_carried_to_the_next_segment():
    # v2 / v3 zh_date: the reference's 37 prompt tokens pad the first hop to 38 (+3 look-ahead)
    # tokens; the first piece is 8 mel frames short: v2 keeps them for the cross-fade, v3's HiFT needs them
    # as look-ahead (3 + 4 + 1), and both hand them over with the next piece
    hop = 38 * 2 * 480
    for version in (2, 3):
        first = [p.numel() for p in STREAM[version]["en_numbers"]["pieces"][0]]
        assert first[:2] == [hop - 8 * 480, 50 * 2 * 480]
        assert len(STREAM[version]["en_numbers"]["pieces"][1]) == 1
    # v2's second segment has room for a hop of 25 (+3) but not of 100: one piece, the hop carried over
    assert 25 + 3 + 63 > len(STREAM[2]["en_numbers"]["tokens"][1]) >= 25 + 3


@pytest.mark.golden
@pytest.mark.parametrize("version", [2, 3])
def test_streaming_is_upstreams_other_audio(version):
    # upstream's stream=True audio is not its stream=False audio (2.1 / 2.0 of the scale apart): a mode of its own
    plain = PLAIN[version]["zh_date"]["speech"].float()
    pieces = torch.cat([p.float() for seg in STREAM[version]["zh_date"]["pieces"] for p in seg])
    assert pieces.shape == plain.shape
    assert (pieces - plain).abs().max() > 10 * AUDIO_BOUND * plain.abs().max()


@pytest.mark.golden
@pytest.mark.parametrize("part", ["chunk_mask", "context", "fade"])
def test_each_part_of_streaming_is_needed(models, monkeypatch, part):
    """Without upstream's chunk masks, with zeros for the look-ahead, or without the cross-fade the
    v2 en_numbers pieces miss upstream's by more than the bound: measured 2.0, 6.7e-2 (the look-ahead
    reaches only each hop's last frames) and 1.8 of the scale, so the comparison can fail."""
    from mizuoto.nodes.blocks import s3gen_flow
    from mizuoto.nodes.cosyvoice import phases
    if part == "chunk_mask":
        monkeypatch.setattr(s3gen_flow, "chunk_mask", lambda n, chunk, device: torch.ones(1, n, n, dtype=torch.bool))
    elif part == "context":
        encode = s3gen_flow.Flow.encode
        monkeypatch.setattr(s3gen_flow.Flow, "encode", lambda self, t, p, e, streaming=False, finalize=True:
                            encode(self, t[:, :-3] if not finalize else t, p, e, streaming, True))
    else:
        monkeypatch.setattr(phases, "fade_in_out", lambda fade_in, fade_out, window: fade_in)
    case = STREAM[2]["en_numbers"]
    _, pieces, _, _ = streamed(models[2], monkeypatch, case)
    expected = [p.float() for segment in case["pieces"] for p in segment]
    worst = max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(pieces, expected) if g.shape == w.shape)
    assert worst > 3 * AUDIO_BOUND


def test_upstream_stream_refuses_a_speed(models):
    reference = {"waveform": stereo_reference()[None], "sample_rate": 44100}
    with pytest.raises(ValueError, match="speed"):
        speak(models[2], SpeakRequest("晴。", seed=1, reference=reference, reference_text="我在说。", speed=1.5,
                                      options={"upstream_stream": True}))


# ---- each streaming piece alone, float64 and float32 (fixtures/stream_parts_v*.pt) ----------------------
# fp32 bounds as test_fixtures.py's (flow 1e-5, HiFT 1e-2: the same modules, the same kernels); float64 at
# golden.F64_BOUND. Measured on the recording machine: 0 in both (torch.equal), as the plain flow there.
PARTS = {v: torch.load(FIXTURES / f"stream_parts_v{v}.pt", weights_only=True) for v in (2, 3)}


@pytest.fixture(scope="module", params=[(2, torch.float32), (2, torch.float64), (3, torch.float32), (3, torch.float64)],
                ids=["v2-f32", "v2-f64", "v3-f32", "v3-f64"])
def bundle(request, tmp_path_factory):
    from mizuoto.nodes.cosyvoice.loader import load_cosyvoice
    from cosyvoice.tiny import write_folder
    version, dtype = request.param
    folder = write_folder(tmp_path_factory.mktemp(f"parts{version}"), version)
    return version, dtype, load_cosyvoice(folder, dtype)


@pytest.mark.golden
def test_a_flow_hop_equals_upstreams_streaming_inference(bundle, monkeypatch):
    # 10 prompt + 60 tokens: the chunk masks cut 70 tokens (and 134 frames) into three chunks
    import mizuoto.nodes.blocks.s3gen_flow as flow_module
    version, dtype, b = bundle
    e = PARTS[version]
    monkeypatch.setattr(flow_module, "flow_noise", lambda frames, generator: e["flow.noise"][:, :, :frames])
    mel = b.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"].to(dtype),
                     e["flow.embedding"].to(dtype), None, streaming=True, finalize=False)
    assert mel.dtype == dtype and mel.shape == e["flow.mel"].shape
    if dtype == torch.float64:
        golden.assert_f64(mel, e["flow.mel.f64"], f"v{version} flow hop (f64)")
    else:
        golden.assert_close(mel, e["flow.mel"], 1e-5, f"v{version} flow hop (fp32)")
    monkeypatch.undo()      # the full-context mel needs 6 frames more of the seed-0 noise
    full = b.flow.mel(e["flow.token"].long(), e["flow.prompt_token"].long(), e["flow.prompt_feat"].to(dtype),
                      e["flow.embedding"].to(dtype), torch.Generator().manual_seed(0))[:, :, :mel.shape[2]]
    assert (full - mel).abs().max() > 1e-3 * mel.abs().max()      # the hop is not the full-context mel


@pytest.mark.golden
def test_a_hift_hop_equals_upstreams_streaming_inference(bundle):
    version, dtype, b = bundle
    e = PARTS[version]
    g = torch.Generator().manual_seed(int(e["hift.seed"]))
    if version == 3:
        wav, _ = b.hift.stream(e["hift.mel"].to(dtype), g, finalize=False)
    else:
        wav, source = b.hift.stream(e["hift.mel"].to(dtype), g, e["hift.cache_source"].to(dtype))
        assert torch.equal(source[:, :, :e["hift.cache_source"].shape[2]], e["hift.cache_source"].to(dtype))
    assert wav.shape == e["hift.speech"].shape
    if dtype == torch.float64:
        golden.assert_f64(wav, e["hift.speech.f64"], f"v{version} HiFT hop (f64)")
    else:
        golden.assert_close(wav, e["hift.speech"], 1e-2, f"v{version} HiFT hop (fp32)")


# ---- the hop loop alone from upstream's own inputs (fixtures/stream_hops_v*.pt) ---------------------------
# Upstream's flow prompt and 92 speech tokens of its en_numbers run fed to the engine's hop loop (the flow
# and HiFT phases, the caches and the cross-fade): measured 0 on the recording machine (torch.equal, fp32),
# asserted at the plain HiFT bound, as fp32 kernels move with the CPU.
HOPS = {v: torch.load(FIXTURES / f"stream_hops_v{v}.pt", weights_only=True) for v in (2, 3)}


@pytest.mark.golden
@pytest.mark.parametrize("version", [2, 3])
def test_the_hop_loop_on_upstreams_inputs_equals_upstreams_pieces(models, version):
    from mizuoto.nodes.pack.engine import Chunk
    e = HOPS[version]
    prompt = {"speech_tokens": e["prompt_token"], "speech_feat": e["prompt_feat"], "embedding": e["embedding"]}
    handed: list[tuple[int, torch.Tensor]] = []
    chunk = Chunk(text="-", seed=0, emit=lambda samples, start: handed.append((start, samples)))
    with models[version].using() as engine, engine.manager.request(seed=0) as ctx:
        ctx.generator.manual_seed(int(e["seed"]))          # upstream: torch.manual_seed just before tts()
        wav = engine.stream_chunk(ctx, chunk, e["tokens"].tolist(), prompt)
    assert [p.numel() for _, p in handed] == [p.numel() for p in e["pieces"]] and len(handed) == 3
    assert [start for start, _ in handed] == [0, *torch.tensor([p.numel() for p in e["pieces"]]).cumsum(0)[:-1].tolist()]
    for k, ((_, got), want) in enumerate(zip(handed, e["pieces"])):
        golden.assert_close(got, want, 1e-2, f"v{version} hop {k}")
    assert torch.equal(wav, torch.cat([p for _, p in handed]))
    assert chunk.cache["cosyvoice.stream_hop"] == 100        # 25 -> 50 -> 100 for the next segment


def test_the_yaml_reader_computes_upstreams_chunk_size_products(tmp_path):
    from mizuoto.nodes.cosyvoice.config import read_hyperpyyaml
    path = tmp_path / "c.yaml"
    path.write_text("chunk_size: 25\nratio: 2\nbig: 100000\nflow:\n  a: !ref <chunk_size> * <ratio>\n"
                    "  b: !ref <chunk_size> * 3\n  c: !ref <chunk_size> * <nothing>\n"
                    "  d: !ref <big> * <big> * <big> * <big>\n  e: !ref <chunk_size>\n")
    flow = read_hyperpyyaml(path)["flow"]
    assert (flow["a"], flow["b"], flow["e"]) == (50, 75, 25)
    assert flow["c"] == "<chunk_size> * <nothing>" and flow["d"] == "<big> * <big> * <big> * <big>"

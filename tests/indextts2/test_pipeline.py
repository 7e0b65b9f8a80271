"""IndexTTS 2 through the Speak pipeline against upstream's user-facing `IndexTTS2.infer`.

fixtures/pipeline.pt is recorded by make_pipeline_fixtures.py (README.md) on the folder
tiny.write_pipeline_folder writes (the published layout, weight-norm pairs included), the 44.1 kHz stereo
reference tiny.stereo_reference, upstream's defaults, seeded once (its stream continued through the segments). Here a
SpeakRequest goes through `pipeline.speak` on a LoadedModel at the engine's default precision (fp32) and
default options: multi-sentence Chinese with a date, a time, money and a phone number (two segments and the
200 ms silence between them), and English with money, a time, a date and a percentage.
"""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.pack.pipeline import LoadedModel, SpeakRequest, speak
from mizuoto.nodes.pack.pack_runtime import PackRuntime
from mizuoto.nodes.pack.registry import PRECISIONS, LoadRequest
from mizuoto.nodes.pack.segments import Join
from mizuoto.nodes.indextts2 import ENGINE
from mizuoto.nodes.indextts2.phases import IndexTTS2Engine
from mizuoto.nodes.indextts2.text import TextNormalizer, TextTokenizer
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.service import RuntimeService

from indextts2 import tiny

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.golden]
FIXTURE = torch.load(tiny.FIXTURES / "pipeline.pt", weights_only=True)
CASES = {c["name"]: c for c in FIXTURE["cases"]}
STOP = tiny.CONFIG["gpt"]["stop_mel_token"]
# |ours - upstream| over the PCM-scale samples (upstream's 32767 * wav), relative to full scale: 0 in the plain
# run (this machine type recorded it), at most 1.2e-5 under ATEN_CPU_CAPABILITY=default/avx2 and
# --threads 2 --mkldnn off (float32 sums in other orders; the codes stay equal): 1e-4 is ~8x that.
AUDIO_BOUND = 1e-4


@pytest.fixture(scope="module")
def threads(pytestconfig):
    """one_thread for the module's fixtures (a function fixture would come after them)."""
    n = torch.get_num_threads()
    torch.set_num_threads(pytestconfig.getoption("--threads"))
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def model(tmp_path_factory, threads) -> LoadedModel:
    folder = tiny.write_pipeline_folder(tmp_path_factory.mktemp("indextts2") / "tiny")
    devices = DeviceService()
    manager = ModelManager(devices)
    runtime = PackRuntime(devices, manager, RuntimeService(manager), torch.device("cpu"))
    return LoadedModel(ENGINE, LoadRequest("tiny", folder, PRECISIONS[ENGINE.precisions[0]], torch.device("cpu")),
                       runtime)


def request(case: dict) -> SpeakRequest:
    return SpeakRequest(case["text"], seed=case["seed"],
                        reference={"waveform": tiny.stereo_reference()[None], "sample_rate": 44100})


@pytest.fixture(scope="module")
def spoken(model) -> dict[str, tuple[torch.Tensor, list[list[int]]]]:
    """Each case through pipeline.speak once: (waveform, the codes of each segment)."""
    out = {}
    original = IndexTTS2Engine.codes
    for name, case in CASES.items():
        codes = []

        def record(self, *a, **k):
            result = original(self, *a, **k)
            codes.append(list(result[0]))
            return result

        IndexTTS2Engine.codes = record
        try:
            wav, meta = speak(model, request(case))
        finally:
            IndexTTS2Engine.codes = original
        assert meta["chunks"] == len(case["segments"]) and meta["sample_rate"] == 22050
        out[name] = (wav, codes)
    return out


def test_the_cases_cover_segments_and_text_normalisation():
    assert len(CASES["zh"]["segments"]) >= 2
    assert all(any(ch.isdigit() for ch in c["text"]) for c in CASES.values())


@pytest.mark.parametrize("name", CASES)
def test_pieces_and_segments_equal_upstream(model, name):
    case = CASES[name]
    with model.using() as engine:
        assert engine.tokenizer.tokenize(case["text"]) == case["pieces"]
        assert [list(s.tokens) for s in engine.split_text(case["text"])] == case["segments"]


@pytest.mark.parametrize("name", CASES)
def test_codes_equal_upstream(spoken, name):
    # upstream's codes end with the stop code (cut before the s2mel); ours stop before it
    upstream = [c[:-1] if c and c[-1] == STOP else c for c in CASES[name]["codes"]]
    assert spoken[name][1] == upstream


@pytest.mark.parametrize("name", CASES)
def test_audio_equals_upstream(spoken, name):
    case = CASES[name]
    ours = spoken[name][0] * 32767
    assert ours.shape == case["float"].shape
    err = (ours.clamp(-32767, 32767) - case["float"]).abs().max().item() / 32767
    assert err <= AUDIO_BOUND, err
    # the int16 samples infer returns (a cast toward zero): within one step
    assert (ours.clamp(-32767, 32767).to(torch.int16).int() - case["int16"].int()).abs().max() <= 1
    assert float(case["float"].abs().max()) > 100     # not silence


def test_the_comparison_sees_the_normaliser(model):
    """Digits read as they are (the normaliser bypassed): other pieces than upstream's."""
    class Raw(TextNormalizer):
        def normalize(self, text: str) -> str:
            return text

    raw = TextTokenizer(model.request.folder / "bpe.model", Raw())
    assert all(raw.tokenize(c["text"]) != c["pieces"] for c in CASES.values())


def test_the_comparison_sees_the_silence(model, spoken, monkeypatch):
    """Segments joined without upstream's 200 ms of silence: not upstream's audio."""
    monkeypatch.setattr(IndexTTS2Engine, "join", Join(silence_ms=0))
    wav, _ = speak(model, request(CASES["zh"]))
    full, codes = spoken["zh"]
    first = int(len(codes[0]) * 1.72) * 256          # the first segment's samples (hop 256)
    assert not torch.any(full[first:first + 4410]) and wav.numel() == full.numel() - 4410
    assert torch.equal(wav, torch.cat([full[:first], full[first + 4410:]]))   # the same segments, nothing between

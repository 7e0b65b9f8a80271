"""CosyVoice 3 (tiny upstream-layout folder) streamed, half-resident and resident on the strict simulated
device give audio equal to a plain CPU run, through every phase (prompt, llm, flow, vocoder); CosyVoice 2
gets the same checks from the registry's conformance test (tests/cosyvoice/tiny.py: conformance_case).
With `upstream_stream` (v2 and v3): every piece torch.equal to a plain CPU run's, streamed, half-resident
and resident, and after an OOM injected in a hop's flow or vocoder phase."""
from __future__ import annotations

import pytest
import torch

from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
from mizuoto.nodes.pack.verify import FaultInjector
from mizuoto.nodes.cosyvoice.loader import load_cosyvoice
from mizuoto.nodes.cosyvoice.phases import CosyVoiceEngine
from mizuoto.runtime import DeviceService, ModelManager, VramPolicy
from cosyvoice.tiny import stereo_reference, write_folder
from runtime_helpers import residency_capacity

UNIT = 64 << 10          # tiny layers: units down to 64 KB

pytestmark = pytest.mark.usefixtures("one_thread")


def request() -> SpeakRequest:
    t = torch.arange(14400) / 24000
    wav = 0.3 * torch.sin(2 * torch.pi * 190 * t) * (1 + torch.sin(2 * torch.pi * 2 * t)) / 2
    return SpeakRequest(text="hi", seed=5, reference=(wav, 24000), reference_text="he")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("cv3") / "tiny", 3)


def engine(folder, capacity: int | None = None, mode: str = "normal") -> CosyVoiceEngine:
    devices = DeviceService(simulate={"cpu": capacity}, strict=True) if capacity else DeviceService()
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": mode}))
    return CosyVoiceEngine(load_cosyvoice(folder, torch.float32), manager, min_unit_bytes=UNIT)


@pytest.fixture(scope="module")
def plain(folder):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # as the tests run (one_thread): kernels split work by thread count
    try:
        wav, _ = synthesize(engine(folder), request())
    finally:
        torch.set_num_threads(threads)
    return wav


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_streamed_half_and_resident_equal_plain_run(folder, plain, residency):
    probe = engine(folder, 1 << 30)
    frames = 30 + plain.numel() // 480       # the 0.6 s reference mel frames + those of the speech
    workings = {"llm": probe.llm_memory(30, 2), "flow": probe.flow_memory(frames),
                "vocoder": probe.vocoder_memory(frames)}
    # "half": of the components that can be partly placed (more than their minimum working set), the one
    # whose phase needs the most working memory is placed half-way; the others fit or stream
    handle = max((h for h in (probe.llm_handle, probe.flow_handle, probe.hift_handle)
                  if h.size_bytes > h.min_working_set), key=lambda h: workings[h.name])
    working = workings[handle.name]
    mode, capacity = residency_capacity(handle, residency, working=working)
    if residency != "half":                  # room for the largest component, whichever phase runs
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    eng = engine(folder, capacity, mode)
    wav, meta = synthesize(eng, request())
    assert torch.equal(wav, plain)
    assert meta["applied"]["oom_retries"] == 0
    if residency == "full":
        assert meta["memory"]["streamed_mb"] == 0
    else:
        assert meta["memory"]["streamed_mb"] > 0
        assert sum(h.streamed_bytes for h in eng.handles) > 0


def test_units_and_fixed_part(folder):
    eng = engine(folder, 1 << 30)
    llm = eng.llm_handle.layout
    names = {u.name for u in llm.units}
    assert {f"llm.model.model.layers.{i}" for i in range(2)} <= names
    fixed = {id(t) for t in llm.fixed}
    model = eng.bundle.llm
    assert id(model.speech_embedding.weight) in fixed
    unit_params = {id(p) for u in llm.units for p in u.params}
    assert id(model.decoder.embed_tokens.weight) not in fixed | unit_params      # pinned to the CPU
    flow = eng.flow_handle.layout
    assert any(u.hot for u in flow.units)
    hift = eng.hift_handle.layout
    assert hift.units and all(id(s.alpha) in {id(t) for t in hift.fixed}
                              for s in eng.bundle.hift.modules() if type(s).__name__ == "Snake")


# ---- upstream_stream (upstream's stream=True token hops) -------------------------------------------------


@pytest.fixture(scope="module")
def folder_v2(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("cv2") / "tiny", 2, end_bias=8.0)


@pytest.fixture(scope="module")
def folder_v3(tmp_path_factory):
    # the special tokens at their real ids, as tests/cosyvoice/test_stream.py's: its LM then speaks long enough
    return write_folder(tmp_path_factory.mktemp("cv3r") / "tiny", 3, real_ids=True)


def stream_request(version: int) -> SpeakRequest:
    """37 prompt tokens and enough speech tokens for one hop and the last piece (v2: 42, v3: 50), short
    enough that the vocoder's working set leaves room for a half-placed flow."""
    reference = {"waveform": stereo_reference()[None], "sample_rate": 44100}
    text, seed = ("3月5日。晴！", 21) if version == 2 else ("晴！", 1)
    return SpeakRequest(text, seed=seed, reference=reference, reference_text="我在2023年说过。",
                        options={"upstream_stream": True})


def stream_run(eng: CosyVoiceEngine) -> tuple[torch.Tensor, list[torch.Tensor], dict]:
    pieces: list[torch.Tensor] = []
    wav, meta = synthesize(eng, stream_request(eng.version), on_audio=lambda piece, rate: pieces.append(piece))
    return wav, pieces, meta


@pytest.fixture(scope="module", params=[2, 3])
def stream_case(request, folder_v2, folder_v3):
    """(folder, the plain CPU run's pieces) of a request with upstream_stream on."""
    path = folder_v2 if request.param == 2 else folder_v3
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        wav, pieces, _ = stream_run(engine(path))
    finally:
        torch.set_num_threads(threads)
    assert len(pieces) >= 2 and torch.equal(torch.cat(pieces), wav)     # at least one hop before the last
    return path, pieces


def assert_same_pieces(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert [p.numel() for p in got] == [p.numel() for p in want], what
    assert all(torch.equal(g, w) for g, w in zip(got, want)), what


@pytest.mark.parametrize("residency", ["none", "half", "full"])
def test_upstream_stream_pieces_streamed_half_and_resident_equal_plain_run(stream_case, residency):
    path, plain = stream_case
    probe = engine(path, 1 << 30)
    frames = 75 + sum(p.numel() for p in plain) // 480      # the 1.5 s reference's mel frames + the speech's
    workings = {"llm": probe.llm_memory(80, 20), "flow": probe.flow_memory(frames),
                "vocoder": probe.vocoder_memory(frames)}
    handle = max((h for h in (probe.llm_handle, probe.flow_handle, probe.hift_handle)
                  if h.size_bytes > h.min_working_set), key=lambda h: workings[h.name])
    working = workings[handle.name]
    mode, capacity = residency_capacity(handle, residency, working=working)
    if residency != "half":
        capacity = max(capacity, max(h.size_bytes for h in probe.handles) + 4 * working)
    eng = engine(path, capacity, mode)
    _, pieces, meta = stream_run(eng)
    assert_same_pieces(pieces, plain, f"upstream_stream, residency {residency}")
    assert meta["applied"]["oom_retries"] == 0
    assert (meta["memory"]["streamed_mb"] == 0) == (residency == "full")


@pytest.mark.parametrize("phase", ["flow", "vocoder"])
def test_an_oom_in_a_hop_is_retried_without_a_piece_twice_or_lost(stream_case, phase):
    """An OOM at the last allocation of the first hop's flow or vocoder phase (all weights streamed): the
    phase reruns from the same state (v2: the same generator state for HiFT's noise) and the pieces are
    the plain run's, each once."""
    path, plain = stream_case
    probe = engine(path, 1 << 30)
    capacity = max(h.size_bytes for h in probe.handles) + 4 * probe.flow_memory(400) + (64 << 20)
    eng = engine(path, capacity, "none")
    devices = eng.manager.devices
    with FaultInjector(devices.memory("cpu")) as faults:
        start = faults.count
        stream_run(eng)
        first = faults.points(start, faults.count)[phase]
        faults.fail = {faults.count + first["last"]}
        _, pieces, meta = stream_run(eng)
    assert meta["applied"]["oom_retries"] == 1
    assert_same_pieces(pieces, plain, f"an OOM in {phase}")


# CosyVoice 2's verify takes ~20 s (four times 3's): slow; the residency equality it also checks runs by
# default in test_upstream_stream_pieces_streamed_half_and_resident_equal_plain_run for both versions.
@pytest.mark.parametrize("version", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_upstream_stream_estimates_cover_every_hops_peak(request, version):
    """`verify` (resident, half-resident, all streamed) with upstream_stream on: the runs agree and every
    phase's estimate (each hop's flow and vocoder, from the frames of that hop) covers its measured peak."""
    from mizuoto.nodes.cosyvoice import ENGINE
    from mizuoto.nodes.pack import verify as verify_module
    from mizuoto.nodes.pack.registry import LoadRequest
    path = request.getfixturevalue(f"folder_v{version}")
    report = verify_module.verify(ENGINE, LoadRequest("tiny", path, torch.float32, torch.device("cpu")),
                                  stream_request(version), oom_points=())
    assert report.ok, report.table()
    assert {"flow", "vocoder"} <= set(report.phases)
    assert all(p["estimate_mb"] >= p["measured_mb"] for p in report.phases.values()), report.table()

"""The usage DESIGN.md §3 shows, verbatim in shape, which external tests rely on."""
import torch

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from toy_models import TinyDecoder, TinyVocoder, generate


def test_design_usage_runs_and_reports():
    torch.manual_seed(0)
    lm, voc = TinyDecoder().eval(), TinyVocoder().eval()
    prompt = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        ref_codes = generate(lm, prompt, 6)
        ref_wav = voc(torch.nn.functional.one_hot(ref_codes % 32, 32).float().transpose(1, 2))

    devices = DeviceService(simulate={"cpu": 256 << 20}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": "normal"}))
    talker = ModelHandle(lm, name="talker", kind="sequence")
    vocoder = ModelHandle(voc, name="vocoder", kind="oneshot")
    manager.register(talker, engine="demo", device="cpu")
    manager.register(vocoder, engine="demo", device="cpu")
    with manager.request(seed=0) as ctx:
        codes = ctx.run("talker", [talker], lambda: generate(lm, prompt, 6), memory=8 << 20)
        with ctx.use([vocoder], memory=4 << 20):
            wav = voc(torch.nn.functional.one_hot(codes % 32, 32).float().transpose(1, 2))
    assert torch.equal(codes, ref_codes) and torch.equal(wav.detach(), ref_wav)
    memory = ctx.meta["memory"]
    assert set(memory) >= {"streamed_mb", "loaded_mb", "size_mb", "partial"}
    assert memory["size_mb"] == (talker.size_bytes + vocoder.size_bytes) / (1 << 20)
    assert ctx.meta["applied"] == {"oom_retries": 0, "fallbacks": []}
    for h in (talker, vocoder):
        assert h.loaded_bytes == h.size_bytes and h.streamed_bytes == 0 and h.host_bytes >= 0

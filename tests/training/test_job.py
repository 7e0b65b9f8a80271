"""The job loop: interrupt and resume, its own process, and the exclusive device hold."""
from __future__ import annotations

import os
import threading
import time

import pytest
import torch
import torch.nn.functional as F

from mizuoto.runtime import DeviceService, ModelHandle, ModelManager, VramPolicy
from mizuoto.runtime.allocator import allocator_env
from mizuoto.training import resolve_tools
from mizuoto.training.job import Interrupted, TrainLoop, run_in_process
from mizuoto.training.step import make_optimizer, prepare

from . import worker
from .toy import ToyLM, batches

MB = 1 << 20


def noisy_loss(model, ids):
    """The LM loss through a dropout: resuming must restore torch's RNG as well as the data order."""
    logits = F.dropout(model(ids[:, :-1]), 0.1, training=True)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def make_loop(preset: str, path, seed: int = 7) -> TrainLoop:
    torch.manual_seed(0)
    model = ToyLM()
    tools = resolve_tools(preset, {"mixed_precision": None, "frozen_half": False})
    prepare(model, tools, blocks=model.blocks, frozen=[model.embed])
    opt = make_optimizer(model, tools, lr=2e-3, weight_decay=0.01)
    return TrainLoop(model, opt, batches(5, 2, 9), noisy_loss, tools, seed=seed, checkpoint=path)


@pytest.mark.parametrize("preset", ["fast", "lowest"])
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, preset):
    steps, k = 12, 7    # 5 samples: the interrupt falls inside the second epoch's order
    whole = make_loop(preset, tmp_path / "whole.pt")
    whole.run(steps)

    first = make_loop(preset, tmp_path / "job.pt")
    seen = []
    with pytest.raises(Interrupted) as info:
        first.run(steps, progress=lambda s, n, loss: seen.append((s, n)), interrupted=lambda: first.step == k)
    assert info.value.step == k and seen[-1] == (k, steps) and (tmp_path / "job.pt").is_file()
    assert not list(tmp_path.glob("*.partial"))
    torch.manual_seed(12345)   # whatever ran meanwhile does not leak into the resumed job
    resumed = make_loop(preset, tmp_path / "job.pt")
    resumed.resume()
    assert resumed.step == k
    resumed.run(steps)
    assert resumed.losses == whole.losses
    for (name, a), b in zip(resumed.model.state_dict().items(), whole.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_job_runs_in_its_own_process_with_the_allocator_env():
    env = allocator_env(VramPolicy({"compute.cuda_allocator": "expandable"}), environ={})
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert allocator_env(VramPolicy({"compute.cuda_allocator": "async"}),
                         environ={"PYTORCH_ALLOC_CONF": "x"}) == {"PYTORCH_ALLOC_CONF": "x"}  # the user's wins
    before = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    out = run_in_process(worker.report_env, {"names": ["PYTORCH_CUDA_ALLOC_CONF"]}, env, timeout=120)
    assert out["env"] == env and out["pid"] != os.getpid() and len(out["losses"]) == 2
    assert os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == before
    with pytest.raises(RuntimeError, match="ValueError: dataset clip 3 is silent"):
        run_in_process(worker.fail, {}, {}, timeout=120)


def test_exclusive_hold_makes_inference_wait_and_clears_the_device():
    devices = DeviceService(simulate={"cpu": 64 * MB}, strict=True)
    manager = ModelManager(devices, VramPolicy({"compute.vram_mode": "high"}))
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    handle = manager.register(ModelHandle(model, name="voice"), engine="test", device="cpu")
    x = torch.randn(2, 64)

    def infer():
        with manager.request() as ctx, torch.no_grad():
            return ctx.run("voice", [handle], lambda: model(x), memory=MB)

    expected = infer()
    assert handle.loaded_bytes == handle.size_bytes > 0  # left resident after the request
    done: list[float] = []
    with manager.exclusive("cpu", "training job 'alice'"):
        assert handle.loaded_bytes == 0 and devices.memory("cpu").used == expected.nbytes  # only our output
        assert devices.holder("cpu") == "training job 'alice'"
        def wait_and_infer():
            out = infer()
            done.append((time.monotonic(), out))
        waiter = threading.Thread(target=wait_and_infer)
        waiter.start()
        time.sleep(0.5)
        assert not done                                  # inference on the held device waits
        released = time.monotonic()
    waiter.join(10)
    assert done and done[0][0] >= released and torch.equal(done[0][1], expected)
    assert devices.holder("cpu") is None
    with manager.exclusive("cpu", "a"), pytest.raises(RuntimeError, match="already held by 'a'"):
        with manager.exclusive("cpu", "b"):
            pass

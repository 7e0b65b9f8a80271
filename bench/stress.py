"""Placement changes from other threads while requests run (issue 12's stress figures; counts, not timings).

    python bench/stress.py                   # 40 hammered requests, 2 x 40 requests on one model
    python bench/stress.py --requests 10 --pairs 5

The embedded voice on a strict 16 MB simulated device (its units stream): requests run while upkeep,
`release_device`, the panel's route and RAM relief are called in loops on four other threads; then two
threads speak on the same model. Printed: requests, failures, outputs `torch.equal` to a clean run, calls
each other thread made, and the device bytes left after the last release. tests/test_concurrency.py runs
the same functions with a few requests.
"""
from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import torch


def hammered(runtime, model, request, clean: torch.Tensor, requests: int) -> dict:
    """`requests` speaks while four threads change placement in loops; counts of everything."""
    from mizuoto.nodes.pack.pipeline import speak
    from mizuoto.nodes.pack.routes import runtime_report

    stop = threading.Event()
    failures: list[BaseException] = []
    calls: Counter[str] = Counter()

    def hammer(name: str, fn: Callable[[], object]) -> threading.Thread:
        def loop() -> None:
            while not stop.is_set():
                try:
                    fn()
                    calls[name] += 1
                except BaseException as e:  # noqa: BLE001 - every failure is counted
                    failures.append(e)
                time.sleep(0.001)
        return threading.Thread(target=loop, daemon=True)

    service = runtime.service
    threads = [hammer("upkeep", service.maintain), hammer("release_device", lambda: service.release_device("cpu")),
               hammer("route", lambda: runtime_report(runtime)), hammer("ram_relief", service.release_after_oom)]
    for t in threads:
        t.start()
    exact = 0
    try:
        for _ in range(requests):
            try:
                exact += torch.equal(speak(model, request)[0], clean)
            except BaseException as e:  # noqa: BLE001
                failures.append(e)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    service.release_after_oom()
    return {"requests": requests, "exact": exact, "failures": failures, "calls": dict(calls),
            "device_bytes_after": runtime.devices.memory("cpu").used}


def two_threads(model, requests: Sequence, clean: Sequence[torch.Tensor], each: int) -> dict:
    """Two threads speak `each` times on the same model; counts of exact outputs and failures."""
    from mizuoto.nodes.pack.pipeline import speak

    exact = [0, 0]
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        for _ in range(each):
            try:
                exact[i] += torch.equal(speak(model, requests[i])[0], clean[i])
            except BaseException as e:  # noqa: BLE001
                failures.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"requests": 2 * each, "exact": sum(exact), "failures": failures}


def main(argv: Sequence[str] | None = None) -> tuple[dict, dict]:
    from mizuoto.nodes import NODE_CLASS_MAPPINGS
    from mizuoto.nodes.pack.pack_runtime import build_runtime, use_runtime
    from mizuoto.nodes.pack.pipeline import SpeakRequest, speak
    from mizuoto.runtime import VramPolicy

    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--requests", type=int, default=40)
    args.add_argument("--pairs", type=int, default=40)
    opts = args.parse_args(argv)
    policy = VramPolicy({"compute.simulate_vram_mb": 16, "compute.ram_reserve_mb": 0})
    with use_runtime(build_runtime(policy, strict=True)) as runtime:
        (model,) = NODE_CLASS_MAPPINGS["MizuotoLoadHibari"]().load("fp32", "auto")
        request = SpeakRequest("Threads must not change a sample.", seed=3)
        a = hammered(runtime, model, request, speak(model, request)[0], opts.requests)
        pair = [SpeakRequest("First voice, first thread.", seed=1), SpeakRequest("Second thread here.", seed=2)]
        b = two_threads(model, pair, [speak(model, r)[0] for r in pair], opts.pairs)
    print(f"hammered: {a['requests']} requests, {len(a['failures'])} failures, {a['exact']} exact; "
          f"other threads' calls {a['calls']}; device bytes after release {a['device_bytes_after']}")
    print(f"two threads, one model: {b['requests']} requests, {len(b['failures'])} failures, {b['exact']} exact")
    for e in (a["failures"] + b["failures"])[:3]:
        print(f"  {type(e).__name__}: {e}")
    return a, b


if __name__ == "__main__":
    main()

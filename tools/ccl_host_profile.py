"""Where a small collective's host time goes: 1 KiB all_reduces against a bare torch launch.

    python3 tools/ccl_host_profile.py [--ranks 2] [--batches 30] [--calls 100] [--backend triton] [--profile]

Every rank issues the same calls. Each measurement is ``--batches`` batches of ``--calls`` calls
issued back to back (nothing waits for the device inside a batch; the device catches up and the
ranks line up between batches), and the batches of every kind take turns, so a slow spell of the
host falls on all of them alike. A batch stays well below the launch queue's depth, so the figure
is the host's own time per call, not the device's pace. Per kind, the median over batches of the
time per call, and its ratio to the bare launch's median (issue 14's target is the ratio):

- ``bare``: a torch launch (``add_`` on one element), the baseline;
- ``heap``: ``all_reduce`` of a heap tensor (launched from its recorded plan after the first call);
- ``plain``: ``all_reduce`` of a tensor off the heap (staged inside the kernel);
- ``launch``: the heap tensor's plan alone (``Plan.run``: the compiled kernel's launcher);
- ``python``: the heap tensor's call with the plan's launch left out (the key, the lookup, the
  checks: what iris.ccl's Python adds to the launcher). Only the host runs it; no kernel is queued.

``--profile`` adds rank 0's cProfile of heap calls (cProfile inflates small functions' times).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

KINDS = ("bare", "heap", "plain", "launch", "python")


def _rank(rank, world_size, batches, calls, backend, profile):
    import torch

    import iris.ccl as ccl
    import iris.heap
    from iris.ccl import plans
    from iris.ccl.workspace import workspace_of

    heap = iris.heap.init(1 << 24)
    gpu = heap.device.type == "cuda"
    x = heap.randn(256)
    plain = torch.randn(256, device=heap.device)
    cfg = ccl.Config(backend=backend)
    bare = torch.zeros(1, device=heap.device)
    for _ in range(5):
        ccl.all_reduce(x, config=cfg)
        ccl.all_reduce(plain, config=cfg)
        bare.add_(1)
    key = plans.call_key(heap, "all_reduce", cfg, ("sum",), (x,))
    plan = workspace_of(heap).plans.get(key)
    if plan is None:
        raise RuntimeError("the heap tensor's all_reduce recorded no plan: nothing to decompose")
    run_plan = plans.Plan.run

    def without_launch():
        plans.Plan.run = lambda self, tensors: None
        try:
            for _ in range(calls):
                ccl.all_reduce(x, config=cfg)
        finally:
            plans.Plan.run = run_plan

    def batch(fn):
        for _ in range(calls):
            fn()

    bodies = {
        "bare": lambda: batch(lambda: bare.add_(1)),
        "heap": lambda: batch(lambda: ccl.all_reduce(x, config=cfg)),
        "plain": lambda: batch(lambda: ccl.all_reduce(plain, config=cfg)),
        "launch": lambda: batch(lambda: plan.run((x,))),
        "python": without_launch,
    }
    samples = {kind: [] for kind in KINDS}
    for _ in range(batches):
        for kind in KINDS:
            if gpu:
                torch.cuda.synchronize()
            heap.barrier()
            t0 = time.perf_counter()
            bodies[kind]()
            samples[kind].append((time.perf_counter() - t0) / calls * 1e6)
    if gpu:
        torch.cuda.synchronize()
    heap.barrier()
    heap.check_device_errors()
    report = ""
    if profile:
        prof = cProfile.Profile() if rank == 0 else None
        heap.barrier()
        if prof is not None:
            prof.enable()
        for _ in range(calls * batches):
            ccl.all_reduce(x, config=cfg)
        if prof is not None:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            report = out.getvalue()
        heap.barrier()
    return {kind: statistics.median(s) for kind, s in samples.items()}, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument(
        "--calls", type=int, default=100, help="calls per batch (keep it below the launch queue's depth)"
    )
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--profile", action="store_true", help="add rank 0's cProfile of heap calls")
    args = parser.parse_args()
    import torch

    from iris.heap.testing import run

    env = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}  # CPU ranks: the interpreter
    results = run(_rank, args.ranks, args.batches, args.calls, args.backend, args.profile, env=env)
    print(f"median host us per call over {args.batches} batches of {args.calls} (x = ratio to bare):")
    print("rank  " + "  ".join(f"{k:>14s}" for k in KINDS))
    for r, (med, _) in enumerate(results):
        print(f"{r:4d}  " + "  ".join(f"{med[k]:7.2f} ({med[k] / med['bare']:.2f}x)" for k in KINDS))
    if results[0][1]:
        print(results[0][1])


if __name__ == "__main__":
    main()

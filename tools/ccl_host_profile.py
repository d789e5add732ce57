"""Where a small collective's host time goes: 1 KiB all_reduces against a bare torch launch.

    python3 tools/ccl_host_profile.py [--ranks 2] [--rounds 30] [--calls 100] [--backend triton] [--profile]

Every rank issues the same calls, timed by ``iris.examples.harness.timing.host_seconds`` (ccl-bench's
``host us``): per kind, batches of ``--calls`` calls issued back to back, the kinds taking turns
for ``--rounds`` rounds, the median of the slowest rank's batches; and its ratio to the bare
launch's (issue 14's target is the ratio):

- ``bare``: a torch launch (``add_`` on one element), the baseline;
- ``heap``: ``all_reduce`` of a heap tensor (launched from its recorded plan after the first call);
- ``plain``: ``all_reduce`` of a tensor off the heap (staged inside the kernel);
- ``launch``: the heap tensor's plan alone (``Plan.run``: the compiled kernel's launcher);
- ``python``: the heap tensor's call with its plan emptied of steps (the key, the lookup, the
  checks: what iris.ccl's Python adds to the launcher). Only the host runs it; no kernel is queued.

``--profile`` adds rank 0's cProfile of heap calls (cProfile inflates small functions' times).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

KINDS = ("bare", "heap", "plain", "launch", "python")


def _rank(rank, world_size, rounds, calls, backend, profile):
    import torch

    import iris.ccl as ccl
    import iris.heap
    from iris.ccl import plans
    from iris.ccl.workspace import workspace_of
    from iris.examples.harness import timing

    heap = iris.heap.init(1 << 24)
    x = heap.randn(256)
    plain = torch.randn(256, device=heap.device)
    cfg = ccl.Config(backend=backend)
    bare = torch.zeros(1, device=heap.device)
    for _ in range(5):
        ccl.all_reduce(x, config=cfg)
        ccl.all_reduce(plain, config=cfg)
        bare.add_(1)
    plan = workspace_of(heap).plans.get(plans.call_key(heap, "all_reduce", cfg, ("sum",), (x,)))
    if plan is None:
        raise RuntimeError("the heap tensor's all_reduce recorded no plan: nothing to decompose")
    steps = plan.steps

    def python_only():
        plan.steps = ()
        try:
            ccl.all_reduce(x, config=cfg)
        finally:
            plan.steps = steps

    fns = (
        lambda: bare.add_(1),
        lambda: ccl.all_reduce(x, config=cfg),
        lambda: ccl.all_reduce(plain, config=cfg),
        lambda: plan.run((x,)),
        python_only,
    )
    agree = timing.max_over_ranks()
    seconds = timing.host_seconds(fns, calls, rounds, heap.device, agree)
    heap.barrier()
    heap.check_device_errors()
    report = ""
    if profile:
        prof = cProfile.Profile() if rank == 0 else None
        heap.barrier()
        if prof is not None:
            prof.enable()
        for _ in range(calls * rounds):
            ccl.all_reduce(x, config=cfg)
        if prof is not None:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            report = out.getvalue()
        heap.barrier()
    return {kind: s * 1e6 for kind, s in zip(KINDS, seconds)}, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--calls", type=int, default=100, help="calls per batch (keep it below the launch queue's depth)"
    )
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--profile", action="store_true", help="add rank 0's cProfile of heap calls")
    args = parser.parse_args()
    import torch

    from iris.testing.world import run

    env = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}  # CPU ranks: the interpreter
    results = run(_rank, args.ranks, args.rounds, args.calls, args.backend, args.profile, env=env)
    us, report = results[0]  # every rank holds the slowest rank's figures
    print(f"host us per call, the slowest of {args.ranks} ranks, median of {args.rounds} rounds of {args.calls} calls:")
    print("  ".join(f"{k} {us[k]:.2f} ({us[k] / us['bare']:.2f}x)" for k in KINDS))
    if report:
        print(report)


if __name__ == "__main__":
    main()

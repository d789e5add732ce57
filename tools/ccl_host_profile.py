"""Where a small collective's host time goes: cProfile of back-to-back 1 KiB all_reduces on rank 0.

    python3 tools/ccl_host_profile.py [--ranks 2] [--calls 2000] [--backend triton]

Every rank issues the same calls (nothing waits for the device inside the loop); rank 0 prints
the functions with the most own time, and every rank's host time per call next to a bare torch
launch (``add_`` on one element) in the same process, for a heap tensor (launched from its
recorded plan after the first call) and for a plain tensor (staged: two copies around the kernel).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time


def _rank(rank, world_size, calls, backend):
    import torch

    import iris.ccl as ccl
    import iris.heap

    heap = iris.heap.init(1 << 24)
    x = heap.randn(256)
    plain = torch.randn(256, device=heap.device)
    cfg = ccl.Config(backend=backend)
    bare = torch.zeros(1, device=heap.device)
    for _ in range(20):
        ccl.all_reduce(x, config=cfg)
        ccl.all_reduce(plain, config=cfg)
        bare.add_(1)
    heap.barrier()

    def loop(fn):
        heap.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t = time.perf_counter() - t0
        heap.barrier()
        return t / calls * 1e6

    ccl_us = loop(lambda: ccl.all_reduce(x, config=cfg))
    plain_us = loop(lambda: ccl.all_reduce(plain, config=cfg))
    torch_us = loop(lambda: bare.add_(1))
    report = ""
    if rank == 0:
        prof = cProfile.Profile()
        heap.barrier()
        prof.enable()
        for _ in range(calls):
            ccl.all_reduce(x, config=cfg)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        report = out.getvalue()
    else:
        heap.barrier()
        for _ in range(calls):
            ccl.all_reduce(x, config=cfg)
    heap.barrier()
    return ccl_us, plain_us, torch_us, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--backend", default="triton")
    args = parser.parse_args()
    import torch

    from iris.heap.testing import run

    env = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}  # CPU ranks: the interpreter
    results = run(_rank, args.ranks, args.calls, args.backend, env=env)
    for r, (ccl_us, plain_us, torch_us, _) in enumerate(results):
        print(f"rank {r}: all_reduce 1 KiB heap tensor {ccl_us:.1f} us/call ({ccl_us / torch_us:.2f}x), "
              f"plain tensor {plain_us:.1f} us/call ({plain_us / torch_us:.2f}x), "
              f"bare torch launch {torch_us:.1f} us/call")  # fmt: skip
    print(results[0][3])


if __name__ == "__main__":
    main()

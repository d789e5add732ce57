"""Heap benchmarks: allocation cost (and its collective calls), and init time against world size.

    python benchmarks/bench_heap.py [--ranks 1 2 4] [--init-sizes 16M 256M] [--csv out.csv]

Prints two tables. Allocation: alloc+free pairs of mixed sizes on every rank at once, timed per
pair, for the allocator alone and for the full path (``heap.empty`` + ``heap.free``, a torch
tensor made and dropped each time), next to torch's own ``torch.empty`` + drop of the same sizes
on the same device (the cost of making a tensor at all), with the number of torch.distributed
calls made during the timed loop (the design target: zero). Init: wall time of ``iris.heap.init`` + ``close``,
measured in the same rank processes after the allocation run (so not the CUDA context's start-up).
"""

from __future__ import annotations

import argparse
import csv
import functools
import random
import statistics
import sys
import time

import iris.heap
from iris.heap.allocator import BlockAllocator
from iris.heap.testing import run

SIZES = [64, 256, 1000, 4096, 50_000, 1 << 20]  # bytes: a mix of small and large requests
PAIRS = 20_000


def _count_collectives():
    """Wrap every public torch.distributed collective with a counter; returns the counter."""
    import torch.distributed as dist

    counter = {"calls": 0}
    names = ["all_gather_object", "all_gather", "all_reduce", "broadcast", "broadcast_object_list", "barrier",
             "gather", "scatter", "send", "recv", "isend", "irecv", "all_to_all", "reduce", "monitored_barrier"]  # fmt: skip
    for name in names:
        fn = getattr(dist, name, None)
        if fn is None:
            continue

        @functools.wraps(fn)
        def wrapped(*a, _fn=fn, **k):
            counter["calls"] += 1
            return _fn(*a, **k)

        setattr(dist, name, wrapped)
    return counter


def _alloc_rank(rank, world_size, pairs):
    import torch

    counter = _count_collectives()
    heap = iris.heap.init(64 << 20)
    rng = random.Random(0)  # the same sequence on every rank, as the heap requires
    sizes = [rng.choice(SIZES) for _ in range(pairs)]
    # keep a few tensors live so the free list is not trivially empty
    keep = [heap.empty(rng.choice(SIZES) // 4 + 1, dtype=torch.float32) for _ in range(64)]
    for i in range(0, 64, 2):
        heap.free(keep[i])
    heap.barrier()
    before = counter["calls"]

    t0 = time.perf_counter()
    for n in sizes:
        heap.free(heap.empty(n, dtype=torch.uint8))
    full = (time.perf_counter() - t0) / pairs
    calls = counter["calls"] - before

    # the same pairs from torch's own caching allocator: the cost of making a tensor at all
    torch.empty(1 << 20, dtype=torch.uint8, device=heap.device)
    t0 = time.perf_counter()
    for n in sizes:
        del_me = torch.empty(n, dtype=torch.uint8, device=heap.device)
        del del_me
    torch_us = (time.perf_counter() - t0) / pairs

    a = BlockAllocator(64 << 20)
    t0 = time.perf_counter()
    for n in sizes:
        a.release(a.allocate(n))
    alone = (time.perf_counter() - t0) / pairs
    heap.check_symmetry()
    device = heap.device.type
    heap.close()
    return {
        "full_us": full * 1e6,
        "allocator_us": alone * 1e6,
        "torch_us": torch_us * 1e6,
        "collective_calls": calls,
    }, device


def _init_times(size, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        heap = iris.heap.init(size)
        t1 = time.perf_counter()
        heap.close()
        times.append((t1 - t0, time.perf_counter() - t1))
    return {
        "init_ms": statistics.median(t for t, _ in times) * 1e3,
        "close_ms": statistics.median(c for _, c in times) * 1e3,
    }


def _rank(rank, world_size, pairs, init_sizes, repeats):
    """Both measurements in one process per rank: spawning ranks (torch import, CUDA context) costs
    seconds, and the init times are then the heap's own, not the process's start-up."""
    alloc, device = _alloc_rank(rank, world_size, pairs)
    return {**alloc, "device": device, "init": {size: _init_times(size, repeats) for size in init_sizes}}


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--pairs", type=int, default=PAIRS)
    p.add_argument("--init-sizes", nargs="+", default=["16M", "256M"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--csv", help="write the rows here")
    args = p.parse_args(argv)

    sizes = [_parse_size(t) for t in args.init_sizes]
    results = {w: run(_rank, w, args.pairs, sizes, args.repeats) for w in args.ranks}
    rows = []
    print(f"alloc+free pairs, mixed sizes {SIZES} bytes, {args.pairs} pairs per rank")
    print(
        f"{'ranks':>5} {'device':>8} {'heap.empty+free us/pair':>24} {'allocator us/pair':>18} "
        f"{'torch.empty+del us':>19} {'pairs/s':>10} {'collective calls':>17}"
    )
    for w, res in results.items():
        full = max(r["full_us"] for r in res)
        alone = max(r["allocator_us"] for r in res)
        torch_us = max(r["torch_us"] for r in res)
        calls = sum(r["collective_calls"] for r in res)
        dev = res[0]["device"]
        print(f"{w:>5} {dev:>8} {full:>24.2f} {alone:>18.2f} {torch_us:>19.2f} {1e6 / full:>10.0f} {calls:>17}")
        rows.append({"bench": "alloc_free", "ranks": w, "device": dev, "full_us": f"{full:.3f}",
                     "allocator_us": f"{alone:.3f}", "torch_empty_us": f"{torch_us:.3f}",
                     "collective_calls": calls})  # fmt: skip

    print(f"\nheap init (+ close) time, median of {args.repeats}, in processes whose device is already started")
    print(f"{'ranks':>5} {'heap size':>10} {'device':>8} {'init ms':>9} {'close ms':>9}")
    for size_text, size in zip(args.init_sizes, sizes):
        for w, res in results.items():
            init_ms = max(r["init"][size]["init_ms"] for r in res)
            close_ms = max(r["init"][size]["close_ms"] for r in res)
            print(f"{w:>5} {size_text:>10} {res[0]['device']:>8} {init_ms:>9.1f} {close_ms:>9.1f}")
            rows.append({"bench": "init", "ranks": w, "device": res[0]["device"], "heap_bytes": size,
                         "init_ms": f"{init_ms:.2f}", "close_ms": f"{close_ms:.2f}"})  # fmt: skip
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
        print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

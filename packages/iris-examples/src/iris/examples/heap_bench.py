"""heap-bench: the heap's allocation cost (and its collective calls), and init time against world size.

    python -m iris.examples heap-bench --ranks 1 2 4 [--init-sizes 16M 256M] [--csv heap.csv]

Two tables. Allocation: alloc+free pairs of mixed sizes on every rank at once, timed per pair,
for the allocator alone and for the full path (``heap.empty`` + ``heap.free``, a torch tensor
made and dropped each time), next to torch's own ``torch.empty`` + drop of the same sizes on the
same device (the cost of making a tensor at all), with the number of torch.distributed calls made
during the timed loop (the design target: zero). Init: wall time of ``iris.heap.init`` + ``close``,
measured in the same rank processes after the allocation run (so not the CUDA context's
start-up), once per transport of ``--transports`` (default ``auto``: ``cuda-ipc`` on a GPU,
``shm`` on CPU ranks; name ``cuda-ipc cuda-vmm`` to compare the GPU's two). Every world size of
``--ranks`` is a launch of its own; the tables show the slowest rank of each. Runs no kernels.

``--profile-init N``: where init spends its time. Each timed init + close also runs under
``cProfile``, and a third table lists, per transport, size and world size, the N functions with
the most time of their own (driver and runtime calls appear by name, ``cuMemCreate``, ``cudaMalloc``;
a rank's wait for its peers in ``recv`` or ``accept``), in ms per init + close on the slowest rank
(the profiler's own cost included: compare the transports within one run, not with the init table).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import pstats
import random
import statistics
import time

import iris.heap
from iris.heap.allocator import BlockAllocator

from .harness import environment, tables
from .harness.options import positive_int
from .harness.units import format_bytes, size_type

__all__ = ["SUMMARY", "add_arguments", "rank_main", "report"]

SUMMARY = "iris.heap allocation cost per alloc+free pair (vs torch.empty) and heap init time, per world size"
BACKENDS = ()  # no kernels
SWEEPS_RANKS = True  # --ranks 1 2 4: one launch per world size

SIZES = [64, 256, 1000, 4096, 50_000, 1 << 20]  # bytes: a mix of small and large requests
PAIRS = 20_000
TRANSPORTS = ("auto", "cuda-ipc", "cuda-vmm", "shm")
COLLECTIVES = ["all_gather_object", "all_gather", "all_reduce", "broadcast", "broadcast_object_list", "barrier",
               "gather", "scatter", "send", "recv", "isend", "irecv", "all_to_all", "reduce", "monitored_barrier"]  # fmt: skip


@contextlib.contextmanager
def _count_collectives():
    """Count calls of every public torch.distributed collective while the block runs."""
    import torch.distributed as dist

    counter = {"calls": 0}
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    for name, fn in originals.items():

        @functools.wraps(fn)
        def wrapped(*a, _fn=fn, **k):
            counter["calls"] += 1
            return _fn(*a, **k)

        setattr(dist, name, wrapped)
    try:
        yield counter
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def _alloc_rank(pairs):
    import torch

    with _count_collectives() as counter:
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


def _init_times(size, repeats, transport="auto", profile=0):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        heap = iris.heap.init(size, transport=transport)
        t1 = time.perf_counter()
        name = heap.transport_name
        heap.close()
        times.append((t1 - t0, time.perf_counter() - t1))
    result = {
        "init_ms": statistics.median(t for t, _ in times) * 1e3,
        "close_ms": statistics.median(c for _, c in times) * 1e3,
        "transport": name,
    }
    if profile:
        result["profile"] = _profiled_inits(size, repeats, transport, profile)
    return result


def _profiled_inits(size, repeats, transport, most):
    """The ``most`` functions with the most time of their own over ``repeats`` profiled inits +
    closes: ``[(function, calls per init, own ms per init, cumulative ms per init)]``."""
    profiler = cProfile.Profile()
    for _ in range(repeats):
        profiler.enable()
        iris.heap.init(size, transport=transport).close()
        profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive calls, own s, cumulative s, callers)
    own = collections.Counter()
    seen = {}
    for (file, line, name), (_, calls, tottime, cumtime, _) in stats.items():
        label = name if file == "~" else f"{name} ({file.rsplit('/', 1)[-1]}:{line})"
        own[label] += tottime
        seen[label] = (calls, cumtime)
    return [(label, seen[label][0] / repeats, t * 1e3 / repeats, seen[label][1] * 1e3 / repeats)
            for label, t in own.most_common(most)]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    parser.add_argument(
        "--pairs", type=positive_int, default=PAIRS, help=f"alloc+free pairs per rank (default {PAIRS})"
    )
    parser.add_argument("--init-sizes", nargs="+", type=size_type, default=[size_type(s) for s in ("16M", "256M")],
                        help="heap sizes whose init + close is timed (default 16M 256M)")  # fmt: skip
    parser.add_argument("--repeats", type=positive_int, default=3, help="init + close per size; the median is shown")
    parser.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=["auto"],
                        help="the transports whose init is timed (default auto)")  # fmt: skip
    parser.add_argument("--profile-init", type=positive_int, default=0, metavar="N",
                        help="also profile init + close and list the N functions with the most own time")  # fmt: skip


def rank_main(args: argparse.Namespace) -> dict:
    """Both measurements in one process per rank: spawning ranks (torch import, CUDA context) costs
    seconds, and the init times are then the heap's own, not the process's start-up."""
    alloc, device = _alloc_rank(args.pairs)
    init = {(t, size): _init_times(size, args.repeats, t, args.profile_init) for t in dict.fromkeys(args.transports)
            for size in args.init_sizes}  # fmt: skip
    return {**alloc, "device": device, "init": init}


def report(results: dict[int, list], args: argparse.Namespace) -> int:
    """``results``: every rank's result, per world size (``--ranks`` sweeps them)."""
    env = environment.describe(gpu=any(r["device"] == "cuda" for res in results.values() for r in res))
    rows, alloc, init = [], [], []
    for w, res in results.items():
        full = max(r["full_us"] for r in res)
        alone = max(r["allocator_us"] for r in res)
        torch_us = max(r["torch_us"] for r in res)
        calls = sum(r["collective_calls"] for r in res)
        dev = res[0]["device"]
        alloc.append({"ranks": w, "device": dev, "full_us": full, "allocator_us": alone, "torch_us": torch_us,
                      "pairs_per_s": 1e6 / full, "collective_calls": calls})  # fmt: skip
        rows.append({"bench": "alloc_free", "ranks": w, "device": dev, "full_us": f"{full:.3f}",
                     "allocator_us": f"{alone:.3f}", "torch_empty_us": f"{torch_us:.3f}",
                     "collective_calls": calls})  # fmt: skip
    profiles = []
    for key in results[next(iter(results))][0]["init"]:
        size = key[1]
        for w, res in results.items():
            init_ms = max(r["init"][key]["init_ms"] for r in res)
            if args.profile_init:  # the rank whose profiled inits took longest
                slowest = max(res, key=lambda r: sum(own for _, _, own, _ in r["init"][key]["profile"]))
                profiles += [{"transport": res[0]["init"][key]["transport"], "heap_bytes": size, "ranks": w,
                              "function": f, "calls": c, "own_ms": o, "cum_ms": cum}
                             for f, c, o, cum in slowest["init"][key]["profile"]]  # fmt: skip
            close_ms = max(r["init"][key]["close_ms"] for r in res)
            transport = res[0]["init"][key]["transport"]
            init.append({"ranks": w, "heap_bytes": size, "device": res[0]["device"], "transport": transport,
                         "init_ms": init_ms, "close_ms": close_ms, "series": f"{transport}, {w} ranks"})  # fmt: skip
            rows.append({"bench": "init", "ranks": w, "device": res[0]["device"], "heap_bytes": size,
                         "transport": transport, "init_ms": f"{init_ms:.2f}", "close_ms": f"{close_ms:.2f}"})  # fmt: skip
    tables.print_table(
        f"alloc+free pairs, mixed sizes {SIZES} bytes, {args.pairs} pairs per rank (slowest rank)",
        alloc,
        [("ranks", "ranks", "d"), ("device", "device", ""), ("full_us", "heap.empty+free us/pair", ".2f"),
         ("allocator_us", "allocator us/pair", ".2f"), ("torch_us", "torch.empty+del us", ".2f"),
         ("pairs_per_s", "pairs/s", ".0f"), ("collective_calls", "collective calls", "d")],
        caption=environment.summary(env),
    )  # fmt: skip
    tables.print_table(
        f"heap init (+ close) time, median of {args.repeats}, in processes whose device is already started",
        init,
        [("ranks", "ranks", "d"), ("heap_bytes", "heap size", format_bytes), ("device", "device", ""),
         ("transport", "transport", ""), ("init_ms", "init ms", ".1f"), ("close_ms", "close ms", ".1f")],
    )  # fmt: skip
    if profiles:
        tables.print_table(
            f"where init + close spends its time (cProfile, own time, top {args.profile_init}, slowest rank)",
            profiles,
            [("transport", "transport", ""), ("heap_bytes", "heap size", format_bytes), ("ranks", "ranks", "d"),
             ("function", "function", ""), ("calls", "calls", ".0f"), ("own_ms", "own ms", ".3f"),
             ("cum_ms", "cumulative ms", ".3f")],
        )  # fmt: skip
    if args.csv:  # one column per key in sorted order, as tools/benchmarks.py's tables have it
        tables.write_csv(args.csv, rows, columns=sorted({k for r in rows for k in r}))
        print(f"wrote {args.csv}")
    if args.plot:
        tables.plot(args.plot, init, x="heap_bytes", y="init_ms", series="series", title="iris.heap init time",
                    xlabel="heap bytes", ylabel="ms (slowest rank)")  # fmt: skip
    return 0

"""gluon-rma-bench: remote put / get / copy bandwidth of iris.mem.gluon, against a local Gluon copy
and the same operations written with iris.mem.triton (iris-examples is the layer that has both).

    python -m iris.examples gluon-rma-bench --ranks 2                 # 1 MiB .. 1 GiB on a GPU
    python -m iris.examples gluon-rma-bench --ranks 4 --csv rma.csv   # also write the table as CSV
    python -m iris.examples gluon-rma-bench --sizes 64M 256M --ops put

Ranks take turns: each timed launch runs while the other ranks wait at a host barrier, so every
figure is one rank's with the GPU to itself and Gluon and Triton are compared under the same
conditions (with ``--concurrent`` every rank launches at once after a barrier instead; ranks
sharing a GPU then overlap by chance, and the ratios swing with it). Each rank works over its own
buffers: ``put`` writes our ``src`` into the next rank's ``dst``, ``get`` reads the next rank's
``src`` into our ``dst``, ``copy`` moves the next rank's ``src`` into the previous rank's ``dst``
(with 2 ranks both are the one peer). The Triton side is rma-bench's kernel. ``local`` is a plain copy with no translation. Every case is checked once
(after its warm-up) for the rank whose data it should have delivered. Bandwidth counts the bytes
read plus the bytes written, per rank (the slowest rank's median time) and, with
``--concurrent``, summed over ranks. On a GPU each sample is ``--reps`` launches queued back to
back behind a spin (``iris.examples.harness.timing.time_launches``). Several ranks may share one GPU (run
under MPS for concurrency; the caption says whether an MPS daemon runs). On CPU ranks the sizes
are tiny: a smoke test, not a measurement.

``--trace FILE``: every program of the put/get/copy kernels records its operation, one event name
per case ("remote put (gluon)", ..., "remote copy (triton)"; target rank: the rank read for get,
the rank written for put and copy; bytes: what the program moved), warm-up and timed launches
alike: the timed figures then include the tracing. The local copies are not traced.

(This was ``packages/iris-examples/benchmarks/bench_gluon_rma.py``.)
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.heap
import iris.mem.gluon as img
import iris.mem.triton as imt

from . import rma_bench, rma_sweep
from .harness import environment, tables, timing, trace, validation
from .harness.options import positive_int
from .harness.units import format_bytes, size_type

__all__ = ["SUMMARY", "add_arguments", "check_arguments", "rank_main", "report"]

SUMMARY = "iris.mem.gluon remote put/get/copy bandwidth vs a local Gluon copy and the same ops in iris.mem.triton"
BACKENDS = ("gluon",)

OPS = ("put", "get", "copy")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8}
CSV_COLUMNS = ["size_bytes", "op", "impl", "ranks", "seconds", "rank_gbps", "total_gbps", "vs_local", "vs_triton",
               "launches", "dtype", "block", "warps", "device", "mps", "triton"]  # fmt: skip


# -- Gluon kernels ----------------------------------------------------------------------------------


@img.interpret()
@gluon.jit
def gluon_local_copy(src, dst, context_ptr, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    gl.store(dst + offs, gl.load(src + offs, mask=mask), mask=mask)


@img.interpret()
@gluon.jit
def gluon_rma(src, dst, context_ptr, n, EVENT, OP: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr,
              TRACE: gl.constexpr):  # fmt: skip
    """OP: put (local src -> next rank's dst), get (next rank's src -> local dst), copy (next rank's
    src -> the previous rank's dst): rma-bench's ``remote_copy_kernel``, the Triton side of the
    comparison, does the same. ``TRACE``: record the program's operation as ``EVENT``
    (target rank: the rank read for get, written for put and copy; bytes: what it moved)."""
    ctx = img.Context.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    nxt = (ctx.rank + 1) % ctx.world_size
    start = gl.program_id(0) * BLOCK
    offs = start + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    nbytes = gl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    prev = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    moved = tr.record_start(EVENT, prev if OP == "copy" else nxt, nbytes)
    if OP == "put":
        ctx.put(src + offs, dst + offs, nxt, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, nxt, mask=mask)
    else:
        ctx.copy(src + offs, dst + offs, nxt, prev, mask=mask)
    if TRACE:
        img.barrier()  # the event ends when every thread's part is done (stores: issued)
    tr.record_end(moved)


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    sizes = ["1M", "4M", "16M", "64M", "256M", "1G"] if gpu else ["64K", "256K"]
    parser.add_argument("--sizes", nargs="+", type=size_type, default=[size_type(s) for s in sizes],
                        help=f"buffer bytes per rank (default {' '.join(sizes)})")  # fmt: skip
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="a subset of put get copy")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--block", type=positive_int, default=4096, help="elements per program, a power of two")
    parser.add_argument("--num-warps", type=positive_int, default=8, help="warps per program (default 8)")
    parser.add_argument("--iters", type=positive_int, default=20 if gpu else 2, help="timed samples per case")
    parser.add_argument("--warmup", type=positive_int, default=3 if gpu else 1,
                        help="untimed launches per case, after which the case is checked")  # fmt: skip
    parser.add_argument("--reps", type=positive_int, default=5, help="back-to-back launches per timed sample (GPU)")
    parser.add_argument("--no-triton", action="store_true", help="skip the iris.mem.triton comparison")
    parser.add_argument("--concurrent", action="store_true", help="every rank launches at once (default: in turn)")


def check_arguments(args: argparse.Namespace) -> None:
    if args.block & (args.block - 1):
        raise ValueError(f"--block must be a power of two, got {args.block}")
    itemsize = torch.empty(0, dtype=DTYPES[args.dtype]).element_size()
    bad = [s for s in args.sizes if s % itemsize]
    if bad:
        raise ValueError(f"sizes must be whole numbers of {args.dtype} elements ({itemsize} bytes), got {bad}")


# -- one rank's measurements ------------------------------------------------------------------------


def _cases(ops, with_triton):
    """(impl, op) pairs, the local copies first (they are the reference)."""
    cases = [("gluon", "local")] + [("gluon", op) for op in ops]
    if with_triton:
        cases += [("triton", "local")] + [("triton", op) for op in ops]
    return cases


def _launcher(impl, op, src, dst, heap, n, cfg, event, trace_on):
    """One launch of case (impl, op); the put/get/copy kernels record ``event`` when ``trace_on``."""
    grid = (triton.cdiv(n, cfg["block"]),)
    if impl == "gluon":
        layout = img.blocked_layout(cfg["block"], cfg["warps"], dtype=src.dtype)
        if op == "local":
            return lambda: gluon_local_copy[grid](
                src, dst, heap.context, n, BLOCK=cfg["block"], L=layout, num_warps=cfg["warps"]
            )
        return lambda: gluon_rma[grid](
            src, dst, heap.context, n, event, OP=op, BLOCK=cfg["block"], L=layout, TRACE=trace_on,
            num_warps=cfg["warps"])  # fmt: skip
    if op == "local":
        # the Triton local copy is all-load's and all-store's baseline kernel
        return lambda: rma_sweep.local_copy_kernel[grid](src, dst, n, BLOCK=cfg["block"], num_warps=cfg["warps"])
    return lambda: rma_bench.remote_copy_kernel[grid](src, dst, n, heap.context, event, OP=op, BLOCK=cfg["block"],
                                                      WIDE=False, TRACE=trace_on, num_warps=cfg["warps"])  # fmt: skip


def _expected_source(rank, world_size, op):
    """Whose src ends up in this rank's dst (src of rank r holds r + 1 everywhere)."""
    if op == "local":
        return rank
    if op == "put":
        return (rank - 1) % world_size
    if op == "get":
        return (rank + 1) % world_size
    return (rank + 2) % world_size  # copy: rank r+1 moved rank r+2's src here


def _time_once(fn, device, reps: int) -> float:
    """Seconds per launch: on a GPU the device time of ``reps`` launches queued back to back
    behind a spin (``iris.examples.harness.timing.time_launches``), so neither the host's launch path nor
    an idle GPU between launches is in the figure; on CPU the wall time of one launch."""
    return timing.time_launches(fn, reps=reps if device.type == "cuda" else 1, iters=1, warmup=1, device=device)


def _event_name(impl, op):
    """The trace event of case (impl, op)."""
    return f"remote {op} ({impl})"


def bench_rank(rank, world_size, cfg, heap, tracing):
    """Median seconds per (size, impl, op) on this rank, and the cases that delivered wrong data;
    ``tracing`` (a ``trace.Session``): what --trace asks of the kernels."""
    dtype = DTYPES[cfg["dtype"]]
    itemsize = torch.empty(0, dtype=dtype).element_size()
    with_triton = not cfg["no_triton"]
    results, mismatches = {}, []
    events = {case: tracing.event(_event_name(*case)) for case in _cases(cfg["ops"], with_triton) if case[1] != "local"}
    for size in cfg["sizes"]:
        n = size // itemsize
        src = heap.full((n,), rank + 1, dtype=dtype)
        dst = heap.zeros(n, dtype=dtype)
        cases = _cases(cfg["ops"], with_triton)
        launchers = {case: _launcher(*case, src, dst, heap, n, cfg, events.get(case, 0), tracing.on) for case in cases}
        times = {case: [] for case in cases}
        for case in cases:  # warm-up (compiles), and a correctness check of each case
            dst.zero_()
            heap.barrier()
            for _ in range(cfg["warmup"]):
                launchers[case]()
            heap.barrier()
            source = _expected_source(rank, world_size, case[1])
            if not bool((dst == source + 1).all()):  # compared on the device; the details only on a mismatch
                mismatches.append(validation.compare(dst, torch.full_like(dst, source + 1), rank=rank,
                                                     what=f"{case[0]} {case[1]} of {format_bytes(size)} (rank {source}'s data)"))  # fmt: skip
        for _ in range(cfg["iters"]):  # rounds interleave the cases, so drift hits all alike
            for case in cases:
                if cfg["concurrent"]:
                    heap.barrier()
                    times[case].append(_time_once(launchers[case], heap.device, cfg["reps"]))
                    continue
                for turn in range(world_size):  # one rank at a time; the others wait here
                    heap.barrier()
                    if turn == rank:
                        times[case].append(_time_once(launchers[case], heap.device, cfg["reps"]))
        for case in cases:
            results[(size, *case)] = statistics.median(times[case])
        heap.free(src)
        heap.free(dst)
    heap.barrier()
    return results, mismatches


def rank_main(args: argparse.Namespace) -> dict:
    cfg = dict(sizes=args.sizes, ops=tuple(args.ops), dtype=args.dtype, block=args.block, warps=args.num_warps,
               iters=args.iters, warmup=args.warmup, reps=args.reps, no_triton=args.no_triton, concurrent=args.concurrent)  # fmt: skip
    heap = iris.heap.init(2 * max(args.sizes) + (1 << 20) + trace.heap_bytes(args))
    try:
        with trace.session(heap, args) as tracing:  # --trace: recorded, exported on success
            times, mismatches = bench_rank(heap.rank, heap.world_size, cfg, heap, tracing)
        return {"times": times, "mismatches": mismatches, "gpu": heap.device.type == "cuda"}
    finally:
        heap.close()


# -- the table --------------------------------------------------------------------------------------


def report(results: list, args: argparse.Namespace) -> int:
    env = environment.describe(gpu=results[0]["gpu"])
    per_rank = [r["times"] for r in results]
    with_triton = not args.no_triton
    rows = []
    for key in per_rank[0]:
        size, impl, op = key
        seconds = max(r[key] for r in per_rank)
        rank_gbps = 2 * size / seconds / 1e9
        rows.append(dict(size_bytes=size, op=op, impl=impl, ranks=args.ranks, seconds=seconds,
                         rank_gbps=rank_gbps, total_gbps=rank_gbps * args.ranks if args.concurrent else None))  # fmt: skip
    by_key = {(r["size_bytes"], r["impl"], r["op"]): r for r in rows}
    for r in rows:
        local = by_key[(r["size_bytes"], r["impl"], "local")]["rank_gbps"]
        r["vs_local"] = r["rank_gbps"] / local
        other = by_key.get((r["size_bytes"], "triton", r["op"]))
        r["vs_triton"] = r["rank_gbps"] / other["rank_gbps"] if (other and r["impl"] == "gluon") else None

    mode = "all ranks at once" if args.concurrent else "one rank at a time, the others waiting"
    tables.print_table(
        f"iris.mem.gluon {img.__version__} RMA bandwidth: {args.ranks} ranks, {args.dtype}, BLOCK {args.block}, "
        f"{args.num_warps} warps; Triton backend: {'iris.mem.triton ' + imt.__version__ if with_triton else 'not compared'}",
        [dict(r, us=r["seconds"] * 1e6) for r in rows],
        [("size_bytes", "size", format_bytes), ("op", "op", ""), ("impl", "impl", ""), ("us", "time us", ".1f"),
         ("rank_gbps", "GB/s/rank", ".2f"), ("total_gbps", "GB/s all", ".2f"), ("vs_local", "vs local", ".3f"),
         ("vs_triton", "vs triton", ".3f")],
        caption=f"bandwidth = bytes read + written; per rank (slowest rank) and summed over ranks; launches: {mode}; "
        f"median of {args.iters} samples, each {args.reps} launches queued back to back behind a spin (device time). "
        + environment.summary(env),
    )  # fmt: skip
    if with_triton:
        big = [
            r["vs_triton"]
            for r in rows
            if r["vs_triton"] is not None and r["op"] != "local" and r["size_bytes"] >= 64 << 20
        ]
        if big:
            print(
                f"Gluon / Triton at >= 64 MiB (put/get/copy): min {min(big):.3f}, median {statistics.median(big):.3f}"
            )
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        extra = {"launches": "concurrent" if args.concurrent else "in turn", "dtype": args.dtype, "block": args.block,
                 "warps": args.num_warps, "device": env["device"], "mps": env["mps"], "triton": env["triton"]}  # fmt: skip
        tables.write_csv(args.csv, [{**r, **extra} for r in rows], columns=CSV_COLUMNS)
        print(f"wrote {args.csv}")
    if args.plot:
        tables.plot(args.plot, rows, x="size_bytes", y="rank_gbps", series=("impl", "op"),
                    title=f"iris.mem.gluon vs iris.mem.triton, {args.ranks} ranks", xlabel="bytes per buffer",
                    ylabel="GB/s per rank (read + written)")  # fmt: skip
    return 1 if bad else 0

"""rma-bench: iris.mem.triton's translated remote load/store/get/put/copy against a local copy, and
the latency and throughput of remote atomics.

    python -m iris.examples rma-bench --ranks 4 [--sizes 1M 64M 1G] [--csv rma.csv]

Bandwidth: for each size, ``torch.Tensor.copy_``, a plain local Triton copy, and the same copy
through translated pointers (``ctx.load`` from the next rank, ``ctx.store`` / ``put`` into it,
``get`` from it, ``copy`` from the next rank into the previous one); ``vs local`` is against
the local Triton copy of the same size in the same run, and bandwidth counts the bytes read plus
the bytes written. On a GPU each sample is ``--reps`` launches queued back to back behind a spin
(``iris.examples.harness.timing.time_launches``: device time, not the host's launch path); on CPU ranks
the wall time of one launch. Atomic latency: a dependent chain of ``--atomic-chain`` remote
atomics in one program. Atomic throughput: every lane of every program adds 1 to the next
rank's counters (distinct words, or one word).

By default ranks take turns: one rank measures while the others wait (``--all-turns``: every rank
takes a turn; otherwise rank 0 alone), so the figures show what translation costs, not how
processes share the GPU; ``--concurrent`` runs every rank at once. Several ranks may share one
GPU (CUDA IPC; run them under MPS). On CPU ranks the sizes are tiny: it shows that it runs.

``--trace FILE``: every program of the remote copies records its operation ("remote load",
"remote store", "remote get", "remote put", "remote copy"; target rank: the rank read, or for
store/put/copy the rank written; bytes: what the program moved), each latency kernel an "atomic
chain" (the peer; 4 bytes per atomic) and each program of the throughput kernels an "atomic
batch" (the peer; 4 bytes per atomic), warm-up and timed launches alike: the timed figures then
include the tracing. The local copies are not traced.

(This was ``packages/iris-mem-triton/benchmarks/bench_rma.py``.)
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

import iris.heap
import iris.mem.triton as imt
from iris.mem.triton import Context

from .harness import environment, tables, timing, trace
from .harness.options import DTYPES, positive_int
from .harness.units import format_bytes, size_type

__all__ = ["SUMMARY", "add_arguments", "check_arguments", "rank_main", "report"]

SUMMARY = (
    "iris.mem.triton remote load/store/get/put/copy bandwidth vs a local copy, remote atomic latency and throughput"
)
BACKENDS = ("triton",)

MiB = 1 << 20
COPY_OPS = ("load", "store", "get", "put", "copy")
CSV_COLUMNS = ["rank", "section", "op", "bytes", "ranks", "ms", "GBps", "ratio_vs_local", "latency_us", "ops_per_s"]


# -- kernels ---------------------------------------------------------------------------------------


@triton.jit
def _offsets(BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """This program's element offsets, in int64 (``--index int64``) or int32 arithmetic."""
    if WIDE:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return offs


@imt.interpret()
@triton.jit
def local_copy_kernel(src, dst, n, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    offs = _offsets(BLOCK, WIDE)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@imt.interpret()
@triton.jit
def remote_copy_kernel(src, dst, n, context_ptr, EVENT, OP: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr,
                       TRACE: tl.constexpr):  # fmt: skip
    """OP: load (peer src -> local dst by ctx.load), store (local -> peer by ctx.store), get, put,
    copy (peer src -> other peer's dst; with 2 ranks both are the one peer).

    ``TRACE``: record the program's operation as event ``EVENT`` (target rank: the peer read, or
    for store/put/copy the rank written; bytes: what the program moved)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + 1) % ctx.world_size
    offs = _offsets(BLOCK, WIDE)
    mask = offs < n
    other = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    nbytes = tl.minimum(BLOCK, n - tl.program_id(0).to(tl.int64) * BLOCK) * src.dtype.element_ty.primitive_bitwidth // 8
    moved = tr.record_start(EVENT, other if OP == "copy" else peer, nbytes)
    if OP == "load":
        tl.store(dst + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    elif OP == "store":
        ctx.store(dst + offs, tl.load(src + offs, mask=mask), peer, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, peer, mask=mask)
    elif OP == "put":
        ctx.put(src + offs, dst + offs, peer, mask=mask)
    else:
        ctx.copy(src + offs, dst + offs, peer, other, mask=mask)
    if TRACE:
        tl.debug_barrier()  # the event ends when every thread's part is done (stores: issued)
    tr.record_end(moved)


@imt.interpret()
@triton.jit
def atomic_chain_kernel(counter, context_ptr, K, EVENT, OP: tl.constexpr, SEM: tl.constexpr, TRACE: tl.constexpr):
    """K dependent remote atomics on the peer's counter (each value depends on the last old value).

    ``TRACE``: record the chain as event ``EVENT`` (target rank: the peer; bytes: each atomic's word)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + 1) % ctx.world_size
    chain = tr.record_start(EVENT, peer, K * (counter.dtype.element_ty.primitive_bitwidth // 8))
    v = 1
    for _ in range(K):
        if OP == "cas":
            old = ctx.atomic_cas(counter, 0, 0, peer, sem=SEM)
        else:
            old = ctx.atomic_add(counter, v, peer, sem=SEM)
        v = 1 + (old >> 30)  # counters stay below 2**30: always 1, but not foldable
    tr.record_end(chain)


@imt.interpret()
@triton.jit
def atomic_throughput_kernel(counters, context_ptr, EVENT, REPS: tl.constexpr, LANES: tl.constexpr,
                             CONTENDED: tl.constexpr, SEM: tl.constexpr, TRACE: tl.constexpr):  # fmt: skip
    """Every lane of every program adds 1 REPS times to the peer's counters (distinct words, or one).

    ``TRACE``: record each program's adds as event ``EVENT`` (target rank: the peer; bytes: each add's word)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + 1) % ctx.world_size
    batch = tr.record_start(EVENT, peer, REPS * LANES * (counters.dtype.element_ty.primitive_bitwidth // 8))
    lane = tl.arange(0, LANES)
    if CONTENDED:
        ptrs = counters + lane * 0
    else:
        ptrs = counters + tl.program_id(0) * LANES + lane
    for _ in range(REPS):
        ctx.atomic_add(ptrs, 1, peer, sem=SEM)
    if TRACE:
        tl.debug_barrier()  # every lane's adds
    tr.record_end(batch)


# -- options ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    sizes = ["1M", "4M", "16M", "64M", "256M", "1G"] if gpu else ["64K", "256K"]
    parser.add_argument("--sizes", nargs="+", type=size_type, default=[size_type(s) for s in sizes],
                        help=f"bytes per buffer (default {' '.join(sizes)})")  # fmt: skip
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--block", type=positive_int, default=4096 if gpu else 1024,
                        help="elements per program, a power of two")  # fmt: skip
    parser.add_argument("--num-warps", type=positive_int, default=8)
    parser.add_argument("--index", choices=("int32", "int64"), default="int32",
                        help="offset arithmetic of the copy kernels (int32 reaches 2**31 elements)")  # fmt: skip
    parser.add_argument("--iters", type=positive_int, default=20,
                        help="timed samples per bandwidth case (a tenth of it on CPU ranks)")  # fmt: skip
    parser.add_argument("--reps", type=positive_int, default=5, help="back-to-back launches per bandwidth sample (GPU)")
    parser.add_argument("--atomic-chain", type=positive_int, default=2000, help="dependent atomics per latency kernel")
    parser.add_argument("--atomic-programs", type=positive_int, default=264)
    parser.add_argument("--atomic-lanes", type=positive_int, default=1024, help="a power of two")
    parser.add_argument("--concurrent", action="store_true", help="every rank measures at once")
    parser.add_argument("--all-turns", action="store_true", help="every rank takes a turn (default: rank 0 only)")


def check_arguments(args: argparse.Namespace) -> None:
    for name in ("block", "atomic_lanes"):
        value = getattr(args, name)
        if value & (value - 1):
            raise ValueError(f"--{name.replace('_', '-')} must be a power of two, got {value}")
    args.sizes = sorted(args.sizes)
    elem = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    if args.index == "int32" and args.sizes[-1] // elem + args.block > 2**31:
        raise ValueError(f"--index int32 reaches 2**31 elements; {args.sizes[-1]} bytes needs --index int64")
    args.heap_size = 2 * args.sizes[-1] + 4 * args.atomic_programs * args.atomic_lanes + 64 * MiB


# -- measurement -----------------------------------------------------------------------------------


def _time_ms(fn, device, iters, warmup, reps=1):
    """Median milliseconds per launch of fn(): on a GPU the device time of ``reps`` launches
    queued back to back (``iris.examples.harness.timing.time_launches``), so neither the host's launch
    path nor an idle GPU between launches is counted; on CPU the wall time of one launch."""
    gpu = device.type == "cuda"
    return 1e3 * timing.time_launches(fn, reps=reps if gpu else 1, iters=iters, warmup=warmup, device=device)


def _buffers(rank, heap, opts):
    """src (this rank's rank + 1 everywhere), dst and the atomic counters: every rank makes them,
    so the heaps stay symmetric and the memory a measuring rank reaches on a peer is that peer's
    live, written tensor."""
    dtype = getattr(torch, opts["dtype"])
    n = opts["sizes"][-1] // torch.empty((), dtype=dtype).element_size()
    src = heap.full((n,), rank + 1, dtype=dtype)
    dst = heap.zeros(n, dtype=dtype)
    counters = heap.zeros(opts["atomic_programs"] * opts["atomic_lanes"], dtype=torch.int32)
    return src, dst, counters


def _measure(rank, world_size, opts, heap, src, dst, counters, tracing, events):
    """This rank's rows (run while the other ranks wait, unless --concurrent); ``tracing`` (a
    ``trace.Session``) and ``events`` (trace event id by case) for --trace."""
    on = tracing.on
    device, dtype = heap.device, getattr(torch, opts["dtype"])
    elem = torch.empty((), dtype=dtype).element_size()
    block, warps, wide = opts["block"], opts["num_warps"], opts["index"] == "int64"
    gpu = device.type == "cuda"
    rows = []
    for size in opts["sizes"]:
        n = size // elem
        s, d = src[:n], dst[:n]
        grid = (triton.cdiv(n, block),)
        iters = opts["iters"] if gpu else max(1, opts["iters"] // 10)
        warmup = 3 if gpu else 1
        cases = {
            "torch copy_": lambda s=s, d=d: d.copy_(s),
            "triton local copy": lambda s=s, d=d, n=n, g=grid: local_copy_kernel[g](
                s, d, n, BLOCK=block, WIDE=wide, num_warps=warps
            ),
        }
        for op in COPY_OPS:
            cases[f"remote {op}"] = lambda s=s, d=d, n=n, g=grid, op=op: remote_copy_kernel[g](
                s, d, n, heap.context, events[op], OP=op, BLOCK=block, WIDE=wide, TRACE=on, num_warps=warps
            )
        times = {name: _time_ms(fn, device, iters, warmup, opts["reps"]) for name, fn in cases.items()}
        local = times["triton local copy"]
        for name, ms in times.items():
            rows.append({"section": "bandwidth", "op": name, "bytes": size, "ranks": world_size, "ms": ms,
                         "GBps": 2 * size / (ms * 1e-3) / 1e9, "ratio_vs_local": local / ms})  # fmt: skip
    k = opts["atomic_chain"] if gpu else 20
    for op, sem in (("add", "relaxed"), ("add", "acq_rel"), ("cas", "acq_rel")):
        chain = lambda op=op, sem=sem: atomic_chain_kernel[(1,)](  # noqa: E731
            counters, heap.context, k, events["chain"], OP=op, SEM=sem, TRACE=on
        )
        ms = _time_ms(chain, device, 5 if gpu else 1, 1)
        rows.append(
            {
                "section": "atomic latency",
                "op": f"atomic_{op} sem={sem}",
                "ranks": world_size,
                "ms": ms,
                "latency_us": ms * 1e3 / k,
            }
        )
    programs, lanes = (opts["atomic_programs"], opts["atomic_lanes"]) if gpu else (2, 64)
    reps = 16 if gpu else 2
    for contended in (False, True):
        for sem in ("relaxed", "acq_rel"):

            def fn(contended=contended, sem=sem):
                atomic_throughput_kernel[(programs,)](
                    counters, heap.context, events["batch"], REPS=reps, LANES=lanes, CONTENDED=contended,
                    SEM=sem, TRACE=on)  # fmt: skip

            ms = _time_ms(fn, device, 5 if gpu else 1, 1)
            ops = programs * lanes * reps
            rows.append({"section": "atomic throughput", "op": f"atomic_add {'one word' if contended else 'distinct words'} sem={sem}",
                         "ranks": world_size, "ms": ms, "ops_per_s": ops / (ms * 1e-3)})  # fmt: skip
    return rows


def rank_main(args: argparse.Namespace) -> dict:
    opts = vars(args)
    heap = iris.heap.init(opts["heap_size"] + trace.heap_bytes(args))
    try:
        rank, world_size = heap.rank, heap.world_size
        buffers = _buffers(rank, heap, opts)
        rows = None
        with trace.session(heap, args) as tracing:  # --trace: recorded, exported on success
            # every rank names the events, in one order (a collective), whether or not it measures
            events = {op: tracing.event(f"remote {op}") for op in COPY_OPS}
            events.update(chain=tracing.event("atomic chain"), batch=tracing.event("atomic batch"))

            def measure():
                return _measure(rank, world_size, opts, heap, *buffers, tracing, events)

            if opts["concurrent"]:
                heap.barrier()
                rows = measure()
                heap.barrier()
            else:  # only one rank measures at a time; the others hold their buffers and wait
                for turn in range(world_size if opts["all_turns"] else 1):
                    heap.barrier()
                    if rank == turn:
                        rows = measure()
                    heap.barrier()
        for t in buffers:
            heap.free(t)
        return {"rank": rank, "device": str(heap.device), "rows": rows}
    finally:
        heap.close()


# -- reporting -------------------------------------------------------------------------------------


def report(results: list, args: argparse.Namespace) -> int:
    first = next(r for r in results if r["rows"])
    env = environment.describe(gpu=first["device"].startswith("cuda"))
    rows = [dict(row, rank=r["rank"]) for r in results if r["rows"] for row in r["rows"]]
    mode = "concurrent ranks" if args.concurrent else "ranks take turns"
    setup = (f"iris.mem.triton RMA benchmark: {len(results)} ranks on {first['device']}, {args.dtype}, BLOCK {args.block}, "
             f"num_warps {args.num_warps}, {args.index} offsets, {mode}")  # fmt: skip
    bw = [r for r in rows if r["section"] == "bandwidth"]
    if bw:
        tables.print_table(
            setup,
            bw,
            [("rank", "rank", "d"), ("bytes", "size", format_bytes), ("op", "op", ""), ("ms", "ms", ".4f"),
             ("GBps", "GB/s", ".3g"), ("ratio_vs_local", "vs local", ".3f")],
            caption=f"bandwidth: bytes read + written; median of {args.iters} samples, each {args.reps} launches queued "
            "back to back behind a spin (device time; on CPU ranks one launch). " + environment.summary(env),
        )  # fmt: skip
    lat = [r for r in rows if r["section"] == "atomic latency"]
    if lat:
        tables.print_table(
            "remote atomic latency",
            lat,
            [("rank", "rank", "d"), ("op", "remote atomic (dependent chain)", ""), ("latency_us", "latency us", ".3f")],
        )
    thr = [dict(r, Mops=r["ops_per_s"] / 1e6) for r in rows if r["section"] == "atomic throughput"]
    if thr:
        tables.print_table(
            "remote atomic throughput",
            thr,
            [("rank", "rank", "d"), ("op", "remote atomic throughput", ""), ("Mops", "Mops/s", ".2f")],
        )
    if args.csv:
        tables.write_csv(args.csv, rows, columns=CSV_COLUMNS)
        print(f"wrote {args.csv}")
    if args.plot and bw:
        tables.plot(args.plot, bw, x="bytes", y="GBps", series=("op", "rank") if len({r["rank"] for r in bw}) > 1 else "op",
                    title=f"iris.mem.triton remote access, {len(results)} ranks", xlabel="bytes per buffer",
                    ylabel="GB/s (read + written)")  # fmt: skip
    return 0

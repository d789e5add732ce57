"""rma-bench: remote load/store/get/put/copy through translated pointers against a local copy, with
the Triton kernels (iris.mem.triton) or the Gluon kernels (iris.mem.gluon, compared with the
Triton ones too); with Triton also the latency and throughput of remote atomics.

    python -m iris.examples rma-bench --ranks 4 [--sizes 1M 64M 1G] [--csv rma.csv]
    python -m iris.examples rma-bench --ranks 2 --backend gluon [--ops put get copy] [--all-turns]

Bandwidth: for each size, each case moves one buffer of that size: a plain local copy of the
backend (``vs local`` is against it; with Triton ``torch.Tensor.copy_`` too), and each remote
operation: ``load`` reads the next rank's ``src`` into our ``dst``, ``store`` and ``put`` write our
``src`` into the next rank's ``dst``, ``get`` reads the next rank's ``src``, ``copy`` moves the next
rank's ``src`` into the previous rank's ``dst`` (with 2 ranks both are the one peer). With
``--backend gluon`` the Triton kernels run the same cases (``vs triton``, the Gluon target's
baseline) unless ``--no-triton``. Bandwidth counts the bytes read plus the bytes written.

Every rank runs each case's ``--warmup`` launches at once, and the case is checked for the rank
whose data it should have delivered. Then ``--iters`` rounds, each timing every case once (so drift
hits all alike): one rank measures while the others wait at a host barrier (rank 0;
``--all-turns``: every rank in turn), so the figures show what translation costs, not how processes
share the GPU; ``--concurrent`` times every rank at once. A figure is the slowest measuring rank's
median. On a GPU each sample is ``--reps`` launches queued back to back behind a spin
(``iris.examples.harness.timing.time_launches``: device time, not the host's launch path); on CPU
ranks the wall time of one launch, at tiny sizes: it shows that it runs. Several ranks may share
one GPU (CUDA IPC; run them under MPS; the caption says whether an MPS daemon runs).

Atomics (Triton): a dependent chain of ``--atomic-chain`` remote atomics in one program
(latency), and every lane of every program adding 1 to the next rank's counters, distinct words or
one word (throughput), measured in the same turns.

``--trace FILE``: every program of the remote copies records its operation ("remote load", ...;
with Gluon "remote load (gluon)", ..., "remote load (triton)"; target rank: the rank read, or for
store/put/copy the rank written; bytes: what the program moved), each latency kernel an "atomic
chain" and each program of the throughput kernels an "atomic batch" (the peer; 4 bytes per
atomic), warm-up and timed launches alike: the timed figures then include the tracing. The local
copies are not traced.

``gluon-rma-bench`` is a deprecated name for ``rma-bench --backend gluon``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.heap
import iris.mem.gluon as img
import iris.mem.triton as imt
from iris.mem.triton import Context

from .harness import environment, tables, timing, trace, validation
from .harness.options import DTYPES, positive_int
from .harness.units import format_bytes, size_type

__all__ = ["SUMMARIES", "SUMMARY", "add_arguments", "check_arguments", "rank_main", "report"]

SUMMARY = (
    "remote load/store/get/put/copy bandwidth vs a local copy (Triton, or Gluon vs Triton); "
    "Triton: remote atomic latency and throughput"
)
SUMMARIES = {
    "rma-bench": SUMMARY,
    "gluon-rma-bench": "deprecated name of rma-bench --backend gluon",
}
BACKENDS = ("triton", "gluon")

MiB = 1 << 20
OPS = ("load", "store", "get", "put", "copy")
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # short names --dtype takes
# Each backend writes its own CSV columns: tools/benchmarks.py reads the Triton backend's (ratio_vs_local) and
# the Gluon backend's (vs_triton, vs_local) by these names.
TRITON_CSV_COLUMNS = ["rank", "section", "op", "bytes", "ranks", "ms", "GBps", "ratio_vs_local", "latency_us",
                      "ops_per_s", "transport"]  # fmt: skip
GLUON_CSV_COLUMNS = ["size_bytes", "op", "impl", "ranks", "seconds", "rank_gbps", "total_gbps", "vs_local", "vs_triton",
                     "launches", "dtype", "block", "warps", "device", "mps", "triton", "transport"]  # fmt: skip
TRANSPORTS = ("auto", "cuda-ipc", "cuda-vmm", "shm")


# -- Triton kernels --------------------------------------------------------------------------------


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


@triton.jit
def _remote_op(ctx, src, dst, mask, peer, other, OP: tl.constexpr):
    """The operation measured, on this program's pointer blocks: load (``peer``'s ``src`` into the
    local ``dst`` by ``ctx.load``), store (the local ``src`` into ``peer``'s ``dst`` by
    ``ctx.store``), get, put, or copy (``peer``'s ``src`` into ``other``'s ``dst``)."""
    if OP == "load":
        tl.store(dst, ctx.load(src, peer, mask=mask), mask=mask)
    elif OP == "store":
        ctx.store(dst, tl.load(src, mask=mask), peer, mask=mask)
    elif OP == "get":
        ctx.get(src, dst, peer, mask=mask)
    elif OP == "put":
        ctx.put(src, dst, peer, mask=mask)
    else:
        ctx.copy(src, dst, peer, other, mask=mask)


@imt.interpret()
@triton.jit
def remote_copy_kernel(src, dst, n, context_ptr, EVENT, OP: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr,
                       TRACE: tl.constexpr):  # fmt: skip
    """``_remote_op`` OP with the next rank (copy: from the next rank to the previous one; with 2
    ranks both are the one peer).

    ``TRACE``: record the program's operation as event ``EVENT`` (target rank: the peer read, or
    for store/put/copy the rank written; bytes: what the program moved)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + 1) % ctx.world_size
    other = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    offs = _offsets(BLOCK, WIDE)
    mask = offs < n
    nbytes = tl.minimum(BLOCK, n - tl.program_id(0).to(tl.int64) * BLOCK) * src.dtype.element_ty.primitive_bitwidth // 8
    moved = tr.record_start(EVENT, other if OP == "copy" else peer, nbytes)
    _remote_op(ctx, src + offs, dst + offs, mask, peer, other, OP)
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


# -- Gluon kernels ---------------------------------------------------------------------------------


@img.interpret()
@gluon.jit
def gluon_local_copy_kernel(src, dst, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    gl.store(dst + offs, gl.load(src + offs, mask=mask), mask=mask)


@gluon.jit
def _gluon_remote_op(ctx, src, dst, mask, peer, other, OP: gl.constexpr):
    """``_remote_op`` in Gluon."""
    if OP == "load":
        gl.store(dst, ctx.load(src, peer, mask=mask), mask=mask)
    elif OP == "store":
        ctx.store(dst, gl.load(src, mask=mask), peer, mask=mask)
    elif OP == "get":
        ctx.get(src, dst, peer, mask=mask)
    elif OP == "put":
        ctx.put(src, dst, peer, mask=mask)
    else:
        ctx.copy(src, dst, peer, other, mask=mask)


@img.interpret()
@gluon.jit
def gluon_remote_copy_kernel(src, dst, n, context_ptr, EVENT, OP: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr,
                             TRACE: gl.constexpr):  # fmt: skip
    """``remote_copy_kernel`` in Gluon (int32 offsets): the same OPs between the same ranks, the same
    ``TRACE`` event."""
    ctx = img.Context.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + 1) % ctx.world_size
    other = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    start = gl.program_id(0) * BLOCK
    offs = start + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    nbytes = gl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    moved = tr.record_start(EVENT, other if OP == "copy" else peer, nbytes)
    _gluon_remote_op(ctx, src + offs, dst + offs, mask, peer, other, OP)
    if TRACE:
        img.barrier()  # the event ends when every thread's part is done (stores: issued)
    tr.record_end(moved)


# -- options ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    sizes = ["1M", "4M", "16M", "64M", "256M", "1G"] if gpu else ["64K", "256K"]
    parser.add_argument("--sizes", nargs="+", type=size_type, default=[size_type(s) for s in sizes],
                        help=f"bytes per buffer (default {' '.join(sizes)})")  # fmt: skip
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="a subset of load store get put copy")
    parser.add_argument("--dtype", choices=(*DTYPES, *DTYPE_ALIASES), default="float32")
    parser.add_argument("--block", type=positive_int, default=4096 if gpu else 1024,
                        help="elements per program, a power of two")  # fmt: skip
    parser.add_argument("--num-warps", type=positive_int, default=8)
    parser.add_argument("--index", choices=("int32", "int64"), default="int32",
                        help="offset arithmetic of the Triton copy kernels (int32 reaches 2**31 elements)")  # fmt: skip
    parser.add_argument("--iters", type=positive_int, default=20 if gpu else 2, help="timed rounds of every case")
    parser.add_argument("--warmup", type=positive_int, default=3 if gpu else 1,
                        help="untimed launches per case, after which the case is checked")  # fmt: skip
    parser.add_argument("--reps", type=positive_int, default=5, help="back-to-back launches per timed sample (GPU)")
    parser.add_argument("--no-triton", action="store_true", help="--backend gluon: leave out the Triton comparison")
    parser.add_argument("--transport", choices=TRANSPORTS, default="auto",
                        help="the heap's transport (iris.heap.init(transport=...); default auto)")  # fmt: skip
    parser.add_argument("--concurrent", action="store_true", help="every rank measures at once")
    parser.add_argument("--all-turns", action="store_true", help="every rank takes a turn (default: rank 0 only)")
    atomics = parser.add_argument_group("remote atomics (--backend triton)")
    atomics.add_argument("--atomic-chain", type=positive_int, default=2000, help="dependent atomics per latency kernel")
    atomics.add_argument("--atomic-programs", type=positive_int, default=264)
    atomics.add_argument("--atomic-lanes", type=positive_int, default=1024, help="a power of two")


def check_arguments(args: argparse.Namespace) -> None:
    for name in ("block", "atomic_lanes"):
        value = getattr(args, name)
        if value & (value - 1):
            raise ValueError(f"--{name.replace('_', '-')} must be a power of two, got {value}")
    if args.no_triton and args.backend != "gluon":
        raise ValueError("--no-triton leaves out the Triton comparison of --backend gluon; leave it out here")
    args.dtype = DTYPE_ALIASES.get(args.dtype, args.dtype)
    args.sizes = sorted(set(args.sizes))
    args.ops = [op for op in OPS if op in args.ops]
    elem = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    bad = [s for s in args.sizes if s % elem]
    if bad:
        raise ValueError(f"sizes must be whole numbers of {args.dtype} elements ({elem} bytes), got {bad}")
    if (args.index == "int32" or args.backend == "gluon") and args.sizes[-1] // elem + args.block > 2**31:
        raise ValueError(f"int32 offsets reach 2**31 elements; {args.sizes[-1]} bytes needs --index int64 "
                         "(the Triton kernels only)")  # fmt: skip
    args.heap_size = 2 * args.sizes[-1] + 4 * args.atomic_programs * args.atomic_lanes + 64 * MiB


# -- the cases -------------------------------------------------------------------------------------


def _cases(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (impl, op) pairs timed at each size, each implementation's local copy first (its reference)."""
    if args.backend == "triton":
        return [("torch", "local"), ("triton", "local")] + [("triton", op) for op in args.ops]
    impls = ("gluon",) if args.no_triton else ("gluon", "triton")
    return [(impl, op) for impl in impls for op in ("local", *args.ops)]


def _event_name(args: argparse.Namespace, impl: str, op: str) -> str:
    """The trace event of a remote case; with Gluon the implementation is named, both run."""
    return f"remote {op}" if args.backend == "triton" else f"remote {op} ({impl})"


def _case_name(impl: str, op: str) -> str:
    """How the table (and the Triton CSV) names a case: "triton local copy", "remote put", ..."""
    if op == "local":
        return "torch copy_" if impl == "torch" else f"{impl} local copy"
    return f"remote {op}"


def _launcher(case, src, dst, n, heap, args, event, trace_on):
    """One launch of ``case`` (impl, op) over the first ``n`` elements; the remote kernels record
    ``event`` when ``trace_on``."""
    impl, op = case
    block, warps, wide = args.block, args.num_warps, args.index == "int64"
    grid = (triton.cdiv(n, block),)
    if impl == "torch":
        return lambda: dst.copy_(src)
    if impl == "gluon":
        layout = img.blocked_layout(block, warps, dtype=src.dtype)
        if op == "local":
            return lambda: gluon_local_copy_kernel[grid](src, dst, n, BLOCK=block, L=layout, num_warps=warps)
        return lambda: gluon_remote_copy_kernel[grid](src, dst, n, heap.context, event, OP=op, BLOCK=block, L=layout,
                                                      TRACE=trace_on, num_warps=warps)  # fmt: skip
    if op == "local":
        return lambda: local_copy_kernel[grid](src, dst, n, BLOCK=block, WIDE=wide, num_warps=warps)
    return lambda: remote_copy_kernel[grid](src, dst, n, heap.context, event, OP=op, BLOCK=block, WIDE=wide,
                                            TRACE=trace_on, num_warps=warps)  # fmt: skip


def _expected_source(rank: int, world_size: int, op: str) -> int:
    """Whose ``src`` ends up in this rank's ``dst`` (rank r's ``src`` holds r + 1 everywhere)."""
    if op in ("load", "get"):
        return (rank + 1) % world_size
    if op in ("store", "put"):
        return (rank - 1) % world_size
    if op == "copy":
        return (rank + 2) % world_size  # rank r+1 moved rank r+2's src here
    return rank


# -- one rank's measurements -----------------------------------------------------------------------


def _turns(args: argparse.Namespace, world_size: int) -> list[int | None]:
    """Who measures in each turn: None is every rank at once."""
    if args.concurrent:
        return [None]
    return list(range(world_size)) if args.all_turns else [0]


def _seconds(fn, device, reps: int) -> float:
    """One sample, in seconds per launch: on a GPU the device time of ``reps`` launches queued back
    to back behind a spin (``time_launches``), so neither the host's launch path nor an idle GPU
    between launches is in it; on CPU the wall time of one launch. The case is warm already."""
    return timing.time_launches(fn, reps=reps if device.type == "cuda" else 1, iters=1, warmup=0, device=device)


def _check_case(case, launch, dst, heap, args, size) -> validation.Mismatch | None:
    """Every rank runs ``--warmup`` launches of ``case`` at once; then this rank's ``dst`` must hold
    the data of the rank it came from (None when it does)."""
    dst.zero_()
    heap.barrier()
    for _ in range(args.warmup):
        launch()
    heap.barrier()
    source = _expected_source(heap.rank, heap.world_size, case[1])
    if bool((dst == source + 1).all()):  # compared on the device; the details only on a mismatch
        return None
    what = f"{_case_name(*case)} ({case[0]}) of {format_bytes(size)} (rank {source}'s data)"
    return validation.compare(dst, torch.full_like(dst, source + 1), rank=heap.rank, what=what)


def _measure_size(size, src, dst, heap, args, tracing, events):
    """Check every case at ``size``, then time ``--iters`` rounds of them in turns: this rank's
    median seconds per case (empty when it never measured) and its mismatches."""
    n = size // src.element_size()
    s, d = src[:n], dst[:n]
    launchers = {c: _launcher(c, s, d, n, heap, args, events.get(c, 0), tracing.on) for c in _cases(args)}
    mismatches = [m for c, fn in launchers.items() if (m := _check_case(c, fn, d, heap, args, size)) is not None]
    samples = {case: [] for case in launchers}
    for _ in range(args.iters):  # rounds interleave the cases, so drift hits all alike
        for case, fn in launchers.items():
            for turn in _turns(args, heap.world_size):  # the others wait at the barrier
                heap.barrier()
                if turn is None or turn == heap.rank:
                    samples[case].append(_seconds(fn, heap.device, args.reps))
    return {(size, *case): statistics.median(t) for case, t in samples.items() if t}, mismatches


def _atomic_rows(heap, counters, args, tracing, events) -> list[dict]:
    """Remote atomic latency (dependent chains) and throughput (every lane adding) on this rank."""
    device, on, gpu = heap.device, tracing.on, heap.device.type == "cuda"
    rows = []
    k = args.atomic_chain if gpu else 20
    for op, sem in (("add", "relaxed"), ("add", "acq_rel"), ("cas", "acq_rel")):
        chain = lambda op=op, sem=sem: atomic_chain_kernel[(1,)](  # noqa: E731
            counters, heap.context, k, events["chain"], OP=op, SEM=sem, TRACE=on
        )
        ms = 1e3 * timing.time_launches(chain, reps=1, iters=5 if gpu else 1, warmup=1, device=device)
        rows.append({"section": "atomic latency", "op": f"atomic_{op} sem={sem}", "ms": ms,
                     "latency_us": ms * 1e3 / k})  # fmt: skip
    programs, lanes = (args.atomic_programs, args.atomic_lanes) if gpu else (2, 64)
    reps = 16 if gpu else 2
    for contended in (False, True):
        for sem in ("relaxed", "acq_rel"):

            def fn(contended=contended, sem=sem):
                atomic_throughput_kernel[(programs,)](
                    counters, heap.context, events["batch"], REPS=reps, LANES=lanes, CONTENDED=contended,
                    SEM=sem, TRACE=on)  # fmt: skip

            ms = 1e3 * timing.time_launches(fn, reps=1, iters=5 if gpu else 1, warmup=1, device=device)
            words = "one word" if contended else "distinct words"
            rows.append({"section": "atomic throughput", "op": f"atomic_add {words} sem={sem}", "ms": ms,
                         "ops_per_s": programs * lanes * reps / (ms * 1e-3)})  # fmt: skip
    return [dict(row, rank=heap.rank, ranks=heap.world_size) for row in rows]


def _events(args: argparse.Namespace, tracing) -> dict:
    """Trace event ids by case (and "chain", "batch" for the atomics); every rank asks for the same
    names in the same order (a collective), whether or not it measures."""
    events = {case: tracing.event(_event_name(args, *case)) for case in _cases(args) if case[1] != "local"}
    if args.backend == "triton":
        events.update(chain=tracing.event("atomic chain"), batch=tracing.event("atomic batch"))
    return events


def _measure(heap, args, tracing) -> dict:
    """This rank's bandwidth medians, mismatches and atomic rows (None when it measured none)."""
    dtype = getattr(torch, args.dtype)
    n = args.sizes[-1] // torch.empty((), dtype=dtype).element_size()
    # every rank makes them, so the heaps stay symmetric and what a measuring rank reaches on a
    # peer is that peer's live, written tensor
    src = heap.full((n,), heap.rank + 1, dtype=dtype)
    dst = heap.zeros(n, dtype=dtype)
    counters = heap.zeros(args.atomic_programs * args.atomic_lanes, dtype=torch.int32)
    events = _events(args, tracing)
    times, mismatches, atomics = {}, [], None
    for size in args.sizes:
        found, bad = _measure_size(size, src, dst, heap, args, tracing, events)
        times.update(found)
        mismatches += bad
    if args.backend == "triton":
        for turn in _turns(args, heap.world_size):
            heap.barrier()
            if turn is None or turn == heap.rank:
                atomics = _atomic_rows(heap, counters, args, tracing, events)
            heap.barrier()
    for t in (src, dst, counters):
        heap.free(t)
    return {"times": times, "mismatches": mismatches, "atomics": atomics}


def rank_main(args: argparse.Namespace) -> dict:
    heap = iris.heap.init(args.heap_size + trace.heap_bytes(args), transport=args.transport)
    try:
        with trace.session(heap, args) as tracing:  # --trace: recorded, exported on success
            measured = _measure(heap, args, tracing)
        return dict(measured, rank=heap.rank, device=str(heap.device), transport=heap.transport_name)
    finally:
        heap.close()


# -- reporting -------------------------------------------------------------------------------------


def _bandwidth_rows(results: list, args: argparse.Namespace) -> list[dict]:
    """One row per (size, impl, op): the slowest measuring rank's median and the ratios."""
    measured = [r for r in results if r["times"]]
    rows = []
    for key in measured[0]["times"]:
        slowest = max(measured, key=lambda r: r["times"][key])
        seconds = slowest["times"][key]
        gbps = 2 * key[0] / seconds / 1e9
        rows.append({"rank": slowest["rank"], "bytes": key[0], "impl": key[1], "op": key[2],
                     "case": _case_name(*key[1:]), "seconds": seconds, "GBps": gbps,
                     "total_GBps": gbps * args.ranks if args.concurrent else None})  # fmt: skip
    by_key = {(r["bytes"], r["impl"], r["op"]): r for r in rows}
    for r in rows:
        local = by_key[(r["bytes"], "triton" if r["impl"] == "torch" else r["impl"], "local")]
        r["vs_local"] = local["seconds"] / r["seconds"]
        other = by_key.get((r["bytes"], "triton", r["op"]))
        r["vs_triton"] = other["seconds"] / r["seconds"] if other and r["impl"] == "gluon" else None
    return rows


def _print_bandwidth(rows: list, results: list, args: argparse.Namespace, env: dict) -> None:
    mem = img if args.backend == "gluon" else imt
    if args.concurrent:
        mode = "all ranks at once"
    else:
        mode = f"{'every rank in turn' if args.all_turns else 'rank 0'} measuring, the others waiting"
    columns = [("bytes", "size", format_bytes), ("case", "case", ""), ("impl", "impl", ""),
               ("us", "time us", ".1f"), ("GBps", "GB/s/rank", ".3g"), ("vs_local", "vs local", ".3f")]  # fmt: skip
    if args.concurrent:
        columns.insert(5, ("total_GBps", "GB/s all", ".3g"))
    if args.backend == "gluon" and not args.no_triton:
        columns.append(("vs_triton", "vs triton", ".3f"))
    tables.print_table(
        f"rma-bench: iris.mem.{args.backend} {mem.__version__}, {args.ranks} ranks on {results[0]['device']} "
        f"({results[0]['transport']} heap), "
        f"{args.dtype}, BLOCK {args.block}, {args.num_warps} warps, {args.index} offsets (Triton); {mode}",
        [dict(r, us=r["seconds"] * 1e6) for r in rows],
        columns,
        caption=f"bandwidth: bytes read + written per rank (the slowest measuring rank); median of {args.iters} "
        f"samples, each {args.reps} launches queued back to back behind a spin (device time; on CPU ranks one "
        "launch). " + environment.summary(env),
    )  # fmt: skip
    big = [r["vs_triton"] for r in rows if r["vs_triton"] is not None and r["op"] != "local" and r["bytes"] >= 64 * MiB]
    if big:
        print(f"Gluon / Triton at >= 64 MiB: min {min(big):.3f}, median {statistics.median(big):.3f}")


def _print_atomics(atomics: list) -> None:
    lat = [r for r in atomics if r["section"] == "atomic latency"]
    tables.print_table(
        "remote atomic latency",
        lat,
        [("rank", "rank", "d"), ("op", "remote atomic (dependent chain)", ""), ("latency_us", "latency us", ".3f")],
    )
    thr = [dict(r, Mops=r["ops_per_s"] / 1e6) for r in atomics if r["section"] == "atomic throughput"]
    tables.print_table(
        "remote atomic throughput",
        thr,
        [("rank", "rank", "d"), ("op", "remote atomic throughput", ""), ("Mops", "Mops/s", ".2f")],
    )


def _csv_rows(rows: list, atomics: list, args: argparse.Namespace, env: dict, transport: str) -> tuple[list, list]:
    """The rows and columns of the CSV, in the backend's columns (see ``TRITON_CSV_COLUMNS``), each
    with the heap's ``transport``."""
    if args.backend == "triton":
        bandwidth = [{"rank": r["rank"], "section": "bandwidth", "op": r["case"], "bytes": r["bytes"],
                      "ranks": args.ranks, "ms": r["seconds"] * 1e3, "GBps": r["GBps"],
                      "ratio_vs_local": r["vs_local"], "transport": transport} for r in rows]  # fmt: skip
        return bandwidth + [dict(a, transport=transport) for a in atomics], TRITON_CSV_COLUMNS
    launches = "concurrent" if args.concurrent else "in turn" if args.all_turns else "rank 0"
    extra = {"ranks": args.ranks, "launches": launches, "dtype": args.dtype, "block": args.block,
             "warps": args.num_warps, "device": env["device"], "mps": env["mps"], "triton": env["triton"],
             "transport": transport}  # fmt: skip
    gluon = [{"size_bytes": r["bytes"], "op": r["op"], "impl": r["impl"], "seconds": r["seconds"],
              "rank_gbps": r["GBps"], "total_gbps": r["total_GBps"], "vs_local": r["vs_local"],
              "vs_triton": r["vs_triton"], **extra} for r in rows]  # fmt: skip
    return gluon, GLUON_CSV_COLUMNS


def report(results: list, args: argparse.Namespace) -> int:
    env = environment.describe(gpu=results[0]["device"].startswith("cuda"))
    rows = _bandwidth_rows(results, args)
    atomics = [row for r in results if r["atomics"] for row in r["atomics"]]
    _print_bandwidth(rows, results, args, env)
    if atomics:
        _print_atomics(atomics)
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        csv_rows, columns = _csv_rows(rows, atomics, args, env, results[0]["transport"])
        tables.write_csv(args.csv, csv_rows, columns=columns)
        print(f"wrote {args.csv}")
    if args.plot:
        tables.plot(args.plot, rows, x="bytes", y="GBps", series=("impl", "case"),
                    title=f"rma-bench ({args.backend}), {args.ranks} ranks", xlabel="bytes per buffer",
                    ylabel="GB/s per rank (read + written)")  # fmt: skip
    return 1 if bad else 0

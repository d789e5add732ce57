"""atomic-latency: the round trip of a remote atomic signal, and contended remote atomic_add throughput.

Ping-pong: ranks pair up (0-1, 2-3, ...). Each round the first rank of a pair signals the
peer's flag (``atomic_add`` of 1, or ``atomic_cas`` from the last value to the next, with
``sem="release"``) and waits on its own flag (the bounded ``wait``, acquire); the second rank
waits, then answers. Latency is the time of a kernel of ``--rounds`` rounds over the rounds.
Flags count rounds, so they never need clearing; afterwards each flag must equal the rounds its
peer signalled.

Contended throughput: every program lane of every rank adds 1 (``sem="relaxed"``) to one int64
counter on rank 0, ``--reps`` times per launch; afterwards rank 0's counter must equal the
total. Triton backend only.

``--trace FILE``: one event per program and kernel, not per atomic (``--rounds`` of them would
soon fill the buffer): each ping-pong kernel is an "atomic_add ping-pong" or "atomic_cas
ping-pong" (target rank: the peer; bytes: the rounds' 4-byte signals it sent), each program of
the contended kernel an "atomic_add contended" (rank 0; 8 bytes per add), warm-up and timed
kernels alike: the timed figures then include the tracing.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

import iris.heap
import iris.mem.triton as imt
from iris.mem.triton import Context

from .harness import environment, tables, timing, trace, validation
from .harness.options import positive_int

__all__ = ["SUMMARY", "add_arguments", "check_arguments", "rank_main", "report"]

SUMMARY = "remote atomic round trip (atomic_add/atomic_cas ping-pong) and contended atomic_add throughput"
BACKENDS = ("triton",)


@imt.interpret()
@triton.jit
def ping_pong_kernel(flag, context_ptr, peer, base, rounds, EVENT, FIRST: tl.constexpr, OP: tl.constexpr,
                     TRACE: tl.constexpr):  # fmt: skip
    """``rounds`` round trips with ``peer``: round i moves both flags to ``base + i``.

    ``TRACE``: record the whole exchange as event ``EVENT`` (target rank: the peer; bytes: the signals sent)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    exchange = tr.record_start(EVENT, peer, rounds * (flag.dtype.element_ty.primitive_bitwidth // 8))
    for i in range(1, rounds + 1):
        v = base + i
        if not FIRST:
            ctx.wait(flag, v, cmp=">=")
        if OP == "cas":
            ctx.atomic_cas(flag, v - 1, v, peer, sem="release")
        else:
            ctx.atomic_add(flag, 1, peer, sem="release")
        if FIRST:
            ctx.wait(flag, v, cmp=">=")
    tr.record_end(exchange)


@imt.interpret()
@triton.jit
def contended_add_kernel(counter, context_ptr, to_rank, EVENT, REPS: tl.constexpr, LANES: tl.constexpr,
                         TRACE: tl.constexpr):  # fmt: skip
    """Every lane adds 1 to the one word ``counter`` on ``to_rank``, REPS times.

    ``TRACE``: record the program's adds as event ``EVENT`` (target rank: ``to_rank``; bytes: each add's word)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    adds = tr.record_start(EVENT, to_rank, REPS * LANES * (counter.dtype.element_ty.primitive_bitwidth // 8))
    ptrs = counter + tl.arange(0, LANES) * 0
    for _ in range(REPS):
        ctx.atomic_add(ptrs, 1, to_rank, sem="relaxed")
    if TRACE:
        tl.debug_barrier()  # every lane's adds
    tr.record_end(adds)


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    parser.add_argument(
        "--rounds", type=positive_int, default=1000 if gpu else 20, help="round trips per ping-pong kernel"
    )
    parser.add_argument("--iters", type=positive_int, default=5 if gpu else 2, help="timed kernels per measurement")
    parser.add_argument(
        "--programs", type=positive_int, default=132 if gpu else 1, help="programs per rank (throughput)"
    )
    parser.add_argument(
        "--lanes", type=positive_int, default=256 if gpu else 64, help="lanes per program, a power of two"
    )
    parser.add_argument("--reps", type=positive_int, default=16 if gpu else 2, help="atomic_adds per lane per launch")


def check_arguments(args: argparse.Namespace) -> None:
    if args.ranks < 2:
        raise ValueError(f"atomic-latency needs at least 2 ranks (a ping-pong pair), got --ranks {args.ranks}")
    if args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a power of two, got {args.lanes}")


def rank_main(args: argparse.Namespace) -> dict:
    heap = iris.heap.init((1 << 20) + trace.heap_bytes(args))
    try:
        with trace.session(heap, args) as tracing:  # --trace: recorded, exported on success
            rank, world_size, device = heap.rank, heap.world_size, heap.device
            calls = 1 + args.iters  # warmup + timed, on every rank alike
            peer = rank ^ 1 if (rank ^ 1) < world_size else None  # the last rank of an odd world has no partner
            rows, mismatches = [], []
            # every rank names the events, in one order (a collective), paired or not
            events = {op: tracing.event(f"atomic_{op} ping-pong") for op in ("add", "cas")}
            events["contended"] = tracing.event("atomic_add contended")
            for op in ("add", "cas"):
                flag = heap.zeros(1, dtype=torch.int32)
                base = 0
                heap.barrier()
                if peer is not None:

                    def ping_pong(flag=flag, op=op):
                        nonlocal base
                        ping_pong_kernel[(1,)](flag, heap.context, peer, base, args.rounds, events[op], FIRST=rank < peer,
                                               OP=op, TRACE=tracing.on)  # fmt: skip
                        base += args.rounds

                    seconds = timing.time_launches(
                        ping_pong, reps=1, iters=args.iters, warmup=1, device=device, queued=False
                    )
                    rows.append({"section": "latency", "op": f"atomic_{op} ping-pong", "rank": rank, "peer": peer,
                                 "ranks": world_size, "latency_us": seconds * 1e6 / args.rounds})  # fmt: skip
                heap.barrier()  # raises WaitTimeoutError if a signal never came
                if peer is not None:
                    found = validation.compare(flag, torch.tensor([calls * args.rounds], dtype=torch.int32), rank=rank,
                                               what=f"atomic_{op} ping-pong flag (rounds signalled by rank {peer})")  # fmt: skip
                    mismatches += [found] if found is not None else []

            counter = heap.zeros(1, dtype=torch.int64)
            heap.barrier()

            def contended():
                contended_add_kernel[(args.programs,)](counter, heap.context, 0, events["contended"],
                                                       REPS=args.reps, LANES=args.lanes, TRACE=tracing.on)  # fmt: skip

            seconds = timing.time_launches(contended, reps=1, iters=args.iters, warmup=1, device=device, queued=False)
            heap.barrier()
            per_call = args.programs * args.lanes * args.reps
            total = calls * per_call * world_size if rank == 0 else 0
            found = validation.compare(counter, torch.tensor([total], dtype=torch.int64), rank=rank,
                                       what="contended atomic_add counter on rank 0 (every add of every rank)")  # fmt: skip
            mismatches += [found] if found is not None else []
            rows.append({"section": "throughput", "op": "atomic_add contended (one word on rank 0)", "rank": rank,
                         "ranks": world_size, "ops_per_call": per_call, "Mops": per_call / seconds / 1e6})  # fmt: skip
            return {"rows": rows, "mismatches": mismatches, "gpu": device.type == "cuda"}
    finally:
        heap.close()


def report(results: list, args: argparse.Namespace) -> int:
    rows = [row for r in results for row in r["rows"]]
    env = environment.describe(gpu=results[0]["gpu"])
    tables.print_table(
        f"remote atomic round trip: {args.ranks} ranks in pairs, {args.rounds} rounds per kernel",
        [r for r in rows if r["section"] == "latency"],
        [("op", "op", ""), ("rank", "rank", "d"), ("peer", "peer", "d"), ("latency_us", "round trip us", ".3f")],
        caption=environment.summary(env),
    )
    thr = [r for r in rows if r["section"] == "throughput"]
    aggregate = {"op": "all ranks (sum)", "rank": None, "ops_per_call": sum(r["ops_per_call"] for r in thr),
                 "Mops": sum(r["Mops"] for r in thr)}  # fmt: skip
    tables.print_table(
        f"contended remote atomic_add: every rank into one word on rank 0, {args.programs} programs x "
        f"{args.lanes} lanes x {args.reps} reps per rank",
        [*thr, aggregate],
        [("op", "op", ""), ("rank", "rank", "d"), ("ops_per_call", "adds/launch", "d"), ("Mops", "Mops/s", ".3f")],
    )  # fmt: skip
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        tables.write_csv(args.csv, [dict(row, device=env["device"], mps=env["mps"]) for row in rows])
    if args.plot:
        tables.plot(args.plot, [r for r in rows if r["section"] == "latency"], x="rank", y="latency_us", series="op",
                    title="remote atomic round trip", xlabel="rank", ylabel="us per round trip", logx=False)  # fmt: skip
    return 1 if bad else 0

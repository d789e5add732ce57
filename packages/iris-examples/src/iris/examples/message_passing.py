"""Message passing between ranks: put, release a flag per block, acquire-wait, check.

Every rank is a producer and a consumer at once, in a ring: rank r puts its blocks into rank
(r+1) % N's receive buffer (``ctx.put``) and, per block, releases a flag on that rank
(``atomic_add``, ``sem="release"``, after a barrier of the program's threads); the consumer waits
on each flag with the mem layer's bounded ``wait`` (acquire) and then copies the block out. The
copy is checked against torch's payload of rank (r-1) % N. At world size 1 the rank sends to
itself.

A round is one producer launch then one consumer launch; flags count rounds, so they never need
clearing. The table shows each rank's time per round and the bandwidth of its sent bytes.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.heap
import iris.mem.gluon as img
import iris.mem.triton as imt
from iris.mem.gluon import Context as GluonContext
from iris.mem.triton import Context

from .harness import environment, tables, timing, trace, validation
from .harness.options import DTYPES, dtype_type, positive_int
from .harness.units import format_bytes, size_type

__all__ = ["SUMMARY", "add_arguments", "check_arguments", "payload", "rank_main", "report"]

SUMMARY = (
    "producer puts blocks into a peer's heap and releases a flag per block; the consumer waits (acquire) and checks"
)
BACKENDS = ("triton", "gluon")


# -- kernels: Triton ------------------------------------------------------------------------------


@imt.interpret()
@triton.jit
def produce_kernel(src, dst, flags, context_ptr, n, to_rank, BLOCK_ELEMS, PUT, SIGNAL, TILE: tl.constexpr,
                   TRACE: tl.constexpr):  # fmt: skip
    """Program b: put block b of the local ``src`` into ``to_rank``'s ``dst``, then release its flag there.

    ``TRACE``: record the put (event ``PUT``: target rank, bytes) and the signal (an instant)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    block = tl.program_id(0)
    start = block.to(tl.int64) * BLOCK_ELEMS
    nbytes = tl.minimum(BLOCK_ELEMS, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    put = tr.record_start(PUT, to_rank, nbytes)
    for t in range(0, BLOCK_ELEMS, TILE):
        offs = start + t + tl.arange(0, TILE)
        ctx.put(src + offs, dst + offs, to_rank, mask=(offs < start + BLOCK_ELEMS) & (offs < n))
    tl.debug_barrier()  # every thread's stores before the signal
    tr.record_end(put)
    ctx.atomic_add(flags + block, 1, to_rank, sem="release")
    tr.record_instant(SIGNAL, to_rank, 4)


@imt.interpret()
@triton.jit
def consume_kernel(buf, out, flags, context_ptr, n, epoch, BLOCK_ELEMS, WAIT, COPY, TILE: tl.constexpr,
                   TRACE: tl.constexpr):  # fmt: skip
    """Program b: wait (acquire) until block b's local flag reaches ``epoch``, then copy the block to ``out``.

    ``TRACE``: record the wait (event ``WAIT``) and the copy (``COPY``: bytes)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    block = tl.program_id(0)
    start = block.to(tl.int64) * BLOCK_ELEMS
    waited = tr.record_start(WAIT, ctx.rank, 0)
    arrived = ctx.wait(flags + block, epoch, cmp=">=")
    tr.record_end(waited)
    if arrived:
        copy = tr.record_start(
            COPY, ctx.rank, tl.minimum(BLOCK_ELEMS, n - start) * out.dtype.element_ty.primitive_bitwidth // 8
        )
        for t in range(0, BLOCK_ELEMS, TILE):
            offs = start + t + tl.arange(0, TILE)
            mask = (offs < start + BLOCK_ELEMS) & (offs < n)
            tl.store(out + offs, tl.load(buf + offs, mask=mask), mask=mask)
        tr.record_end(copy)


# -- kernels: Gluon (the same, with explicit layouts) -----------------------------------------------


@img.interpret()
@gluon.jit
def gluon_produce_kernel(src, dst, flags, context_ptr, n, to_rank, BLOCK_ELEMS, PUT, SIGNAL, TILE: gl.constexpr,
                         TRACE: gl.constexpr, LAYOUT: gl.constexpr):  # fmt: skip
    ctx = GluonContext.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    block = gl.program_id(0)
    start = block.to(gl.int64) * BLOCK_ELEMS
    nbytes = gl.minimum(BLOCK_ELEMS, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    put = tr.record_start(PUT, to_rank, nbytes)
    for t in range(0, BLOCK_ELEMS, TILE):
        offs = start + t + gl.arange(0, TILE, layout=LAYOUT)
        ctx.put(src + offs, dst + offs, to_rank, mask=(offs < start + BLOCK_ELEMS) & (offs < n))
    img.barrier()
    tr.record_end(put)
    ctx.atomic_add(flags + block, 1, to_rank, sem="release")
    tr.record_instant(SIGNAL, to_rank, 4)


@img.interpret()
@gluon.jit
def gluon_consume_kernel(buf, out, flags, context_ptr, n, epoch, BLOCK_ELEMS, WAIT, COPY, TILE: gl.constexpr,
                         TRACE: gl.constexpr, LAYOUT: gl.constexpr):  # fmt: skip
    ctx = GluonContext.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    block = gl.program_id(0)
    start = block.to(gl.int64) * BLOCK_ELEMS
    waited = tr.record_start(WAIT, ctx.rank, 0)
    arrived = ctx.wait(flags + block, epoch, ">=")
    tr.record_end(waited)
    if arrived:
        copy = tr.record_start(
            COPY, ctx.rank, gl.minimum(BLOCK_ELEMS, n - start) * out.dtype.element_ty.primitive_bitwidth // 8
        )
        for t in range(0, BLOCK_ELEMS, TILE):
            offs = start + t + gl.arange(0, TILE, layout=LAYOUT)
            mask = (offs < start + BLOCK_ELEMS) & (offs < n)
            gl.store(out + offs, gl.load(buf + offs, mask=mask), mask=mask)
        tr.record_end(copy)


# -- host -----------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    parser.add_argument(
        "--blocks", type=positive_int, default=64 if gpu else 4, help="blocks per round (one program each)"
    )
    parser.add_argument("--block-size", type=size_type, default="1M" if gpu else "4K", help="bytes per block")
    parser.add_argument("--dtype", type=dtype_type, default="float32", help=f"element type ({', '.join(DTYPES)})")
    parser.add_argument("--iters", type=positive_int, default=20 if gpu else 3, help="timed rounds")
    parser.add_argument("--num-warps", type=positive_int, default=4, help="warps per program on a GPU")


def check_arguments(args: argparse.Namespace) -> None:
    elem = args.dtype.itemsize
    if args.block_size % elem:
        raise ValueError(
            f"--block-size {args.block_size} is not a whole number of {args.dtype} elements ({elem} bytes each)"
        )


def payload(rank: int, n: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """What rank ``rank`` sends: small positive integers (exact in every dtype), never zero."""
    return ((torch.arange(n, dtype=torch.int64, device=device) * 7 + 13 * rank) % 127 + 1).to(dtype)


def _tile(block_elems: int, gpu: bool) -> int:
    cap = 4096 if gpu else 1 << 16
    return 1 << (min(block_elems, cap).bit_length() - 1)


def rank_main(args: argparse.Namespace) -> dict:
    elem = args.dtype.itemsize
    block_elems = args.block_size // elem
    n = args.blocks * block_elems
    heap = iris.heap.init(2 * n * elem + args.blocks * 4 + (1 << 20) + trace.heap_bytes(args))
    try:
        rank, world_size, gpu = heap.rank, heap.world_size, heap.device.type == "cuda"
        to_rank, from_rank = (rank + 1) % world_size, (rank - 1) % world_size
        send = heap.empty(n, dtype=args.dtype)
        send.copy_(payload(rank, n, args.dtype, heap.device))
        recv = heap.zeros(n, dtype=args.dtype)
        flags = heap.zeros(args.blocks, dtype=torch.int32)
        out = torch.zeros(n, dtype=args.dtype, device=heap.device)
        tile, grid, warps = _tile(block_elems, gpu), (args.blocks,), args.num_warps
        if args.backend == "gluon":
            layout = img.blocked_layout(tile, warps, dtype=args.dtype)
            produce, consume, extra = gluon_produce_kernel, gluon_consume_kernel, {"LAYOUT": layout}
        else:
            produce, consume, extra = produce_kernel, consume_kernel, {}
        epoch = 0
        with trace.session(heap, args) as tracing:  # --trace: recorded, exported on success
            put, signal, wait, copy = (tracing.event(e) for e in ("remote store", "signal", "flag wait", "copy out"))
            extra["TRACE"] = tracing.on

            def one_round():
                nonlocal epoch
                epoch += 1
                produce[grid](send, recv, flags, heap.context, n, to_rank, block_elems, put, signal, TILE=tile,
                              num_warps=warps, **extra)  # fmt: skip
                consume[grid](recv, out, flags, heap.context, n, epoch, block_elems, wait, copy, TILE=tile,
                              num_warps=warps, **extra)  # fmt: skip

            heap.barrier()
            one_round()
            heap.barrier()  # raises WaitTimeoutError if a flag never came
            expected = payload(from_rank, n, args.dtype)
            mismatches = [validation.compare(out, expected, rank=rank, what=f"blocks received from rank {from_rank}")]
            out.zero_()
            seconds = timing.time_launches(
                one_round, reps=1, iters=args.iters, warmup=1, device=heap.device, queued=False
            )
            heap.barrier()
            mismatches.append(
                validation.compare(
                    out, expected, rank=rank, what=f"blocks received from rank {from_rank}, timed rounds"
                )
            )
            row = {"rank": rank, "to_rank": to_rank, "from_rank": from_rank, "blocks": args.blocks,
                   "block_bytes": args.block_size, "bytes": n * elem, "dtype": str(args.dtype).removeprefix("torch."),
                   "backend": args.backend, "ranks": world_size, "time_us": seconds * 1e6,
                   "GBps": n * elem / seconds / 1e9}  # fmt: skip
            mismatches = [m for m in mismatches if m is not None]
            row["check"] = "ok" if not mismatches else "MISMATCH"
            return {"row": row, "mismatches": mismatches, "gpu": gpu}
    finally:
        heap.close()


def report(results: list, args: argparse.Namespace) -> int:
    rows = [r["row"] for r in results]
    env = environment.describe(gpu=results[0]["gpu"])
    tables.print_table(
        f"message passing ({args.backend}): {args.ranks} ranks, {args.blocks} x {format_bytes(args.block_size)} "
        f"blocks of {rows[0]['dtype']} per round",
        rows,
        [("rank", "rank", "d"), ("to_rank", "sends to", "d"), ("from_rank", "receives from", "d"),
         ("bytes", "bytes/round", format_bytes), ("time_us", "us/round", ".1f"), ("GBps", "GB/s", ".3g"),
         ("check", "vs torch", "")],
        caption=environment.summary(env),
    )  # fmt: skip
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        tables.write_csv(
            args.csv, [dict(row, **{k: v for k, v in env.items() if k in ("device", "mps")}) for row in rows]
        )
    if args.plot:
        tables.plot(args.plot, rows, x="rank", y="GBps", series="backend", title="message passing bandwidth per rank",
                    xlabel="rank", ylabel="GB/s (bytes sent per round / time)", logx=False)  # fmt: skip
    return 1 if bad else 0

"""The size sweep that all-load and all-store share: buffers, baselines, timing, tables, plot.

For each size (bytes of each rank's buffer) every rank runs the example's kernel, which moves
one buffer between this rank and every rank (itself included), and two local baselines that
move the same bytes: a Triton copy kernel of ``W * size`` bytes and ``torch.Tensor.copy_``.
Bandwidth counts bytes read plus bytes written (``2 * W * size`` per call for each of them), so
"vs local copy" is the fraction of the local copy rate that the remote traffic reaches.
Every size is checked against torch after its timed calls.

With ``--trace`` every program of the remote kernel records one event (the operation's: target
rank the peer, bytes what the program moved), warm-up and timed calls alike, so the timed calls
include the tracing; the local baselines are not traced.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

import iris.heap
import iris.mem.gluon as img

from .harness import environment, tables, timing, trace, validation
from .harness.options import positive_int
from .harness.units import format_bytes, size_type

__all__ = ["Operation", "add_arguments", "payload", "report", "run"]


@dataclass(frozen=True)
class Operation:
    """One remote operation in the sweep.

    ``launch(heap, src, dst, n, block, backend, num_warps, event, trace)`` moves the buffers once,
    leaving row j of ``dst`` (W rows of n) equal to rank j's ``src``; with ``trace`` (the kernel's
    ``TRACE`` constexpr) each program records ``event`` (the id of ``Operation.event``: target rank
    the peer, bytes what the program moved). ``dst_on_heap`` says whether ``dst`` lives on the heap
    (all-store writes into peers) or may be local (all-load reads peers into it).
    """

    name: str
    launch: Callable
    dst_on_heap: bool
    event: str


@triton.jit
def local_copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    """The baseline: a plain local copy of n elements."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def payload(rank: int, n: int, device="cpu") -> torch.Tensor:
    """Rank ``rank``'s buffer: fp32 values that differ between ranks and along the buffer."""
    return torch.arange(n, dtype=torch.float32, device=device) * 0.5 + 1000.0 * (rank + 1)


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    default = ["1M", "4M", "16M", "64M", "256M"] if gpu else ["16K", "64K"]
    parser.add_argument("sizes", nargs="*", type=size_type, default=[size_type(s) for s in default],
                        help=f"bytes of each rank's buffer (default {' '.join(default)})")  # fmt: skip
    parser.add_argument("--iters", type=positive_int, default=20 if gpu else 2, help="timed calls per size")
    parser.add_argument("--block", type=positive_int, default=4096, help="elements per program (a power of two)")
    parser.add_argument("--num-warps", type=positive_int, default=8 if gpu else 4, help="warps per program on a GPU")


def check_arguments(args: argparse.Namespace) -> None:
    if args.block & (args.block - 1):
        raise ValueError(f"--block must be a power of two, got {args.block}")
    bad = [s for s in args.sizes if s % 4]
    if bad:
        raise ValueError(f"sizes must be whole numbers of float32 elements (multiples of 4 bytes), got {bad}")


def run(args: argparse.Namespace, op: Operation) -> dict:
    """One rank's sweep: rows of timings and the mismatches against torch."""
    sizes = sorted(set(args.sizes))
    biggest = sizes[-1] // 4
    world_size = args.ranks
    heap = iris.heap.init(
        biggest * 4 * (1 + (world_size if op.dst_on_heap else 0)) + (1 << 20) + trace.heap_bytes(args)
    )
    try:
        rank, device, gpu = heap.rank, heap.device, heap.device.type == "cuda"
        src_all = heap.empty(biggest)
        dst_all = (
            heap.empty(world_size * biggest) if op.dst_on_heap else torch.empty(world_size * biggest, device=device)
        )
        copy_src = torch.empty(world_size * biggest, device=device)
        copy_dst = torch.empty(world_size * biggest, device=device)
        rows, mismatches = [], []
        progress = tables.progress(f"{op.name} sweep", len(sizes), enabled=rank == 0)
        with trace.session(heap, args) as tracing, progress as bar:  # --trace: exported on success
            event = tracing.event(op.event)
            for size in sizes:
                n = size // 4
                src, dst = src_all[:n], dst_all[: world_size * n]
                src.copy_(payload(rank, n, device))
                dst.zero_()
                a, b = copy_src[: world_size * n], copy_dst[: world_size * n]
                grid = (triton.cdiv(world_size * n, args.block),)
                cases = {
                    op.name: lambda src=src, dst=dst, n=n: op.launch(
                        heap, src, dst, n, args.block, args.backend, args.num_warps, event, tracing.on
                    ),
                    "triton local copy": lambda a=a, b=b, grid=grid: local_copy_kernel[grid](
                        a, b, a.numel(), BLOCK=args.block, num_warps=args.num_warps
                    ),
                    "torch copy_": lambda a=a, b=b: b.copy_(a),
                }
                heap.barrier()
                times = {}
                for name, fn in cases.items():
                    times[name] = timing.time_launches(
                        fn, reps=1, iters=args.iters, warmup=1, device=device, queued=False
                    )
                    heap.barrier()  # every rank's stores are in, and device-side errors surface
                # row j of dst holds rank j's buffer: all-load read it from rank j, all-store got it from rank j
                expected = torch.cat([payload(j, n) for j in range(world_size)])
                found = validation.compare(dst, expected, rank=rank, what=f"{op.name} of {format_bytes(size)}")
                if found is not None:
                    mismatches.append(found)
                for name, seconds in times.items():
                    rows.append({"op": name, "bytes": size, "rank": rank, "ranks": world_size, "backend": args.backend,
                                 "time_us": seconds * 1e6, "GBps": 2 * world_size * size / seconds / 1e9,
                                 "vs_local_copy": times["triton local copy"] / seconds})  # fmt: skip
                bar.advance()
        return {"rows": rows, "mismatches": mismatches, "gpu": gpu}
    finally:
        heap.close()


def report(results: list, args: argparse.Namespace, title: str) -> int:
    per_rank = [row for r in results for row in r["rows"]]
    summary = []
    for key in dict.fromkeys((row["bytes"], row["op"]) for row in per_rank):
        group = [row for row in per_rank if (row["bytes"], row["op"]) == key]
        summary.append({"bytes": key[0], "op": key[1], "ranks": args.ranks, "backend": args.backend,
                        "time_us": max(g["time_us"] for g in group),
                        "GBps": statistics.median(g["GBps"] for g in group),
                        "GBps_min": min(g["GBps"] for g in group),
                        "vs_local_copy": statistics.median(g["vs_local_copy"] for g in group)})  # fmt: skip
    env = environment.describe(gpu=results[0]["gpu"])
    tables.print_table(
        f"{title} ({args.backend}): {args.ranks} ranks, median over ranks",
        summary,
        [("bytes", "buffer/rank", format_bytes), ("op", "op", ""), ("time_us", "us (slowest rank)", ".1f"),
         ("GBps", "GB/s per rank", ".3g"), ("GBps_min", "GB/s (min rank)", ".3g"),
         ("vs_local_copy", "vs local copy", ".3f")],
        caption="GB/s counts bytes read + written (2 x ranks x buffer per call). " + environment.summary(env),
    )  # fmt: skip
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        tables.write_csv(args.csv, [dict(row, device=env["device"], mps=env["mps"]) for row in per_rank])
    if args.plot:
        tables.plot(args.plot, summary, x="bytes", y="GBps", series="op", title=f"{title}: {args.ranks} ranks",
                    xlabel="bytes per rank buffer", ylabel="GB/s per rank (read + written)")  # fmt: skip
    return 1 if bad else 0


def gluon_layout(block: int, num_warps: int):
    """The Gluon tile layout of ``block`` fp32 elements over ``num_warps`` warps (the target's warp size)."""
    return img.blocked_layout(block, num_warps, dtype=torch.float32)

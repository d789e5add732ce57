"""Remote put / get / copy bandwidth of iris.mem.gluon, against a local Gluon copy and the same
operations written with iris.mem.triton (it lives in iris-examples, the layer that has both).

    python bench_gluon_rma.py --ranks 2                      # 1 MiB .. 1 GiB on a GPU
    python bench_gluon_rma.py --ranks 4 --csv rma.csv        # also write the table as CSV
    python bench_gluon_rma.py --sizes 64M,256M --ops put     # a subset

Ranks take turns: each timed launch runs while the other ranks wait at a host barrier, so every
figure is one rank's with the GPU to itself and Gluon and Triton are compared under the same
conditions (with ``--concurrent`` every rank launches at once after a barrier instead; ranks
sharing a GPU then overlap by chance, and the ratios swing with it). Each rank works over its own
buffers: ``put`` writes our ``src`` into the next rank's ``dst``,
``get`` reads the next rank's ``src`` into our ``dst``, ``copy`` moves the next rank's ``src``
into the rank after it (with 2 ranks: into ours). ``local`` is a plain Gluon copy with no
translation. Bandwidth counts the bytes read plus the bytes written, per rank (the slowest
rank's median time) and, with ``--concurrent``, summed over ranks. Several ranks may share one GPU (run under MPS for
concurrency; the header says whether an MPS server is running). Without a GPU the kernels run
on CPU ranks (TRITON_INTERPRET=1) at tiny sizes: a smoke test, not a measurement.

This is a program that prints a table, not a test.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported, here and in the ranks

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402

import iris.heap  # noqa: E402
import iris.mem.gluon as img  # noqa: E402
import iris.mem.triton as imt  # noqa: E402
from iris.heap.testing import time_launches  # noqa: E402

OPS = ("put", "get", "copy")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8}


# -- Gluon kernels ----------------------------------------------------------------------------------


@gluon.jit
def gluon_local_copy(src, dst, context_ptr, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    gl.store(dst + offs, gl.load(src + offs, mask=mask), mask=mask)


@gluon.jit
def gluon_rma(src, dst, context_ptr, n, OP: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr):
    ctx = img.Context.initialize(context_ptr)
    nxt = (ctx.rank + 1) % ctx.world_size
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    if OP == "put":
        ctx.put(src + offs, dst + offs, nxt, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, nxt, mask=mask)
    else:
        ctx.copy(src + offs, dst + offs, nxt, (ctx.rank + 2) % ctx.world_size, mask=mask)


# -- the same with iris.mem.triton -----------------------------------------------------------------


@triton.jit
def triton_local_copy(src, dst, context_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@triton.jit
def triton_rma(src, dst, context_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    ctx = imt.Context.initialize(context_ptr)
    nxt = (ctx.rank + 1) % ctx.world_size
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if OP == "put":
        ctx.put(src + offs, dst + offs, nxt, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, nxt, mask=mask)
    else:
        ctx.copy(src + offs, dst + offs, nxt, (ctx.rank + 2) % ctx.world_size, mask=mask)


# -- one rank's measurements ------------------------------------------------------------------------


def _cases(ops, with_triton):
    """(impl, op) pairs, the local copies first (they are the reference)."""
    cases = [("gluon", "local")] + [("gluon", op) for op in ops]
    if with_triton:
        cases += [("triton", "local")] + [("triton", op) for op in ops]
    return cases


def _launcher(impl, op, src, dst, heap, n, cfg):
    grid = (triton.cdiv(n, cfg["block"]),)
    if impl == "gluon":
        layout = img.blocked_layout(cfg["block"], cfg["warps"], dtype=src.dtype)
        if op == "local":
            return lambda: gluon_local_copy[grid](
                src, dst, heap.context, n, BLOCK=cfg["block"], L=layout, num_warps=cfg["warps"]
            )
        return lambda: gluon_rma[grid](
            src, dst, heap.context, n, OP=op, BLOCK=cfg["block"], L=layout, num_warps=cfg["warps"]
        )
    if op == "local":
        return lambda: triton_local_copy[grid](src, dst, heap.context, n, BLOCK=cfg["block"], num_warps=cfg["warps"])
    return lambda: triton_rma[grid](src, dst, heap.context, n, OP=op, BLOCK=cfg["block"], num_warps=cfg["warps"])


def _expected_source(rank, world_size, op):
    """Whose src ends up in this rank's dst (src of rank r holds r + 1 everywhere)."""
    if op == "local":
        return rank
    if op == "put":
        return (rank - 1) % world_size
    if op == "get":
        return (rank + 1) % world_size
    return (rank - 1) % world_size  # copy: rank r-2 moved rank r-1's src here


def _time_once(fn, device, reps: int) -> float:
    """Seconds per launch: on a GPU the device time of ``reps`` launches queued back to back
    behind a spin (``iris.heap.testing.time_launches``), so neither the host's launch path nor an
    idle GPU between launches is in the figure; on CPU the wall time of one launch."""
    return time_launches(fn, reps=reps if device.type == "cuda" else 1, iters=1, warmup=1, device=device)


def bench_rank(rank, world_size, cfg):
    """Median seconds per (size, impl, op) on this rank."""
    dtype = DTYPES[cfg["dtype"]]
    itemsize = torch.empty(0, dtype=dtype).element_size()
    biggest = max(cfg["sizes"])
    heap = iris.heap.init(2 * biggest + (1 << 20))
    with_triton = not cfg["no_triton"]
    results = {}
    for size in cfg["sizes"]:
        n = size // itemsize
        src = heap.full((n,), rank + 1, dtype=dtype)
        dst = heap.zeros(n, dtype=dtype)
        cases = _cases(cfg["ops"], with_triton)
        launchers = {case: _launcher(*case, src, dst, heap, n, cfg) for case in cases}
        times = {case: [] for case in cases}
        for case in cases:  # warm-up (compiles), and a correctness check of each case
            dst.zero_()
            heap.barrier()
            for _ in range(cfg["warmup"]):
                launchers[case]()
            heap.barrier()
            want = _expected_source(rank, world_size, case[1]) + 1
            if not bool((dst == want).all()):
                raise AssertionError(f"rank {rank}: {case} at {size} bytes did not deliver rank {want - 1}'s data")
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
    return results


# -- the table --------------------------------------------------------------------------------------


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _human(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _mps_running() -> str:
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        if f.read().strip().startswith("nvidia-cuda-mps"):
                            return "on"
                except OSError:
                    continue
        return "off"
    except OSError:
        return "unknown"


def main(argv=None) -> int:
    gpu = torch.cuda.is_available()
    default_sizes = [1 << p for p in range(20, 31, 2)] if gpu else [1 << 16, 1 << 18]
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ranks", type=int, default=2, help="rank processes (sharing the GPU(s)); default 2")
    p.add_argument("--sizes", type=lambda s: [_parse_size(x) for x in s.split(",")], default=default_sizes,
                   help="comma-separated buffer sizes per rank, e.g. 1M,64M,1G (default: 1 MiB..1 GiB, x4 steps)")  # fmt: skip
    p.add_argument("--ops", type=lambda s: tuple(s.split(",")), default=OPS, help="subset of put,get,copy")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--block", type=int, default=4096, help="elements per program (default 4096)")
    p.add_argument("--warps", type=int, default=8, help="num_warps (default 8)")
    p.add_argument("--iters", type=int, default=20 if gpu else 2, help="timed launches per case")
    p.add_argument("--warmup", type=int, default=3 if gpu else 1)
    p.add_argument("--reps", type=int, default=5, help="back-to-back launches per timed sample (GPU)")
    p.add_argument("--no-triton", action="store_true", help="skip the iris.mem.triton comparison")
    p.add_argument("--concurrent", action="store_true", help="every rank launches at once (default: in turn)")
    p.add_argument("--csv", help="also write the results to this CSV file")
    args = p.parse_args(argv)
    for name in ("iters", "reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    for op in args.ops:
        if op not in OPS:
            p.error(f"--ops: {op!r} is not one of {', '.join(OPS)}")
    cfg = dict(sizes=args.sizes, ops=args.ops, dtype=args.dtype, block=args.block, warps=args.warps,
               iters=args.iters, warmup=args.warmup, reps=args.reps, no_triton=args.no_triton, concurrent=args.concurrent)  # fmt: skip

    device = torch.cuda.get_device_name(0) if gpu else "CPU ranks (Triton interpreter: a smoke test, not a measurement)"
    with_triton = not args.no_triton
    print(
        f"iris.mem.gluon {img.__version__} RMA bandwidth | {args.ranks} ranks on {device} | MPS {_mps_running() if gpu else 'n/a'}"
    )
    print(f"triton {triton.__version__} | {args.dtype} | BLOCK {args.block}, {args.warps} warps | median of {args.iters} samples, each {args.reps} launches queued back to back behind a spin (device time)"
          f" | Triton backend: {'iris.mem.triton ' + imt.__version__ if with_triton else 'not compared'}")  # fmt: skip
    mode = "all ranks at once" if args.concurrent else "one rank at a time, the others waiting"
    print(f"bandwidth = bytes read + written; per rank (slowest rank) and summed over ranks; launches: {mode}\n")

    per_rank = iris.heap.testing.run(bench_rank, args.ranks, cfg)
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

    header = f"{'size':>9} {'op':>6} {'impl':>7} {'time us':>10} {'GB/s/rank':>10} {'GB/s all':>10} {'vs local':>9} {'vs triton':>10}"
    print(header)
    print("-" * len(header))
    last = None
    for r in rows:
        if last is not None and r["size_bytes"] != last:
            print()
        last = r["size_bytes"]
        vs_triton = f"{r['vs_triton']:.3f}" if r["vs_triton"] is not None else ""
        total = f"{r['total_gbps']:.2f}" if r["total_gbps"] is not None else "-"
        print(f"{_human(r['size_bytes']):>9} {r['op']:>6} {r['impl']:>7} {r['seconds'] * 1e6:>10.1f} {r['rank_gbps']:>10.2f}"
              f" {total:>10} {r['vs_local']:>9.3f} {vs_triton:>10}")  # fmt: skip
    if with_triton:
        big = [
            r["vs_triton"]
            for r in rows
            if r["vs_triton"] is not None and r["op"] != "local" and r["size_bytes"] >= 64 << 20
        ]
        if big:
            print(
                f"\nGluon / Triton at >= 64 MiB (put/get/copy): min {min(big):.3f}, median {statistics.median(big):.3f}"
            )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            fields = [
                "size_bytes",
                "op",
                "impl",
                "ranks",
                "seconds",
                "rank_gbps",
                "total_gbps",
                "vs_local",
                "vs_triton",
            ]
            writer = csv.DictWriter(
                f, fieldnames=fields + ["launches", "dtype", "block", "warps", "device", "mps", "triton"]
            )
            writer.writeheader()
            for r in rows:
                writer.writerow({**r, "launches": "concurrent" if args.concurrent else "in turn", "dtype": args.dtype, "block": args.block, "warps": args.warps, "device": device,
                                 "mps": _mps_running() if gpu else "n/a", "triton": triton.__version__})  # fmt: skip
        print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bandwidth of translated remote load/store/get/put/copy against a local Triton copy and
torch's copy_, and latency/throughput of remote atomics. A program, not a test.

    python bench_rma.py --ranks 2 [--csv out.csv]          # spawns the ranks itself
    torchrun --nproc-per-node 2 bench_rma.py [--csv out.csv]

Several ranks may share one GPU (CUDA IPC). Without a GPU it runs on CPU ranks under Triton's
interpreter at tiny sizes, only to show that it runs. By default ranks take turns (``--turns``):
one rank measures while the others wait, so the figures show what translation costs, not how
processes share the GPU; ``--concurrent`` runs every rank at once. Bandwidth counts the bytes
read plus the bytes written.
"""

import argparse
import csv
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is defined

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import iris.heap  # noqa: E402
from iris.heap.testing import time_launches  # noqa: E402
from iris.mem.triton import Context  # noqa: E402

MiB = 1 << 20


# -- kernels ---------------------------------------------------------------------------------------


@triton.jit
def _offsets(BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """This program's element offsets, in int64 (``--index int64``) or int32 arithmetic."""
    if WIDE:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return offs


@triton.jit
def local_copy_kernel(src, dst, n, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    offs = _offsets(BLOCK, WIDE)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@triton.jit
def remote_copy_kernel(src, dst, n, context_ptr, OP: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """OP: load (peer src -> local dst by ctx.load), store (local -> peer by ctx.store), get, put,
    copy (peer src -> other peer's dst; with 2 ranks both are the one peer)."""
    ctx = Context.initialize(context_ptr)
    peer = (ctx.rank + 1) % ctx.world_size
    offs = _offsets(BLOCK, WIDE)
    mask = offs < n
    if OP == "load":
        tl.store(dst + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    elif OP == "store":
        ctx.store(dst + offs, tl.load(src + offs, mask=mask), peer, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, peer, mask=mask)
    elif OP == "put":
        ctx.put(src + offs, dst + offs, peer, mask=mask)
    else:
        other = (ctx.rank + ctx.world_size - 1) % ctx.world_size
        ctx.copy(src + offs, dst + offs, peer, other, mask=mask)


@triton.jit
def atomic_chain_kernel(counter, context_ptr, K, OP: tl.constexpr, SEM: tl.constexpr):
    """K dependent remote atomics on the peer's counter (each value depends on the last old value)."""
    ctx = Context.initialize(context_ptr)
    peer = (ctx.rank + 1) % ctx.world_size
    v = 1
    for _ in range(K):
        if OP == "cas":
            old = ctx.atomic_cas(counter, 0, 0, peer, sem=SEM)
        else:
            old = ctx.atomic_add(counter, v, peer, sem=SEM)
        v = 1 + (old >> 30)  # counters stay below 2**30: always 1, but not foldable


@triton.jit
def atomic_throughput_kernel(counters, context_ptr, REPS: tl.constexpr, LANES: tl.constexpr, CONTENDED: tl.constexpr,
                             SEM: tl.constexpr):  # fmt: skip
    """Every lane of every program adds 1 REPS times to the peer's counters (distinct words, or one)."""
    ctx = Context.initialize(context_ptr)
    peer = (ctx.rank + 1) % ctx.world_size
    lane = tl.arange(0, LANES)
    if CONTENDED:
        ptrs = counters + lane * 0
    else:
        ptrs = counters + tl.program_id(0) * LANES + lane
    for _ in range(REPS):
        ctx.atomic_add(ptrs, 1, peer, sem=SEM)


# -- measurement -----------------------------------------------------------------------------------


def _time_ms(fn, device, iters, warmup, reps=1):
    """Median milliseconds per launch of fn(): on a GPU the device time of ``reps`` launches
    queued back to back (``iris.heap.testing.time_launches``), so neither the host's launch path
    nor an idle GPU between launches is counted; on CPU the wall time of one launch."""
    gpu = device.type == "cuda"
    return 1e3 * time_launches(fn, reps=reps if gpu else 1, iters=iters, warmup=warmup, device=device)


def _mps_state(device):
    if device.type != "cuda":
        return "n/a (CPU ranks)"
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    if os.path.exists(os.path.join(pipe, "control")):
        return f"active (control pipe in {pipe})"
    return "not detected (unknown: no MPS control pipe found)"


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


def _measure(rank, world_size, opts, heap, src, dst, counters):
    """This rank's rows (run while the other ranks wait, unless --concurrent)."""
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
        for op in ("load", "store", "get", "put", "copy"):
            cases[f"remote {op}"] = lambda s=s, d=d, n=n, g=grid, op=op: remote_copy_kernel[g](
                s, d, n, heap.context, OP=op, BLOCK=block, WIDE=wide, num_warps=warps
            )
        times = {name: _time_ms(fn, device, iters, warmup, opts["reps"]) for name, fn in cases.items()}
        local = times["triton local copy"]
        for name, ms in times.items():
            rows.append({"section": "bandwidth", "op": name, "bytes": size, "ranks": world_size, "ms": ms,
                         "GBps": 2 * size / (ms * 1e-3) / 1e9, "ratio_vs_local": local / ms})  # fmt: skip
    k = opts["atomic_chain"] if gpu else 20
    for op, sem in (("add", "relaxed"), ("add", "acq_rel"), ("cas", "acq_rel")):
        chain = lambda op=op, sem=sem: atomic_chain_kernel[(1,)](counters, heap.context, k, OP=op, SEM=sem)  # noqa: E731
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
                    counters, heap.context, REPS=reps, LANES=lanes, CONTENDED=contended, SEM=sem
                )

            ms = _time_ms(fn, device, 5 if gpu else 1, 1)
            ops = programs * lanes * reps
            rows.append({"section": "atomic throughput", "op": f"atomic_add {'one word' if contended else 'distinct words'} sem={sem}",
                         "ranks": world_size, "ms": ms, "ops_per_s": ops / (ms * 1e-3)})  # fmt: skip
    return rows


def bench(rank, world_size, opts):
    heap = iris.heap.init(opts["heap_size"])
    try:
        buffers = _buffers(rank, heap, opts)
        rows = None
        if opts["concurrent"]:
            heap.barrier()
            rows = _measure(rank, world_size, opts, heap, *buffers)
            heap.barrier()
        else:  # only one rank measures at a time; the others hold their buffers and wait
            for turn in range(world_size if opts["all_turns"] else 1):
                heap.barrier()
                if rank == turn:
                    rows = _measure(rank, world_size, opts, heap, *buffers)
                heap.barrier()
        for t in buffers:
            heap.free(t)
        return {"rank": rank, "device": str(heap.device), "mps": _mps_state(heap.device), "rows": rows}
    finally:
        heap.close()


def _rank_main(rank, world_size, opts):
    return bench(rank, world_size, opts)


# -- reporting -------------------------------------------------------------------------------------


def _human(nbytes):
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // 1024} KiB"


def report(results, opts, out=sys.stdout):
    first = next(r for r in results if r["rows"])
    device = first["device"]
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (Triton interpreter)"
    print(f"iris.mem.triton RMA benchmark: {len(results)} ranks on {name} ({device}); MPS: {first['mps']}", file=out)
    print(f"triton {triton.__version__}, torch {torch.__version__}, dtype {opts['dtype']}, BLOCK {opts['block']}, "
          f"num_warps {opts['num_warps']}, {opts['index']} offsets, {'concurrent ranks' if opts['concurrent'] else 'ranks take turns'}, "
          f"bandwidth: median of {opts['iters']} samples, each {opts['reps']} launches queued back to back behind a spin (device time)", file=out)  # fmt: skip
    rows = [dict(row, rank=r["rank"]) for r in results if r["rows"] for row in r["rows"]]
    bw = [r for r in rows if r["section"] == "bandwidth"]
    if bw:
        print(f"\n{'rank':>4} {'size':>9} {'op':<18} {'ms':>10} {'GB/s':>9} {'vs local':>9}", file=out)
        for r in bw:
            print(
                f"{r['rank']:>4} {_human(r['bytes']):>9} {r['op']:<18} {r['ms']:>10.4f} {r['GBps']:>9.3g} {r['ratio_vs_local']:>9.3f}",
                file=out,
            )
    lat = [r for r in rows if r["section"] == "atomic latency"]
    if lat:
        print(f"\n{'rank':>4} {'remote atomic (dependent chain)':<36} {'latency us':>11}", file=out)
        for r in lat:
            print(f"{r['rank']:>4} {r['op']:<36} {r['latency_us']:>11.3f}", file=out)
    thr = [r for r in rows if r["section"] == "atomic throughput"]
    if thr:
        print(f"\n{'rank':>4} {'remote atomic throughput':<44} {'Mops/s':>10}", file=out)
        for r in thr:
            print(f"{r['rank']:>4} {r['op']:<44} {r['ops_per_s'] / 1e6:>10.2f}", file=out)
    if opts["csv"]:
        fields = ["rank", "section", "op", "bytes", "ranks", "ms", "GBps", "ratio_vs_local", "latency_us", "ops_per_s"]
        with open(opts["csv"], "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k, "") for k in fields} | {"section": r["section"]})
        print(f"\nwrote {opts['csv']}", file=out)


def _sizes(text):
    return [int(float(s) * MiB) for s in text.split(",")]


def parse(argv=None):
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2, help="ranks to spawn when not started by torchrun")
    p.add_argument("--sizes", type=_sizes, default=None,
                   help="comma-separated MiB (default 1,4,16,64,256,1024 on GPU; 0.0625,0.25 on CPU)")  # fmt: skip
    p.add_argument("--dtype", default="float32")
    p.add_argument("--block", type=int, default=4096 if gpu else 1024)
    p.add_argument("--num-warps", type=int, default=8)
    p.add_argument("--index", choices=("int32", "int64"), default="int32",
                   help="offset arithmetic of the copy kernels (int32 reaches 2**31 elements)")  # fmt: skip
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5, help="back-to-back launches per bandwidth sample (GPU)")
    p.add_argument("--atomic-chain", type=int, default=2000, help="dependent atomics per latency kernel")
    p.add_argument("--atomic-programs", type=int, default=264)
    p.add_argument("--atomic-lanes", type=int, default=1024)
    p.add_argument("--concurrent", action="store_true", help="every rank measures at once")
    p.add_argument("--all-turns", action="store_true", help="every rank takes a turn (default: rank 0 only)")
    p.add_argument("--csv", default=None, help="write the rows to this CSV file")
    opts = vars(p.parse_args(argv))
    for name in ("iters", "reps"):
        if opts[name] < 1:
            p.error(f"--{name} must be at least 1, got {opts[name]}")
    if opts["sizes"] is None:
        opts["sizes"] = [s * MiB for s in (1, 4, 16, 64, 256, 1024)] if gpu else [64 * 1024, 256 * 1024]
    opts["sizes"] = sorted(opts["sizes"])
    elem = torch.empty((), dtype=getattr(torch, opts["dtype"])).element_size()
    if opts["index"] == "int32" and opts["sizes"][-1] // elem + opts["block"] > 2**31:
        p.error(f"--index int32 reaches 2**31 elements; {opts['sizes'][-1]} bytes needs --index int64")
    opts["heap_size"] = 2 * opts["sizes"][-1] + 4 * opts["atomic_programs"] * opts["atomic_lanes"] + 64 * MiB
    return opts


def main(argv=None):
    opts = parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        result = bench(rank, world_size, opts)
        import torch.distributed as dist

        results = [None] * world_size
        dist.all_gather_object(results, result)
        if rank == 0:
            report(results, opts)
    else:
        report(iris.heap.testing.run(_rank_main, opts["ranks"], opts), opts)


if __name__ == "__main__":
    main()

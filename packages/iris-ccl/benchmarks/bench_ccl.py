"""iris.ccl against the copy roofline (and NCCL where every rank has its own GPU).

    python benchmarks/bench_ccl.py [--ranks 4] [--sizes 1M 16M 64M 256M 1G] [--csv ccl.csv]

For each collective (and all_reduce variant) and size per rank: the median time of back-to-back
calls on heap tensors (error checks off inside the timed loop, one check after), the effective
memory traffic (bytes every rank must read and write, summed over ranks, below), and that traffic
over the bandwidth of ``torch.Tensor.copy_`` measured in the same run on the same device
(``copy_ GB/s`` counts bytes read plus written). Ranks sharing one GPU share its bandwidth, so
the roofline is the copy rate of the whole GPU. Run ranks sharing a GPU under MPS.

Effective traffic per rank, n = bytes of the per-rank input:
  all_gather W*n read + W*n written (each block read once per destination, written once)
  reduce_scatter n read + n/W written;  all_to_all n + n;  broadcast n + n (non-src ranks)
  all_reduce n read (its chunk from every rank) + n written (result chunk into every rank)
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys

import torch

from iris.heap.testing import run

COLLECTIVES = ["all_reduce:one_shot", "all_reduce:two_shot", "all_reduce:rs_ag", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]


def _parse(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def _traffic(name, n, w):
    if name == "all_gather":
        return 2 * w * n * w
    if name == "reduce_scatter":
        return (n + n // w) * w
    if name == "broadcast":
        return 2 * n * (w - 1)
    return 2 * n * w  # all_reduce, all_to_all


def _time(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return statistics.median(times)
    import time

    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _copy_time(n, dev, iters):
    """Median time of torch.Tensor.copy_ of n fp32 elements on dev (the roofline's bandwidth)."""
    a, b = torch.empty(n, device=dev), torch.empty(n, device=dev)
    return _time(lambda: b.copy_(a), iters)


def _rank(rank, w, sizes, iters, backend, names):
    import torch.distributed as dist

    import iris.ccl as ccl
    import iris.heap

    biggest = max(sizes)
    heap = iris.heap.init(biggest * (w + 3) + (64 << 20))
    dev = heap.device
    nccl = None
    if dev.type == "cuda" and torch.cuda.device_count() >= w and w > 1:
        nccl = dist.new_group(backend="nccl")
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        copy_bw = 2 * nbytes / _copy_time(n, dev, iters)
        x = heap.randn(n)
        big = heap.empty(w * n)
        out = torch.empty(w * n, device=dev)
        part = torch.empty(n // w, device=dev)
        for name in names:
            coll, _, variant = name.partition(":")
            cfg = ccl.Config(variant=variant or "auto", backend=backend, check_errors=False)
            call = {
                "all_reduce": lambda: ccl.all_reduce(x, config=cfg),
                "all_gather": lambda: ccl.all_gather(out, x, config=cfg),
                "reduce_scatter": lambda: ccl.reduce_scatter(part, x, config=cfg),
                "all_to_all": lambda: ccl.all_to_all(out[:n], x, config=cfg),
                "broadcast": lambda: ccl.broadcast(x, 0, config=cfg),
            }[coll]
            t = _time(call, iters)
            heap.barrier()  # surfaces any device-side timeout from the timed loop
            traffic = _traffic(coll, nbytes, w)
            row = {"collective": name, "ranks": w, "bytes_per_rank": nbytes, "time_us": t * 1e6,
                   "traffic_GBps": traffic / t / 1e9, "copy_GBps": copy_bw / 1e9,
                   "ratio_vs_copy": traffic / t / copy_bw}  # fmt: skip
            if nccl is not None:
                ref = {
                    "all_reduce": lambda: dist.all_reduce(x, group=nccl),
                    "all_gather": lambda: dist.all_gather_into_tensor(out, x, group=nccl),
                    "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, x, group=nccl),
                    "all_to_all": lambda: dist.all_to_all_single(out[:n], x, group=nccl),
                    "broadcast": lambda: dist.broadcast(x, 0, group=nccl),
                }[coll]
                tn = _time(ref, iters)
                row["nccl_us"] = tn * 1e6
                row["speedup_vs_nccl"] = tn / t
            rows.append(row)
        heap.free(x)
        heap.free(big)
    # small-message all_reduce latency
    for nbytes in (1 << 10, 8 << 10, 64 << 10):
        y = heap.randn(nbytes // 4)
        for variant in ("one_shot", "two_shot"):
            cfg = ccl.Config(variant=variant, backend=backend, check_errors=False)
            t = _time(lambda: ccl.all_reduce(y, config=cfg), max(iters, 50))
            rows.append({"collective": f"all_reduce:{variant}", "ranks": w, "bytes_per_rank": nbytes, "time_us": t * 1e6, "latency": True})
        heap.free(y)
    heap.barrier()
    return rows if rank == 0 else None


def _mps_active() -> str:
    try:
        out = subprocess.run(["pgrep", "-f", "nvidia-cuda-mps"], capture_output=True, text=True, timeout=5)
        return "yes" if out.stdout.strip() else "no"
    except Exception:
        return "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--sizes", nargs="+", default=["1M", "16M", "64M", "256M", "1G"])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--backend", default="triton")
    p.add_argument("--collectives", nargs="+", default=COLLECTIVES)
    p.add_argument("--csv")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sizes = [_parse(s) for s in args.sizes]
    rows = run(_rank, args.ranks, sizes, args.iters, args.backend, args.collectives)[0]
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (interpreter)"
    print(f"iris.ccl, {args.ranks} ranks, backend {args.backend}, device {dev}, MPS {_mps_active()}")
    print(f"{'collective':<22} {'MiB/rank':>9} {'time us':>10} {'traffic GB/s':>13} {'copy GB/s':>10} {'ratio':>6} {'nccl us':>9}")
    for r in rows:
        if r.get("latency"):
            continue
        print(f"{r['collective']:<22} {r['bytes_per_rank'] / 2**20:>9.1f} {r['time_us']:>10.1f} {r['traffic_GBps']:>13.1f} "
              f"{r['copy_GBps']:>10.1f} {r['ratio_vs_copy']:>6.2f} {r.get('nccl_us', float('nan')):>9.1f}")  # fmt: skip
    print("\nsmall-message all_reduce latency")
    for r in rows:
        if r.get("latency"):
            print(f"{r['collective']:<22} {r['bytes_per_rank'] / 1024:>6.0f} KiB {r['time_us']:>10.1f} us")
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=keys)
            wr.writeheader()
            wr.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

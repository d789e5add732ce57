"""ccl-bench: iris.ccl's collectives against the copy roofline (and NCCL where every rank has its own GPU).

For each collective (and all_reduce variant) and size per rank: the time per call on heap
tensors (asynchronous calls, errors checked once after the timed loop), the effective
memory traffic (the least that any algorithm must read and write, summed over ranks, below), and
that traffic over the copy roofline: the bandwidth of ``torch.Tensor.copy_`` moving as many bytes
through each device's memory as the collective must (``copy_bytes``: a copy of half of a device's
share of the traffic, read once and written once), timed on each device with the device to itself
and summed over devices, in the same run (``copy_ roofline GB/s`` counts bytes read plus written).
A roofline timed at the input's size would flatter the collectives that move several times their
input: all_gather of 1 MiB per rank moves 20 MiB at 4 ranks, where a 1 MiB copy is bound by its
launch, and its ratio went past 1. Ranks sharing one GPU share its bandwidth, so their roofline is
that one GPU's copy rate (``heap.ranks_per_device`` says how many share each). Run ranks sharing
a GPU under MPS.
Before the timed calls, every collective at every size is checked against torch once, on inputs
whose sums are exact in fp32.

Time per call, on a GPU: every rank queues ``--reps`` calls back to back behind a spin and times
them with CUDA events (``iris.examples.harness.timing.time_launches``, the ranks agreeing on every sample), so
the figure is the device time of a stream of collectives, as in nccl-tests' loop of calls, without
the host's launch path (60-80 us per call on an H200 host) in it; the median of ``--iters`` samples.
Each sample's calls follow one untimed call that lines the ranks' streams up: the ranks' spins end
at different times, and without it the first timed call's wait for the last rank (a property of
the benchmark's start, not of the collective) was spread over the ``--reps`` calls.
The copy roofline is timed the same way. The small-message table adds ``call us``: one call at a
time between CUDA events on an idle GPU, which does count the host's launch path (what a program
that waits for each small all_reduce sees); ``host us``: the host's time per call when calls are
issued back to back and nothing waits for them, next to a bare torch launch (``add_`` on one
element) timed the same way in the same process (the issue's "<= 1.3 x a bare launch"): batches of
``--latency-iters`` calls, the two taking turns for ``--host-rounds`` rounds, the median; and on a
GPU ``graph us``: device time per call replayed from a CUDA graph of ``--latency-iters`` calls.

Effective traffic summed over W ranks, n = bytes of the per-rank input:
  all_gather      W*n read (each input once) + W*W*n written (every rank's output)
  reduce_scatter  W*n read + W*(n/W) written;  all_to_all W*n + W*n
  all_reduce      W*n read + W*n written;      broadcast n read (the root's) + (W-1)*n written
An algorithm that moves more scores lower by that factor.

all_reduce's ``"auto"``: where several all_reduce variants run at a size (``--collectives
all_reduce:one_shot all_reduce:two_shot ...``; ``one_shot_push`` only up to ``PUSH_BYTES``), a table
puts the fastest next to the variant ``iris.ccl.tuning`` picks on this device kind at this world
size (``auto_table``), and the run prints the rows that ``iris.ccl.tuning.ALL_REDUCE_AUTO`` should
hold for them. Inputs and outputs live on the heap:
all_gather then pushes (each input read once and stored into every rank's output, the least
traffic); into an output off the heap it pulls (every rank reads every input: 2*W*n per rank).
"""

from __future__ import annotations

import argparse
import functools

import torch

import iris.ccl as ccl
import iris.heap
from iris.ccl import tuning
from iris.ccl.workspace import PUSH_BYTES

from .harness import environment, tables, timing, trace, validation
from .harness.options import positive_int
from .harness.units import format_bytes, size_type

__all__ = ["COLLECTIVES", "SUMMARY", "add_arguments", "auto_table", "check_arguments", "copy_bytes", "expected",
           "rank_main", "report", "traffic"]  # fmt: skip

SUMMARY = "iris.ccl collectives against the torch copy roofline (and NCCL where every rank has a GPU)"
BACKENDS = ("triton", "gluon")

COLLECTIVES = ["all_reduce:one_shot", "all_reduce:two_shot", "all_reduce:rs_ag", "all_gather", "reduce_scatter",
               "all_to_all", "broadcast"]  # fmt: skip
#: The latency table's variants; ``one_shot_push`` only at sizes its slots hold (``iris.ccl.workspace.PUSH_BYTES``).
LATENCY_VARIANTS = ("one_shot", "two_shot", "rs_ag", "one_shot_push")


def traffic(name: str, n: int, w: int) -> int:
    """Bytes the collective ``name`` must read plus write, summed over ``w`` ranks, for ``n`` bytes per rank.

    The least any algorithm moves: every input read once, every output written once (an
    algorithm that reads a peer's input on every rank moves more, and scores lower).
    """
    if name == "all_gather":
        return w * n + w * (w * n)  # w inputs read, w outputs of w*n written
    if name == "reduce_scatter":
        return w * n + w * (n // w)  # w inputs read, w outputs of n/w written
    if name == "broadcast":
        return n + (w - 1) * n  # the root's input read, w - 1 outputs written
    return 2 * n * w  # all_reduce, all_to_all: w inputs read, w outputs written


def copy_bytes(name: str, n: int, w: int, ranks_per_device: int = 1) -> int:
    """The size of the copy whose rate is the roofline of collective ``name`` (``n`` bytes per rank,
    ``w`` ranks, ``ranks_per_device`` of them on this rank's device): half of what the collective
    must move through the device's memory (``traffic`` per rank times the ranks it holds), since a
    copy reads and writes each byte once; a multiple of 4 bytes, at least 4."""
    return max(4, traffic(name, n, w) * ranks_per_device // w // 2 // 4 * 4)


def copy_roofline(nbytes: int, heap, iters: int, reps: int = 1) -> float:
    """Bytes per second (read + written) that ``torch.Tensor.copy_`` reaches on the ranks' devices.

    Collective: every rank times a copy of ``nbytes`` on its device with the device to itself
    (the others wait at a host barrier, holding no copy buffers: at 1 GiB per rank, four ranks'
    buffers at once would not fit an 80 GB GPU beside their heaps); a device's rate is the mean of
    its ranks' figures, and the roofline is the sum over devices (each rank adds its figure over
    ``heap.ranks_per_device``). Ranks sharing one GPU share its memory bandwidth, so the roofline
    is that GPU's copy rate, not one rank's share of it while the others also copy.
    """
    import torch.distributed as dist

    device = heap.device
    mine = None
    if device.type == "cuda":
        torch.cuda.empty_cache()  # what this rank's earlier checks left cached goes back to the device
    for turn in range(dist.get_world_size()):
        dist.barrier()
        if turn == dist.get_rank():
            mine = _copy_rate(nbytes, device, iters, reps)
            if device.type == "cuda":
                torch.cuda.empty_cache()  # the copy's buffers back to the device, for the next rank's turn
    dist.barrier()
    return sum(heap.all_gather_object(mine / heap.ranks_per_device))


def _copy_rate(nbytes: int, device, iters: int, reps: int) -> float:
    """Bytes per second (read + written) of ``copy_`` of ``nbytes`` on ``device``, timed queued."""
    a, b = torch.empty(nbytes // 4, device=device), torch.empty(nbytes // 4, device=device)
    return 2 * nbytes / timing.time_launches(lambda: b.copy_(a), reps=reps, iters=iters, warmup=3, device=device)


def _input(rank: int, n: int, device="cpu") -> torch.Tensor:
    """Rank ``rank``'s validation input: small integers as fp32, so every sum is exact (``i % 17 +
    rank`` at index i, made without an index tensor of n elements)."""
    period = torch.arange(17, dtype=torch.float32, device=device).add_(rank)
    return period.repeat(-(-n // 17))[:n]


def expected(coll: str, rank: int, w: int, n: int) -> torch.Tensor:
    """torch's result of ``coll`` on rank ``rank`` when rank j's input is ``_input(j, n)``."""
    inputs = [_input(j, n) for j in range(w)]
    chunk = n // w
    if coll == "all_reduce":
        return torch.stack(inputs).sum(0)
    if coll == "all_gather":
        return torch.cat(inputs)
    if coll == "reduce_scatter":
        return torch.stack([x[rank * chunk : (rank + 1) * chunk] for x in inputs]).sum(0)
    if coll == "all_to_all":
        return torch.cat([x[rank * chunk : (rank + 1) * chunk] for x in inputs])
    if coll == "broadcast":
        return inputs[0]
    raise ValueError(f"unknown collective {coll!r}")


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    sizes = ["1M", "16M", "64M", "256M", "1G"] if gpu else ["64K"]
    parser.add_argument("--sizes", nargs="+", type=size_type, default=[size_type(s) for s in sizes],
                        help=f"bytes per rank (default {' '.join(sizes)})")  # fmt: skip
    parser.add_argument("--iters", type=positive_int, default=10 if gpu else 1, help="timed samples per size")
    parser.add_argument("--reps", type=positive_int, default=10 if gpu else 1,
                        help="calls queued back to back per sample (default 10 on a GPU, 1 on CPU ranks)")  # fmt: skip
    parser.add_argument("--collectives", nargs="+", default=COLLECTIVES, metavar="NAME",
                        help=f"what to run (default all: {' '.join(COLLECTIVES)})")  # fmt: skip
    lat = ["1K", "8K", "64K"] if gpu else ["1K"]
    parser.add_argument("--latency-sizes", nargs="*", type=size_type, default=[size_type(s) for s in lat],
                        help=f"small all_reduce sizes for the latency table (default {' '.join(lat)}; none: skip)")  # fmt: skip
    parser.add_argument(
        "--latency-iters", type=positive_int, default=50 if gpu else 1, help="timed calls per latency size"
    )
    parser.add_argument("--host-rounds", type=positive_int, default=5 if gpu else 1,
                        help="rounds of the host-time batches, the median taken (default 5 on a GPU, 1 on CPU ranks)")  # fmt: skip
    parser.add_argument("--num-programs", type=positive_int, default=None, metavar="N",
                        help="Config(num_programs=N) for every collective (default: the library's choice)")  # fmt: skip
    parser.add_argument("--num-warps", type=positive_int, default=None, metavar="N",
                        help="Config(num_warps=N) for every collective (default: the library's choice)")  # fmt: skip
    parser.add_argument("--block-size", type=positive_int, default=None, metavar="N",
                        help="Config(block_size=N): elements per tile, a power of two (default: the library's)")  # fmt: skip


def check_arguments(args: argparse.Namespace) -> None:
    for name in args.collectives:
        coll, _, variant = name.partition(":")
        if name not in COLLECTIVES and not (coll == "all_reduce" and variant in ccl.ALL_REDUCE_VARIANTS):
            raise ValueError(f"unknown collective {name!r}; choose from {' '.join(COLLECTIVES)} (or all_reduce:auto)")
    # the launch shape, checked as every rank's Config will check it (a block of 100 elements says so here)
    ccl.Config(num_programs=args.num_programs, num_warps=args.num_warps, block_size=args.block_size)
    w = args.ranks
    bad = [s for s in (*args.sizes, *args.latency_sizes) if s % (4 * w)]
    if bad:
        raise ValueError(
            f"sizes must split into {w} whole chunks of fp32 elements (multiples of {4 * w} bytes), got {bad}"
        )


#: A variant replaces the previous size's fastest only where it is faster by more than this share
#: (so that noise of a few percent does not split a table into alternating rows).
AUTO_MARGIN = 0.03


def auto_table(rows: list, margin: float = AUTO_MARGIN) -> tuple[list, tuple]:
    """all_reduce's variants measured at each size against ``"auto"``'s pick: per size, the fastest
    variant (the previous size's unless another is faster by more than ``margin``), its time, the
    pick ``iris.ccl.tuning`` made (``auto_pick``) and its time over the fastest's; and the rows that
    ``iris.ccl.tuning.ALL_REDUCE_AUTO`` should hold for this device kind and world size: ``(largest
    size, variant)`` per run of sizes with one fastest variant, the last bound None. Only sizes
    where at least two variants (other than ``auto``) were timed count."""
    times: dict[int, dict[str, float]] = {}
    picks: dict[int, str] = {}
    for r in rows:
        coll, _, variant = r["collective"].partition(":")
        if coll != "all_reduce" or r.get("latency") or variant in ("", "auto"):
            continue
        times.setdefault(r["bytes_per_rank"], {})[variant] = r["time_us"]
        if r.get("auto_pick"):
            picks[r["bytes_per_rank"]] = r["auto_pick"]
    table, runs, best = [], [], None
    for size in sorted(s for s, t in times.items() if len(t) > 1):
        t = times[size]
        fastest = min(t, key=t.get)
        if best in t and t[best] <= t[fastest] * (1 + margin):
            fastest = best  # within the margin of the fastest: the previous size's stays
        best = fastest
        pick = picks.get(size)
        table.append({"bytes_per_rank": size, "fastest": fastest, "fastest_us": t[fastest], "auto_pick": pick or "",
                      "pick_us": t.get(pick, float("nan")), "pick_vs_fastest": t.get(pick, float("nan")) / t[fastest],
                      "variants": len(t)})  # fmt: skip
        if runs and runs[-1][1] == fastest:
            runs[-1][0] = size
        else:
            runs.append([size, fastest])
    proposed = tuple((bound, v) for bound, v in runs[:-1]) + ((None, runs[-1][1]),) if runs else ()
    return table, proposed


def _calls(x, out, part, n, cfg, nccl=None):
    """Per collective, a call of it on this rank's buffers: iris.ccl's with ``cfg``, or with
    ``nccl`` (a process group) torch.distributed's on the same arguments."""
    args = {"all_reduce": (x,), "all_gather": (out, x), "reduce_scatter": (part, x), "all_to_all": (out[:n], x),
            "broadcast": (x, 0)}  # fmt: skip
    if nccl is None:
        return {name: functools.partial(getattr(ccl, name), *a, config=cfg) for name, a in args.items()}
    import torch.distributed as dist

    torch_calls = {"all_reduce": dist.all_reduce, "all_gather": dist.all_gather_into_tensor,
                   "reduce_scatter": dist.reduce_scatter_tensor, "all_to_all": dist.all_to_all_single,
                   "broadcast": dist.broadcast}  # fmt: skip
    return {name: functools.partial(torch_calls[name], *a, group=nccl) for name, a in args.items()}


def _graph_seconds(fn, calls: int, device, agree) -> float:
    """Device seconds per call of ``fn`` replayed from a CUDA graph of ``calls`` calls (every rank
    captures the same graph; its replays are timed as queued launches with the ranks lined up, so
    the ranks' different start times stay out of the figure)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()  # warm up off the capturing stream
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    replay = timing.time_launches(graph.replay, reps=1, iters=5, warmup=1, device=device, agree=agree)
    return agree(replay) / calls  # the slowest rank's


def _result(coll, x, out, part, n):
    return {"all_reduce": x, "all_gather": out, "reduce_scatter": part, "all_to_all": out[:n], "broadcast": x}[coll]


def _config(args, tracing, variant: str, blocking: bool = False) -> ccl.Config:
    """The collectives' Config of this run: ``variant``, the backend, tracing and the launch shape
    that ``--num-programs``, ``--num-warps`` and ``--block-size`` set (None: the library's)."""
    return ccl.Config(variant=variant, backend=args.backend, blocking=blocking, trace=tracing.on,
                      num_programs=args.num_programs, num_warps=args.num_warps, block_size=args.block_size)  # fmt: skip


def _shape_note(args) -> str:
    """The launch shape the run set, for the table's title ("" where the library chose)."""
    parts = [f"{args.num_programs} programs", f"{args.num_warps} warps", f"blocks of {args.block_size}"]
    chosen = [p for p, v in zip(parts, (args.num_programs, args.num_warps, args.block_size)) if v]
    return ", " + ", ".join(chosen) + " a launch" if chosen else ""


def _collective_row(name, x, out, part, nbytes, heap, args, tracing, timed, copy_bw, nccl):
    """One collective at one size: checked once against torch, then timed (and NCCL's, where there
    is a group); its row and its mismatch (None when it matched)."""
    rank, w, dev, n = heap.rank, args.ranks, heap.device, nbytes // 4
    coll, _, variant = name.partition(":")
    # checked once against torch (blocking: raises at once)
    x.copy_(_input(rank, n, dev))
    checked = _config(args, tracing, variant or "auto", blocking=True)
    _calls(x, out, part, n, checked)[coll]()
    found = validation.compare(_result(coll, x, out, part, n), expected(coll, rank, w, n), rank=rank,
                               what=f"{name} of {format_bytes(nbytes)} per rank")  # fmt: skip
    x.normal_()
    cfg = _config(args, tracing, variant or "auto")
    t = timed(_calls(x, out, part, n, cfg)[coll], args.iters)
    heap.barrier()  # surfaces any device-side timeout from the timed loop
    moved = traffic(coll, nbytes, w)
    row = {"collective": name, "ranks": w, "backend": args.backend, "bytes_per_rank": nbytes,
           "time_us": t * 1e6, "traffic_GBps": moved / t / 1e9, "copy_GBps": copy_bw / 1e9,
           "ratio_vs_copy": moved / t / copy_bw, "check": "ok" if found is None else "MISMATCH"}  # fmt: skip
    if coll == "all_reduce":  # what "auto" runs at this size here (iris.ccl.tuning's table)
        row["auto_pick"] = tuning.all_reduce_auto(nbytes, w, dev)
    if nccl is not None:
        tn = timed(_calls(x, out, part, n, None, nccl)[coll], args.iters)
        row["nccl_us"] = tn * 1e6
        row["speedup_vs_nccl"] = tn / t
    return row, found


def _bandwidth_rows(heap, args, tracing, timed, nccl) -> tuple[list, list]:
    """Every collective at every size against the copy roofline: rows and mismatches."""
    rows, mismatches = [], []
    sizes = sorted(set(args.sizes))
    with tables.progress("ccl-bench", len(sizes) * len(args.collectives), enabled=heap.rank == 0) as bar:
        for nbytes in sizes:
            n = nbytes // 4
            rooflines = {}  # by traffic, the same on every rank (each rank times its own device's copy)
            x = heap.empty(n)
            out = heap.empty(args.ranks * n)  # on the heap, as a user keeps it for speed: all_gather pushes
            part = torch.empty(n // args.ranks, device=heap.device)
            for name in args.collectives:
                coll, _, variant = name.partition(":")
                if variant == "one_shot_push" and nbytes > PUSH_BYTES:
                    bar.advance()
                    continue  # its slots hold at most PUSH_BYTES per rank
                moved = traffic(coll, nbytes, args.ranks)
                if moved not in rooflines:
                    size = copy_bytes(coll, nbytes, args.ranks, heap.ranks_per_device)
                    rooflines[moved] = copy_roofline(size, heap, args.iters, args.reps)
                row, found = _collective_row(name, x, out, part, nbytes, heap, args, tracing, timed, rooflines[moved],
                                             nccl)  # fmt: skip
                mismatches += [found] if found is not None else []
                rows.append(row)
                bar.advance()
            heap.free(out)
            heap.free(x)
    return rows, mismatches


def _latency_rows(heap, args, tracing, timed, agree) -> list:
    """Small-message all_reduce latency per variant: queued, one call alone, the host's cost next to
    a bare torch launch, and (GPU) replayed from a CUDA graph."""
    dev, rows = heap.device, []
    bare = torch.zeros(1, device=dev)
    for nbytes in sorted(set(args.latency_sizes)):
        y = heap.randn(nbytes // 4)
        for variant in LATENCY_VARIANTS:
            if variant == "one_shot_push" and nbytes > PUSH_BYTES:
                continue
            cfg = _config(args, tracing, variant)
            call = lambda y=y, cfg=cfg: ccl.all_reduce(y, config=cfg)  # noqa: E731
            t = timed(call, max(1, args.latency_iters // args.reps))
            one = timing.time_launches(call, reps=1, iters=args.latency_iters, warmup=3, device=dev, queued=False)
            host, torch_host = timing.host_seconds(
                (call, lambda: bare.add_(1)), args.latency_iters, args.host_rounds, dev, agree
            )
            row = {"collective": f"all_reduce:{variant}", "ranks": args.ranks, "backend": args.backend,
                   "bytes_per_rank": nbytes, "time_us": t * 1e6, "call_us": one * 1e6, "host_us": host * 1e6,
                   "torch_launch_us": torch_host * 1e6, "host_vs_launch": host / torch_host,
                   "latency": True}  # fmt: skip
            if dev.type == "cuda":
                row["graph_us"] = _graph_seconds(call, args.latency_iters, dev, agree) * 1e6
            rows.append(row)
        heap.free(y)
    return rows


def rank_main(args: argparse.Namespace) -> dict:
    import torch.distributed as dist

    w = args.ranks
    biggest = max(args.sizes) // 4
    # x, out (w x), staging, the trace buffer (--trace) and room to spare
    heap = iris.heap.init(biggest * 4 * (w + 5) + (64 << 20) + trace.heap_bytes(args))
    try:
        dev = heap.device
        nccl = None
        agree = timing.max_over_ranks(dist.new_group(backend="gloo"))  # whatever backend the default group has

        def timed(fn, iters):  # every rank times the same calls at once
            return timing.time_launches(fn, reps=args.reps, iters=iters, warmup=3, device=dev, agree=agree)

        if dev.type == "cuda" and w > 1 and heap.ranks_per_device == 1:  # NCCL needs a GPU per rank
            torch.cuda.set_device(dev)
            nccl = dist.new_group(backend="nccl")
        with trace.session(heap, args) as tracing:  # --trace: every iris collective below
            rows, mismatches = _bandwidth_rows(heap, args, tracing, timed, nccl)
            rows += _latency_rows(heap, args, tracing, timed, agree)
        heap.barrier()
        exported = {"trace_export_s": tracing.export_seconds, "trace_events": tracing.events,
                    "trace_dropped": tracing.dropped} if tracing.export_seconds is not None else {}  # fmt: skip
        capability = tuple(torch.cuda.get_device_capability(dev)) if dev.type == "cuda" else None
        return {"rank": heap.rank, "rows": rows, "mismatches": mismatches, "gpu": dev.type == "cuda",
                "nccl": nccl is not None, "exported": exported, "capability": capability}  # fmt: skip
    finally:
        heap.close()


def _report_auto(main: list, args: argparse.Namespace, capability) -> None:
    """The auto table (``auto_table``) where all_reduce variants were timed side by side, and the
    rows it proposes for ``iris.ccl.tuning.ALL_REDUCE_AUTO``."""
    table, proposed = auto_table(main)
    if not table:
        return
    tables.print_table(
        f"all_reduce: the fastest variant per size against auto's pick, {args.ranks} ranks",
        table,
        [("bytes_per_rank", "bytes/rank", format_bytes), ("fastest", "fastest", ""), ("fastest_us", "us", ".1f"),
         ("auto_pick", "auto picks", ""), ("pick_us", "us", ".1f"), ("pick_vs_fastest", "pick / fastest", ".2f")],
        caption=f"queued device time per call; a variant displaces the previous size's fastest only when faster by "
        f"more than {AUTO_MARGIN:.0%}",
    )  # fmt: skip
    where = (f"for iris.ccl.tuning.ALL_REDUCE_AUTO[{tuple(capability)}][{args.ranks}]" if capability
             else f"at {args.ranks} ranks without a CUDA device (iris.ccl.tuning keeps no table for these: FALLBACK)")  # fmt: skip
    try:
        tuning.check_rows(proposed)
    except ValueError as e:  # e.g. only sizes that one_shot_push holds were timed: no row for larger ones
        print(f"the measured rows {proposed!r} are not a table for iris.ccl.tuning: {e}")
        return
    print(f"measured rows {where}: {proposed!r}")


def report(results: list, args: argparse.Namespace) -> int:
    rows = results[0]["rows"]  # rank 0's timings, as every rank times the same calls
    env = environment.describe(gpu=results[0]["gpu"])
    main = [r for r in rows if not r.get("latency")]
    columns = [("collective", "collective", ""), ("bytes_per_rank", "bytes/rank", format_bytes), ("time_us", "time us", ".1f"),
               ("traffic_GBps", "traffic GB/s", ".3g"), ("copy_GBps", "copy_ roofline GB/s", ".3g"), ("ratio_vs_copy", "ratio", ".2f")]  # fmt: skip
    if results[0]["nccl"]:
        columns += [("nccl_us", "nccl us", ".1f"), ("speedup_vs_nccl", "vs nccl", ".2f")]
    columns.append(("check", "vs torch", ""))
    tables.print_table(f"iris.ccl, {args.ranks} ranks, backend {args.backend}{_shape_note(args)} (rank 0's times)", main,
                       columns, caption=environment.summary(env))  # fmt: skip
    latency = [r for r in rows if r.get("latency")]
    if latency:
        tables.print_table(
            "small-message all_reduce latency",
            latency,
            [
                ("collective", "collective", ""),
                ("bytes_per_rank", "bytes/rank", format_bytes),
                ("time_us", "time us", ".1f"),
                ("call_us", "call us", ".1f"),
                ("host_us", "host us", ".1f"),
                ("torch_launch_us", "torch launch us", ".1f"),
                ("host_vs_launch", "host / launch", ".2f"),
                *([("graph_us", "graph us", ".2f")] if any("graph_us" in r for r in latency) else []),
            ],
            caption="time us: device time per call in a queued stream of calls; call us: one call at a time, "
            "host launch path included; host us: host time per call issued back to back (nothing waits "
            "for the device), against a bare torch launch (add_ on a 1-element tensor) in the same "
            "process; graph us: device time per call replayed from a CUDA graph",
        )
    _report_auto(main, args, results[0]["capability"])
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    exported = results[0]["exported"]  # --trace: rank 0 wrote the file
    if exported:
        print(f"trace export: {exported['trace_events']} events gathered, formatted and written in "
              f"{exported['trace_export_s']:.1f} s")  # fmt: skip
    if args.csv:  # with --trace, every row also says how long the trace's export took
        tables.write_csv(args.csv, [dict(r, device=env["device"], mps=env["mps"], num_programs=args.num_programs or "",
                                         num_warps=args.num_warps or "", block_size=args.block_size or "", **exported) for r in rows])  # fmt: skip
        print(f"wrote {args.csv}")
    if args.plot:
        tables.plot(args.plot, main, x="bytes_per_rank", y="ratio_vs_copy", series="collective",
                    title=f"iris.ccl vs the copy roofline, {args.ranks} ranks ({args.backend})",
                    xlabel="bytes per rank", ylabel="traffic / copy_ bandwidth")  # fmt: skip
    return 1 if bad else 0

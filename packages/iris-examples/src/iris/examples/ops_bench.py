"""ops-bench: iris.ops' fused operations against their unfused parts and against their limit.

For each operation and shape (per rank, tensor parallelism over the ranks of the run):

- ``fused``: the fused operation's kernel (``iris.ops``, ``Config(variant="fused")``), its output
  preallocated (on the heap where the operation stores into peers, as a user after speed keeps it);
- ``auto``: the operation as a call without a variant runs it (``variant="auto"``: the fused kernel,
  or ``torch.matmul`` + the collective where ``iris.ops.config.AUTO_UNFUSED`` says so for the
  device; ``auto variant`` names which). Timed where it is not the fused kernel;
- ``unfused``: ``torch.matmul`` into a heap tensor, then the ``iris.ccl`` collective on heap
  tensors (``iris.ops.reference``'s parts, without their allocations);
- ``chunked``: ``Config(variant="chunked")``, ``torch.matmul`` and the collective by row chunks on
  two streams, one chunk's collective beside the next chunk's GEMM (``iris.ops.chunked``;
  ``--chunks``, ``--chunk-programs``);
- ``matmul`` and ``collective``: the two unfused parts alone, so the table shows whether unfused
  is their sum (``unfused / (matmul + coll)``: above 1 when the two interfere, for instance the
  ranks' kernels interleaving under MPS);
- ``core``: ``iris.ops.local_matmul``, the fused kernels' GEMM core with communication off (its
  TFLOP/s against ``torch.matmul``'s: ``core / torch``);
- the **limit**: max(``matmul``, the collective's traffic at the copy bandwidth measured in the same
  run), i.e. the W ranks' GEMMs at torch.matmul's rate (timed with every rank running its matmul
  at once) or the least the communication must move (the collective's traffic as ``ccl-bench``
  counts it: every input read once, every output written once), whichever is larger. A fused
  operation that overlaps perfectly runs at its limit; one that does not, at the sum.

``comm share`` = collective / (matmul + collective). Times are queued device times with the
ranks' streams lined up (``iris.examples.harness.timing.time_launches``, as ``ccl-bench``), the slowest
rank's, median of ``--iters`` samples of ``--reps`` calls. Each path is checked against torch once
before it is timed. Traffic per operation, summed over W ranks, e = element size:

  all_gather_matmul   all_gather of a:        W*m*K*e read + W*(W*m*K)*e written
  matmul_all_gather   all_gather of a @ b:    W*M*n*e read + W*(W*M*n)*e written
  matmul_reduce_scatter  reduce_scatter:      W*M*N*e read + W*(M/W*N)*e written
  matmul_all_reduce   all_reduce:             W*M*N*e read + W*M*N*e written

Shapes: ``TxHxI`` (tokens, hidden, intermediate) as a transformer MLP under tensor parallelism
splits them: all_gather_matmul a = T/W x H, b = H x I/W (the up-projection of sequence-parallel
input); matmul_reduce_scatter and matmul_all_reduce a = T x I/W, b = I/W x H (the
down-projection); matmul_all_gather a = T x H, b = H x I/W.
"""

from __future__ import annotations

import argparse
import re

import torch

import iris.ccl as ccl
import iris.heap
import iris.ops as ops

from .ccl_bench import copy_roofline
from .harness import environment, tables, timing, trace, validation
from .harness.options import positive_int

__all__ = ["OPS", "SUMMARY", "add_arguments", "check_arguments", "parse_shape", "rank_main", "report", "traffic"]

SUMMARY = "iris.ops fused GEMM + communication against torch.matmul + iris.ccl, and against max(GEMM, traffic)"
BACKENDS = ("triton", "gluon")
OPS = ("all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce", "matmul_all_gather")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
GPU_SHAPES = ["1024x4096x16384", "4096x4096x16384", "16384x4096x16384", "1024x8192x28672", "4096x8192x28672",
              "16384x8192x28672"]  # fmt: skip
CPU_SHAPES = ["64x48x96"]
_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"TxHxI"`` -> (tokens, hidden, intermediate); ValueError otherwise."""
    m = _SHAPE.match(str(text))
    if m is None or min(int(g) for g in m.groups()) < 1:
        raise ValueError(f"cannot read {text!r} as TxHxI (tokens, hidden, intermediate), like 4096x8192x28672")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _shape_type(text: str):
    try:
        return parse_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def operands(op: str, shape, w: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The per-rank shapes of ``a`` and ``b`` of ``op`` for an MLP of ``shape`` over ``w`` ranks."""
    t, h, i = shape
    return {"all_gather_matmul": ((t // w, h), (h, i // w)), "matmul_reduce_scatter": ((t, i // w), (i // w, h)),
            "matmul_all_reduce": ((t, i // w), (i // w, h)), "matmul_all_gather": ((t, h), (h, i // w))}[op]  # fmt: skip


def traffic(op: str, a: tuple[int, int], b: tuple[int, int], w: int, e: int) -> int:
    """Bytes the op's collective must read plus write, summed over ``w`` ranks (module docstring)."""
    (m, k), n = a, b[1]
    if op == "all_gather_matmul":
        return w * m * k * e * (1 + w)
    if op == "matmul_all_gather":
        return w * m * n * e * (1 + w)
    if op == "matmul_reduce_scatter":
        return w * m * n * e + w * (m // w) * n * e
    return 2 * w * m * n * e


def _tiles_type(text: str) -> tuple[int, int, int]:
    try:
        return parse_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("TxHxI (tokens, hidden, intermediate)", "MxNxK")) from None


def _config(args, trace_on: bool, variant: str = "fused") -> ops.Config:
    if variant == "chunked":
        return ops.Config(backend=args.backend, trace=trace_on, variant=variant, chunks=args.chunks,
                          num_programs=args.chunk_programs)  # fmt: skip
    tiles = dict(zip(("block_m", "block_n", "block_k"), args.tiles)) if args.tiles else {}
    return ops.Config(backend=args.backend, trace=trace_on, num_stages=args.num_stages, variant=variant, **tiles)


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    shapes = GPU_SHAPES if gpu else CPU_SHAPES
    parser.add_argument("--shapes", nargs="+", type=_shape_type, default=[parse_shape(s) for s in shapes],
                        metavar="TxHxI", help=f"MLP shapes: tokens x hidden x intermediate (default {' '.join(shapes)})")  # fmt: skip
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="operations to run (default all)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="bfloat16", help="dtype (default bfloat16)")
    parser.add_argument("--tiles", type=_tiles_type, default=None, metavar="MxNxK",
                        help="the fused kernels' tile (block_m x block_n x block_k; default iris.ops.Config's)")  # fmt: skip
    parser.add_argument("--num-stages", type=positive_int, default=None,
                        help="stages of the fused kernels' K loop (Triton's pipelining, Gluon's ring on Hopper; default iris.ops.Config's)")  # fmt: skip
    parser.add_argument("--chunks", type=positive_int, default=None,
                        help="the chunked variant's chunks (default iris.ops.chunked.DEFAULT_CHUNKS)")  # fmt: skip
    parser.add_argument("--chunk-programs", type=positive_int, default=None, metavar="N",
                        help="programs of the chunked variant's collectives (default: iris.ops' choice)")  # fmt: skip
    parser.add_argument("--iters", type=positive_int, default=10 if gpu else 1, help="timed samples per path")
    parser.add_argument("--reps", type=positive_int, default=5 if gpu else 1, help="calls queued per sample")


def check_arguments(args: argparse.Namespace) -> None:
    _config(args, False)  # raises ValueError naming a bad tile or stage count
    bad = [s for s in args.shapes if s[0] % args.ranks or s[2] % args.ranks]
    if bad:
        raise ValueError(f"tokens and intermediate must split evenly over {args.ranks} ranks; not so for {bad}")


def _inputs(op, a_shape, b_shape, dtype, dev, rank, w):
    """Every rank's ``a`` and ``b`` (the same bits on every rank: references are local); this rank's."""
    gen = torch.Generator(device=dev).manual_seed(1234)
    a_all = [torch.randn(a_shape, generator=gen, device=dev).to(dtype) for _ in range(w)]
    scale = a_shape[1] ** -0.5
    b_all = [(torch.randn(b_shape, generator=gen, device=dev) * scale).to(dtype) for _ in range(w)]
    if op == "all_gather_matmul":
        b_all = [b_all[0]] * w  # the weight of a column-parallel layer, whole on every rank
    return a_all, b_all


def _expected(op, a_all, b_all, rank, w, dtype):
    parts = [(a.float() @ b.float()).to(dtype) for a, b in zip(a_all, b_all)]
    if op == "all_gather_matmul":
        return (torch.cat(a_all).float() @ b_all[0].float()).to(dtype)
    if op == "matmul_all_gather":
        return torch.cat(parts, dim=1)
    total = parts[0].float()
    for p in parts[1:]:
        total = total + p.float()
    total = total.to(dtype)
    if op == "matmul_reduce_scatter":
        rows = total.shape[0] // w
        return total[rank * rows : (rank + 1) * rows]
    return total


def _paths(op, heap, a, b, cfg, ccl_cfg, auto_cfg, chunked_cfg):
    """The fused call, the call as ``auto_cfg`` runs it, the unfused call and its two parts, on
    preallocated buffers: ``(paths, result of each checked path)`` (a tensor, or a callable that
    makes it)."""
    w, dev, dtype = heap.world_size, heap.device, a.dtype
    (m, k), n = a.shape, b.shape[1]
    if op == "all_gather_matmul":
        out = torch.empty(w * m, n, dtype=dtype, device=dev)
        src = heap.empty(m, k, dtype=dtype)
        src.copy_(a)
        gathered = heap.empty(w * m, k, dtype=dtype)
        ref = torch.empty(w * m, n, dtype=dtype, device=dev)
        fused = lambda c=cfg: ops.all_gather_matmul(src, b, out=out, config=c)  # noqa: E731
        matmul = lambda: torch.matmul(gathered, b, out=ref)  # noqa: E731
        coll = lambda: ccl.all_gather(gathered, src, config=ccl_cfg)  # noqa: E731
        results = {"fused": out, "unfused": ref}
    elif op == "matmul_all_gather":
        out = heap.empty(m, w * n, dtype=dtype)
        part = heap.empty(m, n, dtype=dtype)
        blocks = heap.empty(w, m, n, dtype=dtype)
        fused = lambda c=cfg: ops.matmul_all_gather(a, b, out=out, config=c)  # noqa: E731
        matmul = lambda: torch.matmul(a, b, out=part)  # noqa: E731
        coll = lambda: ccl.all_gather(blocks, part, config=ccl_cfg)  # noqa: E731
        results = {"fused": out, "unfused": lambda: blocks.permute(1, 0, 2).reshape(m, w * n)}
    else:
        part = heap.empty(m, n, dtype=dtype)
        if op == "matmul_reduce_scatter":
            out = torch.empty(m // w, n, dtype=dtype, device=dev)
            red = torch.empty(m // w, n, dtype=dtype, device=dev)
            fused = lambda c=cfg: ops.matmul_reduce_scatter(a, b, out=out, config=c)  # noqa: E731
            coll = lambda: ccl.reduce_scatter(red, part, config=ccl_cfg)  # noqa: E731
            results = {"fused": out, "unfused": red}
        else:
            out = heap.empty(m, n, dtype=dtype)
            fused = lambda c=cfg: ops.matmul_all_reduce(a, b, out=out, config=c)  # noqa: E731
            coll = lambda: ccl.all_reduce(part, config=ccl_cfg)  # noqa: E731
            results = {"fused": out, "unfused": part}
        matmul = lambda: torch.matmul(a, b, out=part)  # noqa: E731

    def unfused():  # the collective first where it makes the GEMM's input
        if op == "all_gather_matmul":
            coll()
            matmul()
        else:
            matmul()
            coll()

    core_a = gathered if op == "all_gather_matmul" else a  # the GEMM the unfused matmul makes
    core_out = torch.empty(core_a.shape[0], n, dtype=dtype, device=dev)
    core = lambda: ops.local_matmul(core_a, b, out=core_out, config=cfg)  # noqa: E731
    paths = {"fused": fused, "unfused": unfused, "matmul": matmul, "collective": coll, "core": core}
    if ops.config.variant_of(auto_cfg, op, heap.device) != "fused":  # else the same calls as "fused"
        paths["auto"] = lambda: fused(auto_cfg)
        results["auto"] = results["fused"]
    paths["chunked"] = lambda: fused(chunked_cfg)
    results["chunked"] = results["fused"]
    return paths, results


def rank_main(args: argparse.Namespace) -> dict:
    import torch.distributed as dist

    w, dtype = args.ranks, DTYPES[args.dtype]
    e = torch.empty((), dtype=dtype).element_size()
    biggest = 0  # the heap tensors and staging of the largest call (_paths; the op's exchange buffer)
    for shape in args.shapes:
        for op in args.ops:
            (m, k), (_, n) = operands(op, shape, w)
            biggest = max(biggest, (w + 1) * m * k * e, (2 * w + 1) * m * n * e, 3 * m * n * e)
    # and the staging the variants reserve and keep (the chunked variant's buffers: up to 2 x W x m x n a chunk)
    heap = iris.heap.init(biggest * 2 + (64 << 20) + trace.heap_bytes(args))
    try:
        rank, dev = heap.rank, heap.device
        agree = timing.max_over_ranks(dist.new_group(backend="gloo"))
        rows, mismatches = [], []
        with trace.session(heap, args) as tracing, tables.progress(
            "ops-bench", len(args.shapes) * len(args.ops), enabled=rank == 0
        ) as bar:
            cfg, auto_cfg = _config(args, tracing.on), _config(args, tracing.on, "auto")
            chunked_cfg = _config(args, tracing.on, "chunked")
            # the unfused operations' collectives, one program per multiprocessor and rank on a shared GPU
            ccl_cfg = ops.reference.collective_config(args.backend, trace=tracing.on)
            for shape in args.shapes:
                for op in args.ops:
                    a_shape, b_shape = operands(op, shape, w)
                    a_all, b_all = _inputs(op, a_shape, b_shape, dtype, dev, rank, w)
                    a, b = a_all[rank], b_all[rank]
                    paths, results = _paths(op, heap, a, b, cfg, ccl_cfg, auto_cfg, chunked_cfg)
                    want = _expected(op, a_all, b_all, rank, w, dtype)
                    del a_all, b_all
                    found = []
                    for name in [p for p in ("fused", "auto", "unfused", "chunked") if p in paths]:
                        paths[name]()
                        heap.barrier()
                        heap.check_device_errors()
                        # 16-bit: a few units in the last place of each of the W rounded partials
                        rtol = 1e-4 if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32 else 2e-2 * w
                        result = results[name]() if callable(results[name]) else results[name]
                        got = validation.compare(result, want, rank=rank, what=f"{name} {op} {shape}",
                                                 rtol=rtol, atol=rtol)  # fmt: skip
                        found += [got] if got is not None else []
                    mismatches += found
                    row = {"op": op, "shape": "x".join(map(str, shape)), "ranks": w, "dtype": args.dtype,
                           "backend": args.backend, "check": "ok" if not found else "MISMATCH",
                           "auto_variant": "unfused" if "auto" in paths else "fused"}  # fmt: skip
                    for name, fn in paths.items():
                        heap.barrier()
                        t = timing.time_launches(fn, reps=args.reps, iters=args.iters, warmup=2, device=dev, agree=agree)
                        row[f"{name}_ms"] = agree(t) * 1e3
                    row.setdefault("auto_ms", row["fused_ms"])  # auto ran the fused kernel: the same calls
                    heap.barrier()
                    heap.check_device_errors()
                    nbytes = traffic(op, a_shape, b_shape, w, e)
                    copy_bw = copy_roofline(min(nbytes, 1 << 30) // w // 4 * 4 or 4, heap, max(3, args.iters // 2))
                    row["traffic_MB"] = nbytes / 1e6
                    row["copy_GBps"] = copy_bw / 1e9
                    row["flop"] = 2 * a_shape[0] * a_shape[1] * b_shape[1] * (w if op == "all_gather_matmul" else 1)
                    rows.append(row)
                    del paths, results
                    bar.advance()
                    heap.collect()
        heap.barrier()
        return {"rank": rank, "rows": rows, "mismatches": mismatches, "gpu": dev.type == "cuda"}
    finally:
        heap.close()


def _derive(row: dict) -> dict:
    row = dict(row)
    comm_ms = row["traffic_MB"] * 1e6 / (row["copy_GBps"] * 1e9) * 1e3
    row["comm_limit_ms"] = comm_ms
    row["limit_ms"] = max(row["matmul_ms"], comm_ms)
    row["fused_vs_limit"] = row["fused_ms"] / row["limit_ms"]
    row["speedup"] = row["unfused_ms"] / row["fused_ms"]
    row["auto_speedup"] = row["unfused_ms"] / row["auto_ms"]
    row["auto_label"] = f"{row['auto_speedup']:.2f} ({row['auto_variant']})"  # the table's; the CSV has both
    row["chunked_speedup"] = row["unfused_ms"] / row["chunked_ms"]
    row["chunked_vs_limit"] = row["chunked_ms"] / row["limit_ms"]
    row["parts_ms"] = row["matmul_ms"] + row["collective_ms"]
    row["unfused_vs_parts"] = row["unfused_ms"] / row["parts_ms"]
    row["comm_share"] = row["collective_ms"] / row["parts_ms"]
    row["core_vs_torch"] = row["matmul_ms"] / row["core_ms"]  # same flops per rank: the TFLOP/s ratio
    return row


def report(results: list, args: argparse.Namespace) -> int:
    rows = [_derive(r) for r in results[0]["rows"]]  # every rank's times were agreed (the slowest's)
    env = environment.describe(gpu=results[0]["gpu"])
    columns = [("op", "op", ""), ("shape", "T x H x I", ""), ("fused_ms", "fused ms", ".3f"),
               ("unfused_ms", "unfused ms", ".3f"), ("matmul_ms", "matmul ms", ".3f"),
               ("collective_ms", "coll ms", ".3f"), ("unfused_vs_parts", "unfused/(mm+coll)", ".2f"),
               ("comm_share", "comm share", ".0%"), ("limit_ms", "limit ms", ".3f"),
               ("fused_vs_limit", "fused/limit", ".2f"), ("speedup", "unfused/fused", ".2f"),
               ("auto_label", "unfused/auto", ""),
               ("chunked_speedup", "unfused/chunked", ".2f"), ("chunked_vs_limit", "chunked/limit", ".2f"),
               ("core_ms", "core ms", ".3f"), ("core_vs_torch", "core/torch", ".2f"), ("check", "vs torch", "")]  # fmt: skip
    caption = ("times: queued device time per call, slowest rank; limit = max(matmul, collective traffic at the "
               "copy bandwidth); core = iris.ops.local_matmul (the fused kernels' GEMM, communication off); "
               "core/torch = TFLOP/s ratio\n" + environment.summary(env))  # fmt: skip
    shape = (f", tiles {'x'.join(map(str, args.tiles))}" if args.tiles else "") + (
        f", {args.num_stages} stages" if args.num_stages else "")
    tables.print_table(f"iris.ops, {args.ranks} ranks, backend {args.backend}, {args.dtype}{shape}", rows, columns,
                       caption=caption)  # fmt: skip
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        tables.write_csv(args.csv, [{**{k: v for k, v in r.items() if k != "auto_label"}, "device": env["device"],
                                     "mps": env["mps"]} for r in rows])  # fmt: skip
        print(f"wrote {args.csv}")
    if args.plot:
        points = [{"index": i, "ratio": r[key] / r["limit_ms"], "path": label} for i, r in enumerate(rows)
                  for label, key in (("fused", "fused_ms"), ("unfused", "unfused_ms"), ("matmul + coll", "parts_ms"))]  # fmt: skip
        tables.plot(args.plot, points, x="index", y="ratio", series="path", logx=False,
                    title=f"iris.ops vs its limit, {args.ranks} ranks ({args.backend}, {args.dtype})",
                    xlabel="op and shape (the table's rows, in order)", ylabel="time / limit")  # fmt: skip
        print(f"wrote {args.plot}")
    return 1 if bad else 0

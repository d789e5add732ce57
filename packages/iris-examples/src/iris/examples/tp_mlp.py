"""tp-mlp: one transformer MLP block under tensor parallelism, fused (iris.ops) against unfused.

The block, per rank r of W (Megatron's sequence-parallel layout): the input ``x_r`` holds this
rank's T/W tokens (T/W x H); the up-projection is column-parallel (``w_up_r``: H x I/W, this
rank's columns) and the down-projection row-parallel (``w_down_r``: I/W x H, this rank's rows):

    h_r = gelu(cat_s(x_s) @ w_up_r)                  all_gather_matmul   (T x I/W)
    y_r = rows r of sum_s h_s @ w_down_s             matmul_reduce_scatter (T/W x H)

so ``y = gelu(x @ w_up) @ w_down`` with every rank holding its T/W tokens of it. The fused block
is those two ``iris.ops`` calls and a GELU, each run as ``--variant`` says (``auto``, the default:
as a call without a variant runs, its fused kernel or its unfused parts where
``iris.ops.config.AUTO_UNFUSED`` says so for the device; the table names which); the unfused block is ``iris.ccl.all_gather``,
``torch.matmul``, GELU, ``torch.matmul`` and ``iris.ccl.reduce_scatter`` (and the same with NCCL
where every rank has a GPU of its own). Both are checked against the block computed by torch on
one rank from the gathered weights, and timed as queued device time with the ranks lined up
(``iris.examples.harness.timing``), the slowest rank's.

Widths: hidden 4096 with intermediate 14336 and hidden 8192 with 28672 (Llama-3 8B and 70B's),
1k to 16k tokens; CPU ranks run a small block.
"""

from __future__ import annotations

import argparse

import torch

import iris.ccl as ccl
import iris.heap
import iris.ops as ops

from .harness import environment, tables, timing, trace, validation
from .harness.options import positive_int
from .ops_bench import parse_shape

__all__ = ["SUMMARY", "add_arguments", "check_arguments", "rank_main", "report"]

SUMMARY = "a tensor-parallel transformer MLP block: iris.ops fused vs torch.matmul + iris.ccl (and NCCL)"
BACKENDS = ("triton", "gluon")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
GPU_SHAPES = ["1024x4096x14336", "4096x4096x14336", "16384x4096x14336", "1024x8192x28672", "4096x8192x28672",
              "16384x8192x28672"]  # fmt: skip
CPU_SHAPES = ["64x48x96"]


def _shape_type(text: str):
    try:
        return parse_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    shapes = GPU_SHAPES if gpu else CPU_SHAPES
    parser.add_argument("--shapes", nargs="+", type=_shape_type, default=[parse_shape(s) for s in shapes],
                        metavar="TxHxI", help=f"tokens x hidden x intermediate (default {' '.join(shapes)})")  # fmt: skip
    parser.add_argument("--dtype", choices=list(DTYPES), default="bfloat16", help="dtype (default bfloat16)")
    parser.add_argument("--iters", type=positive_int, default=10 if gpu else 1, help="timed samples per block")
    parser.add_argument("--reps", type=positive_int, default=3 if gpu else 1, help="blocks queued per sample")
    parser.add_argument("--variant", choices=ops.config.VARIANTS, default="auto",
                        help="iris.ops.Config(variant=...) of the fused block's two operations (default auto)")  # fmt: skip


def check_arguments(args: argparse.Namespace) -> None:
    bad = [s for s in args.shapes if s[0] % args.ranks or s[2] % args.ranks]
    if bad:
        raise ValueError(f"tokens and intermediate must split evenly over {args.ranks} ranks; not so for {bad}")


def _weights(shape, dtype, dev, w):
    """Every rank's input rows and weight shards (the same bits on every rank: the check is local)."""
    t, h, i = shape
    gen = torch.Generator(device=dev).manual_seed(4321)
    x = torch.randn(t, h, generator=gen, device=dev).to(dtype)
    w_up = (torch.randn(h, i, generator=gen, device=dev) * h**-0.5).to(dtype)
    w_down = (torch.randn(i, h, generator=gen, device=dev) * i**-0.5).to(dtype)
    return x, w_up, w_down


def rank_main(args: argparse.Namespace) -> dict:
    import torch.distributed as dist

    w, dtype = args.ranks, DTYPES[args.dtype]
    e = torch.empty((), dtype=dtype).element_size()
    biggest = max(t * i // w * e * 3 + t * h * e * 3 for t, h, i in args.shapes)
    heap = iris.heap.init(biggest + (64 << 20) + trace.heap_bytes(args))
    try:
        rank, dev = heap.rank, heap.device
        agree = timing.max_over_ranks(dist.new_group(backend="gloo"))
        nccl = dist.new_group(backend="nccl") if dev.type == "cuda" and w > 1 and heap.ranks_per_device == 1 else None
        rows, mismatches = [], []
        with trace.session(heap, args) as tracing, tables.progress("tp-mlp", len(args.shapes), enabled=rank == 0) as bar:
            cfg = ops.Config(backend=args.backend, trace=tracing.on, variant=args.variant)
            ran = ", ".join(f"{op} {ops.config.variant_of(cfg, op, dev)}" for op in ("all_gather_matmul",
                                                                                     "matmul_reduce_scatter"))  # fmt: skip
            ccl_cfg = ops.reference.collective_config(args.backend, trace=tracing.on)
            for shape in args.shapes:
                t, hidden, inter = shape
                x, w_up, w_down = _weights(shape, dtype, dev, w)
                tokens, cols = t // w, inter // w
                want = (torch.nn.functional.gelu((x.float() @ w_up.float()).to(dtype).float()).to(dtype).float()
                        @ w_down.float())[rank * tokens : (rank + 1) * tokens].to(dtype)  # fmt: skip
                x_r = heap.empty(tokens, hidden, dtype=dtype)  # read in place by the peers
                x_r.copy_(x[rank * tokens : (rank + 1) * tokens])
                up = w_up[:, rank * cols : (rank + 1) * cols].contiguous()
                down = w_down[rank * cols : (rank + 1) * cols].contiguous()
                del x, w_up, w_down
                h = torch.empty(t, cols, dtype=dtype, device=dev)
                y = torch.empty(tokens, hidden, dtype=dtype, device=dev)
                gathered = heap.empty(t, hidden, dtype=dtype)
                part = heap.empty(t, hidden, dtype=dtype)
                y_ref = torch.empty(tokens, hidden, dtype=dtype, device=dev)

                def fused():
                    ops.all_gather_matmul(x_r, up, out=h, config=cfg)
                    ops.matmul_reduce_scatter(torch.nn.functional.gelu(h), down, out=y, config=cfg)

                def unfused(group=None):
                    if group is None:
                        ccl.all_gather(gathered, x_r, config=ccl_cfg)
                    else:
                        dist.all_gather_into_tensor(gathered, x_r, group=group)
                    torch.matmul(torch.nn.functional.gelu(torch.matmul(gathered, up)), down, out=part)
                    if group is None:
                        ccl.reduce_scatter(y_ref, part, config=ccl_cfg)
                    else:
                        dist.reduce_scatter_tensor(y_ref, part, group=group)

                paths = {"fused": (fused, y), "unfused": (unfused, y_ref)}
                if nccl is not None:
                    paths["nccl"] = (lambda: unfused(nccl), y_ref)
                row = {"shape": "x".join(map(str, shape)), "tokens": t, "hidden": hidden, "intermediate": inter,
                       "ranks": w, "dtype": args.dtype, "backend": args.backend, "fused_block": ran}  # fmt: skip
                tol = 2e-2 * w if dtype != torch.float32 else 1e-3
                for name, (fn, result) in paths.items():
                    result.fill_(float("nan"))
                    fn()
                    heap.barrier()
                    heap.check_device_errors()
                    found = validation.compare(result, want, rank=rank, what=f"{name} block {row['shape']}", rtol=tol,
                                               atol=tol)  # fmt: skip
                    mismatches += [found] if found is not None else []
                    heap.barrier()
                    secs = timing.time_launches(fn, reps=args.reps, iters=args.iters, warmup=2, device=dev, agree=agree)
                    row[f"{name}_ms"] = agree(secs) * 1e3
                heap.barrier()
                heap.check_device_errors()
                row["speedup"] = row["unfused_ms"] / row["fused_ms"]
                if nccl is not None:
                    row["speedup_vs_nccl"] = row["nccl_ms"] / row["fused_ms"]
                row["check"] = "ok" if not any(m.what.endswith(row["shape"]) for m in mismatches) else "MISMATCH"
                rows.append(row)
                del paths
                heap.collect()
                bar.advance()
        heap.barrier()
        return {"rank": rank, "rows": rows, "mismatches": mismatches, "gpu": dev.type == "cuda", "nccl": nccl is not None}
    finally:
        heap.close()


def report(results: list, args: argparse.Namespace) -> int:
    rows = results[0]["rows"]
    env = environment.describe(gpu=results[0]["gpu"])
    columns = [("shape", "T x H x I", ""), ("fused_ms", "fused ms", ".3f"), ("unfused_ms", "unfused ms", ".3f"),
               ("speedup", "unfused/fused", ".2f")]  # fmt: skip
    if results[0]["nccl"]:
        columns += [("nccl_ms", "NCCL ms", ".3f"), ("speedup_vs_nccl", "NCCL/fused", ".2f")]
    columns.append(("check", "vs torch", ""))
    caption = ("fused = iris.ops.all_gather_matmul, GELU, iris.ops.matmul_reduce_scatter (variant "
               f"{args.variant}: {rows[0]['fused_block'] if rows else '-'}); unfused = iris.ccl.all_gather, "
               "matmul, GELU, matmul, iris.ccl.reduce_scatter; queued device time per block, slowest rank\n"
               + environment.summary(env))  # fmt: skip
    tables.print_table(f"tp-mlp, {args.ranks} ranks, backend {args.backend}, {args.dtype}", rows, columns, caption=caption)
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        tables.write_csv(args.csv, [dict(r, device=env["device"], mps=env["mps"]) for r in rows])
        print(f"wrote {args.csv}")
    if args.plot:
        points = [{"tokens": r["tokens"], "speedup": r["speedup"], "hidden": f"hidden {r['hidden']}"} for r in rows]
        tables.plot(args.plot, points, x="tokens", y="speedup", series="hidden",
                    title=f"tp-mlp, {args.ranks} ranks: unfused / fused ({args.backend}, {args.dtype})",
                    xlabel="tokens", ylabel="unfused time / fused time")  # fmt: skip
        print(f"wrote {args.plot}")
    return 1 if bad else 0

"""gemm-all-scatter: C = A @ B complete on every rank, from one fused operation per rank.

The problem (tensor parallelism by columns): A (M x K) is the same on every rank; B (K x W*N) is
split by columns, rank r owning ``B_r = B[:, r*N : (r+1)*N]``. Every rank must end with all of
``C = A @ B`` (M x W*N).

This example is a thin driver over ``iris.ops.matmul_all_gather``:

- **Fused** (``iris.ops.matmul_all_gather(a, b_r, out=c)``): a persistent GEMM on each rank
  computes the tiles of its column block ``A @ B_r`` and stores each finished tile into **every**
  rank's C (a symmetric-heap tensor) while the next tile is computed, so communication overlaps
  the remaining tiles' math and no rank ever reads a peer. The operation synchronizes itself (the
  collectives' protocol: every rank waits for every rank at the kernel's entry, so no rank writes
  into a peer's C before the peer reached the call, and at its exit, so C is complete on every
  rank when the call is done in stream order); the example adds no barrier around it.
- **Unfused** baseline: ``torch.matmul(A, B_r)`` into a heap tensor, then ``iris.ccl.all_gather``
  (asynchronous, no host sync in the timed loop, as ``ccl-bench`` times it), and where every rank
  has its own GPU also NCCL's ``torch.distributed.all_gather_into_tensor``.
- **GEMM only**: ``iris.ops.local_matmul``, the fused operation's GEMM core with communication
  off (what the fused call would cost if its stores were free).

Layout of C (``--layout``), chosen so that both paths produce the same bytes:

- ``blocks`` (default): C is stored as W blocks, ``C_blocks[r] = A @ B_r`` (shape W x M x N), which
  is exactly what an all-gather of the per-rank products produces (it concatenates along dim 0;
  the operation's stacked ``out``). The baseline then does nothing more, and the comparison is
  GEMM + all-gather against the fused operation with no extra work on either side. The M x W*N
  matrix is the view ``C_blocks.permute(1, 0, 2).reshape(M, W*N)``.
- ``matrix``: C is stored as the row-major M x W*N matrix. The fused operation writes it directly
  (only the addresses differ); the baseline needs a permuting copy after the all-gather, timed as
  its own column ("permute") and included in its total.

The world size must divide the columns of B (a clear usage error otherwise). M, N and K need
not be multiples of the tiles (edges are masked).

Validation, on every rank: the inputs are generated identically on every rank from ``--seed``
(torch generators), and C (every path's result) must equal ``A.float() @ B.float()`` within a
tolerance for the dtype (fp32 accumulation; fp32 products on TF32 tensor cores where torch's own
matmul would use them). A mismatch names the rank, the path, the element, the rank that wrote
it and its tile, and the run exits 1.

Products and tiles are the operation's (``iris.ops.Config``; the tile options below override its
defaults): Triton's ``tl.dot``, Gluon's tensor-core or FMA product as the target allows. On CPU
ranks both backends run under Triton's interpreter.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

import torch

import iris.ccl as ccl
import iris.heap
import iris.ops as ops
import iris.ops.config

from .harness import environment, tables, timing, validation
from .harness import trace as trace_option  # --trace (ops_config takes a keyword named trace)
from .harness.options import positive_int

__all__ = [
    "BACKENDS",
    "DTYPES",
    "LAYOUTS",
    "SUMMARY",
    "add_arguments",
    "as_matrix",
    "check_arguments",
    "find_mismatch",
    "gemm_all_scatter",
    "ops_config",
    "parse_shape",
    "rank_main",
    "report",
    "tolerance",
]

SUMMARY = (
    "persistent GEMM whose tiles are stored straight into every rank's C (fused all-scatter) vs matmul + all_gather"
)
BACKENDS = ops.BACKENDS
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
LAYOUTS = ("blocks", "matrix")

#: GPU sweep: M = N = 8192 with K from communication-heavy (256) to compute-heavy (8192), and a
#: bigger and a smaller output at small K.
GPU_SIZES = ["8192x8192x256", "8192x8192x512", "8192x8192x1024", "8192x8192x2048", "8192x8192x4096",
             "8192x8192x8192", "16384x16384x512", "4096x4096x512"]  # fmt: skip
#: CPU ranks (Triton's interpreter): tiny, with edges that are not multiples of the tiles; the
#: column counts divide by 1, 2, 3, 4 and 6 ranks.
CPU_SIZES = ["64x96x32", "40x48x24"]
#: Command-line tile options -> the ``iris.ops.Config`` fields they set.
_CONFIG_OPTIONS = {"block_m": "block_m", "block_n": "block_n", "block_k": "block_k", "group_m": "group_m",
                   "num_warps": "num_warps", "num_stages": "num_stages", "programs": "num_programs"}  # fmt: skip

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"MxNxK"`` -> (M, N, K), N being the columns of the whole B and C; ValueError otherwise."""
    m = _SHAPE.match(str(text))
    if m is None or min(int(g) for g in m.groups()) < 1:
        raise ValueError(
            f"cannot read {text!r} as a GEMM size: write MxNxK with positive whole numbers, like 8192x8192x1024"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _shape_type(text: str) -> tuple[int, int, int]:
    try:
        return parse_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _label(shape) -> str:
    return "x".join(str(v) for v in shape)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for C against ``A.float() @ B.float()`` when C's entries are about N(0, 1).

    bf16/fp16: two units in the last place of the output (fp32 sums in another order than
    torch's, then one rounding); fp32: TF32 inputs on tensor cores (10-bit mantissas) over any K.
    """
    return {torch.bfloat16: (2**-6, 2**-6), torch.float16: (2**-9, 2**-9), torch.float32: (1e-2, 1e-2)}[dtype]


def ops_config(args: argparse.Namespace, *, trace: bool = False) -> ops.Config:
    """The ``iris.ops.Config`` of the command line: the backend, the tile options given (the rest
    None: the operation's defaults for the device and dtype) and ``trace``. ValueError names a
    bad option."""
    chosen = {field: getattr(args, option) for option, field in _CONFIG_OPTIONS.items()}
    return ops.Config(backend=args.backend, trace=trace, variant="fused",  # this example is the fused kernel
                      **{k: v for k, v in chosen.items() if v is not None})


def gemm_all_scatter(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, heap, config: ops.Config | None = None,
                     layout: str = "blocks") -> torch.Tensor:  # fmt: skip
    """This rank's block ``a @ b`` into every rank's ``c``: ``iris.ops.matmul_all_gather(a, b, out=c)``.

    ``a``: M x K, ``b``: this rank's K x N columns, on the heap's device; ``c``: a contiguous heap
    tensor (``heap.empty(...)``, so every rank's tiles land in it in place), ``(W, M, N)`` for
    ``layout="blocks"`` (``c[r]`` is rank r's block) or ``(M, W*N)`` for ``"matrix"``. The
    operation synchronizes with the peers itself and is asynchronous: ``c`` is complete on every
    rank in stream order. Argument errors are raised before anything is launched.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {LAYOUTS}")
    w = heap.world_size
    m, n = a.shape[0], b.shape[-1]
    want = (w, m, n) if layout == "blocks" else (m, w * n)
    if tuple(c.shape) != want:
        raise ValueError(
            f"c must have shape {want} for layout {layout!r} ({w} ranks, a {tuple(a.shape)}, b {tuple(b.shape)}), "
            f"got {tuple(c.shape)}"
        )
    if not (heap.is_symmetric(c) and c.is_contiguous()):
        raise ValueError(
            "c must be a contiguous tensor on the symmetric heap (heap.empty(...)), so that peers store into it "
            "in place; got " + ("a non-contiguous heap tensor" if heap.is_symmetric(c) else "a tensor off the heap")
        )
    return ops.matmul_all_gather(a, b, out=c, heap=heap, config=config)


# -- command line ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, *, gpu: bool) -> None:
    sizes = GPU_SIZES if gpu else CPU_SIZES
    g = parser.add_argument_group("gemm-all-scatter")
    g.add_argument("--sizes", nargs="+", type=_shape_type, default=[parse_shape(s) for s in sizes], metavar="MxNxK",
                   help=f"GEMM sizes: C is M x N on every rank (N split over the ranks), K the inner dimension "
                        f"(default {' '.join(sizes)})")  # fmt: skip
    g.add_argument(
        "--dtype", choices=list(DTYPES), default="bfloat16", help="input and output dtype (default bfloat16)"
    )
    g.add_argument("--layout", choices=LAYOUTS, default="blocks",
                   help="how C is stored: 'blocks' = W x M x N/W (what all_gather produces; default), 'matrix' = "
                        "M x N (the baseline adds a permuting copy)")  # fmt: skip
    g.add_argument("--iters", type=int, default=20 if gpu else 2, help="timed calls per measurement (0: validate only)")
    g.add_argument("--warmup", type=int, default=3 if gpu else 1, help="untimed calls before each measurement")
    g.add_argument("--seed", type=int, default=0, help="seed of the inputs (the same on every rank)")
    t = parser.add_argument_group(
        "gemm-all-scatter tiles (iris.ops.Config)",
        "Left out, each takes iris.ops.Config's default for the device, dtype and backend; the table's title names "
        "the tiles that ran.",
    )
    t.add_argument("--block-m", type=positive_int, default=None, help="tile rows (a power of two >= 16)")
    t.add_argument("--block-n", type=positive_int, default=None, help="tile columns (a power of two >= 16)")
    t.add_argument("--block-k", type=positive_int, default=None, help="K step (a power of two >= 16)")
    t.add_argument("--group-m", type=positive_int, default=None, help="tile rows swept together, for L2 reuse")
    t.add_argument("--num-warps", type=positive_int, default=None, help="warps per program")
    t.add_argument("--num-stages", type=positive_int, default=None, help="Triton software-pipeline stages")
    t.add_argument("--programs", type=positive_int, default=None,
                   help="programs of the persistent kernel (default: multiprocessors / ranks on the GPU; CPU: 2)")  # fmt: skip


def check_arguments(args: argparse.Namespace) -> None:
    """Usage errors before any rank starts: N divisible by the world size, sane tiles and counts."""
    w = args.ranks
    bad = [_label(s) for s in args.sizes if s[1] % w]
    if bad:
        raise ValueError(
            f"the columns N of every size must split evenly over the {w} ranks (each rank owns N/{w} columns of B "
            f"and C); not so for {' '.join(bad)}. Choose N divisible by {w}, or another --ranks."
        )
    if args.iters < 0 or args.warmup < 0:
        raise ValueError(f"--iters and --warmup must be >= 0, got {args.iters} and {args.warmup}")
    ops_config(args)  # raises ValueError naming a bad tile option


# -- one rank ---------------------------------------------------------------------------------------


def _inputs(shape, dtype, device, seed, rank, w):
    """A (M x K) and this rank's columns of B (K x N/W), the same bits on every rank; and the full B."""
    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=gen, device=device).to(dtype)
    b = (torch.randn(k, n, generator=gen, device=device) / math.sqrt(k)).to(dtype)  # C ~ N(0, 1)
    cols = n // w
    return a, b, b[:, rank * cols : (rank + 1) * cols].contiguous()


def as_matrix(c: torch.Tensor, layout: str) -> torch.Tensor:
    """C as the M x N matrix (a view for ``blocks``)."""
    if layout == "blocks":
        w, m, n = c.shape
        return c.permute(1, 0, 2).reshape(m, w * n)
    return c


def find_mismatch(c_full, ref, *, rank, what, tile, cols):
    """The first mismatch of C against torch (None if none), naming the element, the rank that
    wrote it and its ``tile`` (block_m, block_n). Compared on C's device (C and its reference can
    be GiBs)."""
    rtol, atol = tolerance(c_full.dtype)
    got = c_full.float()
    bad = ~torch.isclose(got, ref, rtol=rtol, atol=atol)
    count = int(bad.sum())
    if count == 0:
        return None
    i, j = (int(v) for v in bad.nonzero()[0])
    owner, col = divmod(j, cols)
    bm, bn = tile
    where = (f"{what}; element ({i}, {j}) comes from rank {owner}'s tile ({i // bm}, {col // bn}) of {bm}x{bn} "
             f"(rtol {rtol:g}, atol {atol:g})")  # fmt: skip
    return validation.Mismatch(rank, where, (i, j), ref[i, j].item(), got[i, j].item(), count, got.numel())


def rank_main(args: argparse.Namespace) -> dict:
    import torch.distributed as dist

    w, dtype = args.ranks, DTYPES[args.dtype]
    size = max(torch.empty((), dtype=dtype).element_size() * m * n * (w + 1) // w for m, n, _ in args.sizes)
    heap = iris.heap.init(size + (8 << 20) + trace_option.heap_bytes(args))  # C, the baseline's product, flags
    try:
        # The protocol's workspace (its flags) is allocated on first use: make that now, at the bottom
        # of the heap, so it does not split the free space that each size's C needs in one block.
        ccl.barrier(heap=heap)
        rank, dev = heap.rank, heap.device
        nccl = None
        if dev.type == "cuda" and w > 1 and heap.ranks_per_device == 1:
            nccl = dist.new_group(backend="nccl")
        rows, mismatches = [], []
        with (
            trace_option.session(heap, args) as tracing,
            tables.progress("gemm-all-scatter", len(args.sizes), enabled=rank == 0) as bar,
        ):
            # the tiles the operation picks, named in the report and in mismatches (programs as given)
            cfg = iris.ops.config.resolve(ops_config(args, trace=tracing.on), dtype, heap)
            ccl_cfg = ccl.Config(backend=args.backend, trace=tracing.on)
            for shape in args.sizes:
                row, found = _one_size(args, heap, shape, cfg, ccl_cfg, nccl)
                rows.append(row)
                mismatches += found
                bar.advance()
        heap.barrier()
        config = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("backend", "blocking", "trace")}
        return {"rank": rank, "rows": rows, "mismatches": mismatches, "gpu": dev.type == "cuda",
                "nccl": nccl is not None, "config": config, "sharing": heap.ranks_per_device}  # fmt: skip
    finally:
        heap.close()


def _one_size(args, heap, shape, cfg, ccl_cfg, nccl):
    import torch.distributed as dist

    w, rank, dev, layout = heap.world_size, heap.rank, heap.device, args.layout
    dtype = DTYPES[args.dtype]
    m, n, k = shape
    cols = n // w
    a, b_full, b = _inputs(shape, dtype, dev, args.seed, rank, w)
    ref = torch.matmul(a.float(), b_full.float())
    del b_full
    c = heap.empty(*((w, m, cols) if layout == "blocks" else (m, n)), dtype=dtype)
    part = heap.empty(m, cols, dtype=dtype)  # the baseline's product, on the heap: all_gather reads it in place
    gathered = c if layout == "blocks" else torch.empty(w, m, cols, dtype=dtype, device=dev)

    def fused():
        gemm_all_scatter(a, b, c, heap=heap, config=cfg, layout=layout)

    def local_gemm():  # the fused operation's GEMM core, communication off
        ops.local_matmul(a, b, out=part, heap=heap, config=cfg)

    def matmul():
        torch.matmul(a, b, out=part)

    def gather(group=None):
        if group is None:
            ccl.all_gather(gathered, part, heap=heap, config=ccl_cfg)
        else:
            dist.all_gather_into_tensor(gathered.view(w * m, cols), part, group=group)

    def permute():
        c.view(m, w, cols).copy_(gathered.permute(1, 0, 2))

    def unfused(group=None):
        matmul()
        gather(group)
        if layout == "matrix":
            permute()

    def check(path):
        what = f"{path} C of {_label(shape)} {args.dtype}"
        return find_mismatch(as_matrix(c, layout), ref, rank=rank, what=what, tile=(cfg.block_m, cfg.block_n),
                             cols=cols)  # fmt: skip

    found = _check_paths(c, fused, unfused, check, heap, nccl)
    row = {"size": _label(shape), "M": m, "N": n, "K": k, "ranks": w, "dtype": args.dtype, "backend": args.backend,
           "layout": layout, "check": "ok" if not found else "MISMATCH"}  # fmt: skip
    if args.iters > 0:
        timed = {"fused": fused, "local_gemm": local_gemm, "matmul": matmul, "all_gather": gather, "unfused": unfused}
        if layout == "matrix":
            timed["permute"] = permute
        if nccl is not None:
            timed["nccl_all_gather"] = lambda: gather(nccl)
            timed["nccl_unfused"] = lambda: unfused(nccl)
        row.update(_time_paths(timed, args, heap))
    heap.free(c)
    heap.free(part)
    return row, found


def _check_paths(c, fused, unfused, check, heap, nccl) -> list:
    """Run the fused path, the unfused one and (with a group) NCCL's once each into a C of NaNs and
    check it; the mismatches found."""
    # An element nobody wrote is a mismatch. Each call's protocol waits for every rank at its entry
    # (in stream order), so no peer stores into C before this rank's fill is done.
    c.fill_(float("nan"))
    fused()
    heap.barrier()
    heap.check_device_errors()  # an asynchronous failure of the operation, before its result is read
    found = [check("fused")]
    c.fill_(float("nan"))
    unfused()
    heap.barrier()
    heap.check_device_errors()
    found.append(check("unfused"))
    if nccl is not None:
        c.fill_(float("nan"))
        unfused(nccl)
        torch.cuda.synchronize(heap.device)
        found.append(check("NCCL"))
    return [f for f in found if f is not None]


def _time_paths(timed: dict, args, heap) -> dict:
    """``{name}_ms`` for each of ``timed`` (one call at a time, the ranks lined up before each path)."""
    row = {}
    for name, fn in timed.items():
        heap.barrier()
        seconds = timing.time_launches(fn, reps=1, iters=args.iters, warmup=args.warmup, device=heap.device,
                                       queued=False)  # fmt: skip
        row[f"{name}_ms"] = seconds * 1e3
    heap.barrier()
    heap.check_device_errors()  # any device-side failure of the timed loops
    return row


# -- report ---------------------------------------------------------------------------------------


def _merge(results: list) -> list[dict]:
    """Per size: every time as the slowest rank's (the result is complete when every rank is done)."""
    rows = []
    for per_rank in zip(*(r["rows"] for r in results)):
        row = dict(per_rank[0])
        for key in row:
            if key.endswith("_ms"):
                row[key] = max(r[key] for r in per_rank)
        row["check"] = "ok" if all(r["check"] == "ok" for r in per_rank) else "MISMATCH"
        flop = 2 * row["M"] * row["N"] * row["K"]
        if "fused_ms" in row:
            row["speedup"] = row["unfused_ms"] / row["fused_ms"]
            row["fused_tflops"] = flop / (row["fused_ms"] * 1e-3) / 1e12
            row["unfused_tflops"] = flop / (row["unfused_ms"] * 1e-3) / 1e12
            row["comm_share"] = row["all_gather_ms"] / (row["matmul_ms"] + row["all_gather_ms"])
            if "nccl_unfused_ms" in row:
                row["speedup_vs_nccl"] = row["nccl_unfused_ms"] / row["fused_ms"]
        rows.append(row)
    return rows


def _legend(layout: str, *, gpu: bool) -> str:
    parts = [
        "times: median per call, slowest rank",
        "fused = iris.ops.matmul_all_gather (synchronized by its own protocol)",
        "unfused = torch.matmul + iris.ccl.all_gather" + (" + permute" if layout == "matrix" else ""),
        "TFLOP/s = 2MNK / time (all ranks together)",
        "comm share = all_gather / (matmul + all_gather)",
        "GEMM only = iris.ops.local_matmul (the fused operation's GEMM, communication off)",
    ]
    if not gpu:
        parts.append("CPU ranks: interpreter times, not performance")
    return "; ".join(parts)


def report(results: list, args: argparse.Namespace) -> int:
    rows = _merge(results)
    first = results[0]
    env = environment.describe(gpu=first["gpu"])
    config = first["config"]
    timed = "fused_ms" in rows[0] if rows else False
    columns = [("size", "M x N x K", "")]
    if timed:
        columns += [("fused_ms", "fused ms", ".3f"), ("matmul_ms", "matmul ms", ".3f"),
                    ("all_gather_ms", "all_gather ms", ".3f")]  # fmt: skip
        if args.layout == "matrix":
            columns.append(("permute_ms", "permute ms", ".3f"))
        columns += [("unfused_ms", "unfused ms", ".3f"), ("speedup", "speedup", ".2f"),
                    ("comm_share", "comm share", ".0%"), ("fused_tflops", "fused TFLOP/s", ".1f"),
                    ("unfused_tflops", "unfused TFLOP/s", ".1f"), ("local_gemm_ms", "GEMM only ms", ".3f")]  # fmt: skip
        if first["nccl"]:
            columns += [("nccl_unfused_ms", "matmul+NCCL ms", ".3f"), ("speedup_vs_nccl", "vs NCCL", ".2f")]
    columns.append(("check", "vs torch", ""))
    programs = config["num_programs"]
    title = (f"gemm-all-scatter, {args.ranks} ranks, {args.backend} (iris.ops), {args.dtype}, C as {args.layout}, "
             f"tiles {config['block_m']}x{config['block_n']}x{config['block_k']}, {config['num_warps']} warps"
             + (f", num_stages {config['num_stages']}" if args.backend == "triton" else "")
             + (f", {programs} programs" if programs is not None else ""))  # fmt: skip
    notes = [environment.summary(env)]
    if timed:
        notes.insert(0, _legend(args.layout, gpu=first["gpu"]))
        if first["gpu"] and first["sharing"] > 1:
            notes.insert(1, f"{first['sharing']} ranks share each GPU (run under MPS for concurrent kernels)")
    tables.print_table(title, rows, columns, caption="\n".join(notes))
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        tables.write_csv(args.csv, [dict(r, device=env["device"], mps=env["mps"], **config) for r in rows])
        print(f"wrote {args.csv}")
    if args.plot and timed:
        paths = [("fused", "fused_ms"), ("matmul + all_gather", "unfused_ms"), ("matmul + NCCL", "nccl_unfused_ms")]
        points = [{"gflop": 2 * r["M"] * r["N"] * r["K"] / 1e9, "ms": r[key], "path": label, "size": r["size"]}
                  for r in rows for label, key in paths if key in r]  # fmt: skip
        tables.plot(args.plot, points, x="gflop", y="ms", series="path", logy=True,
                    title=f"gemm-all-scatter, {args.ranks} ranks ({args.backend}, {args.dtype}, C as {args.layout})",
                    xlabel="GEMM size (GFLOP, all ranks)", ylabel="time per call (ms)")  # fmt: skip
        print(f"wrote {args.plot}")
    return 1 if bad else 0

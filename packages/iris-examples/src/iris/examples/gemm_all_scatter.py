"""gemm-all-scatter: C = A @ B complete on every rank, from one fused GEMM kernel per rank.

The problem (tensor parallelism by columns): A (M x K) is the same on every rank; B (K x W*N) is
split by columns, rank r owning ``B_r = B[:, r*N : (r+1)*N]``. Every rank must end with all of
``C = A @ B`` (M x W*N).

- **Fused** (this example's kernel, ``iris.examples._gemm_triton`` / ``_gemm_gluon``): a
  persistent GEMM on each rank computes the tiles of its column block ``A @ B_r`` and stores each
  finished tile straight into **every** rank's copy of C (a symmetric-heap tensor) through
  translated pointers, so communication overlaps the remaining tiles' math and no rank ever reads
  a peer. The call is ``ccl.barrier(); kernel; ccl.barrier()``: the entry barrier (in stream
  order) keeps any rank from writing into a peer's C before the peer is done with what it had
  there (its reads of the previous result), the exit barrier makes C complete on every rank
  before anyone reads it.
- **Unfused** baseline: ``torch.matmul(A, B_r)`` into a heap tensor, then
  ``iris.ccl.all_gather`` (with error checks off in the timed loop, one check after, as
  ``ccl-bench`` times it), and where every rank has its own GPU also NCCL's
  ``torch.distributed.all_gather_into_tensor``.

Layout of C (``--layout``), chosen so that both paths produce the same bytes:

- ``blocks`` (default): C is stored as W blocks, ``C_blocks[r] = A @ B_r`` (shape W x M x N), which
  is exactly what an all-gather of the per-rank products produces (it concatenates along dim 0).
  The baseline then does nothing more, and the comparison is GEMM + all-gather against the fused
  kernel with no extra work on either side. The M x W*N matrix is the view
  ``C_blocks.permute(1, 0, 2).reshape(M, W*N)``.
- ``matrix``: C is stored as the row-major M x W*N matrix. The fused kernel writes it directly
  (only the addresses differ); the baseline needs a permuting copy after the all-gather, timed as
  its own column ("permute") and included in its total.

The world size must divide the columns of B (a clear usage error otherwise). M, N and K need
not be multiples of the tiles (edges are masked).

Validation, on every rank: the inputs are generated identically on every rank from ``--seed``
(torch generators), and C (both paths' results) must equal ``A.float() @ B.float()`` within a
tolerance for the dtype (fp32 accumulation; fp32 inputs may use TF32 tensor cores, as Triton's
``tl.dot`` does by default). A mismatch names the rank, the path, the element, the rank that wrote
it and its tile, and the run exits 1.

Products per target: the Triton kernel uses ``tl.dot`` (wgmma on sm_90, MFMA on gfx942, chosen by
Triton). The Gluon kernel uses ``gl.nvidia.ampere.mma_v2`` (tensor cores, register operands) on
NVIDIA sm_80+ and ``gl.dot_fma`` elsewhere (AMD: FMA units, a portable fallback, far slower).
On CPU ranks both run under Triton's interpreter (Gluon through ``iris.mem.gluon.interpret``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
from dataclasses import dataclass

import torch

import iris.ccl as ccl
import iris.heap

from . import environment, tables, timing, validation
from . import trace as trace_option  # --trace (the kernel's own argument is named trace)
from .options import positive_int

__all__ = [
    "BACKENDS",
    "DTYPES",
    "LAYOUTS",
    "SUMMARY",
    "Tiles",
    "add_arguments",
    "as_matrix",
    "check_arguments",
    "default_tiles",
    "find_mismatch",
    "gemm_all_scatter",
    "parse_shape",
    "rank_main",
    "report",
    "tolerance",
]

SUMMARY = (
    "persistent GEMM whose tiles are stored straight into every rank's C (fused all-scatter) vs matmul + all_gather"
)
BACKENDS = ("triton", "gluon")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
LAYOUTS = ("blocks", "matrix")
GLUON_DOTS = ("auto", "mma_v2", "fma")

#: GPU sweep: M = N = 8192 with K from communication-heavy (256) to compute-heavy (8192), and a
#: bigger and a smaller output at small K.
GPU_SIZES = ["8192x8192x256", "8192x8192x512", "8192x8192x1024", "8192x8192x2048", "8192x8192x4096",
             "8192x8192x8192", "16384x16384x512", "4096x4096x512"]  # fmt: skip
#: CPU ranks (Triton's interpreter): tiny, with edges that are not multiples of the tiles; the
#: column counts divide by 1, 2, 3, 4 and 6 ranks.
CPU_SIZES = ["64x96x32", "40x48x24"]

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


@dataclass(frozen=True)
class Tiles:
    """Launch shape of the fused kernel: tile sizes (powers of two), tile-row grouping, warps,
    software-pipeline stages (Triton only) and programs (None: one per multiprocessor, shared
    among the ranks on the GPU; 2 on CPU ranks)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    programs: int | None = None

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"{name} must be a power of two >= 16 (tl.dot and gl.arange need one), got {v!r}")
        if self.num_warps & (self.num_warps - 1) or self.num_warps < 1:
            raise ValueError(f"num_warps must be a positive power of two, got {self.num_warps!r}")
        for name in ("group_m", "num_stages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.programs is not None and self.programs < 1:
            raise ValueError(f"programs must be at least 1, got {self.programs!r}")


def default_tiles(backend: str, dtype: torch.dtype, *, gpu: bool, mma: bool = True) -> Tiles:
    """The tiles the example uses unless told otherwise.

    GPU (chosen for sm_90): Triton 128x256x64, 8 warps, 3 stages for 16-bit inputs (144 KiB of
    shared memory for the pipeline), 128x128x32 for fp32; Gluon 128x128x32, 8 warps on tensor
    cores, 64x64x32 with 4 warps on FMA units. CPU ranks: 32x16x16 (few, cheap programs).
    """
    if not gpu:
        return Tiles(32, 16, 16, group_m=2, num_warps=4, num_stages=1)
    if backend == "gluon":
        return Tiles(128, 128, 32, num_warps=8, num_stages=1) if mma else Tiles(64, 64, 32, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return Tiles(128, 128, 32, num_warps=8, num_stages=3)
    return Tiles(128, 256, 64, num_warps=8, num_stages=3)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for C against ``A.float() @ B.float()`` when C's entries are about N(0, 1).

    bf16/fp16: two units in the last place of the output (Triton's interpreter truncates to bf16
    where GPUs round to nearest); fp32: TF32 inputs on tensor cores (10-bit mantissas) over any K.
    """
    return {torch.bfloat16: (2**-6, 2**-6), torch.float16: (2**-9, 2**-9), torch.float32: (1e-2, 1e-2)}[dtype]


def _kernels(backend: str):
    if backend == "gluon":
        from . import _gemm_gluon as kernels
    else:
        from . import _gemm_triton as kernels
    return kernels


@functools.cache
def _target(device: torch.device):
    """The compile target of ``device``'s kernels (None on CPU ranks)."""
    if device.type != "cuda":
        return None
    import triton

    return triton.runtime.driver.active.get_current_target()


@functools.cache
def _launch_options(backend: str, tiles: Tiles, dtype: torch.dtype, target, gluon_dot: str) -> dict:
    """The backend's extra constexprs and launch options (cached: the fused step's host time is
    on its critical path, between two synchronising barriers)."""
    extra = {"mma_v2": None if gluon_dot == "auto" else gluon_dot == "mma_v2"} if backend == "gluon" else {}
    return _kernels(backend).launch_options(tiles, dtype, target, **extra)


def gemm_all_scatter(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, heap, tiles: Tiles, backend: str = "triton",
                     layout: str = "blocks", scatter: bool = True, gluon_dot: str = "auto",
                     programs: int = 1, trace: bool = False) -> torch.Tensor:  # fmt: skip
    """Launch the fused kernel once: this rank's block ``a @ b`` into every rank's ``c`` (no barriers).

    ``a``: M x K, ``b``: this rank's K x N columns, on the heap's device (any strides); ``c``: a
    heap tensor, ``(W, M, N)`` for ``layout="blocks"`` or ``(M, W*N)`` for ``"matrix"``, rows
    contiguous. ``scatter=False`` stores only this rank's copy. ``gluon_dot`` picks the Gluon
    product (``auto``: tensor cores on NVIDIA, FMA elsewhere). ``trace``: record each tile's product
    and each of its stores into ``heap.tracing``'s buffer. The caller synchronises: a barrier
    before (peers' C free) and after (C complete), as :func:`rank_main` does.
    """
    w = heap.world_size
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b must have a's {k} columns as rows")
    want = (w, m, n) if layout == "blocks" else (m, w * n)
    if tuple(c.shape) != want or c.stride(-1) != 1:
        raise ValueError(
            f"c must be a rows-contiguous {want} tensor for layout {layout!r}, got {tuple(c.shape)} with strides {c.stride()}"
        )
    if not heap.is_symmetric(c):
        raise ValueError("c must live on the symmetric heap (heap.empty(...)): peers store into it")
    if not (a.device == b.device == c.device == heap.device):
        raise ValueError(
            f"a, b and c must be on the heap's device {heap.device}, got {a.device}, {b.device} and {c.device}"
        )
    if not (a.dtype == b.dtype == c.dtype):
        raise TypeError(f"a, b and c must have one dtype, got {a.dtype}, {b.dtype} and {c.dtype}")
    if layout == "blocks":
        stride_cm, rank_stride = c.stride(1), c.stride(0)
    else:
        stride_cm, rank_stride = c.stride(0), n
    options = _launch_options(backend, tiles, c.dtype, _target(c.device), gluon_dot)
    _kernels(backend).gemm_all_scatter_kernel[(programs,)](
        a, b, c, heap.context, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), stride_cm, rank_stride,
        BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, GROUP_M=tiles.group_m,
        SCATTER=scatter, TRACE=trace, **options,
    )  # fmt: skip
    return c


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
        "gemm-all-scatter kernel",
        "Products: --backend triton uses tl.dot (Triton picks wgmma on sm_90, MFMA on gfx942); gluon uses "
        "gl.nvidia.ampere.mma_v2 tensor cores on NVIDIA sm_80+ and gl.dot_fma elsewhere (AMD). On CPU ranks both "
        "run under Triton's interpreter. Tile defaults depend on backend and dtype (below).",
    )
    t.add_argument("--block-m", type=positive_int, default=None, help="tile rows (Triton GPU: 128)")
    t.add_argument(
        "--block-n",
        type=positive_int,
        default=None,
        help="tile columns (Triton GPU: 256 for 16-bit, 128 fp32; Gluon: 128)",
    )
    t.add_argument(
        "--block-k", type=positive_int, default=None, help="K step (Triton GPU: 64 for 16-bit, 32 fp32; Gluon: 32)"
    )
    t.add_argument("--group-m", type=positive_int, default=None, help="tile rows swept together, for L2 reuse (8)")
    t.add_argument("--num-warps", type=positive_int, default=None, help="warps per program (GPU: 8)")
    t.add_argument("--num-stages", type=positive_int, default=None, help="Triton software-pipeline stages (GPU: 3)")
    t.add_argument("--programs", type=positive_int, default=None,
                   help="programs of the persistent kernel (default: multiprocessors / ranks on the GPU; CPU: 2)")  # fmt: skip
    t.add_argument("--gluon-dot", choices=GLUON_DOTS, default="auto",
                   help="Gluon product: auto = mma_v2 tensor cores on NVIDIA sm_80+, dot_fma elsewhere (AMD); "
                        "or force one")  # fmt: skip


def _uses_mma_v2(args, target) -> bool:
    if args.gluon_dot != "auto":
        return args.gluon_dot == "mma_v2"
    from . import _gemm_gluon

    return _gemm_gluon.uses_mma_v2(target)


def _tiles(args, target=None) -> Tiles:
    dtype = DTYPES[args.dtype]
    base = default_tiles(args.backend, dtype, gpu=args.gpu, mma=args.backend == "gluon" and _uses_mma_v2(args, target))
    chosen = {
        "block_m": args.block_m, "block_n": args.block_n, "block_k": args.block_k, "group_m": args.group_m,
        "num_warps": args.num_warps, "num_stages": args.num_stages, "programs": args.programs,
    }  # fmt: skip
    return dataclasses.replace(base, **{k: v for k, v in chosen.items() if v is not None})


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
    _tiles(args)  # raises ValueError naming a bad tile option


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


def find_mismatch(c_full, ref, *, rank, what, tiles, cols):
    """The first mismatch of C against torch (None if none), naming the element, the rank that
    wrote it and its tile. Compared on C's device (C and its reference can be GiBs)."""
    rtol, atol = tolerance(c_full.dtype)
    got = c_full.float()
    bad = ~torch.isclose(got, ref, rtol=rtol, atol=atol)
    count = int(bad.sum())
    if count == 0:
        return None
    i, j = (int(v) for v in bad.nonzero()[0])
    owner, col = divmod(j, cols)
    where = (f"{what}; element ({i}, {j}) comes from rank {owner}'s tile ({i // tiles.block_m}, "
             f"{col // tiles.block_n}) of {tiles.block_m}x{tiles.block_n} (rtol {rtol:g}, atol {atol:g})")  # fmt: skip
    return validation.Mismatch(rank, where, (i, j), ref[i, j].item(), got[i, j].item(), count, got.numel())


def _programs(tiles: Tiles, shape, w, device, sharing) -> int:
    m, n, _ = shape
    count = -(-m // tiles.block_m) * -(-(n // w) // tiles.block_n)
    if tiles.programs is not None:
        return tiles.programs
    if device.type != "cuda":
        return min(count, 2)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(count, sms // sharing))


def rank_main(args: argparse.Namespace) -> dict:
    import torch.distributed as dist

    w, dtype = args.ranks, DTYPES[args.dtype]
    size = max(torch.empty((), dtype=dtype).element_size() * m * n * (w + 1) // w for m, n, _ in args.sizes)
    heap = iris.heap.init(size + (8 << 20) + trace_option.heap_bytes(args))  # C, the baseline's product, ccl's flags
    try:
        # iris.ccl's workspace (its flags) is allocated on first use: make that now, at the bottom of
        # the heap, so it does not split the free space that each size's C needs in one block.
        ccl.barrier(heap=heap)
        rank, dev = heap.rank, heap.device
        tiles = _tiles(args, _target(dev))
        sharing = heap.ranks_per_device
        nccl = None
        if dev.type == "cuda" and w > 1 and sharing == 1:
            nccl = dist.new_group(backend="nccl")
        rows, mismatches = [], []
        with (
            trace_option.session(heap, args) as tracing,
            tables.progress("gemm-all-scatter", len(args.sizes), enabled=rank == 0) as bar,
        ):
            cfg = ccl.Config(backend=args.backend, trace=tracing.on)
            for shape in args.sizes:
                row, found = _one_size(args, heap, shape, tiles, cfg, nccl, sharing)
                rows.append(row)
                mismatches += found
                bar.advance()
        heap.barrier()
        return {"rank": rank, "rows": rows, "mismatches": mismatches, "gpu": dev.type == "cuda",
                "nccl": nccl is not None, "tiles": dataclasses.asdict(tiles), "sharing": sharing}  # fmt: skip
    finally:
        heap.close()


def _one_size(args, heap, shape, tiles, cfg, nccl, sharing):
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
    programs = _programs(tiles, shape, w, dev, sharing)
    launch = {"heap": heap, "tiles": tiles, "backend": args.backend, "layout": layout, "gluon_dot": args.gluon_dot,
              "programs": programs, "trace": cfg.trace}  # fmt: skip

    quiet = cfg  # asynchronous: no host sync inside the timed loop

    def fused():
        ccl.barrier(heap=heap, config=quiet)  # no rank writes into a peer's C before the peer is done with it
        gemm_all_scatter(a, b, c, **launch)
        ccl.barrier(heap=heap, config=quiet)  # C is complete on every rank

    def barriers():  # the fused step's synchronisation alone
        ccl.barrier(heap=heap, config=quiet)
        ccl.barrier(heap=heap, config=quiet)

    def local_gemm():
        gemm_all_scatter(a, b, c, scatter=False, **launch)

    def matmul():
        torch.matmul(a, b, out=part)

    def gather(group=None):
        if group is None:
            ccl.all_gather(gathered, part, heap=heap, config=cfg)
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
        return find_mismatch(as_matrix(c, layout), ref, rank=rank, what=what, tiles=tiles, cols=cols)

    c.fill_(float("nan"))  # an element nobody wrote is a mismatch
    heap.barrier()
    fused()
    found = [check("fused")]
    c.fill_(float("nan"))
    heap.barrier()
    ccl.barrier(heap=heap)
    unfused()
    heap.barrier()  # surfaces device-side timeouts of the unchecked all_gather
    found.append(check("unfused"))
    if nccl is not None:
        c.fill_(float("nan"))
        unfused(nccl)
        torch.cuda.synchronize(dev)
        found.append(check("NCCL"))
    found = [f for f in found if f is not None]

    row = {"size": _label(shape), "M": m, "N": n, "K": k, "ranks": w, "dtype": args.dtype, "backend": args.backend,
           "layout": layout, "programs": programs, "check": "ok" if not found else "MISMATCH"}  # fmt: skip
    if args.iters > 0:
        timed = {"fused": fused, "barriers": barriers, "local_gemm": local_gemm, "matmul": matmul,
                 "all_gather": gather, "unfused": unfused}  # fmt: skip
        if layout == "matrix":
            timed["permute"] = permute
        if nccl is not None:
            timed["nccl_all_gather"] = lambda: gather(nccl)
            timed["nccl_unfused"] = lambda: unfused(nccl)
        for name, fn in timed.items():
            heap.barrier()
            row[f"{name}_ms"] = (
                timing.time_launches(fn, reps=1, iters=args.iters, warmup=args.warmup, device=dev, queued=False) * 1e3
            )
        heap.barrier()  # surfaces any device-side timeout from the timed loops
    heap.free(c)
    heap.free(part)
    return row, found


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
        "fused = barrier + kernel + barrier",
        "unfused = torch.matmul + iris.ccl.all_gather" + (" + permute" if layout == "matrix" else ""),
        "TFLOP/s = 2MNK / time (all ranks together)",
        "comm share = all_gather / (matmul + all_gather)",
        "GEMM only = the fused kernel storing only locally",
        "2 barriers = the fused call's two iris.ccl.barrier()s alone",
    ]
    if not gpu:
        parts.append("CPU ranks: interpreter times, not performance")
    return "; ".join(parts)


def report(results: list, args: argparse.Namespace) -> int:
    rows = _merge(results)
    first = results[0]
    env = environment.describe(gpu=first["gpu"])
    tiles = first["tiles"]
    timed = "fused_ms" in rows[0] if rows else False
    columns = [("size", "M x N x K", ""), ("programs", "programs", "d")]
    if timed:
        columns += [("fused_ms", "fused ms", ".3f"), ("matmul_ms", "matmul ms", ".3f"),
                    ("all_gather_ms", "all_gather ms", ".3f")]  # fmt: skip
        if args.layout == "matrix":
            columns.append(("permute_ms", "permute ms", ".3f"))
        columns += [("unfused_ms", "unfused ms", ".3f"), ("speedup", "speedup", ".2f"),
                    ("comm_share", "comm share", ".0%"), ("fused_tflops", "fused TFLOP/s", ".1f"),
                    ("unfused_tflops", "unfused TFLOP/s", ".1f"), ("local_gemm_ms", "GEMM only ms", ".3f"),
                    ("barriers_ms", "2 barriers ms", ".3f")]  # fmt: skip
        if first["nccl"]:
            columns += [("nccl_unfused_ms", "matmul+NCCL ms", ".3f"), ("speedup_vs_nccl", "vs NCCL", ".2f")]
    columns.append(("check", "vs torch", ""))
    how = {"triton": "tl.dot", "gluon": "mma_v2 / dot_fma"}[args.backend]
    title = (f"gemm-all-scatter, {args.ranks} ranks, {args.backend} ({how}), {args.dtype}, C as {args.layout}, "
             f"tiles {tiles['block_m']}x{tiles['block_n']}x{tiles['block_k']}, {tiles['num_warps']} warps"
             + (f", num_stages {tiles['num_stages']}" if args.backend == "triton" else ""))  # fmt: skip
    notes = [environment.summary(env)]
    if timed:
        notes.insert(0, _legend(args.layout, gpu=first["gpu"]))
        if first["gpu"] and first["sharing"] > 1:
            notes.insert(1, f"{first['sharing']} ranks share each GPU (run under MPS for concurrent kernels)")
    tables.print_table(title, rows, columns, caption="\n".join(notes))
    bad = validation.print_mismatches(m for r in results for m in r["mismatches"])
    if args.csv:
        shape = {k: v for k, v in tiles.items() if k != "programs"}  # rows carry the programs they ran
        tables.write_csv(args.csv, [dict(r, device=env["device"], mps=env["mps"], **shape) for r in rows])
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

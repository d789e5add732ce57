"""The fused GEMM + all-scatter as one persistent ``@gluon.jit`` kernel (over ``iris.mem.gluon``).

The algorithm, signature and C addressing of ``iris.examples._gemm_triton`` (read its docstring),
with every layout explicit and built on the host for the target (:func:`layouts`):

- A and B tiles are loaded in blocked layouts giving each thread 16-byte vectors along the
  contiguous dimension (K for A, N for B), with the target's warp size (``iris.mem.gluon.warp_size``).
- The product: on NVIDIA targets, tensor cores through ``gl.nvidia.ampere.mma_v2`` (``mma.sync``,
  sm_80 and newer) with the operands converted to ``DotOperandLayout`` registers of an
  ``NVMMADistributedLayout`` accumulator (version 2.0, instruction 16x8); on other targets
  (AMD) ``gl.dot_fma`` on a blocked accumulator (FMA units, a portable fallback). No shared memory
  is allocated by the kernel itself: the layout conversions are the compiler's. The next K tile
  is loaded before the current one is multiplied (register double buffering), so the loads
  overlap the math.
- The finished tile is converted once to a store layout with 16-byte vectors along N and stored
  into every rank's copy of C through ``Context.store`` (the next rank first, the own copy last).

On CPU ranks the kernel runs through ``iris.mem.gluon.interpret`` (layouts dropped, both products
forwarded to ``tl.dot``); bf16 operands are widened to fp32 there, exactly, because Triton's
interpreter multiplies bf16 as raw 16-bit integers.
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import ampere

import iris.mem.gluon as img
from iris.heap.tracing import EVENTS
from iris.mem.gluon import Context, Tracing

__all__ = ["gemm_all_scatter_kernel", "launch_options", "layouts", "uses_mma_v2"]

#: Bytes one thread moves per vector access (``ld/st.global.v4`` on NVIDIA, ``dwordx4`` on AMD).
VECTOR_BYTES = 16


#: Whether Gluon kernels run on CPU ranks in this process (``TRITON_INTERPRET=1``: iris.mem.gluon.interpret).
_CPU_RANKS = gl.constexpr(bool(triton.knobs.runtime.interpret))
_TILE = gl.constexpr(EVENTS["tile"])  # --trace: a tile's product, then its store to each rank
_REMOTE_STORE = gl.constexpr(EVENTS["remote store"])


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """Tile index -> (pid_m, pid_n), GROUP_M tile rows at a time sweeping the tile columns."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    rows = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % rows
    pid_n = (tile % width) // rows
    return pid_m, pid_n


@gluon.jit
def _dot_operand(x, layout: gl.constexpr, USE_MMA_V2: gl.constexpr):
    """``x`` in the operand ``layout``. bf16 is widened to fp32 (exactly) on CPU ranks (see the
    module) and for ``dot_fma`` (which multiplies in fp32 anyway; LLVM cannot select gfx942's
    bf16 dot2 instruction that it would otherwise use)."""
    if (_CPU_RANKS or not USE_MMA_V2) and x.dtype == gl.bfloat16:
        x = x.to(gl.float32)
    return gl.convert_layout(x, layout)


@gluon.jit
def _mma(a, b, acc, USE_MMA_V2: gl.constexpr):
    if USE_MMA_V2:
        return ampere.mma_v2(a, b, acc)
    else:
        return gl.dot_fma(a, b, acc)


@gluon.jit
def _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, k_left):
    """The A (rows x BLOCK_K) and B (BLOCK_K x cols) tiles at K offset ``K - k_left``; zeros outside."""
    a = gl.load(a_ptrs, mask=row_ok & (rk_a[None, :] < k_left), other=0.0)
    b = gl.load(b_ptrs, mask=(rk_b[:, None] < k_left) & col_ok, other=0.0)
    return a, b


@gluon.jit
def _matmul_tile(
    a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """The fp32 tile ``A[rows of pid_m, :] @ B[:, cols of pid_n]`` in layout ACC; out of range reads as 0."""
    rm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LOAD_A))
    rk_a = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, LOAD_A))
    rk_b = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, LOAD_B))
    rn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LOAD_B))
    a_ptrs = a_ptr + rm[:, None].to(gl.int64) * stride_am + rk_a[None, :] * stride_ak
    b_ptrs = b_ptr + rk_b[:, None].to(gl.int64) * stride_bk + rn[None, :] * stride_bn
    row_ok = rm[:, None] < M
    col_ok = rn[None, :] < N
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC)
    a, b = _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, K)
    for k in range(0, gl.cdiv(K, BLOCK_K)):
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        # the next tiles (all masked off after the last) are in flight while this one is multiplied
        a_next, b_next = _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, K - (k + 1) * BLOCK_K)
        acc = _mma(_dot_operand(a, DOT_A, USE_MMA_V2), _dot_operand(b, DOT_B, USE_MMA_V2), acc, USE_MMA_V2)
        a, b = a_next, b_next
    return acc


@gluon.jit
def _scatter_tile(
    ctx, tr, c, c_ptr, pid_m, pid_n, M, N, stride_cm, rank_stride,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STORE: gl.constexpr, SCATTER: gl.constexpr,
):  # fmt: skip
    """Store tile ``c`` (layout STORE) at its place in this rank's block of C: in every rank's copy
    (SCATTER), else locally."""
    rm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, STORE))
    rn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, STORE))
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = c_ptr + ctx.rank * rank_stride + rm[:, None].to(gl.int64) * stride_cm + rn[None, :]
    if SCATTER:
        nbytes = gl.sum(gl.sum(mask.to(gl.int64), axis=1), axis=0) * (c_ptr.dtype.element_ty.primitive_bitwidth // 8)
        for i in range(1, ctx.world_size + 1):  # the next rank first, this rank's own copy last
            to = (ctx.rank + i) % ctx.world_size
            h = tr.record_start(_REMOTE_STORE, to, nbytes)
            ctx.store(ptrs, c, to, mask=mask)
            tr.record_end(h)
    else:
        gl.store(ptrs, c, mask=mask)


@img.interpret()
@gluon.jit
def gemm_all_scatter_kernel(
    a_ptr, b_ptr, c_ptr, context_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, rank_stride,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    SCATTER: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr, TRACE: gl.constexpr = False,
):  # fmt: skip
    """C[:, this rank's N columns] = A (M x K) @ B_rank (K x N), stored into every rank's C
    (``iris.examples._gemm_triton``'s contract, tracing included; the layouts come from :func:`layouts`)."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        h = tr.record_start(_TILE, ctx.rank, BLOCK_M * BLOCK_N * (c_ptr.dtype.element_ty.primitive_bitwidth // 8))
        acc = _matmul_tile(
            a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
            BLOCK_M, BLOCK_N, BLOCK_K, LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2,
        )  # fmt: skip
        c = gl.convert_layout(acc.to(c_ptr.dtype.element_ty), STORE)
        tr.record_end(h)
        _scatter_tile(ctx, tr, c, c_ptr, pid_m, pid_n, M, N, stride_cm, rank_stride, BLOCK_M, BLOCK_N, STORE, SCATTER)


# -- host side: layouts for a target ------------------------------------------------------------


def uses_mma_v2(target) -> bool:
    """Whether the kernel multiplies on tensor cores (``mma_v2``) for ``target``: NVIDIA sm_80 and newer.

    Elsewhere (AMD, older NVIDIA) it uses ``gl.dot_fma``. On CPU ranks (``target`` None) either
    path runs; the tensor-core one is the default there, so CPU runs cover the code NVIDIA runs.
    """
    if target is None:
        return True
    arch = target.arch if isinstance(target.arch, int) else 0
    return target.backend == "cuda" and arch >= 80


def _itemsize(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else int(dtype)


def _blocked(rows: int, cols: int, num_warps: int, threads: int, itemsize: int) -> gl.BlockedLayout:
    """A row-major [rows, cols] layout: 16-byte vectors along cols, a warp's lanes along cols first."""
    vec = max(1, min(VECTOR_BYTES // itemsize, cols))
    lanes_c = max(1, min(threads, cols // vec))
    lanes_r = threads // lanes_c
    warps_r = max(1, min(num_warps, rows // lanes_r))
    return gl.BlockedLayout(
        size_per_thread=[1, vec],
        threads_per_warp=[lanes_r, lanes_c],
        warps_per_cta=[warps_r, num_warps // warps_r],
        order=[1, 0],
    )


def _mma_warps(num_warps: int, block_m: int, block_n: int) -> list[int]:
    """Warps of an mma_v2 accumulator: along M while each warp keeps >= 16 rows, the rest along N."""
    wm = 1
    while wm < num_warps and block_m // (wm * 2) >= 16:
        wm *= 2
    return [wm, num_warps // wm]


def layouts(tiles, dtype: torch.dtype, target, *, mma_v2: bool | None = None) -> dict:
    """The layout constexprs of :func:`gemm_all_scatter_kernel` for ``tiles`` (block sizes, warps)
    of ``dtype`` inputs on ``target`` (a ``GPUTarget``; None on CPU ranks). ``mma_v2`` overrides
    the product path (default :func:`uses_mma_v2`)."""
    threads = img.warp_size(target)
    bm, bn, bk, warps = tiles.block_m, tiles.block_n, tiles.block_k, tiles.num_warps
    size = _itemsize(dtype)
    use_mma = uses_mma_v2(target) if mma_v2 is None else mma_v2
    if use_mma:
        acc = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=_mma_warps(warps, bm, bn), instr_shape=[16, 8])
        k_width = max(1, 4 // size)  # operand elements per 32 bits (2 for fp16/bf16, tf32: 1)
    else:
        acc = _blocked(bm, bn, warps, threads, 4)
        k_width = 0  # dot operands of a blocked (FMA) accumulator have no k_width
    return {
        "LOAD_A": _blocked(bm, bk, warps, threads, size),
        "LOAD_B": _blocked(bk, bn, warps, threads, size),
        "ACC": acc,
        "DOT_A": gl.DotOperandLayout(operand_index=0, parent=acc, k_width=k_width),
        "DOT_B": gl.DotOperandLayout(operand_index=1, parent=acc, k_width=k_width),
        "STORE": _blocked(bm, bn, warps, threads, size),
        "USE_MMA_V2": use_mma,
    }


def launch_options(tiles, dtype: torch.dtype, target, *, mma_v2: bool | None = None) -> dict:
    """Constexprs and launch options beyond the shared ones: the layouts, and ``num_warps``
    (Gluon does not pipeline by itself: the kernel double-buffers in registers, so no num_stages)."""
    return {**layouts(tiles, dtype, target, mma_v2=mma_v2), "num_warps": tiles.num_warps}

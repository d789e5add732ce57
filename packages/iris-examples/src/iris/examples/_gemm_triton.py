"""The fused GEMM + all-scatter as one persistent ``@triton.jit`` kernel (over ``iris.mem.triton``).

Each program walks the tiles of this rank's column block ``C[:, rank*N : (rank+1)*N] = A @ B_rank``
(``B_rank`` is K x N, this rank's columns of B) with a grid stride, in grouped order (GROUP_M rows
of tiles sweep the columns together, so their B tiles stay in L2). A tile accumulates
``tl.dot`` products in fp32 over K, is rounded to C's dtype once, and the epilogue stores it into
**every** rank's copy of C through translated pointers (``Context.store``), the other ranks first
and this rank's own copy last, each rank starting at its next neighbour so that the ranks'
stores spread over the peers. Translation keeps the tile's contiguity and 16-byte alignment, so
the remote stores are the same 16-byte vector stores as local ones.

Where C goes is given by two strides: row ``i`` of this rank's block starts at
``c_ptr + rank * rank_stride + i * stride_cm`` (columns contiguous). C as one M x (W*N) matrix:
``stride_cm = W*N, rank_stride = N``; C as W blocks of M x N: ``stride_cm = N, rank_stride = M*N``.

The kernel does no synchronisation: the host brackets it with device barriers (a peer's C must
be free before anyone writes it, and complete before anyone reads it). ``SCATTER=False`` stores
only this rank's copy (the same GEMM without communication, for comparison).

``iris.examples._gemm_gluon`` is the same kernel in Gluon, with the same signature up to its layouts.
"""

import triton
import triton.language as tl

import iris.mem.triton as imt
from iris.heap.tracing import EVENTS
from iris.mem.triton import Context, Tracing

_TILE = tl.constexpr(EVENTS["tile"])  # --trace: a tile's product, then its store to each rank
_REMOTE_STORE = tl.constexpr(EVENTS["remote store"])

__all__ = ["gemm_all_scatter_kernel", "launch_options"]


@triton.jit
def _probe():
    pass


#: Whether kernels run under Triton's interpreter in this process (fixed at import, as Triton's own choice).
_INTERPRETED = tl.constexpr(type(_probe).__name__ == "InterpretedFunction")


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile index -> (pid_m, pid_n), GROUP_M tile rows at a time sweeping the tile columns."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % rows
    pid_n = (tile % width) // rows
    return pid_m, pid_n


@triton.jit
def _dot_operand(x):
    """``x`` as a ``tl.dot`` operand: itself, except bf16 under the interpreter (which multiplies
    bf16 as its raw 16-bit integers) is widened to fp32 there, exactly."""
    if _INTERPRETED and x.dtype == tl.bfloat16:
        return x.to(tl.float32)
    return x


@triton.jit
def _matmul_tile(
    a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """The fp32 tile ``A[rows of pid_m, :] @ B[:, cols of pid_n]``; out-of-range rows/cols/K read as 0."""
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None].to(tl.int64) * stride_bk + rn[None, :] * stride_bn
    row_ok = rm[:, None] < M
    col_ok = rn[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=row_ok & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & col_ok, other=0.0)
        acc = tl.dot(_dot_operand(a), _dot_operand(b), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _scatter_tile(
    ctx, tr, c, c_ptr, pid_m, pid_n, M, N, stride_cm, rank_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCATTER: tl.constexpr,
):  # fmt: skip
    """Store tile ``c`` at its place in this rank's block of C: in every rank's copy (SCATTER), else
    locally. Traced: each rank's store, a "remote store" of the tile's bytes to that rank."""
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = c_ptr + ctx.rank * rank_stride + rm[:, None].to(tl.int64) * stride_cm + rn[None, :]
    if SCATTER:
        nbytes = tl.sum(tl.sum(mask.to(tl.int64), axis=1), axis=0) * (c_ptr.dtype.element_ty.primitive_bitwidth // 8)
        for i in range(1, ctx.world_size + 1):  # the next rank first, this rank's own copy last
            to = (ctx.rank + i) % ctx.world_size
            h = tr.record_start(_REMOTE_STORE, to, nbytes)
            ctx.store(ptrs, c, to, mask=mask)
            tr.record_end(h)
    else:
        tl.store(ptrs, c, mask=mask)


@imt.interpret()
@triton.jit
def gemm_all_scatter_kernel(
    a_ptr, b_ptr, c_ptr, context_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, rank_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SCATTER: tl.constexpr, TRACE: tl.constexpr = False,
):  # fmt: skip
    """C[:, this rank's N columns] = A (M x K) @ B_rank (K x N), stored into every rank's C (see the module).

    ``TRACE``: each tile's product is a "tile" event (its output bytes), each store a "remote store"."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        h = tr.record_start(_TILE, ctx.rank, BLOCK_M * BLOCK_N * (c_ptr.dtype.element_ty.primitive_bitwidth // 8))
        acc = _matmul_tile(
            a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K
        )
        c = acc.to(c_ptr.dtype.element_ty)
        tr.record_end(h)
        _scatter_tile(ctx, tr, c, c_ptr, pid_m, pid_n, M, N, stride_cm, rank_stride, BLOCK_M, BLOCK_N, SCATTER)


def launch_options(tiles, dtype, target) -> dict:
    """Constexprs and launch options beyond the shared ones: Triton picks layouts itself and
    software-pipelines the K loop over ``tiles.num_stages`` stages."""
    return {"num_warps": tiles.num_warps, "num_stages": tiles.num_stages}

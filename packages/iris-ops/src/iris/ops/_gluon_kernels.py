"""The fused operations' kernels, in Gluon over ``iris.mem.gluon``.

The kernels of ``iris.ops._triton_kernels`` (read its docstring: the algorithms, the order of the
hand-offs, the synchronization), with the same names and signatures, on the same device protocol
(``iris.ccl.protocol_gluon``: the same functions as ``protocol_triton``), plus layout constexprs
at the end that the host builds for the compile target (:func:`launch_options`); ``matmul_kernel``
is the GEMM core alone (no communication, no protocol), the baseline of ``local_matmul``:

- A and B tiles are loaded in blocked layouts (``LOAD_A``, ``LOAD_B``) giving each thread 16-byte
  vectors along the contiguous dimension (K for A, N for B), with the target's warp size
  (``iris.mem.gluon.warp_size``: 32 on NVIDIA, 64 on AMD CDNA).
- The product (``USE_MMA_V2``): on NVIDIA sm_80 and newer, tensor cores through
  ``gl.nvidia.ampere.mma_v2`` (``mma.sync``) on an ``NVMMADistributedLayout`` accumulator (``ACC``,
  version 2.0, instruction 16x8) with ``DotOperandLayout`` operands (``DOT_A``, ``DOT_B``); on other
  targets (AMD, older NVIDIA), and for fp32 wherever torch's own matmul would not use TF32
  (``PRECISION`` "ieee"), ``gl.dot_fma`` on a blocked accumulator: FMA units, IEEE fp32. The next K
  tile is loaded before the current one is multiplied (register double buffering), so loads
  overlap the math; Gluon does not software-pipeline by itself (``Config.num_stages`` is unused).
- Finished tiles (rounded to the output dtype once, ``protocol_gluon.cast_out``), their stores to
  peers and the reduction of the partials are in one blocked layout (``STORE``) with 16-byte
  vectors along N.

On CPU ranks the kernels run through ``iris.mem.gluon.interpret`` (each launched kernel is marked
``@img.interpret()``): layouts are dropped and both products are ``tl.dot`` in IEEE fp32 (bf16
operands widened to fp32 first, exactly). There ``uses_tensor_cores`` answers as on NVIDIA, so
CPU runs go through the code NVIDIA runs: ``mma_v2`` for fp16 and bf16 (and TF32 fp32), ``dot_fma``
for IEEE fp32.
"""

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import ampere

import iris.mem.gluon as img
from iris.ccl import protocol
from iris.ccl import protocol_gluon as proto
from iris.heap.tracing import EVENTS

__all__ = [
    "all_gather_matmul_kernel",
    "launch_options",
    "matmul_all_gather_kernel",
    "matmul_kernel",
    "matmul_reduce_kernel",
    "uses_tensor_cores",
]

#: Bytes one thread moves per vector access (``ld/st.global.v4`` on NVIDIA, ``dwordx4`` on AMD).
VECTOR_BYTES = 16

_AVG = gl.constexpr(protocol.REDUCE_OPS["avg"])
# Config(trace=True): each tile's product, its stores to peers, and waits for peers' tiles.
_TILE = gl.constexpr(EVENTS["tile"])
_REMOTE_STORE = gl.constexpr(EVENTS["remote store"])
_TILE_WAIT = gl.constexpr(EVENTS["tile wait"])


@gluon.jit
def _tile_of(t, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    """Tile index -> (pid_m, pid_n): GROUP_M tile rows at a time sweep the tile columns, so the
    B tiles they share stay in L2."""
    width = GROUP_M * tiles_n
    first_m = (t // width) * GROUP_M
    rows = gl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (t % width) % rows, (t % width) // rows


@gluon.jit
def _rows(start, BLOCK: gl.constexpr, L: gl.constexpr):
    """Row indices ``start + [0, BLOCK)`` of a 2-D tile in layout ``L``."""
    return start + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, L))


@gluon.jit
def _cols(start, BLOCK: gl.constexpr, L: gl.constexpr):
    """Column indices ``start + [0, BLOCK)`` of a 2-D tile in layout ``L``."""
    return start + gl.arange(0, BLOCK, layout=gl.SliceLayout(0, L))


@gluon.jit
def _dot_operand(x, layout: gl.constexpr, USE_MMA_V2: gl.constexpr):
    """``x`` in the operand ``layout``. bf16 is widened to fp32 (exactly) for ``dot_fma``, which
    multiplies in fp32 anyway (LLVM cannot select gfx942's bf16 dot2 instruction that it would
    otherwise use). On CPU ranks the product widens bf16 itself (``iris.mem.gluon.interpret``)."""
    if (not USE_MMA_V2) and x.dtype == gl.bfloat16:
        x = x.to(gl.float32)
    return gl.convert_layout(x, layout)


@gluon.jit
def _mma(x, y, acc, PRECISION: gl.constexpr, USE_MMA_V2: gl.constexpr):
    """``acc + x @ y``: tensor cores (``mma.sync``; fp32 operands as TF32) or FMA units (IEEE)."""
    if USE_MMA_V2:
        return ampere.mma_v2(x, y, acc, input_precision=PRECISION)
    else:
        return gl.dot_fma(x, y, acc)


@gluon.jit
def _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, k_left):
    """The A (rows x BLOCK_K) and B (BLOCK_K x cols) tiles with ``k_left`` of K left; zeros outside."""
    a_ok = row_ok[:, None] & (rk_a[None, :] < k_left)
    x = gl.load(a_ptrs, mask=a_ok, other=0.0)
    y = gl.load(b_ptrs, mask=(rk_b[:, None] < k_left) & col_ok[None, :], other=0.0)
    return x, y, a_ok


@gluon.jit
def _product(
    a, b, m0, m_end, n0, N, K, stride_am, stride_ak, stride_bk, stride_bn, g, stride_gm, stride_gk, first_col,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, PRECISION: gl.constexpr, GATHER: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """The fp32 tile ``a[m0 : m0+BLOCK_M, :] @ b[:, n0 : n0+BLOCK_N]`` in layout ``ACC``; rows from
    ``m_end`` on, columns past N and K past K read as 0. With ``GATHER``, where ``first_col``
    holds, each A tile is also stored into ``g`` (the same rows)."""
    gl.static_assert(not (USE_MMA_V2 and PRECISION == "ieee"), "IEEE fp32 products run on dot_fma, not mma_v2")
    rm = _rows(m0, BLOCK_M, LOAD_A)
    rk_a = _cols(0, BLOCK_K, LOAD_A)
    rk_b = _rows(0, BLOCK_K, LOAD_B)
    rn = _cols(n0, BLOCK_N, LOAD_B)
    a_ptrs = a + rm[:, None].to(gl.int64) * stride_am + rk_a[None, :] * stride_ak
    b_ptrs = b + rk_b[:, None].to(gl.int64) * stride_bk + rn[None, :] * stride_bn
    g_ptrs = g + rm[:, None].to(gl.int64) * stride_gm + rk_a[None, :] * stride_gk
    row_ok = rm < m_end
    col_ok = rn < N
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC)
    x, y, a_ok = _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, K)
    for k in range(0, gl.cdiv(K, BLOCK_K)):
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        # the next tiles (all masked off after the last) are in flight while this one is multiplied
        x_next, y_next, a_ok_next = _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, K - (k + 1) * BLOCK_K)
        if GATHER:
            if first_col:
                gl.store(g_ptrs, x, mask=a_ok)
            g_ptrs += BLOCK_K * stride_gk
        acc = _mma(_dot_operand(x, DOT_A, USE_MMA_V2), _dot_operand(y, DOT_B, USE_MMA_V2), acc, PRECISION, USE_MMA_V2)
        x, y, a_ok = x_next, y_next, a_ok_next
    return acc


@gluon.jit
def _finished(acc, dtype: gl.constexpr, STORE: gl.constexpr):
    """The fp32 tile ``acc`` rounded once to ``dtype``, in the store layout."""
    return gl.convert_layout(proto.cast_out(acc, dtype), STORE)


@gluon.jit
def _tile_bytes(c, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    return BLOCK_M * BLOCK_N * (c.dtype.element_ty.primitive_bitwidth // 8)


_DESC = ["CODE", "NUMEL", "OFF_A", "OFF_B", "SHAPE"]  # vary per call: never specialized on


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def matmul_all_gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, c, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_cr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """``a @ b`` (a: M x K, b: K x N) into this rank's block of every rank's ``c`` (a heap buffer,
    the same on every rank), which starts ``rank * stride_cr`` elements in: ``c[:, rank*N :
    (rank+1)*N]`` of an M x W*N matrix (``stride_cr`` = N columns), or ``c[rank]`` of W stacked
    M x N blocks."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    t = gl.program_id(0)
    while go & (t < tiles_m * tiles_n):
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)
        h = tr.record_start(_TILE, ctx.rank, _tile_bytes(c, BLOCK_M, BLOCK_N))
        acc = _product(a, b, pid_m * BLOCK_M, M, pid_n * BLOCK_N, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       c, 0, 0, False, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, False,
                       LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2)  # fmt: skip
        out = _finished(acc, c.dtype.element_ty, STORE)
        tr.record_end(h)
        rm = _rows(pid_m * BLOCK_M, BLOCK_M, STORE)
        rn = _cols(pid_n * BLOCK_N, BLOCK_N, STORE)
        mine = c + gl.cast(ctx.rank, gl.int64) * stride_cr  # this rank's block
        ptrs = mine + rm[:, None].to(gl.int64) * stride_cm + rn[None, :].to(gl.int64) * stride_cn
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        for j in range(1, ctx.world_size + 1):  # the next rank first, this rank's own copy last
            to = (ctx.rank + j) % ctx.world_size
            h = tr.record_start(_REMOTE_STORE, to, _tile_bytes(c, BLOCK_M, BLOCK_N))
            ctx.store(ptrs, out, to, mask=mask)
            tr.record_end(h)
        t += gl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def all_gather_matmul_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, c, g, m, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_gm, stride_gk,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr, GATHER: gl.constexpr, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """``c[s*m : (s+1)*m] = a_s @ b`` for every rank s (a_s: rank s's copy of ``a``, m x K, a heap
    buffer at the same offset on every rank; b: K x N), this rank's rows first. ``GATHER``: the
    A tiles of the first tile column are also stored into ``g`` (W*m x K, every rank's ``a``)."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = gl.cdiv(m, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    per_rank = tiles_m * tiles_n
    t = gl.program_id(0)
    while go & (t < ctx.world_size * per_rank):
        s = (ctx.rank + t // per_rank) % ctx.world_size
        pid_m, pid_n = _tile_of(t % per_rank, tiles_m, tiles_n, GROUP_M)
        h = tr.record_start(_TILE, s, _tile_bytes(c, BLOCK_M, BLOCK_N))
        acc = _product(ctx.translate(a, s), b, pid_m * BLOCK_M, m, pid_n * BLOCK_N, N, K, stride_am, stride_ak,
                       stride_bk, stride_bn, g + s * m * stride_gm, stride_gm, stride_gk, pid_n == 0,
                       BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, GATHER,
                       LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2)  # fmt: skip
        rm = _rows(pid_m * BLOCK_M, BLOCK_M, STORE)
        rn = _cols(pid_n * BLOCK_N, BLOCK_N, STORE)
        ptrs = c + (s * m + rm)[:, None].to(gl.int64) * stride_cm + rn[None, :].to(gl.int64) * stride_cn
        gl.store(ptrs, _finished(acc, c.dtype.element_ty, STORE), mask=(rm[:, None] < m) & (rn[None, :] < N))
        tr.record_end(h)
        t += gl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


#: Rows of a tile the owner reduces at a time (as the Triton kernel: a whole tile's W fp32 operands
#: would not fit the registers its product left).
_REDUCE_ROWS = gl.constexpr(32)


@gluon.jit
def _reduce_rows(partials, rl, rn, rows, N, OP: gl.constexpr, W: gl.constexpr):
    """``OP`` over ranks 0, 1, ..., W-1 (in that order) of their partials of rows ``rl`` (within
    the group), columns ``rn``, in fp32, in the layout of ``rl`` and ``rn``.

    Unrolled over the ``W`` ranks, so all W loads are in flight at once (a loop over a runtime
    world size issues them one after another: W memory latencies). Cached at L2 only (".cg",
    not in L1, which another launch may have filled from these addresses): after
    ``wait_flags``' acquire, L2 holds what the peers stored."""
    ptrs = partials + rl[:, None].to(gl.int64) * N + rn[None, :]
    mask = (rl[:, None] < rows) & (rn[None, :] < N)
    size = gl.cast(rows, gl.int64) * N  # cast, not .to: a launch makes rows == 1 a constexpr
    acc = gl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg").to(gl.float32)
    for r in gl.static_range(1, W):
        v = gl.load(ptrs + r * size, mask=mask, other=0.0, cache_modifier=".cg").to(gl.float32)
        acc = proto.combine(acc, v, OP, True)
    if OP == _AVG:
        acc = gl.div_rn(acc, gl.full_like(acc, W))  # IEEE-rounded, as torch divides
    return acc


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def matmul_reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, out, partials, flags, M, N, K, rows,
    stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr, OP: gl.constexpr, ALL_REDUCE: gl.constexpr, W: gl.constexpr,
    FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """``_triton_kernels.matmul_reduce_kernel`` in Gluon (its docstring: the exchange buffer, the
    order of the products, when flags are raised and waited for), with the store layout
    (``STORE``) for the partials and the reduction."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = gl.cdiv(rows, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    size = gl.cast(rows, gl.int64) * N  # cast, not .to: a launch makes rows == 1 a constexpr
    sent_t = -1  # the tile whose partial was stored last and not yet signalled (-1: none), and its owner
    sent_o = ctx.rank % ctx.world_size  # (typed as the owners computed below)
    # One flat loop over (tile, group) pairs: tile t of the next rank's rows first, of this rank's
    # own last. (Nested loops would let the compiler hoist the tile's index and pointer vectors out
    # of the loop over groups, where they stayed live through the products: registers spilled.)
    v = 0
    t = gl.program_id(0)
    while go & (t < tiles_m * tiles_n):
        j = v % W + 1
        o = (ctx.rank + j) % ctx.world_size
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)  # the tile's place in every group
        first = o * rows  # the group's first row of a
        end = gl.minimum(first + rows, M)  # rows of a past the group's (or past M) read as 0
        h = tr.record_start(_TILE, o, _tile_bytes(partials, BLOCK_M, BLOCK_N))
        acc = _product(a, b, first + pid_m * BLOCK_M, end, pid_n * BLOCK_N, N, K, stride_am, stride_ak,
                       stride_bk, stride_bn, a, 0, 0, False, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, False,
                       LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2)  # fmt: skip
        part = _finished(acc, partials.dtype.element_ty, STORE)
        tr.record_end(h)
        rl = _rows(pid_m * BLOCK_M, BLOCK_M, STORE)  # rows within the group
        rn = _cols(pid_n * BLOCK_N, BLOCK_N, STORE)
        h = tr.record_start(_REMOTE_STORE, o, _tile_bytes(partials, BLOCK_M, BLOCK_N))
        if sent_t >= 0:
            go = proto.signal(ctx, flags + sent_t * FLAGS, epoch, sent_o, SCOPE)
            sent_t = -1
        if go:
            mine = partials + ctx.rank * size + rl[:, None].to(gl.int64) * N + rn[None, :]
            ctx.store(mine, part, o, mask=((rl < rows) & (first + rl < M))[:, None] & (rn[None, :] < N))
            if j < ctx.world_size:
                sent_t = t
                sent_o = o
        tr.record_end(h)
        if go & (j == ctx.world_size):  # a tile of this rank's rows: every rank's partial, reduced
            gl.atomic_xchg(flags + t * FLAGS + ctx.rank, epoch, sem="relaxed", scope=SCOPE)
            h = tr.record_start(_TILE_WAIT, ctx.rank, 0)
            go = proto.wait_flags(ctx, flags + t * FLAGS, sync, epoch, FLAGS, SCOPE)
            tr.record_end(h)
            if go:
                CHUNK: gl.constexpr = min(_REDUCE_ROWS, BLOCK_M)
                for c in gl.static_range(BLOCK_M // CHUNK):
                    rc = _rows(pid_m * BLOCK_M + c * CHUNK, CHUNK, STORE)  # rows within the group
                    res = proto.cast_out(_reduce_rows(partials, rc, rn, rows, N, OP, W), out.dtype.element_ty)
                    mask = ((rc < rows) & (first + rc < M))[:, None] & (rn[None, :] < N)
                    if ALL_REDUCE:
                        ptrs = (out + (first + rc)[:, None].to(gl.int64) * stride_om
                                + rn[None, :].to(gl.int64) * stride_on)  # fmt: skip
                        for i in range(1, ctx.world_size + 1):  # the next rank first, this rank's own last
                            to = (ctx.rank + i) % ctx.world_size
                            h = tr.record_start(_REMOTE_STORE, to, _tile_bytes(out, CHUNK, BLOCK_N))
                            ctx.store(ptrs, res, to, mask=mask)
                            tr.record_end(h)
                    else:
                        ptrs = out + rc[:, None].to(gl.int64) * stride_om + rn[None, :].to(gl.int64) * stride_on
                        gl.store(ptrs, res, mask=mask)
        v += 1
        t = gl.program_id(0) + (v // W) * gl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@img.interpret()
@gluon.jit
def matmul_kernel(
    a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """``c = a @ b`` on this rank alone: the operations' GEMM core (persistent, the same tiles and
    product) with communication off, no protocol: the baseline that says what the core costs."""
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    t = gl.program_id(0)
    while t < tiles_m * tiles_n:
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)
        acc = _product(a, b, pid_m * BLOCK_M, M, pid_n * BLOCK_N, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       c, 0, 0, False, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, False,
                       LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2)  # fmt: skip
        rm = _rows(pid_m * BLOCK_M, BLOCK_M, STORE)
        rn = _cols(pid_n * BLOCK_N, BLOCK_N, STORE)
        ptrs = c + rm[:, None].to(gl.int64) * stride_cm + rn[None, :].to(gl.int64) * stride_cn
        gl.store(ptrs, _finished(acc, c.dtype.element_ty, STORE), mask=(rm[:, None] < M) & (rn[None, :] < N))
        t += gl.num_programs(0)


# -- host side: the product path and the layouts for a target -------------------------------------


def uses_tensor_cores(target, dtype) -> bool:
    """Whether the products run on tensor cores (``mma_v2``) for ``dtype`` inputs on ``target``.

    NVIDIA sm_80 and newer: yes, except fp32 where torch's matmul would not use TF32
    (``torch.backends.cuda.matmul.allow_tf32`` off, the kernels' ``PRECISION`` "ieee"): mma_v2 takes
    fp32 operands only as TF32, so IEEE fp32 runs on ``dot_fma``. Elsewhere (AMD, older NVIDIA):
    no, ``dot_fma``. On CPU ranks (``target`` None) the answer is NVIDIA's, so CPU runs cover the
    code NVIDIA runs (both products are ``tl.dot`` there).
    """
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return False
    if target is None:
        return True
    arch = target.arch if isinstance(target.arch, int) else 0
    return target.backend == "cuda" and arch >= 80


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


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


@functools.lru_cache(maxsize=64)
def _layouts(block_m: int, block_n: int, block_k: int, num_warps: int, dtype: torch.dtype, threads: int,
             use_mma: bool) -> tuple:  # fmt: skip
    size = _itemsize(dtype)
    if use_mma:
        acc = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=_mma_warps(num_warps, block_m, block_n), instr_shape=[16, 8]
        )
        k_width = max(1, 4 // size)  # operand elements per 32 bits (2 for fp16/bf16, TF32: 1)
    else:
        acc = _blocked(block_m, block_n, num_warps, threads, 4)
        k_width = 0  # dot operands of a blocked (FMA) accumulator have no k_width
    return tuple(
        {
            "LOAD_A": _blocked(block_m, block_k, num_warps, threads, size),
            "LOAD_B": _blocked(block_k, block_n, num_warps, threads, size),
            "ACC": acc,
            "DOT_A": gl.DotOperandLayout(operand_index=0, parent=acc, k_width=k_width),
            "DOT_B": gl.DotOperandLayout(operand_index=1, parent=acc, k_width=k_width),
            "STORE": _blocked(block_m, block_n, num_warps, threads, size),
            "USE_MMA_V2": use_mma,
        }.items()
    )


def launch_options(config, dtype, target) -> dict:
    """Constexprs beyond the shared ones: the layouts of ``config``'s tiles (block sizes, warps)
    for ``dtype`` inputs on ``target`` (a ``GPUTarget``; None on CPU ranks), with its warp size,
    and the product path (``USE_MMA_V2``, :func:`uses_tensor_cores`). No launch options: Gluon does
    not pipeline by itself (the kernels double-buffer in registers), and the host passes num_warps."""
    return dict(
        _layouts(config.block_m, config.block_n, config.block_k, config.num_warps, dtype, img.warp_size(target),
                 uses_tensor_cores(target, dtype))  # fmt: skip
    )


def operand_modes(target, config, a, b, row_step: int) -> dict:
    """Constexprs that say how the kernels read ``a`` and ``b``: none, the portable path reads
    both through pointers (the Triton backend's kernels take ``A_MODE`` / ``B_MODE``: TMA
    descriptors on Hopper)."""
    return {}

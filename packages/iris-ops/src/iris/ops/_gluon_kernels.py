"""The fused operations' kernels, in Gluon over ``iris.mem.gluon``.

The kernels of ``iris.ops._triton_kernels`` (read its docstring: the algorithms, the order of the
hand-offs, the synchronization), with the same names and signatures, on the same device protocol
(``iris.ccl.protocol_gluon``: the same functions as ``protocol_triton``), plus layout constexprs
at the end that the host builds for the compile target (:func:`launch_options`); ``matmul_kernel``
is the GEMM core alone (no communication, no protocol), the baseline of ``local_matmul``.

Two product paths, chosen on the host (``product_path``, ``operand_modes``) and passed as
constexprs:

- **Hopper** (``A_MODE``/``B_MODE`` nonzero: 16-bit inputs on sm_90 that TMA can address, both
  operands): each program keeps a ring of ``STAGES`` shared-memory slots for the A and B tiles,
  an mbarrier each, for its whole life (``_ring``). The tensor memory accelerator (TMA) brings a
  K step's tiles into a slot through descriptors built on the device (``_operand``; column-major
  operands through descriptors of their transposes, handed to wgmma as permuted views), and the
  slot's mbarrier completes when both have arrived (``_load_step``); ``warpgroup_mma`` multiplies
  one slot asynchronously while the next ``STAGES - 1`` are loading, keeping one MMA in flight
  (``_wgmma_product``); the accumulator is ``WGMMA`` (an ``NVMMADistributedLayout`` of version
  3.0: warpgroups along M). A program's K steps are numbered across its tiles (``base``), so a
  slot's mbarrier phase is its use count's parity, whatever tile it serves.
- **Portable** (mma_v2 or FMA, every other case): A and B tiles are loaded in blocked layouts
  (``LOAD_A``, ``LOAD_B``) giving each thread 16-byte vectors along the contiguous dimension (K
  for A, N for B), with the target's warp size (``iris.mem.gluon.warp_size``: 32 on NVIDIA, 64 on
  AMD CDNA). On NVIDIA sm_80 and newer, tensor cores through ``gl.nvidia.ampere.mma_v2``
  (``mma.sync``) on an ``NVMMADistributedLayout`` accumulator (``ACC``, version 2.0, instruction
  16x8) with ``DotOperandLayout`` operands (``DOT_A``, ``DOT_B``); on other targets (AMD, older
  NVIDIA), and for fp32 wherever torch's own matmul would not use TF32 (``PRECISION`` "ieee"),
  ``gl.dot_fma`` on a blocked accumulator: FMA units, IEEE fp32. The next K tile is loaded before
  the current one is multiplied (register double buffering), so loads overlap the math.

Finished tiles (rounded to the output dtype once, ``protocol_gluon.cast_out``), their stores to
peers and the reduction of the partials are in one blocked layout (``STORE``) with 16-byte
vectors along N, whichever path computed them.

On CPU ranks the kernels run through ``iris.mem.gluon.interpret`` (each launched kernel is marked
``@img.interpret()``, through ``protocol_gluon.kernel`` or directly): layouts are dropped, every
product is ``tl.dot`` in IEEE fp32 (bf16 operands widened to fp32 first, exactly), and Hopper's
primitives have CPU meanings (TMA copies complete at once; mbarriers keep their phases and byte
counts, and a wait that would never complete raises). There ``product_path`` answers as on sm_90,
so CPU runs go through the code an H100 runs: the Hopper path for fp16 and bf16 operands TMA can
address, ``mma_v2`` for the others (and TF32 fp32), ``dot_fma`` for IEEE fp32.
"""

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import ampere, hopper
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

import iris.mem.gluon as img
from iris.mem.gluon import hopper as hp
from iris.ccl import protocol
from iris.ccl import protocol_gluon as proto
from iris.heap.tracing import EVENTS

from .operands import tma_mode

__all__ = [
    "all_gather_matmul_kernel",
    "launch_options",
    "matmul_all_gather_kernel",
    "matmul_kernel",
    "matmul_reduce_kernel",
    "operand_modes",
    "product_path",
]

#: The portable path's K step at most (``_register_product``): 32, or 16 for tiles over 128 x 128.
_PORTABLE_K = gl.constexpr(32)
_PORTABLE_K_LARGE = gl.constexpr(16)
_PORTABLE_LARGE = gl.constexpr(128 * 128)
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
    a, b, ring, base, m0, m_end, n0, N, K, stride_am, stride_ak, stride_bk, stride_bn, g, stride_gm, stride_gk,
    first_col, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, PRECISION: gl.constexpr,
    GATHER: gl.constexpr, LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr,
    DOT_B: gl.constexpr, USE_MMA_V2: gl.constexpr, A_MODE: gl.constexpr, B_MODE: gl.constexpr,
    WGMMA: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """``(acc, base)``: the fp32 tile ``a[m0 : m0+BLOCK_M, :] @ b[:, n0 : n0+BLOCK_N]`` (``a`` and
    ``b`` as ``_operand`` made them) and the program's K steps so far (``base``, which the Hopper
    path advances). Columns past N and K past K read as 0; rows from ``m_end`` on read as 0
    through pointers, and a descriptor reads the rows of its matrix there (the callers mask them
    out of their stores). With ``GATHER``, where ``first_col`` holds, each A tile is also stored
    into ``g`` (the same rows, those before ``m_end``)."""
    if A_MODE != 0:
        return _wgmma_product(a, b, ring, base, m0, m_end, n0, K, g, stride_gm, stride_gk, first_col, BLOCK_M,
                              BLOCK_N, BLOCK_K, GATHER, LOAD_A, A_MODE, B_MODE, WGMMA, STAGES)  # fmt: skip
    else:
        acc = _register_product(a, b, m0, m_end, n0, N, K, stride_am, stride_ak, stride_bk, stride_bn, g, stride_gm,
                                stride_gk, first_col, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, GATHER, LOAD_A, LOAD_B,
                                ACC, DOT_A, DOT_B, USE_MMA_V2)  # fmt: skip
        return acc, base


@gluon.jit
def _register_product(
    a, b, m0, m_end, n0, N, K, stride_am, stride_ak, stride_bk, stride_bn, g, stride_gm, stride_gk, first_col,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, PRECISION: gl.constexpr, GATHER: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    USE_MMA_V2: gl.constexpr,
):  # fmt: skip
    """``_product`` on the portable path: pointers ``a`` and ``b``, the tile in layout ``ACC``, K
    in steps of ``BLOCK_K`` or ``_portable_k``, the smaller (the operands of a step and the next
    are held in registers beside the accumulator: steps of 32 spilled 120-240 bytes a thread with
    128 x 256 tiles on sm_90, the Hopper defaults that operands TMA cannot address come here with)."""
    KSTEP: gl.constexpr = min(BLOCK_K, _PORTABLE_K_LARGE if BLOCK_M * BLOCK_N > _PORTABLE_LARGE else _PORTABLE_K)
    gl.static_assert(not (USE_MMA_V2 and PRECISION == "ieee"), "IEEE fp32 products run on dot_fma, not mma_v2")
    rm = _rows(m0, BLOCK_M, LOAD_A)
    rk_a = _cols(0, KSTEP, LOAD_A)
    rk_b = _rows(0, KSTEP, LOAD_B)
    rn = _cols(n0, BLOCK_N, LOAD_B)
    a_ptrs = a + rm[:, None].to(gl.int64) * stride_am + rk_a[None, :] * stride_ak
    b_ptrs = b + rk_b[:, None].to(gl.int64) * stride_bk + rn[None, :] * stride_bn
    g_ptrs = g + rm[:, None].to(gl.int64) * stride_gm + rk_a[None, :] * stride_gk
    row_ok = rm < m_end
    col_ok = rn < N
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC)
    x, y, a_ok = _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, K)
    for k in range(0, gl.cdiv(K, KSTEP)):
        a_ptrs += KSTEP * stride_ak
        b_ptrs += KSTEP * stride_bk
        # the next tiles (all masked off after the last) are in flight while this one is multiplied
        x_next, y_next, a_ok_next = _load_tiles(a_ptrs, b_ptrs, row_ok, col_ok, rk_a, rk_b, K - (k + 1) * KSTEP)
        if GATHER:
            if first_col:
                gl.store(g_ptrs, x, mask=a_ok)
            g_ptrs += KSTEP * stride_gk
        acc = _mma(_dot_operand(x, DOT_A, USE_MMA_V2), _dot_operand(y, DOT_B, USE_MMA_V2), acc, PRECISION, USE_MMA_V2)
        x, y, a_ok = x_next, y_next, a_ok_next
    return acc


@gluon.jit
def _operand(x, rows, cols, stride_r, stride_c, BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr, MODE: gl.constexpr):
    """Matrix ``x`` (rows x cols, strides ``stride_r``, ``stride_c``) as ``_product`` reads it
    (``MODE``, chosen by the host: ``operand_modes``): 0, the pointer itself; 1, a TMA descriptor
    of row-major ``x`` in BLOCK_R x BLOCK_C boxes; 2, a descriptor of ``x``'s transpose (BLOCK_C x
    BLOCK_R boxes), for column-major ``x``. TMA fills what lies outside ``x`` with zeros. The
    boxes' shared-memory layouts are ``_ring``'s."""
    r = gl.cast(rows, gl.int32)  # (cast, not .to: a launch makes a size of 1 a constexpr)
    c = gl.cast(cols, gl.int32)
    if MODE == 1:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_R, BLOCK_C], x.dtype.element_ty)
        return tma.make_tensor_descriptor(x, [r, c], [stride_r, 1], [BLOCK_R, BLOCK_C], layout)
    elif MODE == 2:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_C, BLOCK_R], x.dtype.element_ty)
        return tma.make_tensor_descriptor(x, [c, r], [stride_c, 1], [BLOCK_C, BLOCK_R], layout)
    else:
        return x


@gluon.jit
def _slots(dtype: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr, STAGES: gl.constexpr, MODE: gl.constexpr):
    """``STAGES`` shared-memory boxes of a ROWS x COLS operand tile as ``_operand``'s descriptor of
    ``MODE`` brings them: ROWS x COLS (mode 1), or the transpose's COLS x ROWS (mode 2)."""
    if MODE == 1:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, COLS], dtype)
        return gl.allocate_shared_memory(dtype, [STAGES, ROWS, COLS], layout)
    else:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([COLS, ROWS], dtype)
        return gl.allocate_shared_memory(dtype, [STAGES, COLS, ROWS], layout)


@gluon.jit
def _ring(dtype: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
          STAGES: gl.constexpr, A_MODE: gl.constexpr, B_MODE: gl.constexpr):  # fmt: skip
    """``(a_bufs, b_bufs, bars)``: ``STAGES`` shared-memory slots for the A and B tiles of a K step
    as TMA brings them (``_operand``'s boxes and layouts: A's BLOCK_M x BLOCK_K, or BLOCK_K x
    BLOCK_M for mode 2; B's BLOCK_K x BLOCK_N, or BLOCK_N x BLOCK_K), and an mbarrier per slot,
    initialized (one arrival: ``_load_step``'s expect). 0 on the portable path, which has none
    (Triton 3.6 cannot return None)."""
    if A_MODE == 0:
        return 0
    else:
        a_bufs = _slots(dtype, BLOCK_M, BLOCK_K, STAGES, A_MODE)
        b_bufs = _slots(dtype, BLOCK_K, BLOCK_N, STAGES, B_MODE)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        return a_bufs, b_bufs, bars


@gluon.jit
def _operands(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              BLOCK_K: gl.constexpr, STAGES: gl.constexpr, A_MODE: gl.constexpr, B_MODE: gl.constexpr):  # fmt: skip
    """``(a_op, b_op, ring, base)``: ``a`` (M x K) and ``b`` (K x N) as ``_product`` reads them
    (``_operand``), the ring its Hopper path loads them into (``_ring``), and the program's K steps
    so far, 0 (``base``: the ring's slots and phases, which ``_product`` advances)."""
    a_op = _operand(a, M, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, A_MODE)
    b_op = _operand(b, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, B_MODE)
    return a_op, b_op, _ring(a.dtype.element_ty, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, A_MODE, B_MODE), 0


@gluon.jit
def _load_step(a_desc, b_desc, ring, step, m0, n0, k, pred, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               BLOCK_K: gl.constexpr, A_MODE: gl.constexpr, B_MODE: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """The A and B tiles of K step ``k`` of the tile at (``m0``, ``n0``) into the ring slot of the
    program's K step ``step`` (``step % STAGES``), where ``pred``: the slot's mbarrier expects
    both boxes' bytes (its one arrival) and completes when TMA has written them."""
    a_bufs, b_bufs, bars = ring
    slot = step % STAGES
    bar = bars.index(slot)
    BYTES: gl.constexpr = (BLOCK_M + BLOCK_N) * BLOCK_K * a_bufs.dtype.primitive_bitwidth // 8
    mbarrier.expect(bar, BYTES, pred)
    m = gl.cast(m0, gl.int32)  # (TMA coordinates are 32-bit; a group's first row may come as 64-bit)
    n = gl.cast(n0, gl.int32)
    kk = k * BLOCK_K
    if A_MODE == 1:
        hp.tma_load(a_desc, [m, kk], bar, a_bufs.index(slot), pred)
    else:
        hp.tma_load(a_desc, [kk, m], bar, a_bufs.index(slot), pred)
    if B_MODE == 1:
        hp.tma_load(b_desc, [kk, n], bar, b_bufs.index(slot), pred)
    else:
        hp.tma_load(b_desc, [n, kk], bar, b_bufs.index(slot), pred)


@gluon.jit
def _wgmma_product(
    a_desc, b_desc, ring, base, m0, m_end, n0, K, g, stride_gm, stride_gk, first_col,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GATHER: gl.constexpr,
    LOAD_A: gl.constexpr, A_MODE: gl.constexpr, B_MODE: gl.constexpr, WGMMA: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """``_product`` on the Hopper path: the first ``STAGES - 1`` K steps are loaded, then each step
    waits for its slot, is multiplied by ``warpgroup_mma`` asynchronously, waits for the previous
    step's MMA (one left in flight: the slot it read is free) and loads the step ``STAGES - 1``
    ahead into that slot. The program's K steps ``base, base + 1, ...`` give the slots and the
    mbarrier phases (a slot's uses alternate its phase); returns the tile in layout ``WGMMA``."""
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in gl.static_range(STAGES - 1):
        _load_step(a_desc, b_desc, ring, base + i, m0, n0, i, i < k_tiles, BLOCK_M, BLOCK_N, BLOCK_K, A_MODE,
                   B_MODE, STAGES)  # fmt: skip
    a_bufs, b_bufs, bars = ring
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, WGMMA)
    for k in range(k_tiles):
        step = base + k
        slot = step % STAGES
        mbarrier.wait(bars.index(slot), (step // STAGES) & 1)
        x = a_bufs.index(slot)
        if A_MODE == 2:
            x = x.permute((1, 0))
        y = b_bufs.index(slot)
        if B_MODE == 2:
            y = y.permute((1, 0))
        if GATHER:
            if first_col:
                _store_tile(x, g, m0, m_end, k * BLOCK_K, K, stride_gm, stride_gk, BLOCK_M, BLOCK_K, LOAD_A)
        acc = hopper.warpgroup_mma(x, y, acc, is_async=True)
        acc = hopper.warpgroup_mma_wait(1, deps=[acc])
        ahead = k + STAGES - 1
        _load_step(a_desc, b_desc, ring, base + ahead, m0, n0, ahead, ahead < k_tiles, BLOCK_M, BLOCK_N, BLOCK_K,
                   A_MODE, B_MODE, STAGES)  # fmt: skip
    acc = hopper.warpgroup_mma_wait(0, deps=[acc])
    return acc, base + k_tiles


@gluon.jit
def _store_tile(x, g, m0, m_end, k0, K, stride_gm, stride_gk, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                L: gl.constexpr):  # fmt: skip
    """The BLOCK_M x BLOCK_K tile in shared memory ``x`` into ``g`` at rows ``m0``, columns ``k0``
    (rows before ``m_end``, columns before K), through registers in layout ``L``."""
    rm = _rows(m0, BLOCK_M, L)
    rk = _cols(k0, BLOCK_K, L)
    ptrs = g + rm[:, None].to(gl.int64) * stride_gm + rk[None, :].to(gl.int64) * stride_gk
    gl.store(ptrs, x.load(L), mask=(rm[:, None] < m_end) & (rk[None, :] < K))


@gluon.jit
def _finished(acc, dtype: gl.constexpr, STORE: gl.constexpr):
    """The fp32 tile ``acc`` rounded once to ``dtype``, in the store layout."""
    return gl.convert_layout(proto.cast_out(acc, dtype), STORE)


@gluon.jit
def _tile_bytes(c, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    return BLOCK_M * BLOCK_N * (c.dtype.element_ty.primitive_bitwidth // 8)


@proto.kernel
def matmul_all_gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, c, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_cr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    A_MODE: gl.constexpr, B_MODE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr, WGMMA: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """``a @ b`` (a: M x K, b: K x N) into this rank's block of every rank's ``c`` (a heap buffer,
    the same on every rank), which starts ``rank * stride_cr`` elements in: ``c[:, rank*N :
    (rank+1)*N]`` of an M x W*N matrix (``stride_cr`` = N columns), or ``c[rank]`` of W stacked
    M x N blocks."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    a_op, b_op, ring, base = _operands(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N,
                                       BLOCK_K, STAGES, A_MODE, B_MODE)  # fmt: skip
    t = gl.program_id(0)
    while go & (t < tiles_m * tiles_n):
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)
        h = tr.record_start(_TILE, ctx.rank, _tile_bytes(c, BLOCK_M, BLOCK_N))
        acc, base = _product(a_op, b_op, ring, base, pid_m * BLOCK_M, M, pid_n * BLOCK_N, N, K, stride_am,
                             stride_ak, stride_bk, stride_bn, c, 0, 0, False, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION,
                             False, LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2, A_MODE, B_MODE, WGMMA,
                             STAGES)  # fmt: skip
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


@proto.kernel
def all_gather_matmul_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, c, g, m, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_gm, stride_gk,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr, GATHER: gl.constexpr, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    A_MODE: gl.constexpr, B_MODE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr, WGMMA: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """``c[s*m : (s+1)*m] = a_s @ b`` for every rank s (a_s: rank s's copy of ``a``, m x K, a heap
    buffer at the same offset on every rank; b: K x N), this rank's rows first. ``GATHER``: the
    A tiles of the first tile column are also stored into ``g`` (W*m x K, every rank's ``a``)."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = gl.cdiv(m, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    per_rank = tiles_m * tiles_n
    b_op = _operand(b, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, B_MODE)
    ring = _ring(a.dtype.element_ty, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, A_MODE, B_MODE)
    base = 0  # K steps so far (the Hopper path's ring slots and phases)
    t = gl.program_id(0)
    while go & (t < ctx.world_size * per_rank):
        s = (ctx.rank + t // per_rank) % ctx.world_size
        pid_m, pid_n = _tile_of(t % per_rank, tiles_m, tiles_n, GROUP_M)
        h = tr.record_start(_TILE, s, _tile_bytes(c, BLOCK_M, BLOCK_N))
        a_op = _operand(ctx.translate(a, s), m, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, A_MODE)  # rank s's a
        acc, base = _product(a_op, b_op, ring, base, pid_m * BLOCK_M, m, pid_n * BLOCK_N, N, K, stride_am,
                             stride_ak, stride_bk, stride_bn, g + s * m * stride_gm, stride_gm, stride_gk, pid_n == 0,
                             BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, GATHER,
                             LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2, A_MODE, B_MODE, WGMMA, STAGES)  # fmt: skip
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


@proto.kernel
def matmul_reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, out, partials, flags, M, N, K, rows,
    stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    PRECISION: gl.constexpr, OP: gl.constexpr, ALL_REDUCE: gl.constexpr, W: gl.constexpr,
    FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    A_MODE: gl.constexpr, B_MODE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr, WGMMA: gl.constexpr, STAGES: gl.constexpr,
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
    a_op, b_op, ring, base = _operands(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N,
                                       BLOCK_K, STAGES, A_MODE, B_MODE)  # fmt: skip
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
        acc, base = _product(a_op, b_op, ring, base, first + pid_m * BLOCK_M, end, pid_n * BLOCK_N, N, K,
                             stride_am, stride_ak, stride_bk, stride_bn, a, 0, 0, False, BLOCK_M, BLOCK_N, BLOCK_K,
                             PRECISION, False, LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2, A_MODE, B_MODE, WGMMA,
                             STAGES)  # fmt: skip
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
    A_MODE: gl.constexpr, B_MODE: gl.constexpr,
    LOAD_A: gl.constexpr, LOAD_B: gl.constexpr, ACC: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr,
    STORE: gl.constexpr, USE_MMA_V2: gl.constexpr, WGMMA: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """``c = a @ b`` on this rank alone: the operations' GEMM core (persistent, the same tiles and
    product) with communication off, no protocol: the baseline that says what the core costs."""
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    a_op, b_op, ring, base = _operands(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N,
                                       BLOCK_K, STAGES, A_MODE, B_MODE)  # fmt: skip
    t = gl.program_id(0)
    while t < tiles_m * tiles_n:
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)
        acc, base = _product(a_op, b_op, ring, base, pid_m * BLOCK_M, M, pid_n * BLOCK_N, N, K, stride_am,
                             stride_ak, stride_bk, stride_bn, c, 0, 0, False, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION,
                             False, LOAD_A, LOAD_B, ACC, DOT_A, DOT_B, USE_MMA_V2, A_MODE, B_MODE, WGMMA,
                             STAGES)  # fmt: skip
        rm = _rows(pid_m * BLOCK_M, BLOCK_M, STORE)
        rn = _cols(pid_n * BLOCK_N, BLOCK_N, STORE)
        ptrs = c + rm[:, None].to(gl.int64) * stride_cm + rn[None, :].to(gl.int64) * stride_cn
        gl.store(ptrs, _finished(acc, c.dtype.element_ty, STORE), mask=(rm[:, None] < M) & (rn[None, :] < N))
        t += gl.num_programs(0)


# -- host side: the product path and the layouts for a target -------------------------------------


def product_path(target, dtype) -> str:
    """How the products are computed for ``dtype`` inputs on ``target`` (None: CPU ranks):

    - ``"wgmma"``: fp16 and bf16 on sm_90 (Hopper), and on CPU ranks (which answer as sm_90):
      TMA and wgmma where ``operand_modes`` finds both operands addressable, else ``mma_v2``;
    - ``"mma_v2"``: the other NVIDIA sm_80 and newer cases (fp32 as TF32 where torch's matmul
      would use TF32, ``torch.backends.cuda.matmul.allow_tf32``), and sm_100 and newer (whose
      tensor-core instructions, tcgen05, these kernels do not use);
    - ``"fma"``: IEEE fp32 (mma_v2 takes fp32 operands only as TF32), AMD and older NVIDIA.
    """
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "fma"
    arch = 90 if target is None else target.arch if isinstance(target.arch, int) else 0
    if target is not None and target.backend != "cuda":
        return "fma"
    if dtype in (torch.float16, torch.bfloat16) and arch // 10 == 9:
        return "wgmma"
    return "mma_v2" if arch >= 80 else "fma"


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


def _wgmma_warps(num_warps: int, block_m: int) -> list[int]:
    """Warps of a wgmma accumulator: warpgroups of 4 warps (16 rows each) along M, doubled along M
    while the tile has rows for them, the rest along N (Triton's own choice for ``tl.dot``)."""
    warps = [4, 1]
    while warps[0] * warps[1] < num_warps:
        if block_m > 16 * warps[0]:
            warps[0] *= 2
        else:
            warps[1] *= 2
    return warps


def _wgmma_fits(config) -> bool:
    """Whether ``config``'s tiles suit wgmma on a GPU: whole warpgroups, each with 64 rows of the
    tile at least, and an instruction at most 256 columns wide."""
    w = config.num_warps
    if w % 4:
        return False
    wm, wn = _wgmma_warps(w, config.block_m)
    return config.block_m % (16 * wm) == 0 and config.block_m >= 64 * (wm // 4) and config.block_n // wn <= 256


@functools.lru_cache(maxsize=64)
def _layouts(block_m: int, block_n: int, block_k: int, num_warps: int, dtype: torch.dtype, threads: int,
             path: str) -> tuple:  # fmt: skip
    size = _itemsize(dtype)
    large = block_m * block_n > _PORTABLE_LARGE.value
    k_step = min(block_k, (_PORTABLE_K_LARGE if large else _PORTABLE_K).value)  # _register_product's K step
    use_mma = path != "fma"  # the portable path of "wgmma" (operands TMA cannot address) is mma_v2
    if use_mma:
        acc = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=_mma_warps(num_warps, block_m, block_n), instr_shape=[16, 8]
        )
        k_width = max(1, 4 // size)  # operand elements per 32 bits (2 for fp16/bf16, TF32: 1)
    else:
        acc = _blocked(block_m, block_n, num_warps, threads, 4)
        k_width = 0  # dot operands of a blocked (FMA) accumulator have no k_width
    wgmma = None
    if path == "wgmma":
        wm, wn = _wgmma_warps(num_warps, block_m)
        wgmma = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[wm, wn], instr_shape=[16, min(256, max(8, block_n // wn)), 16]
        )
    return tuple(
        {
            "LOAD_A": _blocked(block_m, k_step, num_warps, threads, size),
            "LOAD_B": _blocked(k_step, block_n, num_warps, threads, size),
            "ACC": acc,
            "DOT_A": gl.DotOperandLayout(operand_index=0, parent=acc, k_width=k_width),
            "DOT_B": gl.DotOperandLayout(operand_index=1, parent=acc, k_width=k_width),
            "STORE": _blocked(block_m, block_n, num_warps, threads, size),
            "USE_MMA_V2": use_mma,
            "WGMMA": wgmma,
        }.items()
    )


def launch_options(config, dtype, target) -> dict:
    """Constexprs beyond the shared ones: the layouts of ``config``'s tiles (block sizes, warps)
    for ``dtype`` inputs on ``target`` (a ``GPUTarget``; None on CPU ranks), with its warp size,
    for its product path (``product_path``), and ``STAGES``: the Hopper path's ring slots
    (``config.num_stages``, at least 2: one loading while one is multiplied). No launch options:
    Gluon does not pipeline by itself, and the host passes num_warps."""
    layouts = _layouts(config.block_m, config.block_n, config.block_k, config.num_warps, dtype,
                       img.warp_size(target), product_path(target, dtype))  # fmt: skip
    return dict(layouts, STAGES=max(2, config.num_stages))


def operand_modes(target, config, a, b, row_step: int) -> dict:
    """The ``A_MODE`` and ``B_MODE`` constexprs of a launch (``iris.ops.operands``): on the
    ``"wgmma"`` path (``product_path``), TMA descriptors of both operands where TMA can address
    both (``tma_mode``: wgmma reads B, and here A, from the shared memory TMA fills) and, on a
    GPU, ``config``'s tiles suit wgmma (whole warpgroups of 64 rows, at most 256 columns an
    instruction); else pointers for both (the portable path). ``row_step``: the rows between the
    first rows of ``a``'s tiles."""
    modes = {"A_MODE": 0, "B_MODE": 0}
    if product_path(target, a.dtype) != "wgmma" or (target is not None and not _wgmma_fits(config)):
        return modes
    a_mode = tma_mode(a, config.block_m, config.block_k, row_step)
    b_mode = tma_mode(b, config.block_k, config.block_n, config.block_k)
    if a_mode and b_mode:
        modes.update(A_MODE=a_mode, B_MODE=b_mode)
    return modes

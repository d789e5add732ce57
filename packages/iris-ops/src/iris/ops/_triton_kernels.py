"""The fused operations' kernels, in Triton over ``iris.mem.triton``.

Each is one persistent launch on the collectives' protocol (``iris.ccl.protocol_triton``): it
publishes its description and waits for every rank at its entry (``begin``), deals output tiles
over its programs with a grid stride, and waits for every rank at its exit (``finish``), so no
rank reads or writes a peer's buffer before the peer reached the call, nor returns while a peer
may still touch its own. In between, communication happens tile by tile while other tiles are
computed:

- ``matmul_all_gather_kernel`` (push): each finished tile of ``a @ b`` is stored into every
  rank's output (the next rank first, this rank's own copy last); stores leave the program at
  once, so the next tile's product overlaps them.
- ``all_gather_matmul_kernel`` (pull): the A tiles of rank s's rows are read straight from rank
  s's copy of ``a`` inside the product's K loop, this rank's own rows first.
- ``matmul_reduce_kernel`` (reduce-scatter, and all-reduce): output rows are split into one group
  per rank, cut alike into tiles; a program computes each of its tiles in every group, the next
  ranks' groups first and its own last, storing each partial product into its owner's exchange
  buffer and ``signal``-ing it (one product later); the owner waits for every rank's partial of
  the tile (``wait_flags``) right after storing its own, and reduces them in rank order (every
  rank's result the same bits), storing the result (all-reduce: into every rank's output). So
  reductions run all through the kernel, on partials just stored (in L2), not all at its end.

A program waits only for the programs of its own index on other ranks (every rank deals tiles
alike: the tiling is in the description), and sends before it waits, so the kernels are correct
under Triton's interpreter too, which runs a launch's programs one after another.

``iris.ops._gluon_kernels`` has the same kernels with the same signatures in Gluon.
"""

import triton
import triton.language as tl

import iris.mem.triton as imt
from iris.ccl import protocol
from iris.ccl import protocol_triton as proto
from iris.heap.tracing import EVENTS

from .operands import tma_mode

__all__ = ["all_gather_matmul_kernel", "matmul_all_gather_kernel", "matmul_kernel", "matmul_reduce_kernel"]

_AVG = tl.constexpr(protocol.REDUCE_OPS["avg"])
# Config(trace=True): each tile's product, its stores to peers, and waits for peers' tiles.
_TILE = tl.constexpr(EVENTS["tile"])
_REMOTE_STORE = tl.constexpr(EVENTS["remote store"])
_TILE_WAIT = tl.constexpr(EVENTS["tile wait"])


_INTERPRETED = tl.constexpr(imt.INTERPRETED)  # kernels run under Triton's interpreter in this process


@triton.jit
def _tile_of(t, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Tile index -> (pid_m, pid_n): GROUP_M tile rows at a time sweep the tile columns, so the
    B tiles they share stay in L2."""
    width = GROUP_M * tiles_n
    first_m = (t // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (t % width) % rows, (t % width) // rows


@triton.jit
def _dot_operand(x):
    """``x`` as a ``tl.dot`` operand: itself, except bf16 under the interpreter (which multiplies
    bf16 as its raw 16-bit integers) is widened to fp32 there, exactly."""
    if _INTERPRETED and x.dtype == tl.bfloat16:
        return x.to(tl.float32)
    return x


@triton.jit
def _operand(x, rows, cols, stride_r, stride_c, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, MODE: tl.constexpr):
    """Matrix ``x`` (rows x cols, strides ``stride_r``, ``stride_c``) as ``_product`` reads it
    (``MODE``, chosen by the host: ``operand_modes``): 0, the pointer itself (masked loads); 1, a
    tensor descriptor (tiles brought by Hopper's tensor memory accelerator, TMA) of row-major
    ``x``; 2, a descriptor of ``x``'s transpose, for column-major ``x`` (``stride_r`` 1). TMA
    fills what lies outside ``x`` with zeros, as the masks do."""
    r = tl.cast(rows, tl.int32)  # (cast, not .to: a launch makes a size of 1 a constexpr)
    c = tl.cast(cols, tl.int32)
    if MODE == 1:
        return tl.make_tensor_descriptor(x, [r, c], [stride_r, 1], [BLOCK_R, BLOCK_C])
    elif MODE == 2:
        return tl.make_tensor_descriptor(x, [c, r], [stride_c, 1], [BLOCK_C, BLOCK_R])
    else:
        return x


@triton.jit
def _tile(x, r0, c0, MODE: tl.constexpr):
    """The tile of descriptor ``x`` (``_operand``'s MODE 1 or 2) at row ``r0``, column ``c0``."""
    r = tl.cast(r0, tl.int32)  # (TMA coordinates are 32-bit; a rank's row offset may come as 64-bit)
    c = tl.cast(c0, tl.int32)
    if MODE == 1:
        return x.load([r, c])
    else:
        return x.load([c, r]).T


@triton.jit
def _product(a, b, m0, rm, row_ok, n0, rn, N, K, stride_am, stride_ak, stride_bk, stride_bn, g, stride_gm,
             stride_gk, gather, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, A_MODE: tl.constexpr, B_MODE: tl.constexpr):  # fmt: skip
    """The fp32 tile ``a[rm, :] @ b[:, rn]`` (``rm`` = ``m0 + [0, BLOCK_M)``, ``rn`` = ``n0 + [0,
    BLOCK_N)``); ``a`` and ``b`` are what ``_operand`` made of them. Rows where ``row_ok`` fails,
    columns past N and K past K read as 0 through pointers; a descriptor reads the rows of its
    matrix there (the caller masks them out of its stores). Where ``gather`` holds, each A tile
    is also stored into ``g`` (rows ``rm``, where ``row_ok``)."""
    rk = tl.arange(0, BLOCK_K)
    if A_MODE == 0:
        a_ptrs = a + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    if B_MODE == 0:
        b_ptrs = b + rk[:, None].to(tl.int64) * stride_bk + rn[None, :] * stride_bn
    g_ptrs = g + rm[:, None].to(tl.int64) * stride_gm + rk[None, :] * stride_gk
    col_ok = rn[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a_ok = row_ok[:, None] & (rk[None, :] < k_left)
        if A_MODE == 0:
            x = tl.load(a_ptrs, mask=a_ok, other=0.0)
            a_ptrs += BLOCK_K * stride_ak
        else:
            x = _tile(a, m0, k * BLOCK_K, A_MODE)
        if B_MODE == 0:
            y = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & col_ok, other=0.0)
            b_ptrs += BLOCK_K * stride_bk
        else:
            y = _tile(b, k * BLOCK_K, n0, B_MODE)
        if gather:
            tl.store(g_ptrs, x, mask=a_ok)
        acc = tl.dot(_dot_operand(x), _dot_operand(y), acc, input_precision=PRECISION)
        g_ptrs += BLOCK_K * stride_gk
    return acc


@triton.jit
def _tile_bytes(c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return BLOCK_M * BLOCK_N * (c.dtype.element_ty.primitive_bitwidth // 8)


@proto.kernel
def matmul_all_gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, c, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_cr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr, FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr,
    A_MODE: tl.constexpr, B_MODE: tl.constexpr,
):  # fmt: skip
    """``a @ b`` (a: M x K, b: K x N) into this rank's block of every rank's ``c`` (a heap buffer,
    the same on every rank), which starts ``rank * stride_cr`` elements in: ``c[:, rank*N :
    (rank+1)*N]`` of an M x W*N matrix (``stride_cr`` = N columns), or ``c[rank]`` of W stacked
    M x N blocks."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    a_op = _operand(a, M, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, A_MODE)
    b_op = _operand(b, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, B_MODE)
    t = tl.program_id(0)
    while go & (t < tiles_m * tiles_n):
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        h = tr.record_start(_TILE, ctx.rank, _tile_bytes(c, BLOCK_M, BLOCK_N))
        acc = _product(a_op, b_op, pid_m * BLOCK_M, rm, rm < M, pid_n * BLOCK_N, rn, N, K, stride_am, stride_ak,
                       stride_bk, stride_bn, c, 0, 0, False, BLOCK_K, PRECISION, BLOCK_M, BLOCK_N, A_MODE,
                       B_MODE)  # fmt: skip
        out = proto.cast_out(acc, c.dtype.element_ty)
        tr.record_end(h)
        mine = c + tl.cast(ctx.rank, tl.int64) * stride_cr  # this rank's block
        ptrs = mine + rm[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        for j in range(1, ctx.world_size + 1):  # the next rank first, this rank's own copy last
            to = (ctx.rank + j) % ctx.world_size
            h = tr.record_start(_REMOTE_STORE, to, _tile_bytes(c, BLOCK_M, BLOCK_N))
            ctx.store(ptrs, out, to, mask=mask)
            tr.record_end(h)
        t += tl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@proto.kernel
def all_gather_matmul_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, c, g, m, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_gm, stride_gk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr, GATHER: tl.constexpr, FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr,
    A_MODE: tl.constexpr, B_MODE: tl.constexpr,
):  # fmt: skip
    """``c[s*m : (s+1)*m] = a_s @ b`` for every rank s (a_s: rank s's copy of ``a``, m x K, a heap
    buffer at the same offset on every rank; b: K x N), this rank's rows first. ``GATHER``: the
    A tiles of the first tile column are also stored into ``g`` (W*m x K, every rank's ``a``)."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = tl.cdiv(m, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_rank = tiles_m * tiles_n
    b_op = _operand(b, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, B_MODE)
    t = tl.program_id(0)
    while go & (t < ctx.world_size * per_rank):
        s = (ctx.rank + t // per_rank) % ctx.world_size
        pid_m, pid_n = _tile_of(t % per_rank, tiles_m, tiles_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        h = tr.record_start(_TILE, s, _tile_bytes(c, BLOCK_M, BLOCK_N))
        a_op = _operand(ctx.translate(a, s), m, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, A_MODE)  # rank s's a
        acc = _product(a_op, b_op, pid_m * BLOCK_M, rm, rm < m, pid_n * BLOCK_N, rn, N, K, stride_am, stride_ak,
                       stride_bk, stride_bn, g + s * m * stride_gm, stride_gm, stride_gk, GATHER & (pid_n == 0),
                       BLOCK_K, PRECISION, BLOCK_M, BLOCK_N, A_MODE, B_MODE)  # fmt: skip
        rows = s * m + rm
        ptrs = c + rows[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
        tl.store(ptrs, proto.cast_out(acc, c.dtype.element_ty), mask=(rm[:, None] < m) & (rn[None, :] < N))
        tr.record_end(h)
        t += tl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


#: Rows of a tile the owner reduces at a time: a whole 128 x 256 tile's W fp32 operands would not fit
#: the registers that its product left (they spilled, costing more than the reduction itself).
_REDUCE_ROWS = tl.constexpr(32)


@triton.jit
def _reduce_rows(partials, rl, rn, rows, N, OP: tl.constexpr, W: tl.constexpr):
    """``OP`` over ranks 0, 1, ..., W-1 (in that order) of their partials of rows ``rl`` (within
    the group), columns ``rn``, in fp32.

    Unrolled over the ``W`` ranks, so all W loads are in flight at once (a loop over a runtime
    world size issues them one after another: W memory latencies). Cached at L2 only (".cg",
    not in L1, which another launch may have filled from these addresses): after
    ``wait_flags``' acquire, L2 holds what the peers stored. (Volatile loads measured 4% slower
    for the whole operation: BENCHMARKS.md, section "iris.ops: fused GEMM + communication against
    unfused and against the limit (H100)".)"""
    ptrs = partials + rl[:, None].to(tl.int64) * N + rn[None, :]
    mask = (rl[:, None] < rows) & (rn[None, :] < N)
    size = tl.cast(rows, tl.int64) * N  # cast, not .to: a launch makes rows == 1 a constexpr
    acc = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
    for r in tl.static_range(1, W):
        v = tl.load(ptrs + r * size, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
        acc = proto.combine(acc, v, OP, True)
    if OP == _AVG:
        acc = tl.div_rn(acc, tl.full((), W, tl.float32))  # IEEE-rounded, as torch divides
    return acc


@proto.kernel
def matmul_reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, a, b, out, partials, flags, M, N, K, rows,
    stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr, OP: tl.constexpr, ALL_REDUCE: tl.constexpr, W: tl.constexpr,
    FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr, A_MODE: tl.constexpr, B_MODE: tl.constexpr,
):  # fmt: skip
    """Rows [o*rows, (o+1)*rows) of ``sum_r a_r @ b_r`` (``OP`` over ranks, in rank order) on rank o
    (a: M x K, b: K x N): into the local ``out`` (rows x N), or with ``ALL_REDUCE`` into every
    rank's ``out`` (M x N, a heap buffer the same on every rank) at those rows.

    ``partials`` (W x rows x N, of ``out``'s dtype) and ``flags`` (one FLAGS-wide row per tile of
    a group) are this rank's exchange buffer, at the same heap offset on every rank: rank s stores
    its partial of a tile of group o into rank o's ``partials[s]`` and raises its lane of the
    tile's row there. ``W``: the world size (the reduction unrolls over it).

    A program takes its tiles one at a time and computes each in every group, its own last (so
    every rank computes a tile's partials at about the same time, and the owner finds them there
    when its own is done). A partial's flag is raised one product late: after the program's next
    product, under which its stores drained (a release right after them would wait for them:
    ``signal``); the last one sent before the owner's own product is raised after that product,
    before the owner waits, so every rank has raised all its flags of a tile before it waits for
    any of that tile. The owner stores its own partial like the others (its lane raised locally:
    only its own threads read it, after the barrier that ends ``wait_flags``) and reduces the tile
    _REDUCE_ROWS rows at a time."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    tiles_m = tl.cdiv(rows, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    size = tl.cast(rows, tl.int64) * N  # cast, not .to: a launch makes rows == 1 a constexpr
    sent_t = -1  # the tile whose partial was stored last and not yet signalled (-1: none), and its owner
    sent_o = ctx.rank % ctx.world_size  # (typed as the owners computed below)
    a_op = _operand(a, M, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, A_MODE)
    b_op = _operand(b, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, B_MODE)
    # One flat loop over (tile, group) pairs: tile t of the next rank's rows first, of this rank's
    # own last. (Nested loops would let the compiler hoist the tile's index and pointer vectors out
    # of the loop over groups, where they stayed live through the products: registers spilled.)
    v = 0
    t = tl.program_id(0)
    while go & (t < tiles_m * tiles_n):
        j = v % W + 1
        o = (ctx.rank + j) % ctx.world_size
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)  # the tile's place in every group
        rl = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # rows within the group
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rm = o * rows + rl
        row_ok = (rl < rows) & (rm < M)
        h = tr.record_start(_TILE, o, _tile_bytes(partials, BLOCK_M, BLOCK_N))
        acc = _product(a_op, b_op, o * rows + pid_m * BLOCK_M, rm, row_ok, pid_n * BLOCK_N, rn, N, K, stride_am,
                       stride_ak, stride_bk, stride_bn, out, 0, 0, False, BLOCK_K, PRECISION, BLOCK_M, BLOCK_N,
                       A_MODE, B_MODE)  # fmt: skip
        part = proto.cast_out(acc, partials.dtype.element_ty)
        tr.record_end(h)
        h = tr.record_start(_REMOTE_STORE, o, _tile_bytes(partials, BLOCK_M, BLOCK_N))
        if sent_t >= 0:
            go = proto.signal(ctx, flags + sent_t * FLAGS, epoch, sent_o, SCOPE)
            sent_t = -1
        if go:
            mine = partials + ctx.rank * size + rl[:, None].to(tl.int64) * N + rn[None, :]
            ctx.store(mine, part, o, mask=row_ok[:, None] & (rn[None, :] < N))
            if j < ctx.world_size:
                sent_t = t
                sent_o = o
        tr.record_end(h)
        if go & (j == ctx.world_size):  # a tile of this rank's rows: every rank's partial, reduced
            tl.atomic_xchg(flags + t * FLAGS + ctx.rank, epoch, sem="relaxed", scope=SCOPE)
            h = tr.record_start(_TILE_WAIT, ctx.rank, 0)
            go = proto.wait_flags(ctx, flags + t * FLAGS, sync, epoch, FLAGS, SCOPE)
            tr.record_end(h)
            if go:
                CHUNK: tl.constexpr = min(_REDUCE_ROWS, BLOCK_M)
                for c in tl.static_range(BLOCK_M // CHUNK):
                    rc = pid_m * BLOCK_M + c * CHUNK + tl.arange(0, CHUNK)  # rows within the group
                    res = proto.cast_out(_reduce_rows(partials, rc, rn, rows, N, OP, W), out.dtype.element_ty)
                    mask = ((rc < rows) & (o * rows + rc < M))[:, None] & (rn[None, :] < N)
                    if ALL_REDUCE:
                        ptrs = (out + (o * rows + rc)[:, None].to(tl.int64) * stride_om
                                + rn[None, :].to(tl.int64) * stride_on)  # fmt: skip
                        for i in range(1, ctx.world_size + 1):  # the next rank first, this rank's own last
                            to = (ctx.rank + i) % ctx.world_size
                            h = tr.record_start(_REMOTE_STORE, to, _tile_bytes(out, CHUNK, BLOCK_N))
                            ctx.store(ptrs, res, to, mask=mask)
                            tr.record_end(h)
                    else:
                        ptrs = out + rc[:, None].to(tl.int64) * stride_om + rn[None, :].to(tl.int64) * stride_on
                        tl.store(ptrs, res, mask=mask)
        v += 1
        t = tl.program_id(0) + (v // W) * tl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@imt.interpret()
@triton.jit
def matmul_kernel(
    a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr, A_MODE: tl.constexpr, B_MODE: tl.constexpr,
):  # fmt: skip
    """``c = a @ b`` on this rank alone: the operations' GEMM core (persistent, the same tiles and
    product) with communication off, no protocol: the baseline that says what the core costs."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    a_op = _operand(a, M, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, A_MODE)
    b_op = _operand(b, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, B_MODE)
    t = tl.program_id(0)
    while t < tiles_m * tiles_n:
        pid_m, pid_n = _tile_of(t, tiles_m, tiles_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = _product(a_op, b_op, pid_m * BLOCK_M, rm, rm < M, pid_n * BLOCK_N, rn, N, K, stride_am, stride_ak,
                       stride_bk, stride_bn, c, 0, 0, False, BLOCK_K, PRECISION, BLOCK_M, BLOCK_N, A_MODE,
                       B_MODE)  # fmt: skip
        ptrs = c + rm[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
        tl.store(ptrs, proto.cast_out(acc, c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
        t += tl.num_programs(0)


def launch_options(config, dtype, target) -> dict:
    """Constexprs and launch options beyond the shared ones: Triton picks layouts itself and
    software-pipelines the K loop over ``config.num_stages`` stages."""
    return {"num_stages": config.num_stages}


def operand_modes(target, config, a, b, row_step: int) -> dict:
    """The ``A_MODE`` and ``B_MODE`` constexprs of a launch on ``target`` (None: CPU ranks) with
    ``config``'s tiles: TMA descriptors on Hopper and later NVIDIA GPUs where the operands allow
    (``iris.ops.operands.tma_mode``), and on CPU ranks (Triton's interpreter reads descriptors as
    masked loads, so the Hopper path's logic runs there); pointers elsewhere. ``row_step``: the rows between the
    first rows of ``a``'s tiles (a reduction starts each rank's group ``rows`` in)."""
    if target is not None and not (target.backend == "cuda" and target.arch >= 90):
        return {"A_MODE": 0, "B_MODE": 0}
    return {
        "A_MODE": tma_mode(a, config.block_m, config.block_k, row_step),
        "B_MODE": tma_mode(b, config.block_k, config.block_n, config.block_k),
    }


def product_path(target, dtype) -> str:
    """How the products are computed: ``tl.dot``, which picks the target's tensor cores itself."""
    return "tl.dot"

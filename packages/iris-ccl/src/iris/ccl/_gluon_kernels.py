"""The collectives' kernels, in Gluon over ``iris.mem.gluon``.

The same kernels, signatures and synchronization as ``iris.ccl._triton_kernels`` (read its
docstring for the entry/exit protocol: the epoch lives on the device, epochs only grow, flags are
never cleared, and no program waits on a later program of its own launch, so CPU ranks run them
too).

Layouts are explicit in Gluon: every tile is a 1-D ``BlockedLayout`` built inside the kernel from
``BLOCK``, the launch's ``num_warps`` (``gl.num_warps()``) and the compile target's warp size
(32 on NVIDIA, 64 on AMD CDNA), one 16-byte vector of the element type per thread and repetition.
"""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
from iris.mem.gluon import Context

__all__ = ["barrier_kernel", "one_shot_kernel", "reduce_kernel", "gather_kernel", "push_kernel"]

#: Bytes one thread moves per vector access (as ``iris.mem.gluon.blocked_layout``).
_VECTOR_BYTES = 16


def _value(x):
    return getattr(x, "value", x)


def _tile_layout(block, num_warps, dtype, _semantic=None):
    """The 1-D layout of a ``block``-element tile of ``dtype`` over ``num_warps`` warps.

    Compiled: the target's warp size (the compile options'). On CPU ranks (called as Python, no
    ``_semantic``) layouts are dropped, so any valid one serves.
    """
    block, num_warps, dtype = _value(block), _value(num_warps), _value(dtype)
    compiled = _semantic is not None
    threads = int(_semantic.builder.options.warp_size) if compiled else img.warp_size()
    size = max(1, dtype.primitive_bitwidth // 8)
    per_thread = max(1, min(_VECTOR_BYTES // size, block // (threads * num_warps)))
    layout = gl.BlockedLayout(
        size_per_thread=[per_thread], threads_per_warp=[threads], warps_per_cta=[num_warps], order=[0]
    )
    return gl.constexpr(layout) if compiled else layout


_tile_layout.__triton_builtin__ = True  # called with the code generator's _semantic when compiled


@gluon.jit
def _lanes(ctx, FLAGS: gl.constexpr):
    """One lane per rank, FLAGS (a power of two >= the world size) of them: lanes past the world
    repeat the last rank (an exchange of the same epoch, or a second look at the same flag)."""
    L: gl.constexpr = _tile_layout(FLAGS, gl.num_warps(), gl.int32)
    return gl.minimum(gl.arange(0, FLAGS, layout=L), ctx.world_size - 1)


@gluon.jit
def _arrive(ctx, flags, epoch, FLAGS: gl.constexpr):
    """Write ``epoch`` into ``flags[rank]`` of every rank at once (a release exchange per lane)."""
    r = _lanes(ctx, FLAGS)
    ctx.atomic_xchg(flags + ctx.rank + r * 0, epoch, r, sem="release", scope="sys")


@gluon.jit
def _await_all(ctx, flags, epoch, FLAGS: gl.constexpr):
    """Bounded wait until every rank's local ``flags[r]`` has reached ``epoch`` (all polled at once)."""
    ctx.wait(flags + _lanes(ctx, FLAGS), epoch, ">=")


@gluon.jit
def _enter(ctx, entry, state, FLAGS: gl.constexpr):
    """This collective's epoch, once every rank has reached it (see ``_triton_kernels``)."""
    epoch = gl.load(state + 1) + 1
    if gl.program_id(0) == 0:
        _arrive(ctx, entry, epoch, FLAGS)
    _await_all(ctx, entry, epoch, FLAGS)
    return epoch


@gluon.jit
def _leave(ctx, exit_flags, state, epoch, FLAGS: gl.constexpr):
    img.barrier()  # every thread's stores are done before this program's release
    done = ctx.atomic_add(state, 1, ctx.rank, sem="acq_rel", scope="sys") + 1
    if done == gl.num_programs(0):  # the last program of the launch: every other one has counted itself
        _arrive(ctx, exit_flags, epoch, FLAGS)
        _await_all(ctx, exit_flags, epoch, FLAGS)
        gl.store(state, epoch * 0)
        gl.store(state + 1, epoch)  # read by the next launch in stream order


@gluon.jit
def _combine(acc, v, OP: gl.constexpr, IS_FLOAT: gl.constexpr):
    if OP == 1:
        if IS_FLOAT:
            acc = gl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = gl.maximum(acc, v)
    elif OP == 2:
        if IS_FLOAT:
            acc = gl.minimum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = gl.minimum(acc, v)
    else:
        acc = acc + v
    return acc


@gluon.jit
def _reduce_tile(ctx, src, mask, W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr, IS_FLOAT: gl.constexpr):
    """``op`` over ranks 0, 1, ..., W-1 (in that order) of the ranks' copies at ``src``.

    Unrolled over the ``W`` ranks, so all W loads of a tile are in flight at once (a loop over a
    runtime world size issues them one after another: W memory latencies per tile).
    """
    acc = ctx.load(src, 0, mask=mask)
    if ACC_F32:
        acc = acc.to(gl.float32)
    for r in gl.static_range(1, W):
        v = ctx.load(src, r, mask=mask)
        if ACC_F32:
            v = v.to(gl.float32)
        acc = _combine(acc, v, OP, IS_FLOAT)
    if OP == 3:
        acc = tl.div_rn(acc, ctx.world_size.to(acc.dtype))  # IEEE-rounded, as torch divides
    return acc


@gluon.jit
def _cast_out(acc, out_dtype: gl.constexpr):
    """acc in the output dtype; fp32 -> bf16 rounds to nearest even explicitly, so interpreted
    and compiled runs give the same bits (the interpreter's own conversion truncates)."""
    if out_dtype == gl.bfloat16:
        bits = acc.to(gl.uint32, bitcast=True)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).to(gl.uint16)
        out = gl.where(acc != acc, acc.to(gl.bfloat16), rounded.to(gl.bfloat16, bitcast=True))
    else:
        out = acc.to(out_dtype)
    return out


@gluon.jit
def barrier_kernel(context_ptr, entry, state, FLAGS: gl.constexpr):
    """One program: raise this rank's entry flag in every rank, wait for every rank's."""
    ctx = Context.initialize(context_ptr)
    epoch = gl.load(state + 1) + 1
    _arrive(ctx, entry, epoch, FLAGS)
    _await_all(ctx, entry, epoch, FLAGS)
    gl.store(state + 1, epoch)


@gluon.jit
def one_shot_kernel(
    context_ptr, entry, exit_flags, state, src, dst, N,
    W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr, IS_FLOAT: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr,
):  # fmt: skip
    """dst (local) = op over ranks of src (every rank's staged copy of its input)."""
    ctx = Context.initialize(context_ptr)
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    epoch = _enter(ctx, entry, state, FLAGS)
    t = gl.program_id(0)
    while t < gl.cdiv(N, BLOCK):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        mask = offs < N
        acc = _reduce_tile(ctx, src + offs, mask, W, OP, ACC_F32, IS_FLOAT)
        gl.store(dst + offs, _cast_out(acc, dst.dtype.element_ty), mask=mask)
        t += gl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)


@gluon.jit
def reduce_kernel(
    context_ptr, entry, exit_flags, state, src, dst, N, chunk,
    PUSH: gl.constexpr, DST_CHUNKED: gl.constexpr,
    W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr, IS_FLOAT: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr,
):  # fmt: skip
    """Reduce chunk ``rank`` (elements [rank*chunk, min((rank+1)*chunk, N))) of src over ranks.

    The result goes to ``dst`` at the chunk's offset (``DST_CHUNKED``) or at 0; into every rank's
    copy of dst (``PUSH``: the two-shot all_reduce, where src and dst are the same tensor and no
    one but this rank touches this chunk) or only the local one (reduce_scatter).
    """
    ctx = Context.initialize(context_ptr)
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    epoch = _enter(ctx, entry, state, FLAGS)
    start = ctx.rank * chunk
    t = gl.program_id(0)
    while t < gl.cdiv(chunk, BLOCK):
        local = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        offs = start + local
        mask = (local < chunk) & (offs < N)
        acc = _reduce_tile(ctx, src + offs, mask, W, OP, ACC_F32, IS_FLOAT)
        out = _cast_out(acc, dst.dtype.element_ty)
        if DST_CHUNKED:
            where = dst + offs
        else:
            where = dst + local
        if PUSH:
            for j in gl.static_range(W):
                ctx.store(where, out, (ctx.rank + j) % W, mask=mask)
        else:
            gl.store(where, out, mask=mask)
        t += gl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)


@gluon.jit
def gather_kernel(
    context_ptr, entry, exit_flags, state, src, dst,
    n, total, src_stride, src_offset, dst_stride, first, COUNT: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr,
):  # fmt: skip
    """For ranks r = first, first+1, ... (COUNT of them, mod W; unrolled, so their loads overlap):
    dst[r*dst_stride + i] = rank r's src[r*src_stride + src_offset + i], for i < n and
    r*dst_stride + i < total (all_gather, all_to_all, broadcast and the all-gather half of rs_ag).
    """
    ctx = Context.initialize(context_ptr)
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    epoch = _enter(ctx, entry, state, FLAGS)
    t = gl.program_id(0)
    while t < gl.cdiv(n, BLOCK):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        for j in gl.static_range(COUNT):
            r = (first + j) % ctx.world_size
            mask = (offs < n) & (r * dst_stride + offs < total)
            v = ctx.load(src + r * src_stride + src_offset + offs, r, mask=mask)
            gl.store(dst + r * dst_stride + offs, v, mask=mask)
        t += gl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)


@gluon.jit
def push_kernel(
    context_ptr, entry, exit_flags, state, src, dst, n, dst_offset,
    W: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr,
):  # fmt: skip
    """Every rank's dst[dst_offset + i] = this rank's src[i], for i < n (all_gather into heap
    outputs: each input read once, from local memory, and stored into all W ranks)."""
    ctx = Context.initialize(context_ptr)
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    epoch = _enter(ctx, entry, state, FLAGS)
    t = gl.program_id(0)
    while t < gl.cdiv(n, BLOCK):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        mask = offs < n
        v = gl.load(src + offs, mask=mask)
        for j in gl.static_range(W):
            ctx.store(dst + dst_offset + offs, v, (ctx.rank + j) % W, mask=mask)
        t += gl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)

"""The collectives' kernels, in Gluon over ``iris.mem.gluon``.

The same kernels, signatures and synchronization as ``iris.ccl._triton_kernels``: every kernel
meets its peers through the device half of the protocol (``iris.ccl.protocol_gluon``, the same
functions as ``protocol_triton``).

Layouts are explicit in Gluon: every tile is a 1-D ``BlockedLayout`` built inside the kernel from
``BLOCK``, the launch's ``num_warps`` (``gl.num_warps()``) and the compile target's warp size
(32 on NVIDIA, 64 on AMD CDNA), one 16-byte vector of the element type per thread and repetition
(``protocol_gluon.tile_layout``).

On CPU ranks the kernels run through ``iris.mem.gluon.interpret``: each launched kernel
(``@proto.kernel``) is marked ``@img.interpret()``, so its launches (whoever makes them) enter that
scope; importing ``iris.mem.gluon`` alone changes nothing in Gluon.
"""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
from iris.heap.tracing import EVENTS
from iris.mem.gluon import Context, Tracing
from iris.mem.gluon import ops as mops

from . import protocol
from . import protocol_gluon as proto
from .call import Push

__all__ = ["barrier_kernel", "reduce_kernel", "gather_kernel", "push_kernel", "push_reduce_kernel"]

_AVG = gl.constexpr(protocol.REDUCE_OPS["avg"])
# Config(trace=True): the phases every kernel records (iris.heap.tracing.EVENTS), per tile.
_TILE = gl.constexpr(EVENTS["tile"])
_REMOTE_LOAD = gl.constexpr(EVENTS["remote load"])
_REMOTE_STORE = gl.constexpr(EVENTS["remote store"])
# push_kernel's MODEs (iris.ccl.call.Push).
_SAME = gl.constexpr(Push.SAME)
_CHUNKS = gl.constexpr(Push.CHUNKS)
_RELAY = gl.constexpr(Push.RELAY)


@gluon.jit
def _bytes(mask, ptr):
    """Bytes that a masked access of ``ptr``'s element type moves (an event's payload)."""
    return gl.sum(mask.to(gl.int64), axis=0) * (ptr.dtype.element_ty.primitive_bitwidth // 8)


@gluon.jit
def _reduce_tile(ctx, tr, src, mask, W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr,
                 IS_FLOAT: gl.constexpr):  # fmt: skip
    """``op`` over ranks 0, 1, ..., W-1 (in that order) of the ranks' copies at ``src``.

    Unrolled over the ``W`` ranks, so all W loads of a tile are in flight at once (a loop over a
    runtime world size issues them one after another: W memory latencies per tile). Tracing
    records each rank's load ("remote load", target the rank), which serializes them.
    """
    nbytes = _bytes(mask, src) if tr.enabled else 0
    h = tr.record_start(_REMOTE_LOAD, 0, nbytes)
    acc = ctx.load(src, 0, mask=mask)
    tr.record_end(h)
    if ACC_F32:
        acc = acc.to(gl.float32)
    for r in gl.static_range(1, W):
        h = tr.record_start(_REMOTE_LOAD, r, nbytes)
        v = ctx.load(src, r, mask=mask)
        tr.record_end(h)
        if ACC_F32:
            v = v.to(gl.float32)
        acc = proto.combine(acc, v, OP, IS_FLOAT)
    return _average(ctx, acc, OP)


@gluon.jit
def _average(ctx, acc, OP: gl.constexpr):
    """``acc`` over the world size where ``OP`` is avg (IEEE-rounded, as torch divides)."""
    if OP == _AVG:
        if acc.dtype == gl.float64:
            acc = acc / ctx.world_size.to(gl.float64)  # fp64 division is IEEE-rounded already
        else:
            acc = tl.div_rn(acc, ctx.world_size.to(acc.dtype))
    return acc


@gluon.jit
def _copy_all(dst, src, N, BLOCK: gl.constexpr, L: gl.constexpr):
    """``dst[i] = src[i]`` for every ``i < N``, by this one program (see _triton_kernels)."""
    i = N * 0  # a while loop: triton 3.6's interpreter takes no argument as a range bound here
    while i < N:
        offs = i + gl.arange(0, BLOCK, layout=L)
        mask = offs < N
        gl.store(dst + offs, gl.load(src + offs, mask=mask, volatile=True), mask=mask)
        i += BLOCK


@gluon.jit
def _stage_in(staging, user, n, staged, BLOCK: gl.constexpr, L: gl.constexpr):
    """A staged launch (``staged`` not 0, one program): ``user`` (a tensor off the heap) into this rank's
    ``staging`` before the entry publishes it. The staging is this rank's own until then: the last
    call's exit saw every peer done with it."""
    if staged != 0:
        _copy_all(staging, user, n, BLOCK, L)
        img.barrier()  # every thread's part is written before program 0's release publishes it


@proto.kernel
def barrier_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr
):
    """One program: every rank arrives (and agrees that this is a barrier); no exit needed."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    proto.complete(ctx, sync, epoch, go, FLAGS, SCOPE)


@proto.kernel
def reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst, N, chunk_index, chunk, user, staged,
    PUSH: gl.constexpr, DST_CHUNKED: gl.constexpr, COPY_BACK: gl.constexpr,
    W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr, IS_FLOAT: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr,
    SCOPE: gl.constexpr, TRACE: gl.constexpr,
):  # fmt: skip
    """Reduce elements [start, min(start + chunk, N)) of src over ranks, start = chunk_index * chunk;
    ``staged``: copy ``user`` in before the entry (``COPY_BACK``: and back after the exit) in this one
    program (see _triton_kernels)."""
    L: gl.constexpr = proto.tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    _stage_in(src, user, N, staged, BLOCK, L)
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    # The chunk's first element, from its index: rank r's start (r * chunk) is then known to be a
    # multiple of 16 wherever chunk is, so every rank runs the same specialization; int64, as
    # chunk_index * chunk may pass what int32 holds where N does not (the last ranks' empty chunks).
    start = chunk_index.to(gl.int64) * chunk
    t = gl.program_id(0)
    while go & (t < gl.cdiv(chunk, BLOCK)):
        local = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        offs = start + local
        mask = (local < chunk) & (offs < N)
        nbytes = _bytes(mask, dst) if TRACE else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        out = proto.cast_out(_reduce_tile(ctx, tr, src + offs, mask, W, OP, ACC_F32, IS_FLOAT), dst.dtype.element_ty)
        if DST_CHUNKED:
            where = dst + offs
        else:
            where = dst + local
        if PUSH:
            for j in gl.static_range(W):
                to = (ctx.rank + j) % W
                h = tr.record_start(_REMOTE_STORE, to, nbytes)
                ctx.store(where, out, to, mask=mask)
                tr.record_end(h)
        else:
            gl.store(where, out, mask=mask)
        tr.record_end(tile)
        t += gl.num_programs(0)
    ok = proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)
    if COPY_BACK:
        img.barrier()  # the exit's acquire (by some threads) before every thread's reads
        if ok:  # after a failure the caller's tensor is left as it was (one program: _leave's answer)
            _copy_all(user, src, N, BLOCK, L)


@proto.kernel
def gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst,
    piece, dst_numel, src_stride, piece_index, dst_stride, first_rank, user, user_numel, staged,
    RANKS: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
):  # fmt: skip
    """For ranks r = first_rank, first_rank + 1, ... (RANKS of them, mod W): dst[r * dst_stride + i]
    = rank r's src[r * src_stride + piece_index * piece + i], for i < piece and r * dst_stride + i < dst_numel;
    ``staged``: copy ``user`` into ``src`` first, in this one program (see _triton_kernels)."""
    L: gl.constexpr = proto.tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    _stage_in(src, user, user_numel, staged, BLOCK, L)
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    offset = piece_index.to(gl.int64) * piece  # as reduce_kernel's start: the same specialization on every rank
    t = gl.program_id(0)
    while go & (t < gl.cdiv(piece, BLOCK)):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        tile = tr.record_start(_TILE, ctx.rank, 0)
        for j in gl.static_range(RANKS):
            r = (first_rank + j) % ctx.world_size
            r64 = r.to(gl.int64)  # r * stride may pass what int32 holds
            mask = (offs < piece) & (r64 * dst_stride + offs < dst_numel)
            h = tr.record_start(_REMOTE_LOAD, r, _bytes(mask, dst) if TRACE else 0)
            v = ctx.load(src + r64 * src_stride + offset + offs, r, mask=mask)
            tr.record_end(h)
            gl.store(dst + r64 * dst_stride + offs, v, mask=mask)
        tr.record_end(tile)
        t += gl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@gluon.jit
def _store(ctx, tr, where, v, to, mask, nbytes):
    """``v`` into rank ``to``'s copy at ``where``, recorded as a "remote store" (``Config(trace=True)``)."""
    h = tr.record_start(_REMOTE_STORE, to, nbytes)
    ctx.store(where, v, to, mask=mask)
    tr.record_end(h)


@proto.kernel
def push_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst, n, chunk_index, dst_numel, src_rank,
    W: gl.constexpr, MODE: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr, SCOPE: gl.constexpr,
    TRACE: gl.constexpr,
):  # fmt: skip
    """This rank's piece, read once, stored into every rank's dst at [chunk_index * n, + n), by
    ``MODE`` (``call.Push``: ``SAME``, ``CHUNKS``, ``RELAY``; see _triton_kernels)."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    L: gl.constexpr = proto.tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    offset = chunk_index.to(gl.int64) * n  # as reduce_kernel's start: the same specialization on every rank
    t = gl.program_id(0)
    while go & (t < gl.cdiv(n, BLOCK)):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        mask = offs < n
        if MODE == _RELAY:
            mask = mask & (offset + offs < dst_numel)
        nbytes = _bytes(mask, dst) if TRACE else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        if MODE == _RELAY:
            h = tr.record_start(_REMOTE_LOAD, src_rank, nbytes)
            v = ctx.load(src + offset + offs, src_rank, mask=mask)
            tr.record_end(h)
        elif MODE == _SAME:
            v = gl.load(src + offs, mask=mask)
        for j in gl.static_range(W):
            to = (ctx.rank + j) % W
            if MODE == _CHUNKS:  # chunk `to` of the input, for rank `to` alone
                v = gl.load(src + to.to(gl.int64) * n + offs, mask=mask)
            if MODE != _RELAY:
                _store(ctx, tr, dst + offset + offs, v, to, mask, nbytes)
            elif to != src_rank:  # the root's copy is the source
                _store(ctx, tr, dst + offset + offs, v, to, mask, nbytes)
        tr.record_end(tile)
        t += gl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@gluon.jit
def _push_slots(ctx, tr, src, slots, N, slot, parity, W: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr):
    """This rank's ``src`` into slot [parity][rank] of every rank's push slots (see _triton_kernels)."""
    mine = slots + (parity * W + ctx.rank) * slot
    i = N * 0  # a while loop: triton 3.6's interpreter takes no argument as a range bound here
    while i < N:
        offs = i + gl.arange(0, BLOCK, layout=L)
        mask = offs < N
        nbytes = _bytes(mask, src) if tr.enabled else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        v = gl.load(src + offs, mask=mask)
        for j in gl.static_range(1, W + 1):
            _store(ctx, tr, mine + offs, v, (ctx.rank + j) % W, mask, nbytes)
        tr.record_end(tile)
        i += BLOCK


@gluon.jit
def _reduce_slots(ctx, dst, slots, N, slot, parity, W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr,
                  IS_FLOAT: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr):  # fmt: skip
    """``dst`` = ``op`` over this rank's slots [parity][0..W-1], in rank order (see _triton_kernels)."""
    base = slots + parity * W * slot
    i = N * 0
    while i < N:
        offs = i + gl.arange(0, BLOCK, layout=L)
        mask = offs < N
        acc = gl.load(base + offs, mask=mask, volatile=True)
        if ACC_F32:
            acc = acc.to(gl.float32)
        for r in gl.static_range(1, W):
            v = gl.load(base + r * slot + offs, mask=mask, volatile=True)
            if ACC_F32:
                v = v.to(gl.float32)
            acc = proto.combine(acc, v, OP, IS_FLOAT)
        gl.store(dst + offs, proto.cast_out(_average(ctx, acc, OP), dst.dtype.element_ty), mask=mask)
        i += BLOCK


@proto.kernel
def push_reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst, slots, N, slot, verified,
    W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr, IS_FLOAT: gl.constexpr, FLAGS: gl.constexpr,
    BLOCK: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
):  # fmt: skip
    """The pushing one-shot all_reduce, one program (see _triton_kernels): stores into every rank's
    push slots before the entry once ``verified``, after it and before an exit otherwise."""
    L: gl.constexpr = proto.tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    epoch = gl.load(proto.state(sync, FLAGS) + 1) + 1
    parity = (epoch % 2).to(gl.int64)
    if (verified != 0) & mops.healthy(context_ptr):  # (a rank in error does not arrive: nothing to push)
        _push_slots(ctx, tr, src, slots, N, slot, parity, W, BLOCK, L)
    img.barrier()  # every thread's stores are done before the arrival releases them
    epoch, go = proto.enter(ctx, tr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE)
    if verified != 0:
        img.barrier()  # the entry's acquire (by some threads) before every thread's reads
        if go:
            _reduce_slots(ctx, dst, slots, N, slot, parity, W, OP, ACC_F32, IS_FLOAT, BLOCK, L)
        proto.complete(ctx, sync, epoch, go, FLAGS, SCOPE)
    else:
        if go:
            _push_slots(ctx, tr, src, slots, N, slot, parity, W, BLOCK, L)
        ok = proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)
        img.barrier()  # the exit's acquire (by some threads) before every thread's reads
        if ok:  # after a failure the caller's tensor is left as it was
            _reduce_slots(ctx, dst, slots, N, slot, parity, W, OP, ACC_F32, IS_FLOAT, BLOCK, L)

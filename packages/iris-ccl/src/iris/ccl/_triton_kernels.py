"""The collectives' kernels, in Triton over ``iris.mem.triton``.

Every kernel meets its peers through the device half of the protocol (``iris.ccl.protocol_triton``:
``begin`` before it touches a peer, ``finish`` after), so back-to-back collectives need no host
barrier and a launch replayed from a CUDA graph synchronizes as a fresh one does.

``iris.ccl._gluon_kernels`` has the same kernels with the same signatures in Gluon. On CPU ranks
each launched kernel (``@proto.kernel``) is marked ``@imt.interpret()`` (as the Gluon ones are
``@img.interpret()``), so its launches run inside that scope (which patches Triton's interpreter
once per launch).
"""

import triton
import triton.language as tl

from iris.heap.tracing import EVENTS
from iris.mem.triton import Context, Tracing
from iris.mem.triton import ops as mops

from . import protocol
from . import protocol_triton as proto
from .call import Push

__all__ = ["barrier_kernel", "reduce_kernel", "gather_kernel", "push_kernel", "push_reduce_kernel"]

_AVG = tl.constexpr(protocol.REDUCE_OPS["avg"])
# Config(trace=True): the phases every kernel records (iris.heap.tracing.EVENTS), per tile.
_TILE = tl.constexpr(EVENTS["tile"])
_REMOTE_LOAD = tl.constexpr(EVENTS["remote load"])
_REMOTE_STORE = tl.constexpr(EVENTS["remote store"])
# push_kernel's MODEs (iris.ccl.call.Push).
_SAME = tl.constexpr(Push.SAME)
_CHUNKS = tl.constexpr(Push.CHUNKS)
_RELAY = tl.constexpr(Push.RELAY)


@triton.jit
def _bytes(mask, ptr):
    """Bytes that a masked access of ``ptr``'s element type moves (an event's payload)."""
    return tl.sum(mask.to(tl.int64), axis=0) * (ptr.dtype.element_ty.primitive_bitwidth // 8)


@triton.jit
def _reduce_tile(ctx, tr, src, mask, W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr,
                 IS_FLOAT: tl.constexpr):  # fmt: skip
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
        acc = acc.to(tl.float32)
    for r in tl.static_range(1, W):
        h = tr.record_start(_REMOTE_LOAD, r, nbytes)
        v = ctx.load(src, r, mask=mask)
        tr.record_end(h)
        if ACC_F32:
            v = v.to(tl.float32)
        acc = proto.combine(acc, v, OP, IS_FLOAT)
    return _average(ctx, acc, OP)


@triton.jit
def _average(ctx, acc, OP: tl.constexpr):
    """``acc`` over the world size where ``OP`` is avg (IEEE-rounded, as torch divides)."""
    if OP == _AVG:
        if acc.dtype == tl.float64:
            acc = acc / ctx.world_size.to(tl.float64)  # fp64 division is IEEE-rounded already
        else:
            acc = tl.div_rn(acc, ctx.world_size.to(acc.dtype))
    return acc


@triton.jit
def _copy_all(dst, src, N, BLOCK: tl.constexpr):
    """``dst[i] = src[i]`` for every ``i < N``, by this one program (a staged call's copy in or out).
    The loads are volatile: peers' pushes into this rank's staging are read from memory, not from a
    cache line an earlier read of the launch left."""
    i = N * 0  # a while loop: triton 3.6's interpreter takes no argument as a range bound here
    while i < N:
        offs = i + tl.arange(0, BLOCK)
        mask = offs < N
        tl.store(dst + offs, tl.load(src + offs, mask=mask, volatile=True), mask=mask)
        i += BLOCK


@triton.jit
def _stage_in(staging, user, n, staged, BLOCK: tl.constexpr):
    """A staged launch (``staged`` not 0, one program): ``user`` (a tensor off the heap) into this rank's
    ``staging`` before the entry publishes it. The staging is this rank's own until then: the last
    call's exit saw every peer done with it."""
    if staged != 0:
        _copy_all(staging, user, n, BLOCK)
        tl.debug_barrier()  # every thread's part is written before program 0's release publishes it


@proto.kernel
def barrier_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr
):
    """One program: every rank arrives (and agrees that this is a barrier); no exit needed."""
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    proto.complete(ctx, sync, epoch, go, FLAGS, SCOPE)


@proto.kernel
def reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst, N, chunk_index, chunk, user, staged,
    PUSH: tl.constexpr, DST_CHUNKED: tl.constexpr, COPY_BACK: tl.constexpr,
    W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr, IS_FLOAT: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr,
    SCOPE: tl.constexpr, TRACE: tl.constexpr,
):  # fmt: skip
    """Reduce elements [start, min(start + chunk, N)) of src over ranks (every rank's copy), where
    start = chunk_index * chunk.

    The result goes to ``dst`` at the elements' offset (``DST_CHUNKED``) or at 0; into every
    rank's copy of dst (``PUSH``: the two-shot all_reduce, where src and dst are the same tensor
    and no one but this rank touches its chunk) or only the local one (one_shot over every
    element, reduce_scatter and the reduce-scatter half of rs_ag over this rank's chunk).

    ``staged`` not 0 (``call.Staging``; a launch of one program, ``iris.ccl.call.FOLD_BYTES``):
    ``src`` is the staging of ``user``, a tensor off the heap, copied in here before the entry
    publishes it; ``COPY_BACK``: also copied back into ``user`` after the exit (the two-shot, whose
    result lands in every rank's staging). Otherwise ``user`` is not touched. ``staged`` is a
    runtime branch before the tile loop, which leaves the loop's registers as they were;
    ``COPY_BACK`` stays a constexpr: as a runtime branch, the copy after the loop would keep
    ``user`` and the exit's answer live across it (on sm_90 the two-shot's fp32 kernel needs 78
    registers then, against 64, one program fewer per multiprocessor).
    """
    _stage_in(src, user, N, staged, BLOCK)
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    # The chunk's first element, from its index: rank r's start (r * chunk) is then known to be a
    # multiple of 16 wherever chunk is, so every rank runs the same specialization; int64, as
    # chunk_index * chunk may pass what int32 holds where N does not (the last ranks' empty chunks).
    start = chunk_index.to(tl.int64) * chunk
    t = tl.program_id(0)
    while go & (t < tl.cdiv(chunk, BLOCK)):
        local = t * BLOCK + tl.arange(0, BLOCK)
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
            for j in tl.static_range(W):
                to = (ctx.rank + j) % W
                h = tr.record_start(_REMOTE_STORE, to, nbytes)
                ctx.store(where, out, to, mask=mask)
                tr.record_end(h)
        else:
            tl.store(where, out, mask=mask)
        tr.record_end(tile)
        t += tl.num_programs(0)
    ok = proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)
    if COPY_BACK:
        tl.debug_barrier()  # the exit's acquire (by some threads) before every thread's reads
        if ok:  # after a failure the caller's tensor is left as it was (one program: _leave's answer)
            _copy_all(user, src, N, BLOCK)


@proto.kernel
def gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst,
    piece, dst_numel, src_stride, piece_index, dst_stride, first_rank, user, user_numel, staged,
    RANKS: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr,
):  # fmt: skip
    """For ranks r = first_rank, first_rank + 1, ... (RANKS of them, mod W; unrolled, so their
    loads overlap): dst[r * dst_stride + i] = rank r's src[r * src_stride + piece_index * piece + i], for
    i < piece and r * dst_stride + i < dst_numel (all_gather by pulls, all_to_all, broadcast and
    the all-gather half of rs_ag).

    ``staged`` (one program): ``src`` is the staging of ``user`` (``user_numel`` elements, a tensor
    off the heap), copied in here before the entry publishes it.
    """
    _stage_in(src, user, user_numel, staged, BLOCK)
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    offset = piece_index.to(tl.int64) * piece  # as reduce_kernel's start: the same specialization on every rank
    t = tl.program_id(0)
    while go & (t < tl.cdiv(piece, BLOCK)):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        tile = tr.record_start(_TILE, ctx.rank, 0)
        for j in tl.static_range(RANKS):
            r = (first_rank + j) % ctx.world_size
            r64 = r.to(tl.int64)  # r * stride may pass what int32 holds
            mask = (offs < piece) & (r64 * dst_stride + offs < dst_numel)
            h = tr.record_start(_REMOTE_LOAD, r, _bytes(mask, dst) if TRACE else 0)
            v = ctx.load(src + r64 * src_stride + offset + offs, r, mask=mask)
            tr.record_end(h)
            tl.store(dst + r64 * dst_stride + offs, v, mask=mask)
        tr.record_end(tile)
        t += tl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@triton.jit
def _store(ctx, tr, where, v, to, mask, nbytes):
    """``v`` into rank ``to``'s copy at ``where``, recorded as a "remote store" (``Config(trace=True)``)."""
    h = tr.record_start(_REMOTE_STORE, to, nbytes)
    ctx.store(where, v, to, mask=mask)
    tr.record_end(h)


@proto.kernel
def push_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst, n, chunk_index, dst_numel, src_rank,
    W: tl.constexpr, MODE: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr, SCOPE: tl.constexpr,
    TRACE: tl.constexpr,
):  # fmt: skip
    """This rank's piece, read once, stored into every rank's dst at [chunk_index * n, + n), by
    ``MODE`` (``call.Push``):

    - ``SAME`` (all_gather into heap outputs): every rank's piece is this rank's src[i], i < n;
    - ``CHUNKS`` (all_to_all into heap outputs): rank ``to``'s piece is this rank's
      src[to * n + i] (chunk ``to`` of the input, read locally once);
    - ``RELAY`` (broadcast of heap tensors): piece ``chunk_index`` of rank ``src_rank``'s src,
      read from it once, stored into every rank but ``src_rank`` (whose copy it is), for
      chunk_index * n + i < dst_numel. Every rank relays its own piece, so the root's tensor is
      read once in all and each other copy written once.
    """
    ctx, tr, epoch, go = proto.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE, TRACE)
    offset = chunk_index.to(tl.int64) * n  # as reduce_kernel's start: the same specialization on every rank
    t = tl.program_id(0)
    while go & (t < tl.cdiv(n, BLOCK)):
        offs = t * BLOCK + tl.arange(0, BLOCK)
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
            v = tl.load(src + offs, mask=mask)
        for j in tl.static_range(W):
            to = (ctx.rank + j) % W
            if MODE == _CHUNKS:  # chunk `to` of the input, for rank `to` alone
                v = tl.load(src + to.to(tl.int64) * n + offs, mask=mask)
            if MODE != _RELAY:
                _store(ctx, tr, dst + offset + offs, v, to, mask, nbytes)
            elif to != src_rank:  # the root's copy is the source
                _store(ctx, tr, dst + offset + offs, v, to, mask, nbytes)
        tr.record_end(tile)
        t += tl.num_programs(0)
    proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@triton.jit
def _push_slots(ctx, tr, src, slots, N, slot, parity, W: tl.constexpr, BLOCK: tl.constexpr):
    """This rank's ``src`` (N elements, read here once) into slot [parity][rank] of every rank's push
    slots (this rank's own first: the next rank's, ..., its own last)."""
    mine = slots + (parity * W + ctx.rank) * slot
    i = N * 0  # a while loop: triton 3.6's interpreter takes no argument as a range bound here
    while i < N:
        offs = i + tl.arange(0, BLOCK)
        mask = offs < N
        nbytes = _bytes(mask, src) if tr.enabled else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        v = tl.load(src + offs, mask=mask)
        for j in tl.static_range(1, W + 1):
            _store(ctx, tr, mine + offs, v, (ctx.rank + j) % W, mask, nbytes)
        tr.record_end(tile)
        i += BLOCK


@triton.jit
def _reduce_slots(ctx, dst, slots, N, slot, parity, W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr,
                  IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """``dst`` = ``op`` over slots [parity][0..W-1] of this rank's push slots, in rank order (volatile
    loads: peers wrote them, so no cache line of an earlier launch may answer)."""
    base = slots + parity * W * slot
    i = N * 0
    while i < N:
        offs = i + tl.arange(0, BLOCK)
        mask = offs < N
        acc = tl.load(base + offs, mask=mask, volatile=True)
        if ACC_F32:
            acc = acc.to(tl.float32)
        for r in tl.static_range(1, W):
            v = tl.load(base + r * slot + offs, mask=mask, volatile=True)
            if ACC_F32:
                v = v.to(tl.float32)
            acc = proto.combine(acc, v, OP, IS_FLOAT)
        tl.store(dst + offs, proto.cast_out(_average(ctx, acc, OP), dst.dtype.element_ty), mask=mask)
        i += BLOCK


@proto.kernel
def push_reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, src, dst, slots, N, slot, verified,
    W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr, IS_FLOAT: tl.constexpr, FLAGS: tl.constexpr,
    BLOCK: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr,
):  # fmt: skip
    """The pushing one-shot all_reduce, one program, N <= ``slot`` elements: every rank stores its
    ``src`` into slot [epoch parity][rank] of every rank's ``slots`` (the workspace's push slots,
    ``slot`` elements each) and reduces its own slots, in rank order, into ``dst`` (which may be
    ``src``). Peers touch only the slots, never the caller's tensors, so ``src`` and ``dst`` may lie
    anywhere on the device.

    ``verified`` (not 0 once a call on these slots has been launched since the collectives were set
    up: its entry compared every rank's slots' offset, and they never move until ``reset()``): the
    stores go out before the entry, whose arrival releases them, so the call meets its peers once
    and has no exit. Parity p's slots are written at epoch e only after the writer completed e - 1,
    which needed every rank's arrival at e - 1, so no rank still reads them (it read parity p at
    e - 2 at the latest). With ``verified`` 0 (the first call) the entry comes first, then the
    stores, then the exit, which releases them, and then the reduction.
    """
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    epoch = tl.load(proto.state(sync, FLAGS) + 1) + 1
    parity = (epoch % 2).to(tl.int64)
    if (verified != 0) & mops.healthy(context_ptr):  # (a rank in error does not arrive: nothing to push)
        _push_slots(ctx, tr, src, slots, N, slot, parity, W, BLOCK)
    tl.debug_barrier()  # every thread's stores are done before the arrival releases them
    epoch, go = proto.enter(ctx, tr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE, FLAGS, SCOPE)
    if verified != 0:
        tl.debug_barrier()  # the entry's acquire (by some threads) before every thread's reads
        if go:
            _reduce_slots(ctx, dst, slots, N, slot, parity, W, OP, ACC_F32, IS_FLOAT, BLOCK)
        proto.complete(ctx, sync, epoch, go, FLAGS, SCOPE)
    else:
        if go:
            _push_slots(ctx, tr, src, slots, N, slot, parity, W, BLOCK)
        ok = proto.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)
        tl.debug_barrier()  # the exit's acquire (by some threads) before every thread's reads
        if ok:  # after a failure the caller's tensor is left as it was
            _reduce_slots(ctx, dst, slots, N, slot, parity, W, OP, ACC_F32, IS_FLOAT, BLOCK)

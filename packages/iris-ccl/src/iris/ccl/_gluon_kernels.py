"""The collectives' kernels, in Gluon over ``iris.mem.gluon``.

The same kernels, signatures and synchronization as ``iris.ccl._triton_kernels`` (read its
docstring for the entry/exit protocol: the epoch lives on the device, epochs only grow, flags are
never cleared, and no program waits on a later program of its own launch, so CPU ranks run them
too).

Layouts are explicit in Gluon: every tile is a 1-D ``BlockedLayout`` built inside the kernel from
``BLOCK``, the launch's ``num_warps`` (``gl.num_warps()``) and the compile target's warp size
(32 on NVIDIA, 64 on AMD CDNA), one 16-byte vector of the element type per thread and repetition.

On CPU ranks the kernels run through ``iris.mem.gluon.interpret``: each launched kernel is marked
``@img.interpret()``, so its launches (whoever makes them) enter that scope; importing
``iris.mem.gluon`` alone changes nothing in Gluon.
"""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
from iris.heap import context as abi
from iris.heap.tracing import EVENTS
from iris.mem.gluon import Context, Tracing
from iris.mem.gluon import ops as mops

from . import _internals, protocol

__all__ = ["barrier_kernel", "reduce_kernel", "gather_kernel", "push_kernel"]

#: Bytes one thread moves per vector access (as ``iris.mem.gluon.blocked_layout``).
_VECTOR_BYTES = 16
_TIMEOUT = gl.constexpr(abi.ERROR_COLLECTIVE_TIMEOUT)
_MISMATCH = gl.constexpr(abi.ERROR_COLLECTIVE_MISMATCH)
_ABANDONED = gl.constexpr(abi.ERROR_COLLECTIVE_ABANDONED)
_NEVER = gl.constexpr(-(2**62))  # a value no flag ever holds: a CAS expecting it changes nothing
DESC_SLOTS = gl.constexpr(protocol.DESC_SLOTS)  # code's low and high halves, numel, offset a, offset b
_TAG = gl.constexpr(1 << protocol.TAG_BITS)  # a published word is payload * _TAG + the epoch's low bits
_TAG_BITS = gl.constexpr(protocol.TAG_BITS)
_FIELDS = gl.constexpr(protocol.DESC_WORDS)  # code, numel, offset a, offset b: what a mismatch names
_ENTRY_GROUPS = gl.constexpr(8)  # the entry's lanes, in FLAGS-wide groups: a power of two >= 2 + DESC_SLOTS
_EXIT_GROUPS = gl.constexpr(2)  # the exit's: its flags and the abandon flags
_MAX = gl.constexpr(protocol.REDUCE_OPS["max"])  # the OP constexpr's codes; anything else sums
_MIN = gl.constexpr(protocol.REDUCE_OPS["min"])
_AVG = gl.constexpr(protocol.REDUCE_OPS["avg"])
# Config(trace=True): the phases every kernel records (iris.heap.tracing.EVENTS), per program.
_ENTRY_WAIT = gl.constexpr(EVENTS["entry wait"])
_TILE = gl.constexpr(EVENTS["tile"])
_REMOTE_LOAD = gl.constexpr(EVENTS["remote load"])
_REMOTE_STORE = gl.constexpr(EVENTS["remote store"])
_EXIT_WAIT = gl.constexpr(EVENTS["exit wait"])


@_internals.target_builtin
def _tile_layout(block, num_warps, dtype, warp_size):
    """The 1-D layout of a ``block``-element tile of ``dtype`` over ``num_warps`` warps.

    Compiled: the compile target's warp size. On CPU ranks (``warp_size`` None) layouts are
    dropped, so any valid one serves.
    """
    threads = warp_size if warp_size is not None else img.warp_size()
    size = max(1, dtype.primitive_bitwidth // 8)
    per_thread = max(1, min(_VECTOR_BYTES // size, block // (threads * num_warps)))
    return gl.BlockedLayout(
        size_per_thread=[per_thread], threads_per_warp=[threads], warps_per_cta=[num_warps], order=[0]
    )


# -- the sync block (iris.ccl.workspace) and the protocol (iris.ccl.protocol), as in _triton_kernels --


@gluon.jit
def _entry(sync, FLAGS: gl.constexpr):
    return sync


@gluon.jit
def _exit(sync, FLAGS: gl.constexpr):
    return sync + FLAGS


@gluon.jit
def _abandon(sync, FLAGS: gl.constexpr):
    return sync + 2 * FLAGS


@gluon.jit
def _desc(sync, epoch, FLAGS: gl.constexpr):
    """The descriptions of the call at ``epoch`` (slot k of rank r at ``[k * FLAGS + r]``): two
    sets, by the epoch's parity (see _triton_kernels)."""
    return sync + 3 * FLAGS + (epoch % 2) * (DESC_SLOTS * FLAGS)


@gluon.jit
def _state(sync, FLAGS: gl.constexpr):
    return sync + (3 + 2 * DESC_SLOTS) * FLAGS


@gluon.jit
def _index(FLAGS: gl.constexpr):
    L: gl.constexpr = _tile_layout(FLAGS, gl.num_warps(), gl.int32)
    return gl.arange(0, FLAGS, layout=L)


@gluon.jit
def _groups(ctx, GROUPS: gl.constexpr, FLAGS: gl.constexpr):
    """``GROUPS`` groups of FLAGS lanes (FLAGS: a power of two >= the world size), one lane per
    rank in each: (lane index, group, rank, whether the lane stands for a rank of its own). Lanes
    past the world repeat the last rank (an exchange of the same value, or a second look at the
    same flag)."""
    i = _index(GROUPS * FLAGS)
    return i, i // FLAGS, gl.minimum(i % FLAGS, ctx.world_size - 1), (i % FLAGS) < ctx.world_size


@gluon.jit
def _slot(k, epoch, code, numel, off_a, off_b):
    """The published word of a description's slot ``k`` at ``epoch`` (see _triton_kernels)."""
    c = code.to(gl.int64)
    a, b, n = off_a.to(gl.int64), off_b.to(gl.int64), numel.to(gl.int64)
    payload = gl.where(
        k == 0, c & ((1 << 30) - 1), gl.where(k == 1, c >> 30, gl.where(k == 2, n, gl.where(k == 3, a, b)))
    )
    return payload * _TAG + epoch % _TAG


@gluon.jit
def _any(cond):
    return gl.max(cond.to(gl.int32), axis=0) != 0


@gluon.jit
def _first(cond, values, N: gl.constexpr):
    """``values`` (int64) at the first of the ``N`` lanes where ``cond`` holds."""
    i = _index(N)
    lane = gl.min(gl.where(cond, i, N), axis=0)
    return gl.max(gl.where(i == lane, values.to(gl.int64), _NEVER), axis=0)


@gluon.jit
def _offset(ctx, ptr):
    """The local heap offset of ``ptr`` (for error records)."""
    return ptr.to(gl.int64, bitcast=True) - gl.load(ctx.heap_bases + ctx.rank)


@gluon.jit
def _poll(ctx, ptrs, SCOPE: gl.constexpr):
    """Acquire reads of local flags (a block), all at once."""
    return ctx.atomic_add(ptrs, 0, ctx.rank, sem="acquire", scope=SCOPE)


@gluon.jit
def _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, FLAGS: gl.constexpr, SCOPE: gl.constexpr,
            GROUPS: gl.constexpr):  # fmt: skip
    """Write ``epoch`` into ``flags[rank]`` of every rank (a release exchange per lane), with
    ``GROUPS`` > 1 (the entry) this rank's tagged description too, in the same exchange; False,
    with ERROR_COLLECTIVE_ABANDONED recorded, if a peer had marked this rank's flag (it gave up)."""
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = gl.minimum(g - 1, DESC_SLOTS - 1)  # lanes past the last slot repeat it
    is_flag = g == 0
    ptrs = gl.where(is_flag, flags + ctx.rank + r * 0, _desc(sync, epoch, FLAGS) + k * FLAGS + ctx.rank)
    old = ctx.atomic_xchg(ptrs, gl.where(is_flag, epoch + k * 0, _slot(k, epoch, code, numel, off_a, off_b)), r,
                          sem="release", scope=SCOPE)  # fmt: skip
    marked = is_flag & real & (old < 0)
    ok = _any(marked) == 0
    if ok == 0:
        peer = _first(marked, r, GROUPS * FLAGS)
        mops.record_error(
            ctx.context_ptr, _ABANDONED, _offset(ctx, flags + ctx.rank), -_first(marked, old, GROUPS * FLAGS), peer, -1
        )
    return ok


@gluon.jit
def _give_up(ctx, sync, epoch, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """Tell every rank that this rank stopped this collective (its ``abandon`` flag)."""
    _, _, r, _ = _groups(ctx, 1, FLAGS)
    ctx.atomic_xchg(_abandon(sync, FLAGS) + ctx.rank + r * 0, epoch, r, sem="release", scope=SCOPE)


@gluon.jit
def _look(got, epoch, g, real):
    """(every rank arrived, some peer gave up) from one poll, with one reduction (see _triton_kernels)."""
    stale = real & ((got & (_TAG - 1)) != epoch % _TAG)
    bad = gl.where(g == 0, (got < epoch).to(gl.int32), gl.where(g == 1, (real & (got != 0)).to(gl.int32) << 20,
                                                                  stale.to(gl.int32)))  # fmt: skip
    total = gl.sum(bad, axis=0)
    return (total & ((1 << 20) - 1)) == 0, total >= (1 << 20)


@gluon.jit
def _await(ctx, flags, sync, epoch, FLAGS: gl.constexpr, SCOPE: gl.constexpr, GROUPS: gl.constexpr):
    """Bounded wait until every rank's local ``flags[r]`` has reached ``epoch`` (at the entry, with
    every rank's description): (they did, a peer gave up, the last poll). See _triton_kernels."""
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = gl.minimum(gl.maximum(g - 2, 0), DESC_SLOTS - 1)  # lanes past the last slot repeat it
    ptrs = gl.where(
        g == 0, flags + r, gl.where(g == 1, _abandon(sync, FLAGS) + r, _desc(sync, epoch, FLAGS) + k * FLAGS + r)
    )
    got = _poll(ctx, ptrs, SCOPE)
    done, quit = _look(got, epoch, g, real)
    if (done == 0) & (quit == 0):  # not there yet: wait, with the clock running
        timeout = mops.wait_timeout_ns(ctx.context_ptr)
        start = mops.clock_ns()
        waited = start * 0  # -1 once this rank's context holds an error (elapsed_ns)
        EVERY: gl.constexpr = mops.polls_per_clock()
        polls = 0
        # Every value the loop branches on is the same on every thread (the poll is an atomic,
        # elapsed_ns agrees, the poll count is shared), so the program's warps leave it at the same
        # poll. The clock is read every EVERY polls (iris.mem.common.POLLS_PER_CLOCK; CPU ranks: every poll).
        while (done == 0) & (quit == 0) & (waited >= 0) & (waited < timeout):
            got = _poll(ctx, ptrs, SCOPE)
            done, quit = _look(got, epoch, g, real)
            polls += 1
            if polls % EVERY == 0:
                waited = mops.elapsed_ns(ctx.context_ptr, start)
        if (done == 0) & (waited >= 0) & (quit == 0):  # the deadline: give up on the missing ranks
            missing = (g == 0) & real & (got < epoch)
            old = ctx.atomic_cas(ptrs, gl.where(missing, got, _NEVER), gl.where(missing, got * 0 - epoch, _NEVER), ctx.rank,
                                 sem="acq_rel", scope=SCOPE)  # fmt: skip
            late = missing & (old < epoch)  # still missing (or already marked by another program)
            if _any(late):
                peer = _first(late, r, GROUPS * FLAGS)
                mops.record_error(ctx.context_ptr, _TIMEOUT, _offset(ctx, flags + peer), epoch, peer, waited)
            done = _any(late) == 0  # every missing rank arrived just before the mark
            if done:  # their descriptions, for _agree (a word still untagged there counts as a difference)
                got = _poll(ctx, ptrs, SCOPE)
    if quit & (done == 0):  # a peer gave up while this rank waited: stop too, naming it and the first rank missing
        peer = _first((g == 1) & real & (got != 0), r, GROUPS * FLAGS)
        missing = (g == 0) & real & (got < epoch)
        first_missing = gl.where(_any(missing), _first(missing, r, GROUPS * FLAGS), -1)
        mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, flags + gl.maximum(first_missing, 0)), epoch, peer,
                          first_missing)  # fmt: skip
    if gl.num_programs(0) > 1:  # another program of the launch may have given up meanwhile
        done = done & mops.healthy(ctx.context_ptr)
    return done, quit, got


@gluon.jit
def _abandoned(ctx, flags, sync, epoch, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """Every rank arrived, but a peer gave up (its abandon flag): record it, naming that peer."""
    _, _, r, real = _groups(ctx, 1, FLAGS)
    gave = real & (_poll(ctx, _abandon(sync, FLAGS) + r, SCOPE) != 0)
    peer = _first(gave, r, FLAGS)
    mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, _abandon(sync, FLAGS) + peer), epoch, peer, -1)


@gluon.jit
def _agree(ctx, got, epoch, code, numel, off_a, off_b, FLAGS: gl.constexpr, GROUPS: gl.constexpr):
    """Whether every rank published this rank's description of the call (see _triton_kernels)."""
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = gl.minimum(gl.maximum(g - 2, 0), DESC_SLOTS - 1)
    on = (g >= 2) & real
    differs = on & (got != _slot(k, epoch, code, numel, off_a, off_b))
    ok = _any(differs) == 0
    if ok == 0:
        peer = gl.min(gl.where(differs, r, FLAGS), axis=0)
        field = gl.min(gl.where(differs & (r == peer), gl.maximum(k - 1, 0), _FIELDS), axis=0)  # slots 0, 1: CODE
        theirs = got >> _TAG_BITS
        at = on & (r == peer)
        lo = _first(at & (k == 0), theirs, GROUPS * FLAGS)
        hi = _first(at & (k == 1), theirs, GROUPS * FLAGS)
        other = _first(at & (k == field + 1), theirs, GROUPS * FLAGS)
        ours = gl.where(field == 0, code.to(gl.int64), gl.where(field == 1, numel.to(gl.int64),
                        gl.where(field == 2, off_a.to(gl.int64), off_b.to(gl.int64))))  # fmt: skip
        mops.record_error(
            ctx.context_ptr, _MISMATCH, field, ours, peer, gl.where(field == 0, hi * (1 << 30) + lo, other)
        )
    return ok


@gluon.jit
def _meet(
    ctx,
    flags,
    sync,
    epoch,
    arrive,
    code,
    numel,
    off_a,
    off_b,
    FLAGS: gl.constexpr,
    SCOPE: gl.constexpr,
    GROUPS: gl.constexpr,
):
    """Raise this rank's ``flags`` entry everywhere (when ``arrive``), then wait for every rank's;
    at the entry (``GROUPS`` = _ENTRY_GROUPS) the description travels with the flag and every
    rank's is compared with this one's (see _triton_kernels)."""
    go = epoch == epoch
    if arrive:
        if GROUPS > _EXIT_GROUPS:
            go = _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, FLAGS, SCOPE, GROUPS)
        else:
            go = _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, FLAGS, SCOPE, 1)
    if go:
        go, quit, got = _await(ctx, flags, sync, epoch, FLAGS, SCOPE, GROUPS)
        if GROUPS > _EXIT_GROUPS:
            if go:
                go = _agree(ctx, got, epoch, code, numel, off_a, off_b, FLAGS, GROUPS)
        if go & quit:
            _abandoned(ctx, flags, sync, epoch, FLAGS, SCOPE)
        go = go & (quit == 0)
    return go


@gluon.jit
def _enter(ctx, sync, code, numel, off_a, off_b, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """(epoch, go): this collective's epoch, and whether this program may touch peers' memory."""
    epoch = gl.load(_state(sync, FLAGS) + 1) + 1
    go = mops.healthy(ctx.context_ptr)
    if go:
        go = _meet(
            ctx, _entry(sync, FLAGS), sync, epoch, gl.program_id(0) == 0, code, numel, off_a, off_b, FLAGS, SCOPE,
            _ENTRY_GROUPS,
        )  # fmt: skip
    return epoch, go


@gluon.jit
def _leave(ctx, sync, epoch, go, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """Exit (see _triton_kernels): the last program raises this rank's exit flag everywhere and
    waits for every rank's; a rank in error skips it and tells the peers it gave up. Returns
    whether the exit completed; a launch of one program neither counts nor reads its health."""
    state = _state(sync, FLAGS)
    img.barrier()  # every thread's stores are done before this program's release
    ok = go
    done = 1
    if gl.num_programs(0) > 1:
        done = ctx.atomic_add(state, 1, ctx.rank, sem="acq_rel", scope=SCOPE).to(gl.int32) + 1
    if done == gl.num_programs(0):  # the last program of the launch: every other one has counted itself
        if gl.num_programs(0) > 1:  # another program of the launch may have failed
            ok = mops.healthy(ctx.context_ptr)
        if ok:
            none = epoch * 0  # the exit compares no description
            ok = _meet(ctx, _exit(sync, FLAGS), sync, epoch, ok, none, none, none, none, FLAGS, SCOPE, _EXIT_GROUPS)
        if ok == 0:
            _give_up(ctx, sync, epoch, FLAGS, SCOPE)
        gl.store(state, epoch * 0)
        gl.store(state + 1, epoch)  # read by the next launch in stream order
    return ok


@gluon.jit
def _begin(context_ptr, sync, code, numel, off_a, off_b, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr):
    """Every kernel's start: ``(ctx, tr, epoch, go)``, the context, the tracing (``TRACE``) and
    ``_enter``'s answer, recorded as this program's "entry wait" when tracing."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    h = tr.record_start(_ENTRY_WAIT, ctx.rank, 0)
    epoch, go = _enter(ctx, sync, code, numel, off_a, off_b, FLAGS, SCOPE)
    tr.record_end(h)
    return ctx, tr, epoch, go


@gluon.jit
def _traced_leave(ctx, tr, sync, epoch, go, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """``_leave``, recorded as this program's "exit wait" when tracing."""
    h = tr.record_start(_EXIT_WAIT, ctx.rank, 0)
    ok = _leave(ctx, sync, epoch, go, FLAGS, SCOPE)
    tr.record_end(h)
    return ok


@gluon.jit
def _bytes(mask, ptr):
    """Bytes that a masked access of ``ptr``'s element type moves (an event's payload)."""
    return gl.sum(mask.to(gl.int64), axis=0) * (ptr.dtype.element_ty.primitive_bitwidth // 8)


@gluon.jit
def _combine(acc, v, OP: gl.constexpr, IS_FLOAT: gl.constexpr):
    if OP == _MAX:
        if IS_FLOAT:
            acc = gl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = gl.maximum(acc, v)
    elif OP == _MIN:
        if IS_FLOAT:
            acc = gl.minimum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = gl.minimum(acc, v)
    else:
        acc = acc + v
    return acc


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
        acc = _combine(acc, v, OP, IS_FLOAT)
    if OP == _AVG:
        if acc.dtype == gl.float64:
            acc = acc / ctx.world_size.to(gl.float64)  # fp64 division is IEEE-rounded already
        else:
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
def _copy_all(dst, src, N, BLOCK: gl.constexpr, L: gl.constexpr):
    """``dst[i] = src[i]`` for every ``i < N``, by this one program (see _triton_kernels)."""
    i = N * 0  # a while loop: triton 3.6's interpreter takes no argument as a range bound here
    while i < N:
        offs = i + gl.arange(0, BLOCK, layout=L)
        mask = offs < N
        gl.store(dst + offs, gl.load(src + offs, mask=mask, volatile=True), mask=mask)
        i += BLOCK


@gluon.jit
def _stage_in(staging, user, n, STAGED: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr):
    """A staged launch (``STAGED``, one program): ``user`` (a tensor off the heap) into this rank's
    ``staging`` before the entry publishes it. The staging is this rank's own until then: the last
    call's exit saw every peer done with it."""
    if STAGED:
        _copy_all(staging, user, n, BLOCK, L)
        img.barrier()  # every thread's part is written before program 0's release publishes it


_DESC = ["CODE", "NUMEL", "OFF_A", "OFF_B"]  # vary per call: never specialized on


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def barrier_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr
):
    """One program: every rank arrives (and agrees that this is a barrier); no exit needed."""
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    if go == 0:
        _give_up(ctx, sync, epoch, FLAGS, SCOPE)
    gl.store(_state(sync, FLAGS) + 1, epoch)


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, src, dst, N, start, chunk, user,
    PUSH: gl.constexpr, DST_CHUNKED: gl.constexpr,
    W: gl.constexpr, OP: gl.constexpr, ACC_F32: gl.constexpr, IS_FLOAT: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr,
    SCOPE: gl.constexpr, TRACE: gl.constexpr, STAGED: gl.constexpr,
):  # fmt: skip
    """Reduce elements [start, min(start + chunk, N)) of src over ranks; ``STAGED``: copy ``user``
    in before the entry (and back after the exit) in this one program (see _triton_kernels)."""
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    _stage_in(src, user, N, STAGED, BLOCK, L)
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    t = gl.program_id(0)
    while go & (t < gl.cdiv(chunk, BLOCK)):
        local = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        offs = start + local
        mask = (local < chunk) & (offs < N)
        nbytes = _bytes(mask, dst) if TRACE else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        out = _cast_out(_reduce_tile(ctx, tr, src + offs, mask, W, OP, ACC_F32, IS_FLOAT), dst.dtype.element_ty)
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
    ok = _traced_leave(ctx, tr, sync, epoch, go, FLAGS, SCOPE)
    if STAGED == 2:
        img.barrier()  # the exit's acquire (by some threads) before every thread's reads
        if ok:  # after a failure the caller's tensor is left as it was (one program: _leave's answer)
            _copy_all(user, src, N, BLOCK, L)


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, src, dst,
    piece, dst_numel, src_stride, src_offset, dst_stride, first_rank, user, user_numel,
    RANKS: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
    STAGED: gl.constexpr,
):  # fmt: skip
    """For ranks r = first_rank, first_rank + 1, ... (RANKS of them, mod W): dst[r * dst_stride + i]
    = rank r's src[r * src_stride + src_offset + i], for i < piece and r * dst_stride + i < dst_numel;
    ``STAGED``: copy ``user`` into ``src`` first, in this one program (see _triton_kernels)."""
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    _stage_in(src, user, user_numel, STAGED, BLOCK, L)
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    t = gl.program_id(0)
    while go & (t < gl.cdiv(piece, BLOCK)):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        tile = tr.record_start(_TILE, ctx.rank, 0)
        for j in gl.static_range(RANKS):
            r = (first_rank + j) % ctx.world_size
            mask = (offs < piece) & (r * dst_stride + offs < dst_numel)
            h = tr.record_start(_REMOTE_LOAD, r, _bytes(mask, dst) if TRACE else 0)
            v = ctx.load(src + r * src_stride + src_offset + offs, r, mask=mask)
            tr.record_end(h)
            gl.store(dst + r * dst_stride + offs, v, mask=mask)
        tr.record_end(tile)
        t += gl.num_programs(0)
    _traced_leave(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@img.interpret()
@gluon.jit(do_not_specialize=_DESC)
def push_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, src, dst, n, dst_offset,
    W: gl.constexpr, FLAGS: gl.constexpr, BLOCK: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr,
):  # fmt: skip
    """Every rank's dst[dst_offset + i] = this rank's src[i], for i < n (all_gather into heap
    outputs: each input read once, from local memory, and stored into all W ranks)."""
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    L: gl.constexpr = _tile_layout(BLOCK, gl.num_warps(), src.dtype.element_ty)
    t = gl.program_id(0)
    while go & (t < gl.cdiv(n, BLOCK)):
        offs = t * BLOCK + gl.arange(0, BLOCK, layout=L)
        mask = offs < n
        nbytes = _bytes(mask, dst) if TRACE else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        v = gl.load(src + offs, mask=mask)
        for j in gl.static_range(W):
            to = (ctx.rank + j) % W
            h = tr.record_start(_REMOTE_STORE, to, nbytes)
            ctx.store(dst + dst_offset + offs, v, to, mask=mask)
            tr.record_end(h)
        tr.record_end(tile)
        t += gl.num_programs(0)
    _traced_leave(ctx, tr, sync, epoch, go, FLAGS, SCOPE)

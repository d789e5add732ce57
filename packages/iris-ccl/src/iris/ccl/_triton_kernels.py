"""The collectives' kernels, in Triton over ``iris.mem.triton``.

Every launch synchronizes with the peers on the device, in stream order:

- entry: every program reads this collective's epoch, one past the last one this rank completed
  (``state[1]``); program 0 writes it into ``entry[rank]`` of every rank; every program waits
  (bounded) until every rank's epoch has arrived, so no peer's buffer is read or written before
  that peer reached the collective (its earlier stream work is done).
- exit: each program bumps ``state[0]``; the last one of the launch writes the epoch into
  ``exit[rank]`` of every rank and waits for every rank's, so no rank returns (and lets later
  work reuse its buffers) while a peer may still read or write them. It then resets ``state[0]``
  and stores the epoch into ``state[1]`` for the next launch in the stream.

The epoch lives on the device, not in the launch's arguments, so a launch replayed from a CUDA
graph synchronizes as a fresh one does. Epochs (int64) only grow and flags are never cleared, so
no wake-up is lost. Waiting only on other ranks, never on a later program of the same launch,
keeps this correct under Triton's interpreter, which runs a launch's programs one after another.

``iris.ccl._gluon_kernels`` has the same kernels with the same signatures in Gluon.
"""

import triton
import triton.language as tl

from iris.heap import context as abi
from iris.heap.tracing import EVENTS
from iris.mem.triton import Context, Tracing
from iris.mem.triton import ops as mops

from . import protocol

__all__ = ["barrier_kernel", "reduce_kernel", "gather_kernel", "push_kernel"]

_TIMEOUT = tl.constexpr(abi.ERROR_COLLECTIVE_TIMEOUT)
_MISMATCH = tl.constexpr(abi.ERROR_COLLECTIVE_MISMATCH)
_ABANDONED = tl.constexpr(abi.ERROR_COLLECTIVE_ABANDONED)
_NEVER = tl.constexpr(-(2**62))  # a value no flag ever holds: a CAS expecting it changes nothing
DESC_WORDS = tl.constexpr(protocol.DESC_WORDS)  # code, numel, offset a, offset b
_MAX = tl.constexpr(protocol.REDUCE_OPS["max"])  # the OP constexpr's codes; anything else sums
_MIN = tl.constexpr(protocol.REDUCE_OPS["min"])
_AVG = tl.constexpr(protocol.REDUCE_OPS["avg"])
# Config(trace=True): the phases every kernel records (iris.heap.tracing.EVENTS), per program.
_ENTRY_WAIT = tl.constexpr(EVENTS["entry wait"])
_TILE = tl.constexpr(EVENTS["tile"])
_REMOTE_LOAD = tl.constexpr(EVENTS["remote load"])
_REMOTE_STORE = tl.constexpr(EVENTS["remote store"])
_EXIT_WAIT = tl.constexpr(EVENTS["exit wait"])


# -- the sync block (iris.ccl.workspace): FLAGS-strided int64 arrays -------------------------------


@triton.jit
def _entry(sync, FLAGS: tl.constexpr):
    return sync


@triton.jit
def _exit(sync, FLAGS: tl.constexpr):
    return sync + FLAGS


@triton.jit
def _abandon(sync, FLAGS: tl.constexpr):
    return sync + 2 * FLAGS


@triton.jit
def _desc(sync, epoch, FLAGS: tl.constexpr):
    """The descriptions of the call at ``epoch``: two sets, by the epoch's parity. A barrier has no
    exit, so a rank may publish the next call while a peer still reads this one's; it can never
    be two calls ahead (it waits at the next entry for every rank)."""
    return sync + 3 * FLAGS + (epoch % 2) * (DESC_WORDS * FLAGS)


@triton.jit
def _state(sync, FLAGS: tl.constexpr):
    return sync + (3 + 2 * DESC_WORDS) * FLAGS


@triton.jit
def _lanes(ctx, FLAGS: tl.constexpr):
    """One lane per rank, FLAGS (a power of two >= the world size) of them: lanes past the world
    repeat the last rank (an exchange of the same value, or a second look at the same flag)."""
    return tl.minimum(tl.arange(0, FLAGS), ctx.world_size - 1)


@triton.jit
def _real(ctx, FLAGS: tl.constexpr):
    """The lanes that stand for a rank of their own (not a repeat of the last one)."""
    return tl.arange(0, FLAGS) < ctx.world_size


@triton.jit
def _any(cond):
    return tl.max(cond.to(tl.int32), axis=0) != 0


@triton.jit
def _first(cond, values, N: tl.constexpr):
    """``values`` (int64) at the first of the ``N`` lanes where ``cond`` holds."""
    lane = tl.min(tl.where(cond, tl.arange(0, N), N), axis=0)
    return tl.max(tl.where(tl.arange(0, N) == lane, values.to(tl.int64), _NEVER), axis=0)


@triton.jit
def _offset(ctx, ptr):
    """The local heap offset of ``ptr`` (for error records)."""
    return ptr.to(tl.int64, bitcast=True) - tl.load(ctx.heap_bases + ctx.rank)


# -- the protocol (see iris.ccl.protocol for the whole story) --------------------------------------


@triton.jit
def _arrive(ctx, flags, sync, value, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Write ``value`` into ``flags[rank]`` of every rank at once (a release exchange per lane).

    An old value below zero is a peer's mark: that peer gave up waiting for this rank, so this
    rank must not go on; it records ERROR_COLLECTIVE_ABANDONED naming the peer. True if none did.
    """
    r = _lanes(ctx, FLAGS)
    old = ctx.atomic_xchg(flags + ctx.rank + r * 0, value, r, sem="release", scope=SCOPE)
    marked = _real(ctx, FLAGS) & (old < 0)
    ok = _any(marked) == 0
    if ok == 0:
        peer = _first(marked, r, FLAGS)
        mops.record_error(
            ctx.context_ptr, _ABANDONED, _offset(ctx, flags + ctx.rank), -_first(marked, old, FLAGS), peer, -1
        )
    return ok


@triton.jit
def _give_up(ctx, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Tell every rank that this rank stopped this collective (its ``abandon`` flag)."""
    r = _lanes(ctx, FLAGS)
    ctx.atomic_xchg(_abandon(sync, FLAGS) + ctx.rank + r * 0, epoch, r, sem="release", scope=SCOPE)


@triton.jit
def _look(got, epoch, is_flag, real):
    """(every flag reached ``epoch``, some peer gave up) from one poll, with one reduction: the
    count of missing flags plus 2**20 per abandon flag raised (lanes are far fewer than 2**20)."""
    bad = tl.where(is_flag, (got < epoch).to(tl.int32), (real & (got != 0)).to(tl.int32) << 20)
    total = tl.sum(bad, axis=0)
    return (total & ((1 << 20) - 1)) == 0, total >= (1 << 20)


@triton.jit
def _await(ctx, flags, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Bounded wait until every rank's local ``flags[r]`` has reached ``epoch``: (they did, a peer gave up).

    One poll reads every rank's flag and every rank's ``abandon`` flag at once (2 * FLAGS lanes).
    It stops early when a peer has given up or this rank's context holds an error; a peer's
    give-up is looked for even when every flag is up at the first look (that peer may have given
    up on a rank that arrived after it). At the deadline (``heap.wait_timeout`` by the device
    clock) it marks every missing rank's flag with ``-epoch`` by a CAS from the value it saw: a
    rank that arrives later finds the mark when it raises its flag (``_arrive``) and stops too. A
    CAS that fails because the rank arrived in the meantime means it is not missing after all.
    """
    i = tl.arange(0, 2 * FLAGS)
    r = tl.minimum(i % FLAGS, ctx.world_size - 1)
    is_flag = i < FLAGS
    real = (i % FLAGS) < ctx.world_size
    ptrs = tl.where(is_flag, flags + r, _abandon(sync, FLAGS) + r)
    got = tl.atomic_add(ptrs, 0, sem="acquire", scope=SCOPE)
    done, quit = _look(got, epoch, is_flag, real)
    if (done == 0) & (quit == 0):  # not there yet: wait, with the clock running
        timeout = mops.wait_timeout_ns(ctx.context_ptr)
        start = mops.clock_ns()
        healthy = mops.healthy(ctx.context_ptr)
        waited = mops.clock_ns() - start
        while (done == 0) & healthy & (quit == 0) & (waited < timeout):
            got = tl.atomic_add(ptrs, 0, sem="acquire", scope=SCOPE)
            done, quit = _look(got, epoch, is_flag, real)
            healthy = mops.healthy(ctx.context_ptr)
            waited = mops.clock_ns() - start
        if (done == 0) & healthy & (quit == 0):  # the deadline: give up on the missing ranks
            missing = is_flag & real & (got < epoch)
            old = tl.atomic_cas(
                ptrs, tl.where(missing, got, _NEVER), tl.where(missing, -epoch, _NEVER), sem="acq_rel", scope=SCOPE
            )
            late = missing & (old < epoch)  # still missing (or already marked by another program)
            if _any(late):
                peer = _first(late, r, 2 * FLAGS)
                mops.record_error(ctx.context_ptr, _TIMEOUT, _offset(ctx, flags + peer), epoch, peer, waited)
            done = _any(late) == 0  # every missing rank arrived just before the mark
    if quit & (done == 0):  # a peer gave up while this rank waited: stop too, naming it and the first rank missing
        peer = _first((is_flag == 0) & real & (got != 0), r, 2 * FLAGS)
        missing = is_flag & real & (got < epoch)
        first_missing = tl.where(_any(missing), _first(missing, r, 2 * FLAGS), -1)
        mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, flags + tl.maximum(first_missing, 0)), epoch, peer,
                          first_missing)  # fmt: skip
    if tl.num_programs(0) > 1:  # another program of the launch may have given up meanwhile
        done = done & mops.healthy(ctx.context_ptr)
    return done, quit


@triton.jit
def _abandoned(ctx, flags, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Every rank arrived, but a peer gave up (its abandon flag): record it, naming that peer."""
    r = _lanes(ctx, FLAGS)
    gave = _real(ctx, FLAGS) & (tl.atomic_add(_abandon(sync, FLAGS) + r, 0, sem="acquire", scope=SCOPE) != 0)
    peer = _first(gave, r, FLAGS)
    mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, _abandon(sync, FLAGS) + peer), epoch, peer, -1)


@triton.jit
def _agree(ctx, sync, epoch, code, numel, off_a, off_b, FLAGS: tl.constexpr):
    """Whether every rank published this rank's description of the call; on the first difference,
    ERROR_COLLECTIVE_MISMATCH with the field, this rank's value, the peer and the peer's value."""
    lanes = _lanes(ctx, FLAGS)
    desc = _desc(sync, epoch, FLAGS) + lanes * DESC_WORDS
    # Plain (volatile) loads: the entry wait's acquire, then the program's barrier, order them
    # after the peers' releases (the data of the call is read the same way).
    tl.debug_barrier()
    c = tl.load(desc + 0, volatile=True)
    n = tl.load(desc + 1, volatile=True)
    a = tl.load(desc + 2, volatile=True)
    b = tl.load(desc + 3, volatile=True)
    differs = (c != code) | (n != numel) | (a != off_a) | (b != off_b)
    ok = _any(differs) == 0
    if ok == 0:
        field = tl.where(c != code, 0, tl.where(n != numel, 1, tl.where(a != off_a, 2, 3)))
        theirs = tl.where(field == 0, c, tl.where(field == 1, n, tl.where(field == 2, a, b)))
        ours = tl.where(field == 0, code, tl.where(field == 1, numel, tl.where(field == 2, off_a, off_b)))
        peer = _first(differs, lanes, FLAGS)
        mops.record_error(
            ctx.context_ptr, _MISMATCH, _first(differs, field, FLAGS), _first(differs, ours, FLAGS), peer,
            _first(differs, theirs, FLAGS),
        )  # fmt: skip
    return ok


@triton.jit
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
    FLAGS: tl.constexpr,
    SCOPE: tl.constexpr,
    AGREE: tl.constexpr,
):
    """Raise this rank's ``flags`` entry everywhere (when ``arrive``), then wait for every rank's;
    with ``AGREE`` (the entry) compare every rank's description with this one's: whether this
    program may go on. The comparison comes first, so that a rank that looks late at a mismatch a
    peer already gave up on still reports the mismatch itself, not the give-up."""
    go = epoch == epoch
    if arrive:
        go = _arrive(ctx, flags, sync, epoch, FLAGS, SCOPE)
    if go:
        go, quit = _await(ctx, flags, sync, epoch, FLAGS, SCOPE)
        if AGREE:
            if go:
                go = _agree(ctx, sync, epoch, code, numel, off_a, off_b, FLAGS)
        if go & quit:
            _abandoned(ctx, flags, sync, epoch, FLAGS, SCOPE)
        go = go & (quit == 0)
    return go


@triton.jit
def _enter(ctx, sync, code, numel, off_a, off_b, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """(epoch, go): this collective's epoch, and whether this program may touch peers' memory.

    go holds once every rank has arrived at the epoch, no rank gave up, and every rank described
    the same call. A rank whose context already holds an error does not arrive at all: it tells
    the peers it gave up, so they stop at once instead of at their deadline.
    """
    epoch = tl.load(_state(sync, FLAGS) + 1) + 1
    go = mops.healthy(ctx.context_ptr)
    if go:
        if tl.program_id(0) == 0:
            r = _lanes(ctx, FLAGS)
            desc = _desc(sync, epoch, FLAGS) + ctx.rank * DESC_WORDS + r * 0
            ctx.store(desc + 0, code, r)
            ctx.store(desc + 1, numel, r)
            ctx.store(desc + 2, off_a, r)
            ctx.store(desc + 3, off_b, r)
            tl.debug_barrier()  # the description is written before the entry flag releases it
        go = _meet(
            ctx, _entry(sync, FLAGS), sync, epoch, tl.program_id(0) == 0, code, numel, off_a, off_b, FLAGS, SCOPE, True
        )
    return epoch, go


@triton.jit
def _leave(ctx, sync, epoch, go, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Exit: the last program of the launch raises this rank's exit flag everywhere and waits for
    every rank's, so no rank returns while a peer may still touch its buffers; then it records
    the epoch (state[1]) for the next launch in the stream. A rank in error skips the exit and
    tells the peers it gave up (they stop waiting for it). Returns whether the exit completed
    (for the last program; ``go``: ``_enter``'s answer for this program).

    A launch of one program (every small call) skips the count of finished programs and reads its
    health from ``go``: nothing else of its launch can have failed (each costs a round trip on
    the device, BENCHMARKS.md)."""
    state = _state(sync, FLAGS)
    tl.debug_barrier()  # every thread's stores are done before this program's release
    ok = go
    done = 1
    if tl.num_programs(0) > 1:
        done = tl.atomic_add(state, 1, sem="acq_rel", scope=SCOPE).to(tl.int32) + 1
    if done == tl.num_programs(0):  # the last program of the launch: every other one has counted itself
        if tl.num_programs(0) > 1:  # another program of the launch may have failed
            ok = mops.healthy(ctx.context_ptr)
        if ok:
            ok = _meet(ctx, _exit(sync, FLAGS), sync, epoch, ok, 0, 0, 0, 0, FLAGS, SCOPE, False)
        if ok == 0:
            _give_up(ctx, sync, epoch, FLAGS, SCOPE)
        tl.store(state, epoch * 0)
        tl.store(state + 1, epoch)  # read by the next launch in stream order
    return ok


@triton.jit
def _begin(context_ptr, sync, code, numel, off_a, off_b, FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr):
    """Every kernel's start: ``(ctx, tr, epoch, go)``, the context, the tracing (``TRACE``) and
    ``_enter``'s answer, recorded as this program's "entry wait" when tracing."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    h = tr.record_start(_ENTRY_WAIT, ctx.rank, 0)
    epoch, go = _enter(ctx, sync, code, numel, off_a, off_b, FLAGS, SCOPE)
    tr.record_end(h)
    return ctx, tr, epoch, go


@triton.jit
def _traced_leave(ctx, tr, sync, epoch, go, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """``_leave``, recorded as this program's "exit wait" when tracing (the last program's
    includes waiting for every rank's exit)."""
    h = tr.record_start(_EXIT_WAIT, ctx.rank, 0)
    ok = _leave(ctx, sync, epoch, go, FLAGS, SCOPE)
    tr.record_end(h)
    return ok


@triton.jit
def _bytes(mask, ptr):
    """Bytes that a masked access of ``ptr``'s element type moves (an event's payload)."""
    return tl.sum(mask.to(tl.int64), axis=0) * (ptr.dtype.element_ty.primitive_bitwidth // 8)


@triton.jit
def _combine(acc, v, OP: tl.constexpr, IS_FLOAT: tl.constexpr):
    if OP == _MAX:
        if IS_FLOAT:
            acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = tl.maximum(acc, v)
    elif OP == _MIN:
        if IS_FLOAT:
            acc = tl.minimum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = tl.minimum(acc, v)
    else:
        acc = acc + v
    return acc


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
        acc = _combine(acc, v, OP, IS_FLOAT)
    if OP == _AVG:
        if acc.dtype == tl.float64:
            acc = acc / ctx.world_size.to(tl.float64)  # fp64 division is IEEE-rounded already
        else:
            acc = tl.div_rn(acc, ctx.world_size.to(acc.dtype))  # IEEE-rounded, as torch divides
    return acc


@triton.jit
def _cast_out(acc, out_dtype: tl.constexpr):
    """acc in the output dtype; fp32 -> bf16 rounds to nearest even explicitly, so interpreted
    and compiled runs give the same bits (the interpreter's own conversion truncates)."""
    if out_dtype == tl.bfloat16:
        bits = acc.to(tl.uint32, bitcast=True)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).to(tl.uint16)
        out = tl.where(acc != acc, acc.to(tl.bfloat16), rounded.to(tl.bfloat16, bitcast=True))
    else:
        out = acc.to(out_dtype)
    return out


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
def _stage_in(staging, user, n, STAGED: tl.constexpr, BLOCK: tl.constexpr):
    """A staged launch (``STAGED``, one program): ``user`` (a tensor off the heap) into this rank's
    ``staging`` before the entry publishes it. The staging is this rank's own until then: the last
    call's exit saw every peer done with it."""
    if STAGED:
        _copy_all(staging, user, n, BLOCK)
        tl.debug_barrier()  # every thread's part is written before program 0's release publishes it


_DESC = ["CODE", "NUMEL", "OFF_A", "OFF_B"]  # vary per call: never specialized on


@triton.jit(do_not_specialize=_DESC)
def barrier_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr
):
    """One program: every rank arrives (and agrees that this is a barrier); no exit needed."""
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    if go == 0:
        _give_up(ctx, sync, epoch, FLAGS, SCOPE)
    tl.store(_state(sync, FLAGS) + 1, epoch)


@triton.jit(do_not_specialize=_DESC)
def reduce_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, src, dst, N, start, chunk, user,
    PUSH: tl.constexpr, DST_CHUNKED: tl.constexpr,
    W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr, IS_FLOAT: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr,
    SCOPE: tl.constexpr, TRACE: tl.constexpr, STAGED: tl.constexpr,
):  # fmt: skip
    """Reduce elements [start, min(start + chunk, N)) of src over ranks (every rank's copy).

    The result goes to ``dst`` at the elements' offset (``DST_CHUNKED``) or at 0; into every
    rank's copy of dst (``PUSH``: the two-shot all_reduce, where src and dst are the same tensor
    and no one but this rank touches its chunk) or only the local one (one_shot over every
    element, reduce_scatter and the reduce-scatter half of rs_ag over this rank's chunk).

    ``STAGED`` (a launch of one program; ``iris.ccl.call.FOLD_BYTES``): ``src`` is the
    staging of ``user``, a tensor off the heap, copied in here before the entry publishes it (1),
    and also copied back into ``user`` after the exit (2: the two-shot, whose result lands in
    every rank's staging). Otherwise ``user`` is not touched.
    """
    _stage_in(src, user, N, STAGED, BLOCK)
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    t = tl.program_id(0)
    while go & (t < tl.cdiv(chunk, BLOCK)):
        local = t * BLOCK + tl.arange(0, BLOCK)
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
            for j in tl.static_range(W):
                to = (ctx.rank + j) % W
                h = tr.record_start(_REMOTE_STORE, to, nbytes)
                ctx.store(where, out, to, mask=mask)
                tr.record_end(h)
        else:
            tl.store(where, out, mask=mask)
        tr.record_end(tile)
        t += tl.num_programs(0)
    ok = _traced_leave(ctx, tr, sync, epoch, go, FLAGS, SCOPE)
    if STAGED == 2:
        tl.debug_barrier()  # the exit's acquire (by some threads) before every thread's reads
        if ok:  # after a failure the caller's tensor is left as it was (one program: _leave's answer)
            _copy_all(user, src, N, BLOCK)


@triton.jit(do_not_specialize=_DESC)
def gather_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, src, dst,
    piece, dst_numel, src_stride, src_offset, dst_stride, first_rank, user, user_numel,
    RANKS: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr,
    STAGED: tl.constexpr,
):  # fmt: skip
    """For ranks r = first_rank, first_rank + 1, ... (RANKS of them, mod W; unrolled, so their
    loads overlap): dst[r * dst_stride + i] = rank r's src[r * src_stride + src_offset + i], for
    i < piece and r * dst_stride + i < dst_numel (all_gather by pulls, all_to_all, broadcast and
    the all-gather half of rs_ag).

    ``STAGED`` (one program): ``src`` is the staging of ``user`` (``user_numel`` elements, a tensor
    off the heap), copied in here before the entry publishes it.
    """
    _stage_in(src, user, user_numel, STAGED, BLOCK)
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    t = tl.program_id(0)
    while go & (t < tl.cdiv(piece, BLOCK)):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        tile = tr.record_start(_TILE, ctx.rank, 0)
        for j in tl.static_range(RANKS):
            r = (first_rank + j) % ctx.world_size
            mask = (offs < piece) & (r * dst_stride + offs < dst_numel)
            h = tr.record_start(_REMOTE_LOAD, r, _bytes(mask, dst) if TRACE else 0)
            v = ctx.load(src + r * src_stride + src_offset + offs, r, mask=mask)
            tr.record_end(h)
            tl.store(dst + r * dst_stride + offs, v, mask=mask)
        tr.record_end(tile)
        t += tl.num_programs(0)
    _traced_leave(ctx, tr, sync, epoch, go, FLAGS, SCOPE)


@triton.jit(do_not_specialize=_DESC)
def push_kernel(
    context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, src, dst, n, dst_offset,
    W: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr,
):  # fmt: skip
    """Every rank's dst[dst_offset + i] = this rank's src[i], for i < n (all_gather into heap
    outputs: each input read once, from local memory, and stored into all W ranks)."""
    ctx, tr, epoch, go = _begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, FLAGS, SCOPE, TRACE)
    t = tl.program_id(0)
    while go & (t < tl.cdiv(n, BLOCK)):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        nbytes = _bytes(mask, dst) if TRACE else 0
        tile = tr.record_start(_TILE, ctx.rank, nbytes)
        v = tl.load(src + offs, mask=mask)
        for j in tl.static_range(W):
            to = (ctx.rank + j) % W
            h = tr.record_start(_REMOTE_STORE, to, nbytes)
            ctx.store(dst + dst_offset + offs, v, to, mask=mask)
            tr.record_end(h)
        tr.record_end(tile)
        t += tl.num_programs(0)
    _traced_leave(ctx, tr, sync, epoch, go, FLAGS, SCOPE)

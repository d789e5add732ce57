"""The device half of the protocol (``iris.ccl.protocol``), in Gluon: ``iris.ccl.protocol_triton``'s
functions with the same names, signatures and behaviour (read its docstring), over ``iris.mem.gluon``.

Layouts are explicit in Gluon: the protocol's lane vectors are 1-D ``BlockedLayout``s built from
the launch's ``num_warps`` and the compile target's warp size (``tile_layout``, which the
collectives' kernels use for their tiles too).
"""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
from iris.heap import context as abi
from iris.heap.tracing import EVENTS
from iris.mem.gluon import Context, Tracing
from iris.mem.triton import INTERPRETED  # (iris-ccl always has iris-mem-triton: one probe of the interpreter)
from iris.mem.common.target import target_builtin
from iris.mem.gluon import ops as mops

from . import protocol

__all__ = ["begin", "cast_out", "combine", "complete", "enter", "finish", "give_up", "kernel", "signal", "state",
           "tile_layout", "wait_flags"]  # fmt: skip

#: Bytes one thread moves per vector access (as ``iris.mem.gluon.blocked_layout``).
_VECTOR_BYTES = 16
# The error record's words: as protocol_triton writes them (its comment above _TIMEOUT).
_TIMEOUT = gl.constexpr(abi.ERROR_COLLECTIVE_TIMEOUT)
_MISMATCH = gl.constexpr(abi.ERROR_COLLECTIVE_MISMATCH)
_ABANDONED = gl.constexpr(abi.ERROR_COLLECTIVE_ABANDONED)
_NEVER = gl.constexpr(-(2**62))  # a value no flag ever holds: a CAS expecting it changes nothing
DESC_SLOTS = gl.constexpr(protocol.DESC_SLOTS)  # code's low and high halves, numel, offset a, offset b, shape
_TAG = gl.constexpr(1 << protocol.TAG_BITS)  # a published word is payload * _TAG + the epoch's low bits
_TAG_BITS = gl.constexpr(protocol.TAG_BITS)
_FIELDS = gl.constexpr(protocol.DESC_WORDS)  # code, numel, offset a, offset b, shape: what a mismatch names
_ENTRY_GROUPS = gl.constexpr(8)  # the entry's lanes, in FLAGS-wide groups: a power of two >= 2 + DESC_SLOTS
_EXIT_GROUPS = gl.constexpr(2)  # the exit's: its flags and the abandon flags
_INTERPRETED = gl.constexpr(INTERPRETED)  # kernels run under Triton's interpreter in this process
_MAX = gl.constexpr(protocol.REDUCE_OPS["max"])  # combine's OP codes; anything else sums
_MIN = gl.constexpr(protocol.REDUCE_OPS["min"])
# Config(trace=True): the phases every kernel records (iris.heap.tracing.EVENTS), per program.
_ENTRY_WAIT = gl.constexpr(EVENTS["entry wait"])
_EXIT_WAIT = gl.constexpr(EVENTS["exit wait"])


@target_builtin
def tile_layout(block, num_warps, dtype, target):
    """The 1-D layout of a ``block``-element tile of ``dtype`` over ``num_warps`` warps.

    Compiled: the compile target's warp size. On CPU ranks (``target`` None) layouts are
    dropped, so any valid one serves.
    """
    threads = target.warp_size if target is not None else img.warp_size()
    size = max(1, dtype.primitive_bitwidth // 8)
    per_thread = max(1, min(_VECTOR_BYTES // size, block // (threads * num_warps)))
    return gl.BlockedLayout(
        size_per_thread=[per_thread], threads_per_warp=[threads], warps_per_cta=[num_warps], order=[0]
    )


def kernel(fn):
    """``fn`` as a launched kernel on the protocol: ``@gluon.jit``, never specialized on the
    description's arguments nor a rank's index (``protocol.UNSPECIALIZED``), the description's
    arguments int64 whatever their values (``protocol.typed``), and marked ``@img.interpret()``."""
    return img.interpret()(gluon.jit(do_not_specialize=protocol.unspecialized(fn))(protocol.typed(fn)))


# -- the sync block (iris.ccl.workspace) and the protocol (iris.ccl.protocol), as in protocol_triton --


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
    sets, by the epoch's parity (see protocol_triton)."""
    return sync + 3 * FLAGS + (epoch % 2) * (DESC_SLOTS * FLAGS)


@gluon.jit
def state(sync, FLAGS: gl.constexpr):
    return sync + (3 + 2 * DESC_SLOTS) * FLAGS


@gluon.jit
def _index(FLAGS: gl.constexpr):
    L: gl.constexpr = tile_layout(FLAGS, gl.num_warps(), gl.int32)
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
def _slot(k, epoch, code, numel, off_a, off_b, shape):
    """The published word of a description's slot ``k`` at ``epoch`` (see protocol_triton)."""
    c = code.to(gl.int64)
    a, b, n, s = off_a.to(gl.int64), off_b.to(gl.int64), numel.to(gl.int64), shape.to(gl.int64)
    payload = gl.where(
        k == 0,
        c & ((1 << 30) - 1),
        gl.where(k == 1, c >> 30, gl.where(k == 2, n, gl.where(k == 3, a, gl.where(k == 4, b, s)))),
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
def _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, shape, FLAGS: gl.constexpr, SCOPE: gl.constexpr,
            GROUPS: gl.constexpr):  # fmt: skip
    """Write ``epoch`` into ``flags[rank]`` of every rank (a release exchange per lane), with
    ``GROUPS`` > 1 (the entry) this rank's tagged description too, in the same exchange; False,
    with ERROR_COLLECTIVE_ABANDONED recorded, if a peer had marked this rank's flag (it gave up)."""
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = gl.minimum(g - 1, DESC_SLOTS - 1)  # lanes past the last slot repeat it
    is_flag = g == 0
    ptrs = gl.where(is_flag, flags + ctx.rank + r * 0, _desc(sync, epoch, FLAGS) + k * FLAGS + ctx.rank)
    old = ctx.atomic_xchg(ptrs, gl.where(is_flag, epoch + k * 0, _slot(k, epoch, code, numel, off_a, off_b, shape)), r,
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
def give_up(ctx, sync, epoch, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """Tell every rank that this rank stopped this collective (its ``abandon`` flag)."""
    _, _, r, _ = _groups(ctx, 1, FLAGS)
    ctx.atomic_xchg(_abandon(sync, FLAGS) + ctx.rank + r * 0, epoch, r, sem="release", scope=SCOPE)


@gluon.jit
def _look(got, epoch, g, real):
    """(every rank arrived, some peer gave up) from one poll, with one reduction (see protocol_triton)."""
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
def _agree(ctx, got, epoch, code, numel, off_a, off_b, shape, FLAGS: gl.constexpr, GROUPS: gl.constexpr):
    """Whether every rank published this rank's description of the call (see protocol_triton)."""
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = gl.minimum(gl.maximum(g - 2, 0), DESC_SLOTS - 1)
    on = (g >= 2) & real
    differs = on & (got != _slot(k, epoch, code, numel, off_a, off_b, shape))
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
                        gl.where(field == 2, off_a.to(gl.int64), gl.where(field == 3, off_b.to(gl.int64),
                                                                          shape.to(gl.int64)))))  # fmt: skip
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
    shape,
    FLAGS: gl.constexpr,
    SCOPE: gl.constexpr,
    GROUPS: gl.constexpr,
):
    """Raise this rank's ``flags`` entry everywhere (when ``arrive``), then wait for every rank's;
    at the entry (``GROUPS`` = _ENTRY_GROUPS) the description travels with the flag and every
    rank's is compared with this one's (see protocol_triton)."""
    go = epoch == epoch
    if arrive:
        if GROUPS > _EXIT_GROUPS:
            go = _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, shape, FLAGS, SCOPE, GROUPS)
        else:
            go = _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, shape, FLAGS, SCOPE, 1)
    if go:
        go, quit, got = _await(ctx, flags, sync, epoch, FLAGS, SCOPE, GROUPS)
        if GROUPS > _EXIT_GROUPS:
            if go:
                go = _agree(ctx, got, epoch, code, numel, off_a, off_b, shape, FLAGS, GROUPS)
        if go & quit:
            _abandoned(ctx, flags, sync, epoch, FLAGS, SCOPE)
        go = go & (quit == 0)
    return go


@gluon.jit
def _enter(ctx, sync, code, numel, off_a, off_b, shape, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """(epoch, go): this collective's epoch, and whether this program may touch peers' memory."""
    epoch = gl.load(state(sync, FLAGS) + 1) + 1
    go = mops.healthy(ctx.context_ptr)
    if go:
        go = _meet(
            ctx, _entry(sync, FLAGS), sync, epoch, gl.program_id(0) == 0, code, numel, off_a, off_b, shape, FLAGS, SCOPE,
            _ENTRY_GROUPS,
        )  # fmt: skip
    return epoch, go


@gluon.jit
def _leave(ctx, sync, epoch, go, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """Exit (see protocol_triton): the last program raises this rank's exit flag everywhere and
    waits for every rank's; a rank in error skips it and tells the peers it gave up. Returns
    whether the exit completed; a launch of one program neither counts nor reads its health."""
    counts = state(sync, FLAGS)
    img.barrier()  # every thread's stores are done before this program's release
    ok = go
    done = 1
    if gl.num_programs(0) > 1:
        done = ctx.atomic_add(counts, 1, ctx.rank, sem="acq_rel", scope=SCOPE).to(gl.int32) + 1
    if done == gl.num_programs(0):  # the last program of the launch: every other one has counted itself
        if gl.num_programs(0) > 1:  # another program of the launch may have failed
            ok = mops.healthy(ctx.context_ptr)
        if ok:
            none = epoch * 0  # the exit compares no description
            ok = _meet(ctx, _exit(sync, FLAGS), sync, epoch, ok, none, none, none, none, none, FLAGS, SCOPE,
                       _EXIT_GROUPS)
        if ok == 0:
            give_up(ctx, sync, epoch, FLAGS, SCOPE)
        gl.store(counts, epoch * 0)
        gl.store(counts + 1, epoch)  # read by the next launch in stream order
    return ok


@gluon.jit
def begin(context_ptr, sync, code, numel, off_a, off_b, shape, FLAGS: gl.constexpr, SCOPE: gl.constexpr, TRACE: gl.constexpr):
    """Every kernel's start: ``(ctx, tr, epoch, go)``, the context, the tracing (``TRACE``) and
    ``enter``'s answer."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    epoch, go = enter(ctx, tr, sync, code, numel, off_a, off_b, shape, FLAGS, SCOPE)
    return ctx, tr, epoch, go


@gluon.jit
def enter(ctx, tr, sync, code, numel, off_a, off_b, shape, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """``begin``'s entry for a kernel that has its context and tracing already (see protocol_triton)."""
    h = tr.record_start(_ENTRY_WAIT, ctx.rank, 0)
    epoch, go = _enter(ctx, sync, code, numel, off_a, off_b, shape, FLAGS, SCOPE)
    tr.record_end(h)
    return epoch, go


@gluon.jit
def complete(ctx, sync, epoch, go, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """The end of a one-program launch that needs no exit (see protocol_triton)."""
    if go == 0:
        give_up(ctx, sync, epoch, FLAGS, SCOPE)
    gl.store(state(sync, FLAGS) + 1, epoch)


@gluon.jit
def finish(ctx, tr, sync, epoch, go, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """``_leave``, recorded as this program's "exit wait" when tracing."""
    h = tr.record_start(_EXIT_WAIT, ctx.rank, 0)
    ok = _leave(ctx, sync, epoch, go, FLAGS, SCOPE)
    tr.record_end(h)
    return ok


# -- hand-offs inside a call: one rank's flag in one rank's row (see protocol_triton) -------------


@gluon.jit
def signal(ctx, flags, epoch, to, SCOPE: gl.constexpr):
    """Raise this rank's flag in rank ``to``'s copy of the FLAGS-wide row ``flags`` to ``epoch``
    (a release exchange after a barrier of the program); False, with ERROR_COLLECTIVE_ABANDONED
    recorded, when ``to`` had marked the flag (see protocol_triton)."""
    img.barrier()  # every thread's stores are done before this program's release
    lane = _index(2)  # one lane does the exchange: a tensor in a layout, as Gluon's atomics take
    old = ctx.atomic_xchg(flags + ctx.rank + lane * 0, epoch + lane * 0, to, mask=lane == 0, sem="release",
                          scope=SCOPE)  # fmt: skip
    old = gl.sum(gl.where(lane == 0, old, 0), axis=0)
    ok = old >= 0
    if ok == 0:
        mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, flags + ctx.rank), -old, to, -1)
    return ok


@gluon.jit
def wait_flags(ctx, flags, sync, epoch, FLAGS: gl.constexpr, SCOPE: gl.constexpr):
    """Wait until every rank has ``signal``-ed its flag of this rank's row ``flags`` at ``epoch``:
    whether this program may go on (bounded and watched as the exit's wait; see protocol_triton)."""
    none = epoch * 0
    go = _meet(ctx, flags, sync, epoch, False, none, none, none, none, none, FLAGS, SCOPE, _EXIT_GROUPS)
    img.barrier()  # the acquire (by some threads) before every thread's reads of what the flags guard
    return go


# -- how ranks' values combine, and are rounded once ------------------------------------------------


@gluon.jit
def combine(acc, v, OP: gl.constexpr, IS_FLOAT: gl.constexpr):
    """``acc`` op ``v`` (``OP``: a code of ``protocol.REDUCE_OPS``; avg sums, the caller divides): how
    ranks' values combine, in rank order, in the collectives and the fused operations. A NaN
    propagates through max and min, as torch's do."""
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
def cast_out(acc, out_dtype: gl.constexpr):
    """acc in the output dtype, rounded to nearest even. Compiled, that is the conversion itself
    (one cvt.rn a pair); under the interpreter, whose own fp32 -> bf16 conversion truncates, the
    rounding is spelled out, so CPU and GPU runs give the same bits. (Spelled out on a GPU too, its
    fp32 temporaries cost a 128x256 tile's kernel registers it then spills.)"""
    out = acc.to(out_dtype)
    if _INTERPRETED:
        if out_dtype == gl.bfloat16:
            bits = acc.to(gl.uint32, bitcast=True)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).to(gl.uint16)
            out = gl.where(acc != acc, out, rounded.to(gl.bfloat16, bitcast=True))
    return out

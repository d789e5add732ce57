"""The device half of the protocol (``iris.ccl.protocol``), in Triton: what every launch of a
collective, and of every fused operation built on the collectives (``iris.ops``), runs on the
device to meet its peers.

A kernel on the protocol takes the call's description and the sync block (``CODE, NUMEL, OFF_A,
OFF_B, SHAPE``; ``sync``, ``FLAGS``, ``SCOPE``, ``TRACE``: what ``iris.ccl.call.Call.launch`` passes)
is declared with ``@protocol_triton.kernel``, and is written as::

    ctx, tr, epoch, go = protocol_triton.begin(context_ptr, sync, CODE, NUMEL, OFF_A, OFF_B, SHAPE,
                                               FLAGS, SCOPE, TRACE)
    ...  # touch peers' memory only while go holds
    protocol_triton.finish(ctx, tr, sync, epoch, go, FLAGS, SCOPE)

- ``begin``: every program reads this call's epoch, one past the last one this rank completed
  (``state[1]``); program 0 writes it, with the description, into ``entry[rank]`` of every rank;
  every program waits (bounded) until every rank's epoch has arrived and compares every rank's
  description with its own, so no peer's buffer is read or written before that peer reached the
  call (its earlier stream work is done) and agreed on it.
- ``finish``: each program bumps ``state[0]``; the last one of the launch writes the epoch into
  ``exit[rank]`` of every rank and waits for every rank's, so no rank returns (and lets later
  work reuse its buffers) while a peer may still read or write them. It then resets ``state[0]``
  and stores the epoch into ``state[1]`` for the next launch in the stream.
- Between the two, a call that hands work from rank to rank tile by tile (a fused reduce-scatter)
  uses ``signal`` (raise one flag of one rank to the epoch) and ``wait_flags`` (wait, bounded,
  until every rank raised its flag of a FLAGS-wide row): the same flags, marks and give-ups as
  the entry and exit, so a rank that dies mid-call stops its peers with the same errors.

The epoch lives on the device, not in the launch's arguments, so a launch replayed from a CUDA
graph synchronizes as a fresh one does. Epochs (int64) only grow and flags are never cleared, so
no wake-up is lost. Waiting only on other ranks, never on a later program of the same launch,
keeps this correct under Triton's interpreter, which runs a launch's programs one after another.

``iris.ccl.protocol_gluon`` is the same in Gluon, with the same names and signatures.
"""

import triton
import triton.language as tl

from iris.heap import context as abi
from iris.heap.tracing import EVENTS
import iris.mem.triton as imt
from iris.mem.triton import INTERPRETED, Context, Tracing
from iris.mem.triton import ops as mops

from . import protocol

__all__ = ["begin", "cast_out", "combine", "complete", "enter", "finish", "give_up", "kernel", "signal", "state",
           "wait_flags"]

# The error record's words (detail, value, peer, aux) as this module writes them:
# - _TIMEOUT (``_await`` at its deadline): the heap offset of the missing rank's flag, the epoch,
#   the missing rank, the nanoseconds waited.
# - _MISMATCH (``_agree``): the first field that differs (protocol.FIELDS: 0 code, 1 numel,
#   2 offset a, 3 offset b, 4 shape), this rank's value of it, the first rank that differs, that
#   rank's value.
# - _ABANDONED: this rank's flag's offset, the mark's epoch, the rank that marked it, -1
#   (``_arrive``, ``signal``: a peer had given up waiting for this rank); the first missing rank's
#   flag's offset, the epoch, the rank that gave up, the first rank this one still waited for or
#   -1 (``_await``); the abandon flag's offset, the epoch, the rank that gave up, -1 (``_abandoned``).
_TIMEOUT = tl.constexpr(abi.ERROR_COLLECTIVE_TIMEOUT)
_MISMATCH = tl.constexpr(abi.ERROR_COLLECTIVE_MISMATCH)
_ABANDONED = tl.constexpr(abi.ERROR_COLLECTIVE_ABANDONED)
_NEVER = tl.constexpr(-(2**62))  # a value no flag ever holds: a CAS expecting it changes nothing
DESC_SLOTS = tl.constexpr(protocol.DESC_SLOTS)  # code's low and high halves, numel, offset a, offset b, shape
_TAG = tl.constexpr(1 << protocol.TAG_BITS)  # a published word is payload * _TAG + the epoch's low bits
_TAG_BITS = tl.constexpr(protocol.TAG_BITS)
_FIELDS = tl.constexpr(protocol.DESC_WORDS)  # code, numel, offset a, offset b, shape: what a mismatch names
_ENTRY_GROUPS = tl.constexpr(8)  # the entry's lanes, in FLAGS-wide groups: a power of two >= 2 + DESC_SLOTS
_EXIT_GROUPS = tl.constexpr(2)  # the exit's: its flags and the abandon flags
_INTERPRETED = tl.constexpr(INTERPRETED)  # kernels run under Triton's interpreter in this process
_MAX = tl.constexpr(protocol.REDUCE_OPS["max"])  # combine's OP codes; anything else sums
_MIN = tl.constexpr(protocol.REDUCE_OPS["min"])
# Config(trace=True): the phases every kernel records (iris.heap.tracing.EVENTS), per program.
_ENTRY_WAIT = tl.constexpr(EVENTS["entry wait"])
_EXIT_WAIT = tl.constexpr(EVENTS["exit wait"])


def kernel(fn):
    """``fn`` as a launched kernel on the protocol: ``@triton.jit``, never specialized on the
    description's arguments nor a rank's index (``protocol.UNSPECIALIZED``: they vary per call or
    rank), the description's arguments int64 whatever their values (``protocol.typed``), and
    marked ``@imt.interpret()``, so its launches on CPU ranks run inside that scope."""
    return imt.interpret()(triton.jit(do_not_specialize=protocol.unspecialized(fn))(protocol.typed(fn)))


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
    """The descriptions of the call at ``epoch`` (slot k of rank r at ``[k * FLAGS + r]``): two
    sets, by the epoch's parity. A barrier has no exit, so a rank may publish the next call while
    a peer still reads this one's; it can never be two calls ahead (it waits at the next entry for
    every rank)."""
    return sync + 3 * FLAGS + (epoch % 2) * (DESC_SLOTS * FLAGS)


@triton.jit
def state(sync, FLAGS: tl.constexpr):
    return sync + (3 + 2 * DESC_SLOTS) * FLAGS


@triton.jit
def _groups(ctx, GROUPS: tl.constexpr, FLAGS: tl.constexpr):
    """``GROUPS`` groups of FLAGS lanes (FLAGS: a power of two >= the world size), one lane per
    rank in each: (lane index, group, rank, whether the lane stands for a rank of its own). Lanes
    past the world repeat the last rank (an exchange of the same value, or a second look at the
    same flag)."""
    i = tl.arange(0, GROUPS * FLAGS)
    return i, i // FLAGS, tl.minimum(i % FLAGS, ctx.world_size - 1), (i % FLAGS) < ctx.world_size


@triton.jit
def _slot(k, epoch, code, numel, off_a, off_b, shape):
    """The published word of a description's slot ``k`` (a lane vector) at ``epoch``: the slot's
    payload (CODE's low 30 bits, its high bits, NUMEL, OFF_A, OFF_B, SHAPE) tagged with the epoch."""
    c = code.to(tl.int64)
    a, b, n, s = off_a.to(tl.int64), off_b.to(tl.int64), numel.to(tl.int64), shape.to(tl.int64)
    payload = tl.where(
        k == 0,
        c & ((1 << 30) - 1),
        tl.where(k == 1, c >> 30, tl.where(k == 2, n, tl.where(k == 3, a, tl.where(k == 4, b, s)))),
    )
    return payload * _TAG + epoch % _TAG


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
def _arrive(ctx, flags, sync, epoch, code, numel, off_a, off_b, shape, FLAGS: tl.constexpr, SCOPE: tl.constexpr,
            GROUPS: tl.constexpr):  # fmt: skip
    """Write ``epoch`` into ``flags[rank]`` of every rank at once (a release exchange per lane);
    with ``GROUPS`` > 1 (the entry) the same exchange writes this rank's description, tagged with
    the epoch, into ``desc[rank]`` of every rank (the lanes past the flag's group): a peer that
    polls it sees each word either old (another tag) or whole, so no fence orders them.

    An old flag below zero is a peer's mark: that peer gave up waiting for this rank, so this
    rank must not go on; it records ERROR_COLLECTIVE_ABANDONED naming the peer. True if none did.
    """
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = tl.minimum(g - 1, DESC_SLOTS - 1)  # lanes past the last slot repeat it
    is_flag = g == 0
    ptrs = tl.where(is_flag, flags + ctx.rank + r * 0, _desc(sync, epoch, FLAGS) + k * FLAGS + ctx.rank)
    old = ctx.atomic_xchg(ptrs, tl.where(is_flag, epoch, _slot(k, epoch, code, numel, off_a, off_b, shape)), r,
                          sem="release", scope=SCOPE)  # fmt: skip
    marked = is_flag & real & (old < 0)
    ok = _any(marked) == 0
    if ok == 0:
        peer = _first(marked, r, GROUPS * FLAGS)
        mops.record_error(
            ctx.context_ptr, _ABANDONED, _offset(ctx, flags + ctx.rank), -_first(marked, old, GROUPS * FLAGS),
            peer, -1,
        )  # fmt: skip
    return ok


@triton.jit
def give_up(ctx, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Tell every rank that this rank stopped this collective (its ``abandon`` flag)."""
    _, _, r, _ = _groups(ctx, 1, FLAGS)
    ctx.atomic_xchg(_abandon(sync, FLAGS) + ctx.rank + r * 0, epoch, r, sem="release", scope=SCOPE)


@triton.jit
def _look(got, epoch, g, real):
    """(every rank arrived, some peer gave up) from one poll, with one reduction: the count of
    missing flags and description words (group 0, groups 2 and up) plus 2**20 per abandon flag
    raised (group 1; lanes are far fewer than 2**20). A description word is there once it
    carries this epoch's tag."""
    stale = real & ((got & (_TAG - 1)) != epoch % _TAG)
    bad = tl.where(g == 0, (got < epoch).to(tl.int32), tl.where(g == 1, (real & (got != 0)).to(tl.int32) << 20,
                                                                  stale.to(tl.int32)))  # fmt: skip
    total = tl.sum(bad, axis=0)
    return (total & ((1 << 20) - 1)) == 0, total >= (1 << 20)


@triton.jit
def _await(ctx, flags, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr, GROUPS: tl.constexpr):
    """Bounded wait until every rank's local ``flags[r]`` has reached ``epoch``: (they did, a peer
    gave up, the last poll).

    One poll reads every rank's flag, every rank's ``abandon`` flag and, at the entry (``GROUPS``
    > 2), every word of every rank's description at once (GROUPS * FLAGS lanes, by atomics: their
    values are shared by the program's threads, so its warps take the same branches).
    It stops early when a peer has given up or this rank's context holds an error; a peer's
    give-up is looked for even when every flag is up at the first look (that peer may have given
    up on a rank that arrived after it). At the deadline (``heap.wait_timeout`` by the device
    clock) it marks every missing rank's flag with ``-epoch`` by a CAS from the value it saw: a
    rank that arrives later finds the mark when it raises its flag (``_arrive``) and stops too. A
    CAS that fails because the rank arrived in the meantime means it is not missing after all.
    """
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = tl.minimum(tl.maximum(g - 2, 0), DESC_SLOTS - 1)  # lanes past the last slot repeat it
    ptrs = tl.where(
        g == 0, flags + r, tl.where(g == 1, _abandon(sync, FLAGS) + r, _desc(sync, epoch, FLAGS) + k * FLAGS + r)
    )
    got = tl.atomic_add(ptrs, 0, sem="acquire", scope=SCOPE)
    done, quit = _look(got, epoch, g, real)
    if (done == 0) & (quit == 0):  # not there yet: wait, with the clock running
        timeout = mops.wait_timeout_ns(ctx.context_ptr)
        start = mops.clock_ns()
        waited = start * 0  # -1 once this rank's context holds an error (elapsed_ns)
        EVERY: tl.constexpr = mops.polls_per_clock()
        polls = 0
        # Every value the loop branches on is the same on every thread (the poll is an atomic,
        # elapsed_ns agrees, the poll count is shared), so the program's warps leave it at the same
        # poll. The clock is read every EVERY polls (iris.mem.common.POLLS_PER_CLOCK; CPU ranks: every poll).
        while (done == 0) & (quit == 0) & (waited >= 0) & (waited < timeout):
            got = tl.atomic_add(ptrs, 0, sem="acquire", scope=SCOPE)
            done, quit = _look(got, epoch, g, real)
            polls += 1
            if polls % EVERY == 0:
                waited = mops.elapsed_ns(ctx.context_ptr, start)
        if (done == 0) & (waited >= 0) & (quit == 0):  # the deadline: give up on the missing ranks
            missing = (g == 0) & real & (got < epoch)
            old = tl.atomic_cas(
                ptrs, tl.where(missing, got, _NEVER), tl.where(missing, -epoch, _NEVER), sem="acq_rel", scope=SCOPE
            )
            late = missing & (old < epoch)  # still missing (or already marked by another program)
            if _any(late):
                peer = _first(late, r, GROUPS * FLAGS)
                mops.record_error(ctx.context_ptr, _TIMEOUT, _offset(ctx, flags + peer), epoch, peer, waited)
            done = _any(late) == 0  # every missing rank arrived just before the mark
            if done:  # their descriptions, for _agree (a word still untagged there counts as a difference)
                got = tl.atomic_add(ptrs, 0, sem="acquire", scope=SCOPE)
    if quit & (done == 0):  # a peer gave up while this rank waited: stop too, naming it and the first rank missing
        peer = _first((g == 1) & real & (got != 0), r, GROUPS * FLAGS)
        missing = (g == 0) & real & (got < epoch)
        first_missing = tl.where(_any(missing), _first(missing, r, GROUPS * FLAGS), -1)
        mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, flags + tl.maximum(first_missing, 0)), epoch, peer,
                          first_missing)  # fmt: skip
    if tl.num_programs(0) > 1:  # another program of the launch may have given up meanwhile
        done = done & mops.healthy(ctx.context_ptr)
    return done, quit, got


@triton.jit
def _abandoned(ctx, flags, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Every rank arrived, but a peer gave up (its abandon flag): record it, naming that peer."""
    _, _, r, real = _groups(ctx, 1, FLAGS)
    gave = real & (tl.atomic_add(_abandon(sync, FLAGS) + r, 0, sem="acquire", scope=SCOPE) != 0)
    peer = _first(gave, r, FLAGS)
    mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, _abandon(sync, FLAGS) + peer), epoch, peer, -1)


@triton.jit
def _agree(ctx, got, epoch, code, numel, off_a, off_b, shape, FLAGS: tl.constexpr, GROUPS: tl.constexpr):
    """Whether every rank published this rank's description of the call (the entry's last poll,
    ``got``); on the first rank with a difference, ERROR_COLLECTIVE_MISMATCH with its first field
    that differs, this rank's value, the peer and the peer's value."""
    i, g, r, real = _groups(ctx, GROUPS, FLAGS)
    k = tl.minimum(tl.maximum(g - 2, 0), DESC_SLOTS - 1)
    on = (g >= 2) & real
    differs = on & (got != _slot(k, epoch, code, numel, off_a, off_b, shape))
    ok = _any(differs) == 0
    if ok == 0:
        peer = tl.min(tl.where(differs, r, FLAGS), axis=0)
        field = tl.min(tl.where(differs & (r == peer), tl.maximum(k - 1, 0), _FIELDS), axis=0)  # slots 0, 1: CODE
        theirs = got >> _TAG_BITS
        at = on & (r == peer)
        lo = _first(at & (k == 0), theirs, GROUPS * FLAGS)
        hi = _first(at & (k == 1), theirs, GROUPS * FLAGS)
        other = _first(at & (k == field + 1), theirs, GROUPS * FLAGS)
        ours = tl.where(field == 0, code.to(tl.int64), tl.where(field == 1, numel.to(tl.int64),
                        tl.where(field == 2, off_a.to(tl.int64), tl.where(field == 3, off_b.to(tl.int64),
                                                                          shape.to(tl.int64)))))  # fmt: skip
        mops.record_error(
            ctx.context_ptr, _MISMATCH, field, ours, peer, tl.where(field == 0, hi * (1 << 30) + lo, other)
        )
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
    shape,
    FLAGS: tl.constexpr,
    SCOPE: tl.constexpr,
    GROUPS: tl.constexpr,
):
    """Raise this rank's ``flags`` entry everywhere (when ``arrive``), then wait for every rank's;
    at the entry (``GROUPS`` = _ENTRY_GROUPS) the description travels with the flag and every
    rank's is compared with this one's: whether this program may go on. The comparison comes
    first, so that a rank that looks late at a mismatch a peer already gave up on still reports
    the mismatch itself, not the give-up."""
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


@triton.jit
def _enter(ctx, sync, code, numel, off_a, off_b, shape, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """(epoch, go): this collective's epoch, and whether this program may touch peers' memory.

    go holds once every rank has arrived at the epoch, no rank gave up, and every rank described
    the same call. A rank whose context already holds an error does not arrive at all: it tells
    the peers it gave up, so they stop at once instead of at their deadline.
    """
    epoch = tl.load(state(sync, FLAGS) + 1) + 1
    go = mops.healthy(ctx.context_ptr)
    if go:
        go = _meet(
            ctx, _entry(sync, FLAGS), sync, epoch, tl.program_id(0) == 0, code, numel, off_a, off_b, shape, FLAGS, SCOPE,
            _ENTRY_GROUPS,
        )  # fmt: skip
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
    the device: BENCHMARKS.md, section "iris.ccl (Triton backend): collectives against the copy roofline")."""
    counts = state(sync, FLAGS)
    tl.debug_barrier()  # every thread's stores are done before this program's release
    ok = go
    done = 1
    if tl.num_programs(0) > 1:
        done = tl.atomic_add(counts, 1, sem="acq_rel", scope=SCOPE).to(tl.int32) + 1
    if done == tl.num_programs(0):  # the last program of the launch: every other one has counted itself
        if tl.num_programs(0) > 1:  # another program of the launch may have failed
            ok = mops.healthy(ctx.context_ptr)
        if ok:
            none = epoch * 0  # the exit compares no description
            ok = _meet(ctx, _exit(sync, FLAGS), sync, epoch, ok, none, none, none, none, none, FLAGS, SCOPE,
                       _EXIT_GROUPS)
        if ok == 0:
            give_up(ctx, sync, epoch, FLAGS, SCOPE)
        tl.store(counts, epoch * 0)
        tl.store(counts + 1, epoch)  # read by the next launch in stream order
    return ok


@triton.jit
def begin(context_ptr, sync, code, numel, off_a, off_b, shape, FLAGS: tl.constexpr, SCOPE: tl.constexpr, TRACE: tl.constexpr):
    """Every kernel's start: ``(ctx, tr, epoch, go)``, the context, the tracing (``TRACE``) and
    ``enter``'s answer."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    epoch, go = enter(ctx, tr, sync, code, numel, off_a, off_b, shape, FLAGS, SCOPE)
    return ctx, tr, epoch, go


@triton.jit
def enter(ctx, tr, sync, code, numel, off_a, off_b, shape, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """``begin``'s entry, for a kernel that has its context and tracing already (one that stores
    into peers' workspace before its entry): ``(epoch, go)``, recorded as this program's "entry
    wait" when tracing. The arrival is a release by program 0: after a barrier of the program
    (``tl.debug_barrier()``, the caller's), every store its threads made before is visible to a
    peer once that peer's entry saw the arrival."""
    h = tr.record_start(_ENTRY_WAIT, ctx.rank, 0)
    epoch, go = _enter(ctx, sync, code, numel, off_a, off_b, shape, FLAGS, SCOPE)
    tr.record_end(h)
    return epoch, go


@triton.jit
def complete(ctx, sync, epoch, go, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """The end of a one-program launch that needs no exit (no peer touches this rank's memory after
    its entry: the barrier, the pushing one-shot all_reduce): tell the peers if this rank gave up,
    and record the epoch for the next launch in the stream."""
    if go == 0:
        give_up(ctx, sync, epoch, FLAGS, SCOPE)
    tl.store(state(sync, FLAGS) + 1, epoch)


@triton.jit
def finish(ctx, tr, sync, epoch, go, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """``_leave``, recorded as this program's "exit wait" when tracing (the last program's
    includes waiting for every rank's exit)."""
    h = tr.record_start(_EXIT_WAIT, ctx.rank, 0)
    ok = _leave(ctx, sync, epoch, go, FLAGS, SCOPE)
    tr.record_end(h)
    return ok


# -- hand-offs inside a call: one rank's flag in one rank's row ------------------------------------


@triton.jit
def signal(ctx, flags, epoch, to, SCOPE: tl.constexpr):
    """Raise this rank's flag in rank ``to``'s copy of the FLAGS-wide row ``flags`` to ``epoch``,
    by a release exchange after a barrier of the program: every store its threads made before is
    visible to ``to`` once ``wait_flags`` there sees the flag. False, with
    ERROR_COLLECTIVE_ABANDONED recorded, when ``to`` had marked the flag (it gave up waiting for
    it, ``wait_flags``): this rank must then touch no peer again in this call."""
    tl.debug_barrier()  # every thread's stores are done before this program's release
    old = ctx.atomic_xchg(flags + ctx.rank, epoch, to, sem="release", scope=SCOPE)
    ok = old >= 0
    if ok == 0:
        mops.record_error(ctx.context_ptr, _ABANDONED, _offset(ctx, flags + ctx.rank), -old, to, -1)
    return ok


@triton.jit
def wait_flags(ctx, flags, sync, epoch, FLAGS: tl.constexpr, SCOPE: tl.constexpr):
    """Wait until every rank has ``signal``-ed its flag of this rank's row ``flags`` at ``epoch``:
    whether this program may go on. Bounded and watched as the exit's wait is: it stops when a
    peer gives up (ERROR_COLLECTIVE_ABANDONED) or this rank's context holds an error, and at the
    deadline (``heap.wait_timeout``) it marks each missing rank's flag (ERROR_COLLECTIVE_TIMEOUT
    naming it), so that rank's late ``signal`` fails instead of reporting a hand-off nobody takes."""
    none = epoch * 0
    go = _meet(ctx, flags, sync, epoch, False, none, none, none, none, none, FLAGS, SCOPE, _EXIT_GROUPS)
    tl.debug_barrier()  # the acquire (by some threads) before every thread's reads of what the flags guard
    return go


# -- how ranks' values combine, and are rounded once ------------------------------------------------


@triton.jit
def combine(acc, v, OP: tl.constexpr, IS_FLOAT: tl.constexpr):
    """``acc`` op ``v`` (``OP``: a code of ``protocol.REDUCE_OPS``; avg sums, the caller divides): how
    ranks' values combine, in rank order, in the collectives and the fused operations. A NaN
    propagates through max and min, as torch's do."""
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
def cast_out(acc, out_dtype: tl.constexpr):
    """acc in the output dtype, rounded to nearest even. Compiled, that is the conversion itself
    (one cvt.rn a pair); under the interpreter, whose own fp32 -> bf16 conversion truncates, the
    rounding is spelled out, so CPU and GPU runs give the same bits. (Spelled out on a GPU too, its
    fp32 temporaries cost a 128x256 tile's kernel registers it then spills.)"""
    out = acc.to(out_dtype)
    if _INTERPRETED:
        if out_dtype == tl.bfloat16:
            bits = acc.to(tl.uint32, bitcast=True)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).to(tl.uint16)
            out = tl.where(acc != acc, out, rounded.to(tl.bfloat16, bitcast=True))
    return out

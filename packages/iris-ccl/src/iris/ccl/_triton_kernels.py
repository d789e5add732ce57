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

from iris.mem.triton import Context

__all__ = ["barrier_kernel", "one_shot_kernel", "reduce_kernel", "gather_kernel", "push_kernel"]


@triton.jit
def _lanes(ctx, FLAGS: tl.constexpr):
    """One lane per rank, FLAGS (a power of two >= the world size) of them: lanes past the world
    repeat the last rank (an exchange of the same epoch, or a second look at the same flag)."""
    return tl.minimum(tl.arange(0, FLAGS), ctx.world_size - 1)


@triton.jit
def _arrive(ctx, flags, epoch, FLAGS: tl.constexpr):
    """Write ``epoch`` into ``flags[rank]`` of every rank at once (a release exchange per lane)."""
    r = _lanes(ctx, FLAGS)
    ctx.atomic_xchg(flags + ctx.rank + r * 0, epoch, r, sem="release", scope="sys")


@triton.jit
def _await_all(ctx, flags, epoch, FLAGS: tl.constexpr):
    """Bounded wait until every rank's local ``flags[r]`` has reached ``epoch`` (all polled at once)."""
    ctx.wait(flags + _lanes(ctx, FLAGS), epoch, ">=")


@triton.jit
def _enter(ctx, entry, state, FLAGS: tl.constexpr):
    """This collective's epoch, once every rank has reached it (see the module's docstring)."""
    epoch = tl.load(state + 1) + 1
    if tl.program_id(0) == 0:
        _arrive(ctx, entry, epoch, FLAGS)
    _await_all(ctx, entry, epoch, FLAGS)
    return epoch


@triton.jit
def _leave(ctx, exit_flags, state, epoch, FLAGS: tl.constexpr):
    tl.debug_barrier()  # every thread's stores are done before this program's release
    done = tl.atomic_add(state, 1, sem="acq_rel", scope="sys") + 1
    if done == tl.num_programs(0):  # the last program of the launch: every other one has counted itself
        _arrive(ctx, exit_flags, epoch, FLAGS)
        _await_all(ctx, exit_flags, epoch, FLAGS)
        tl.store(state, epoch * 0)
        tl.store(state + 1, epoch)  # read by the next launch in stream order


@triton.jit
def _combine(acc, v, OP: tl.constexpr, IS_FLOAT: tl.constexpr):
    if OP == 1:
        if IS_FLOAT:
            acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = tl.maximum(acc, v)
    elif OP == 2:
        if IS_FLOAT:
            acc = tl.minimum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = tl.minimum(acc, v)
    else:
        acc = acc + v
    return acc


@triton.jit
def _reduce_tile(ctx, src, mask, W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr, IS_FLOAT: tl.constexpr):
    """``op`` over ranks 0, 1, ..., W-1 (in that order) of the ranks' copies at ``src``.

    Unrolled over the ``W`` ranks, so all W loads of a tile are in flight at once (a loop over a
    runtime world size issues them one after another: W memory latencies per tile).
    """
    acc = ctx.load(src, 0, mask=mask)
    if ACC_F32:
        acc = acc.to(tl.float32)
    for r in tl.static_range(1, W):
        v = ctx.load(src, r, mask=mask)
        if ACC_F32:
            v = v.to(tl.float32)
        acc = _combine(acc, v, OP, IS_FLOAT)
    if OP == 3:
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
def barrier_kernel(context_ptr, entry, state, FLAGS: tl.constexpr):
    """One program: raise this rank's entry flag in every rank, wait for every rank's."""
    ctx = Context.initialize(context_ptr)
    epoch = tl.load(state + 1) + 1
    _arrive(ctx, entry, epoch, FLAGS)
    _await_all(ctx, entry, epoch, FLAGS)
    tl.store(state + 1, epoch)


@triton.jit
def one_shot_kernel(
    context_ptr, entry, exit_flags, state, src, dst, N,
    W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr, IS_FLOAT: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """dst (local) = op over ranks of src (every rank's staged copy of its input)."""
    ctx = Context.initialize(context_ptr)
    epoch = _enter(ctx, entry, state, FLAGS)
    t = tl.program_id(0)
    while t < tl.cdiv(N, BLOCK):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        acc = _reduce_tile(ctx, src + offs, mask, W, OP, ACC_F32, IS_FLOAT)
        tl.store(dst + offs, _cast_out(acc, dst.dtype.element_ty), mask=mask)
        t += tl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)


@triton.jit
def reduce_kernel(
    context_ptr, entry, exit_flags, state, src, dst, N, chunk,
    PUSH: tl.constexpr, DST_CHUNKED: tl.constexpr,
    W: tl.constexpr, OP: tl.constexpr, ACC_F32: tl.constexpr, IS_FLOAT: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Reduce chunk ``rank`` (elements [rank*chunk, min((rank+1)*chunk, N))) of src over ranks.

    The result goes to ``dst`` at the chunk's offset (``DST_CHUNKED``) or at 0; into every rank's
    copy of dst (``PUSH``: the two-shot all_reduce, where src and dst are the same tensor and no
    one but this rank touches this chunk) or only the local one (reduce_scatter).
    """
    ctx = Context.initialize(context_ptr)
    epoch = _enter(ctx, entry, state, FLAGS)
    start = ctx.rank * chunk
    t = tl.program_id(0)
    while t < tl.cdiv(chunk, BLOCK):
        local = t * BLOCK + tl.arange(0, BLOCK)
        offs = start + local
        mask = (local < chunk) & (offs < N)
        acc = _reduce_tile(ctx, src + offs, mask, W, OP, ACC_F32, IS_FLOAT)
        out = _cast_out(acc, dst.dtype.element_ty)
        if DST_CHUNKED:
            where = dst + offs
        else:
            where = dst + local
        if PUSH:
            for j in tl.static_range(W):
                ctx.store(where, out, (ctx.rank + j) % W, mask=mask)
        else:
            tl.store(where, out, mask=mask)
        t += tl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)


@triton.jit
def gather_kernel(
    context_ptr, entry, exit_flags, state, src, dst,
    n, total, src_stride, src_offset, dst_stride, first, COUNT: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """For ranks r = first, first+1, ... (COUNT of them, mod W; unrolled, so their loads overlap):
    dst[r*dst_stride + i] = rank r's src[r*src_stride + src_offset + i], for i < n and
    r*dst_stride + i < total (all_gather, all_to_all, broadcast and the all-gather half of rs_ag).
    """
    ctx = Context.initialize(context_ptr)
    epoch = _enter(ctx, entry, state, FLAGS)
    t = tl.program_id(0)
    while t < tl.cdiv(n, BLOCK):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        for j in tl.static_range(COUNT):
            r = (first + j) % ctx.world_size
            mask = (offs < n) & (r * dst_stride + offs < total)
            v = ctx.load(src + r * src_stride + src_offset + offs, r, mask=mask)
            tl.store(dst + r * dst_stride + offs, v, mask=mask)
        t += tl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)


@triton.jit
def push_kernel(
    context_ptr, entry, exit_flags, state, src, dst, n, dst_offset,
    W: tl.constexpr, FLAGS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Every rank's dst[dst_offset + i] = this rank's src[i], for i < n (all_gather into heap
    outputs: each input read once, from local memory, and stored into all W ranks)."""
    ctx = Context.initialize(context_ptr)
    epoch = _enter(ctx, entry, state, FLAGS)
    t = tl.program_id(0)
    while t < tl.cdiv(n, BLOCK):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(src + offs, mask=mask)
        for j in tl.static_range(W):
            ctx.store(dst + dst_offset + offs, v, (ctx.rank + j) % W, mask=mask)
        t += tl.num_programs(0)
    _leave(ctx, exit_flags, state, epoch, FLAGS)

"""The Gluon kernels of the mem conformance suite (iris.testing.mem; imported in the ranks, once
TRITON_INTERPRET is settled), and what the suite's adapter asks of them.

Each kernel takes the device context and, with ``FREE=True``, uses the free functions with the
rank and bases read from the context by hand instead of the ``Context`` aggregate, so every test
covers both APIs. Layouts are explicit constexpr arguments (``L``: 1-D, ``L2``: 2-D), built on
the host for the target's warp size. ``compile_cases(target)`` lists every kernel with its
signatures and layouts for the compile-only test.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.heap.context as abi
import iris.mem.gluon as img
from iris.mem.gluon import Context, GluonASTSource

#: Warps per program of every launch and compile-only build (the layouts are made for it).
NUM_WARPS = 4
#: The source of compile-only builds.
SOURCE = GluonASTSource


def layout(n, target=None, num_warps=NUM_WARPS, dtype=None):
    """The 1-D layout the tests launch a block of ``n`` elements with."""
    return img.blocked_layout(n, num_warps, target, dtype=dtype)


def layout_2d(cols, target=None, num_warps=NUM_WARPS):
    """A 2-D [rows, cols] layout: one row of ``cols`` (<= warp size) spread over lanes."""
    threads = img.warp_size(target)
    return gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[threads // cols, cols],
                            warps_per_cta=[num_warps, 1], order=[1, 0])  # fmt: skip


def launch_options(block=None, cols=None):
    """The keywords of a launch over a block of ``block`` elements (``L``) or of rows ``cols`` wide
    (``L2``): the layouts, for the warp size of the GPU here (any without one), and the warps."""
    options = {"num_warps": NUM_WARPS}
    if block is not None:
        options["L"] = layout(block)
    if cols is not None:
        options["L2"] = layout_2d(cols)
    return options


_RANK = gl.constexpr(abi.RANK_INDEX)
_WORLD_SIZE = gl.constexpr(abi.WORLD_SIZE_INDEX)
_BASES = gl.constexpr(abi.BASES_INDEX)


@gluon.jit
def _apis(context_ptr):
    """Both APIs' inputs: the ``Context``, and rank, world_size, heap_bases read straight from the context
    (the free functions')."""
    rank, world_size = gl.load(context_ptr + _RANK), gl.load(context_ptr + _WORLD_SIZE)
    return Context.initialize(context_ptr), rank, world_size, context_ptr + _BASES


@gluon.jit
def _block(context_ptr, n_valid, N: gl.constexpr, L: gl.constexpr):
    """``_apis``, then a block of N offsets in layout L and its mask (the first n_valid): the RMA kernels' inputs."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    offs = gl.arange(0, N, layout=L)
    return ctx, rank, world_size, bases, offs, offs < n_valid


# -- load / store / get / put / copy -------------------------------------------------------------


@img.interpret()
@gluon.jit
def load_kernel(src, out, context_ptr, n_valid, other, N: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr,
                CACHE: gl.constexpr = None, VOLATILE: gl.constexpr = False):  # fmt: skip
    """out[t] = rank t's src (other where offs >= n_valid), for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N, L)
    for t in range(world_size):
        if FREE:
            v = img.load(src + offs, rank, t, bases, mask, other, CACHE, VOLATILE)
        else:
            v = ctx.load(src + offs, t, mask=mask, other=other, cache_modifier=CACHE, volatile=VOLATILE)
        gl.store(out + t * N + offs, v)


@img.interpret()
@gluon.jit
def store_kernel(src, dst, context_ptr, n_valid, N: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr,
                 CACHE: gl.constexpr = None):  # fmt: skip
    """Rank t's dst[rank] = local src where offs < n_valid, for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N, L)
    value = gl.load(src + offs)
    for t in range(world_size):
        if FREE:
            img.store(dst + rank * N + offs, value, rank, t, bases, mask, CACHE)
        else:
            ctx.store(dst + rank * N + offs, value, t, mask=mask, cache_modifier=CACHE)


@img.interpret()
@gluon.jit
def get_kernel(src, dst, context_ptr, n_valid, other, N: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr,
               HINT: gl.constexpr = None):  # fmt: skip
    """Local dst[t] = rank t's src where offs < n_valid, for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N, L)
    for t in range(world_size):
        if FREE:
            img.get(src + offs, dst + t * N + offs, rank, t, bases, mask, other, HINT)
        else:
            ctx.get(src + offs, dst + t * N + offs, t, mask=mask, other=other, hint=HINT)


@img.interpret()
@gluon.jit
def put_kernel(src, dst, context_ptr, n_valid, N: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr,
               HINT: gl.constexpr = None):  # fmt: skip
    """Rank t's dst[rank] = local src where offs < n_valid, for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N, L)
    for t in range(world_size):
        if FREE:
            img.put(src + offs, dst + rank * N + offs, rank, t, bases, mask, HINT)
        else:
            ctx.put(src + offs, dst + rank * N + offs, t, mask=mask, hint=HINT)


@img.interpret()
@gluon.jit
def copy_kernel(src, dst, context_ptr, n_valid, other, N: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr):
    """Rank b's dst[rank, a] = rank a's src where offs < n_valid, for every pair of ranks (a, b)."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N, L)
    for a in range(world_size):
        for b in range(world_size):
            slot = dst + (rank * world_size + a) * N + offs
            if FREE:
                img.copy(src + offs, slot, rank, a, b, bases, mask, other)
            else:
                ctx.copy(src + offs, slot, a, b, mask=mask, other=other)


@img.interpret()
@gluon.jit
def translate_kernel(x, out, context_ptr, FREE: gl.constexpr):
    """out[t] = the address of x in rank t's heap, as mapped in this process."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    for t in range(world_size):
        if FREE:
            p = img.translate(x, rank, t, bases)
        else:
            p = ctx.translate(x, t)
        gl.store(out + t, p.to(gl.int64, bitcast=True))


@img.interpret()
@gluon.jit
def shapes_kernel(x, scalars, grid, context_ptr, ROWS: gl.constexpr, COLS: gl.constexpr, L2: gl.constexpr,
                  FREE: gl.constexpr):  # fmt: skip
    """Scalar pointers and 2-D tensors of pointers, for every rank t: scalars[t] = rank t's x[0];
    rank t's x[ROWS * COLS + rank] = that + 1; grid[t] = rank t's x[:ROWS * COLS] as a ROWS x COLS
    block, the last row masked off (other = -1)."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L2))
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, L2))
    offs = rows[:, None] * COLS + cols[None, :]
    mask = offs < (ROWS - 1) * COLS
    for t in range(world_size):
        if FREE:
            s = img.load(x, rank, t, bases)
            img.store(x + ROWS * COLS + rank, s + 1, rank, t, bases)
            img.get(x + offs, grid + t * ROWS * COLS + offs, rank, t, bases, mask, -1)
        else:
            s = ctx.load(x, t)
            ctx.store(x + ROWS * COLS + rank, s + 1, t)
            ctx.get(x + offs, grid + t * ROWS * COLS + offs, t, mask=mask, other=-1)
        gl.store(scalars + t, s)


@img.interpret()
@gluon.jit
def broadcast_kernel(x, context_ptr, N: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr, CAS: gl.constexpr = True):
    """Scalar values into blocks of pointers, on the next rank's x[0:N) .. x[5N:6N): store 7,
    atomic_add 3, atomic_max 9, atomic_xchg 4 and (with CAS) atomic_cas(0 -> 5) on an int32 block,
    and atomic_add 1.5 on the fp32 view of the last block."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    offs = gl.arange(0, N, layout=L)
    t = (rank + 1) % world_size
    f = (x + 5 * N).to(gl.pointer_type(gl.float32), bitcast=True)
    if FREE:
        img.store(x + offs, 7, rank, t, bases)
        img.atomic_add(x + N + offs, 3, rank, t, bases)
        img.atomic_max(x + 2 * N + offs, 9, rank, t, bases)
        img.atomic_xchg(x + 3 * N + offs, 4, rank, t, bases)
        if CAS:
            img.atomic_cas(x + 4 * N + offs, 0, 5, rank, t, bases)
        img.atomic_add(f + offs, 1.5, rank, t, bases)
    else:
        ctx.store(x + offs, 7, t)
        ctx.atomic_add(x + N + offs, 3, t)
        ctx.atomic_max(x + 2 * N + offs, 9, t)
        ctx.atomic_xchg(x + 3 * N + offs, 4, t)
        if CAS:
            ctx.atomic_cas(x + 4 * N + offs, 0, 5, t)
        ctx.atomic_add(f + offs, 1.5, t)


# -- atomics -------------------------------------------------------------------------------------


@gluon.jit
def _atomic(ctx, rank, bases, ptr, val, t, mask, FN: gl.constexpr, OP: gl.constexpr, FREE: gl.constexpr,
            SEM: gl.constexpr, SCOPE: gl.constexpr):  # fmt: skip
    """One atomic read-modify-write of rank t's copy of ptr by ``FN`` (``atomic_api``: the free
    function, or the Context method called with ``ctx``); atomic_cas: ``val`` is (cmp, new)."""
    if OP == "cas":
        cmp, new = val
        if FREE:
            old = FN(ptr, cmp, new, rank, t, bases, SEM, SCOPE)
        else:
            old = FN(ctx, ptr, cmp, new, t, SEM, SCOPE)
    elif FREE:
        old = FN(ptr, val, rank, t, bases, mask, SEM, SCOPE)
    else:
        old = FN(ctx, ptr, val, t, mask, SEM, SCOPE)
    return old


@img.interpret()
@gluon.jit
def atomic_kernel(buf, vals, shared_olds, private_olds, context_ptr, init, FN: gl.constexpr, OP: gl.constexpr, LANES: gl.constexpr,
                  L: gl.constexpr, REPS: gl.constexpr, FREE: gl.constexpr, SEM: gl.constexpr = None,
                  SCOPE: gl.constexpr = None):  # fmt: skip
    """On every rank t: every lane of every program applies OP with vals[rank, lane] to t's buf[0]
    (REPS times; old values to shared_olds[t, pid, rep, lane]), and program 0's lane 0 applies it
    once to t's private word buf[1 + rank * LANES] (old value to private_olds[t]).

    buf layout: [shared word, then LANES words per rank]. atomic_cas swaps init -> vals (lanes
    other than lane 0 compare against init + 1 on the private words, so they never swap)."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    pid = gl.program_id(0)
    lane = gl.arange(0, LANES, layout=L)
    val = gl.load(vals + rank * LANES + lane)
    elem = buf.dtype.element_ty
    initial = (gl.full([LANES], 0, elem, L) + init).to(elem)
    shared = buf + lane * 0
    private = buf + 1 + rank * LANES + lane
    first = (lane + pid) == 0  # (lane == 0) & (pid == 0): the interpreter rejects that mask
    for t in range(world_size):
        for rep in range(REPS):
            if OP == "cas":
                old = _atomic(ctx, rank, bases, shared, (initial, val), t, None, FN, OP, FREE, SEM, SCOPE)
            else:
                old = _atomic(ctx, rank, bases, shared, val, t, None, FN, OP, FREE, SEM, SCOPE)
            gl.store(shared_olds + ((t * gl.num_programs(0) + pid) * REPS + rep) * LANES + lane, old)
        if OP == "cas":
            cmp = gl.where(lane == 0, initial, initial + 1)
            if pid == 0:
                old = _atomic(ctx, rank, bases, private, (cmp, val), t, None, FN, OP, FREE, SEM, SCOPE)
                gl.store(private_olds + t + lane * 0, old, mask=lane == 0)
        else:
            old = _atomic(ctx, rank, bases, private, val, t, first, FN, OP, FREE, SEM, SCOPE)
            gl.store(private_olds + t + lane * 0, old, mask=first)


@img.interpret()
@gluon.jit
def scalar_atomic_kernel(counter, olds, context_ptr, REPS: gl.constexpr, FREE: gl.constexpr):
    """Scalar pointers: REPS atomic_add(1) into every rank's counter; olds[t, rep] the values seen."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    for t in range(world_size):
        for rep in range(REPS):
            if FREE:
                old = img.atomic_add(counter, 1, rank, t, bases)
            else:
                old = ctx.atomic_add(counter, 1, t)
            gl.store(olds + t * REPS + rep, old)


@img.interpret()
@gluon.jit
def spinlock_kernel(lock, counter, failed, context_ptr, ITERS: gl.constexpr, LIMIT: gl.constexpr, FREE: gl.constexpr):
    """ITERS times: take rank 0's lock by CAS (acquire), increment rank 0's counter with a plain
    load and store, release by xchg (release). failed[0] = 1 if a lock wait passed LIMIT spins."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    for _ in range(ITERS):
        spins = 0
        if FREE:
            got = img.atomic_cas(lock, 0, 1, rank, 0, bases, sem="acquire")
        else:
            got = ctx.atomic_cas(lock, 0, 1, 0, sem="acquire")
        while (got != 0) & (spins < LIMIT):
            if FREE:
                got = img.atomic_cas(lock, 0, 1, rank, 0, bases, sem="acquire")
            else:
                got = ctx.atomic_cas(lock, 0, 1, 0, sem="acquire")
            spins += 1
        if got == 0:
            if FREE:
                v = img.load(counter, rank, 0, bases)
                img.store(counter, v + 1, rank, 0, bases)
                img.barrier()
                img.atomic_xchg(lock, 0, rank, 0, bases, sem="release")
            else:
                v = ctx.load(counter, 0)
                ctx.store(counter, v + 1, 0)
                img.barrier()
                ctx.atomic_xchg(lock, 0, 0, sem="release")
        else:
            gl.store(failed, 1)


@img.interpret()
@gluon.jit
def message_kernel(data, inbox, flags, out, context_ptr, ROUNDS: gl.constexpr, N: gl.constexpr, L: gl.constexpr,
                   FREE: gl.constexpr):  # fmt: skip
    """ROUNDS times: put data + round into the next rank's inbox[round], then signal its flag with
    a release atomic; wait (acquire) for our own flag >= round + 1 and copy inbox[round] to out[round]."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    nxt = (rank + 1) % world_size
    offs = gl.arange(0, N, layout=L)
    for r in range(ROUNDS):
        payload = gl.load(data + offs) + r
        # every thread's stores must precede the (single-thread) release atomic that signals them
        if FREE:
            img.store(inbox + r * N + offs, payload, rank, nxt, bases)
            img.barrier()
            img.atomic_add(flags, 1, rank, nxt, bases, sem="release")
            ok = img.wait(flags, r + 1, context_ptr, ">=")
        else:
            ctx.store(inbox + r * N + offs, payload, nxt)
            img.barrier()
            ctx.atomic_add(flags, 1, nxt, sem="release")
            ok = ctx.wait(flags, r + 1, ">=")
        if ok:
            gl.store(out + r * N + offs, gl.load(inbox + r * N + offs))


# -- bounded wait --------------------------------------------------------------------------------


@img.interpret()
@gluon.jit
def wait_kernel(flag, value, result, context_ptr, CMP: gl.constexpr, FREE: gl.constexpr):
    """result[0] = wait(flag, value, CMP) as 0/1."""
    ctx = Context.initialize(context_ptr)
    if FREE:
        ok = img.wait(flag, value, context_ptr, CMP)
    else:
        ok = ctx.wait(flag, value, CMP)
    gl.store(result, ok.to(gl.int32))


@img.interpret()
@gluon.jit
def wait_default_kernel(flag, value, result, context_ptr):
    """result[0] = ctx.wait(flag, value) with the default comparison (==)."""
    ctx = Context.initialize(context_ptr)
    gl.store(result, ctx.wait(flag, value).to(gl.int32))


@img.interpret()
@gluon.jit
def wait_block_kernel(flags, value, result, context_ptr, LANES: gl.constexpr, L: gl.constexpr, FREE: gl.constexpr):
    """result[0] = wait on the block flags[min(i, 2)] for i < LANES (lanes repeat the last flag) >= value."""
    ctx = Context.initialize(context_ptr)
    ptrs = flags + gl.minimum(gl.arange(0, LANES, layout=L), 2)
    if FREE:
        ok = img.wait(ptrs, value, context_ptr, ">=")
    else:
        ok = ctx.wait(ptrs, value, ">=")
    gl.store(result, ok.to(gl.int32))


@img.interpret()
@gluon.jit
def wait_each_kernel(flag, value, results, context_ptr, FREE: gl.constexpr):
    """results[program] = wait(flag == value) as 0/1: many programs (and warps) give up at once."""
    ctx = Context.initialize(context_ptr)
    if FREE:
        ok = img.wait(flag, value, context_ptr)
    else:
        ok = ctx.wait(flag, value)
    gl.store(results + gl.program_id(0), ok.to(gl.int32))


# -- the device clock and device errors ------------------------------------------------------------


@img.interpret()
@gluon.jit
def clock_kernel(out, context_ptr, FREE: gl.constexpr):
    """out = [the device clock, the bound of a wait in its nanoseconds]."""
    if FREE:
        now = img.clock_ns()
        bound = img.wait_timeout_ns(context_ptr)
    else:
        ctx = Context.initialize(context_ptr)
        now = ctx.clock_ns()
        bound = ctx.wait_timeout_ns()
    gl.store(out, now)
    gl.store(out + 1, bound)


@img.interpret()
@gluon.jit
def record_error_kernel(flag, out, context_ptr, code, detail, FREE: gl.constexpr):
    """A wait for flag == 1, then two record_error calls (details detail and detail + 1, aux the
    clock's ns since the wait began): out = [wait held, healthy before, first won, second won,
    healthy after, elapsed_ns before the first (>= 0), elapsed_ns after it (-1)]."""
    ctx = Context.initialize(context_ptr)
    if FREE:
        start = img.clock_ns()
        held = img.wait(flag, 1, context_ptr)
        before = img.healthy(context_ptr)
        running = img.elapsed_ns(context_ptr, start)
        first = img.record_error(context_ptr, code, detail, 11, ctx.rank, img.clock_ns() - start)
        second = img.record_error(context_ptr, code, detail + 1, 21, ctx.rank, img.clock_ns() - start)
        after = img.healthy(context_ptr)
        stopped = img.elapsed_ns(context_ptr, start)
    else:
        start = ctx.clock_ns()
        held = ctx.wait(flag, 1)
        before = ctx.healthy()
        running = ctx.elapsed_ns(start)
        first = ctx.record_error(code, detail, 11, ctx.rank, ctx.clock_ns() - start)
        second = ctx.record_error(code, detail + 1, 21, ctx.rank, ctx.clock_ns() - start)
        after = ctx.healthy()
        stopped = ctx.elapsed_ns(start)
    gl.store(out, held.to(gl.int32))
    gl.store(out + 1, before.to(gl.int32))
    gl.store(out + 2, first.to(gl.int32))
    gl.store(out + 3, second.to(gl.int32))
    gl.store(out + 4, after.to(gl.int32))
    gl.store(out + 5, running.to(gl.int32))
    gl.store(out + 6, stopped.to(gl.int32))


@img.interpret()
@gluon.jit
def closed_store_kernel(x, context_ptr, N: gl.constexpr, L: gl.constexpr):
    """The next rank's x[:N] = rank * 100 + 1 + offs, through ctx.store (given a closed heap's
    context: this rank's own x)."""
    ctx = Context.initialize(context_ptr)
    offs = gl.arange(0, N, layout=L)
    ctx.store(x + offs, (ctx.rank * 100 + 1 + offs).to(gl.int32), (ctx.rank + 1) % ctx.world_size)


def clock_cases():
    """(label, kernel, signature, constexprs) of the kernels that read the device clock."""
    cases = []
    for free in (False, True):
        cases += [
            (f"clock[free={free}]", clock_kernel, {"out": "*i64", "context_ptr": "*i64", "FREE": "constexpr"}, {"FREE": free}),
            (f"record_error[free={free}]", record_error_kernel,
             {"flag": "*i32", "out": "*i32", "context_ptr": "*i64", "code": "i64", "detail": "i64", "FREE": "constexpr"},
             {"FREE": free}),
        ]  # fmt: skip
    return cases


# -- streaming copies (vectorization check; the benchmark has its own) ----------------------------


@img.interpret()
@gluon.jit
def stream_local_kernel(src, dst, context_ptr, n, BLOCK: gl.constexpr, L: gl.constexpr):
    """dst = src, plain Gluon, no translation: the reference for vector widths. The context is
    initialized as in the translated copies (its closed-heap check stores the error record), so
    that translation is all they differ by."""
    Context.initialize(context_ptr)
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    gl.store(dst + offs, gl.load(src + offs, mask=mask), mask=mask)


@img.interpret()
@gluon.jit
def stream_kernel(src, dst, context_ptr, n, OP: gl.constexpr, BLOCK: gl.constexpr, L: gl.constexpr):
    """dst = src through one translated operation against the next rank."""
    ctx = Context.initialize(context_ptr)
    peer = (ctx.rank + 1) % ctx.world_size
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    if OP == "load":
        gl.store(dst + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    elif OP == "store":
        ctx.store(dst + offs, gl.load(src + offs, mask=mask), peer, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, peer, mask=mask)
    elif OP == "put":
        ctx.put(src + offs, dst + offs, peer, mask=mask)
    else:
        ctx.copy(src + offs, dst + offs, peer, ctx.rank, mask=mask)


STREAM_OPS = ("load", "store", "get", "put", "copy")

_TORCH_NAME = {"i8": "int8", "i32": "int32", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def stream_cases(dtype="fp32", block=1024, target=None):
    """(name, kernel, signature, constexprs) of the local copy and each translated operation."""
    import torch

    lay = layout(block, target, dtype=getattr(torch, _TORCH_NAME[dtype]))
    sig = {"src": f"*{dtype}", "dst": f"*{dtype}", "context_ptr": "*i64", "n": "i32"}
    cases = [
        ("local", stream_local_kernel, {**sig, "BLOCK": "constexpr", "L": "constexpr"}, {"BLOCK": block, "L": lay})
    ]
    for op in STREAM_OPS:
        cases.append((op, stream_kernel, {**sig, "OP": "constexpr", "BLOCK": "constexpr", "L": "constexpr"},
                      {"OP": op, "BLOCK": block, "L": lay}))  # fmt: skip
    return cases


# -- the compile-only cases ----------------------------------------------------------------------

RMA_DTYPES = ("i8", "i32", "fp16", "bf16", "fp32")
ATOMIC_OPS = ("add", "sub", "xchg", "cas", "and", "or", "xor", "min", "max")
SEMS = (None, "relaxed", "acquire", "release", "acq_rel")
SCOPES = (None, "cta", "gpu", "sys")
COMPARISONS = ("==", "!=", ">=", ">", "<=", "<")
N = 64  # the RMA tests' block
LANES = 16  # the atomic tests' block


def atomic_api(op: str, free: bool):
    """What ``atomic_kernel``'s ``FN`` applies for ``op``: ``img.atomic_<op>`` (``free``) or the
    ``Context`` method of that name (called with the context as its first argument)."""
    return getattr(img if free else Context, f"atomic_{op}")


def _atomic_dtypes(op):
    ints = ("i32", "u32", "i64", "u64")
    if op in ("and", "or", "xor"):
        return ints
    if op in ("add", "cas"):
        return ints + ("fp16", "bf16", "fp32", "fp64")
    return ints + ("fp32", "fp64")  # sub, xchg (Triton has no 16-bit float xchg), min, max


def compile_cases(target):
    """(label, kernel, signature, constexprs) for every kernel above, in the variants the tests use,
    with layouts for ``target``'s warp size.

    Every (kernel, dtype) and every (op, dtype) is compiled once, through one of the two APIs in
    turn; every (op, sem, scope) once on int32. (Each compile costs about a second on two cores.)
    """
    L, LL = layout(N, target), layout(LANES, target)
    cases = []
    ctx = {"context_ptr": "*i64"}
    rma = {"N": "constexpr", "L": "constexpr", "FREE": "constexpr"}
    for i, dt in enumerate(RMA_DTYPES):
        free = bool(i % 2)
        consts = {"N": N, "L": L, "FREE": free}
        cases += [
            (f"load[{dt},free={free}]", load_kernel,
             {"src": f"*{dt}", "out": f"*{dt}", **ctx, "n_valid": "i32", "other": "fp32", **rma}, consts),
            (f"store[{dt},free={not free}]", store_kernel,
             {"src": f"*{dt}", "dst": f"*{dt}", **ctx, "n_valid": "i32", **rma}, {**consts, "FREE": not free}),
            (f"get[{dt},free={free}]", get_kernel,
             {"src": f"*{dt}", "dst": f"*{dt}", **ctx, "n_valid": "i32", "other": "fp32", **rma}, consts),
            (f"put[{dt},free={not free}]", put_kernel,
             {"src": f"*{dt}", "dst": f"*{dt}", **ctx, "n_valid": "i32", **rma}, {**consts, "FREE": not free}),
            (f"copy[{dt},free={free}]", copy_kernel,
             {"src": f"*{dt}", "dst": f"*{dt}", **ctx, "n_valid": "i32", "other": "fp32", **rma}, consts),
        ]  # fmt: skip
    for cache, volatile in ((".cg", False), ("", True)):
        cases.append((f"load[cache={cache},volatile={volatile}]", load_kernel,
                      {"src": "*fp32", "out": "*fp32", **ctx, "n_valid": "i32", "other": "fp32", **rma,
                       "CACHE": "constexpr", "VOLATILE": "constexpr"},
                      {"N": N, "L": L, "FREE": False, "CACHE": cache, "VOLATILE": volatile}))  # fmt: skip
    cases.append(("store[cache=.wt]", store_kernel,
                  {"src": "*fp32", "dst": "*fp32", **ctx, "n_valid": "i32", **rma, "CACHE": "constexpr"},
                  {"N": N, "L": L, "FREE": True, "CACHE": ".wt"}))  # fmt: skip
    for free in (False, True):
        cases += [
            (f"get[hint=16,free={free}]", get_kernel,
             {"src": "*fp32", "dst": "*fp32", **ctx, "n_valid": "i32", "other": "fp32", **rma, "HINT": "constexpr"},
             {"N": N, "L": L, "FREE": free, "HINT": 16}),
            (f"translate[free={free}]", translate_kernel, {"x": "*fp32", "out": "*i64", **ctx, "FREE": "constexpr"}, {"FREE": free}),
            (f"shapes[free={free}]", shapes_kernel,
             {"x": "*i32", "scalars": "*i32", "grid": "*i32", **ctx, "ROWS": "constexpr", "COLS": "constexpr",
              "L2": "constexpr", "FREE": "constexpr"},
             {"ROWS": 4, "COLS": 16, "L2": layout_2d(16, target), "FREE": free}),
            (f"broadcast[free={free}]", broadcast_kernel, {"x": "*i32", **ctx, **rma}, {"N": N, "L": L, "FREE": free}),
            (f"scalar_atomic[free={free}]", scalar_atomic_kernel,
             {"counter": "*i32", "olds": "*i32", **ctx, "REPS": "constexpr", "FREE": "constexpr"}, {"REPS": 4, "FREE": free}),
            (f"spinlock[free={free}]", spinlock_kernel,
             {"lock": "*i32", "counter": "*i32", "failed": "*i32", **ctx, "ITERS": "constexpr", "LIMIT": "constexpr", "FREE": "constexpr"},
             {"ITERS": 4, "LIMIT": 1000, "FREE": free}),
            (f"message[free={free}]", message_kernel,
             {"data": "*fp32", "inbox": "*fp32", "flags": "*i32", "out": "*fp32", **ctx, "ROUNDS": "constexpr", **rma},
             {"ROUNDS": 3, "N": N, "L": L, "FREE": free}),
        ]  # fmt: skip
    for i, cmp in enumerate(COMPARISONS):
        cases.append((f"wait[{cmp}]", wait_kernel,
                      {"flag": "*i32", "value": "i32", "result": "*i32", **ctx, "CMP": "constexpr", "FREE": "constexpr"},
                      {"CMP": cmp, "FREE": bool(i % 2)}))  # fmt: skip
    for free in (False, True):
        cases.append((f"wait_block[free={free}]", wait_block_kernel,
                      {"flags": "*i32", "value": "i32", "result": "*i32", **ctx, "LANES": "constexpr", "L": "constexpr",
                       "FREE": "constexpr"}, {"LANES": 4, "L": layout(4, target), "FREE": free}))  # fmt: skip
        cases.append((f"wait_each[free={free}]", wait_each_kernel,
                      {"flag": "*i32", "value": "i32", "results": "*i32", **ctx, "FREE": "constexpr"}, {"FREE": free}))  # fmt: skip
    cases.append(("wait[default]", wait_default_kernel, {"flag": "*i32", "value": "i32", "result": "*i32", **ctx}, {}))
    cases += clock_cases()
    cases.append(("closed_store", closed_store_kernel, {"x": "*i32", **ctx, "N": "constexpr", "L": "constexpr"},
                  {"N": N, "L": L}))  # fmt: skip
    cases += [(f"stream[{name}]", fn, sig, consts) for name, fn, sig, consts in stream_cases("fp32", 1024, target)]

    def atomic(op, dt, free, sem=None, scope=None):
        init = "fp32" if dt.startswith(("fp", "bf")) else "i64" if dt.endswith("64") else "i32"
        sig = {"buf": f"*{dt}", "vals": f"*{dt}", "shared_olds": f"*{dt}", "private_olds": f"*{dt}", **ctx, "init": init,
               "FN": "constexpr", "OP": "constexpr", "LANES": "constexpr", "L": "constexpr", "REPS": "constexpr", "FREE": "constexpr",
               "SEM": "constexpr", "SCOPE": "constexpr"}  # fmt: skip
        consts = {
            "FN": atomic_api(op, free),
            "OP": op,
            "LANES": LANES,
            "L": LL,
            "REPS": 2,
            "FREE": free,
            "SEM": sem,
            "SCOPE": scope,
        }
        return (f"atomic[{op},{dt},free={free},sem={sem},scope={scope}]", atomic_kernel, sig, consts)

    k = 0
    for op in ATOMIC_OPS:
        for dt in _atomic_dtypes(op):
            cases.append(atomic(op, dt, dt == "i32"))
    for sem in SEMS:
        for scope in SCOPES:
            op = ATOMIC_OPS[k % len(ATOMIC_OPS)]
            k += 1
            cases.append(atomic(op, "i32", bool(k % 2), sem, scope))
    return cases

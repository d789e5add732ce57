"""The Triton kernels of the mem conformance suite (iris.testing.mem; imported in the ranks, once
TRITON_INTERPRET is settled), and what the suite's adapter asks of them.

Each kernel takes the device context and, with ``FREE=True``, uses the free functions with the
rank and bases read from the context by hand instead of the ``Context`` aggregate, so every test
covers both APIs. ``compile_cases(target)`` lists every kernel with its signatures for the
compile-only test.
"""

import triton
import triton.language as tl
from triton.compiler import ASTSource

import iris.heap.context as abi
import iris.mem.triton as imt
from iris.mem.triton import Context

#: Warps per program of every launch and compile-only build (Triton's default, stated).
NUM_WARPS = 4
#: The source of compile-only builds.
SOURCE = ASTSource


def launch_options(block=None, cols=None):
    """The keywords of a launch over a block of ``block`` elements (or of rows ``cols`` wide):
    Triton lays blocks out itself, so only the warps."""
    return {"num_warps": NUM_WARPS}


_RANK = tl.constexpr(abi.RANK_INDEX)
_WORLD_SIZE = tl.constexpr(abi.WORLD_SIZE_INDEX)
_BASES = tl.constexpr(abi.BASES_INDEX)


@triton.jit
def _apis(context_ptr):
    """Both APIs' inputs: the ``Context``, and rank, world_size, heap_bases read straight from the context
    (the free functions')."""
    rank, world_size = tl.load(context_ptr + _RANK), tl.load(context_ptr + _WORLD_SIZE)
    return Context.initialize(context_ptr), rank, world_size, context_ptr + _BASES


@triton.jit
def _block(context_ptr, n_valid, N: tl.constexpr):
    """``_apis``, then a block of N offsets and its mask (the first n_valid): the RMA kernels' inputs."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    offs = tl.arange(0, N)
    return ctx, rank, world_size, bases, offs, offs < n_valid


# -- load / store / get / put / copy -------------------------------------------------------------


@imt.interpret()
@triton.jit
def load_kernel(src, out, context_ptr, n_valid, other, N: tl.constexpr, FREE: tl.constexpr,
                CACHE: tl.constexpr = None, VOLATILE: tl.constexpr = False):  # fmt: skip
    """out[t] = rank t's src (other where offs >= n_valid), for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N)
    for t in range(world_size):
        if FREE:
            v = imt.load(src + offs, rank, t, bases, mask, other, CACHE, VOLATILE)
        else:
            v = ctx.load(src + offs, t, mask=mask, other=other, cache_modifier=CACHE, volatile=VOLATILE)
        tl.store(out + t * N + offs, v)


@imt.interpret()
@triton.jit
def store_kernel(src, dst, context_ptr, n_valid, N: tl.constexpr, FREE: tl.constexpr, CACHE: tl.constexpr = None):
    """Rank t's dst[rank] = local src where offs < n_valid, for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N)
    value = tl.load(src + offs)
    for t in range(world_size):
        if FREE:
            imt.store(dst + rank * N + offs, value, rank, t, bases, mask, CACHE)
        else:
            ctx.store(dst + rank * N + offs, value, t, mask=mask, cache_modifier=CACHE)


@imt.interpret()
@triton.jit
def get_kernel(src, dst, context_ptr, n_valid, other, N: tl.constexpr, FREE: tl.constexpr, HINT: tl.constexpr = None):
    """Local dst[t] = rank t's src where offs < n_valid, for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N)
    for t in range(world_size):
        if FREE:
            imt.get(src + offs, dst + t * N + offs, rank, t, bases, mask, other, HINT)
        else:
            ctx.get(src + offs, dst + t * N + offs, t, mask=mask, other=other, hint=HINT)


@imt.interpret()
@triton.jit
def put_kernel(src, dst, context_ptr, n_valid, N: tl.constexpr, FREE: tl.constexpr, HINT: tl.constexpr = None):
    """Rank t's dst[rank] = local src where offs < n_valid, for every rank t."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N)
    for t in range(world_size):
        if FREE:
            imt.put(src + offs, dst + rank * N + offs, rank, t, bases, mask, HINT)
        else:
            ctx.put(src + offs, dst + rank * N + offs, t, mask=mask, hint=HINT)


@imt.interpret()
@triton.jit
def copy_kernel(src, dst, context_ptr, n_valid, other, N: tl.constexpr, FREE: tl.constexpr):
    """Rank b's dst[rank, a] = rank a's src where offs < n_valid, for every pair of ranks (a, b)."""
    ctx, rank, world_size, bases, offs, mask = _block(context_ptr, n_valid, N)
    for a in range(world_size):
        for b in range(world_size):
            slot = dst + (rank * world_size + a) * N + offs
            if FREE:
                imt.copy(src + offs, slot, rank, a, b, bases, mask, other)
            else:
                ctx.copy(src + offs, slot, a, b, mask=mask, other=other)


@imt.interpret()
@triton.jit
def translate_kernel(x, out, context_ptr, FREE: tl.constexpr):
    """out[t] = the address of x in rank t's heap, as mapped in this process."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    for t in range(world_size):
        if FREE:
            p = imt.translate(x, rank, t, bases)
        else:
            p = ctx.translate(x, t)
        tl.store(out + t, p.to(tl.int64, bitcast=True))


@imt.interpret()
@triton.jit
def shapes_kernel(x, scalars, grid, context_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, FREE: tl.constexpr):
    """Scalar pointers and 2-D tensors of pointers, for every rank t: scalars[t] = rank t's x[0];
    rank t's x[ROWS * COLS + rank] = that + 1; grid[t] = rank t's x[:ROWS * COLS] as a ROWS x COLS
    block, the last row masked off (other = -1)."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    mask = offs < (ROWS - 1) * COLS
    for t in range(world_size):
        if FREE:
            s = imt.load(x, rank, t, bases)
            imt.store(x + ROWS * COLS + rank, s + 1, rank, t, bases)
            imt.get(x + offs, grid + t * ROWS * COLS + offs, rank, t, bases, mask, -1)
        else:
            s = ctx.load(x, t)
            ctx.store(x + ROWS * COLS + rank, s + 1, t)
            ctx.get(x + offs, grid + t * ROWS * COLS + offs, t, mask=mask, other=-1)
        tl.store(scalars + t, s)


@imt.interpret()
@triton.jit
def broadcast_kernel(x, context_ptr, N: tl.constexpr, FREE: tl.constexpr, CAS: tl.constexpr = True):
    """Scalar values into blocks of pointers, on the next rank's x[0:N) .. x[5N:6N): store 7,
    atomic_add 3, atomic_max 9, atomic_xchg 4 and (with CAS) atomic_cas(0 -> 5) on an int32 block,
    and atomic_add 1.5 on the fp32 view of the last block."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    offs = tl.arange(0, N)
    t = (rank + 1) % world_size
    f = (x + 5 * N).to(tl.pointer_type(tl.float32), bitcast=True)
    if FREE:
        imt.store(x + offs, 7, rank, t, bases)
        imt.atomic_add(x + N + offs, 3, rank, t, bases)
        imt.atomic_max(x + 2 * N + offs, 9, rank, t, bases)
        imt.atomic_xchg(x + 3 * N + offs, 4, rank, t, bases)
        if CAS:
            imt.atomic_cas(x + 4 * N + offs, 0, 5, rank, t, bases)
        imt.atomic_add(f + offs, 1.5, rank, t, bases)
    else:
        ctx.store(x + offs, 7, t)
        ctx.atomic_add(x + N + offs, 3, t)
        ctx.atomic_max(x + 2 * N + offs, 9, t)
        ctx.atomic_xchg(x + 3 * N + offs, 4, t)
        if CAS:
            ctx.atomic_cas(x + 4 * N + offs, 0, 5, t)
        ctx.atomic_add(f + offs, 1.5, t)


# -- atomics -------------------------------------------------------------------------------------


@triton.jit
def _atomic(ctx, rank, bases, ptr, val, t, mask, FN: tl.constexpr, OP: tl.constexpr, FREE: tl.constexpr,
            SEM: tl.constexpr, SCOPE: tl.constexpr):  # fmt: skip
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


@imt.interpret()
@triton.jit
def atomic_kernel(buf, vals, shared_olds, private_olds, context_ptr, init, FN: tl.constexpr, OP: tl.constexpr, LANES: tl.constexpr,
                  REPS: tl.constexpr, FREE: tl.constexpr, SEM: tl.constexpr = None, SCOPE: tl.constexpr = None):  # fmt: skip
    """On every rank t: every lane of every program applies OP with vals[rank, lane] to t's buf[0]
    (REPS times; old values to shared_olds[t, pid, rep, lane]), and program 0's lane 0 applies it
    once to t's private word buf[1 + rank * LANES] (old value to private_olds[t]).

    buf layout: [shared word, then LANES words per rank]. atomic_cas swaps init -> vals (lanes
    other than lane 0 compare against init + 1 on the private words, so they never swap)."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    pid = tl.program_id(0)
    lane = tl.arange(0, LANES)
    val = tl.load(vals + rank * LANES + lane)
    elem = buf.dtype.element_ty
    initial = (tl.full([LANES], 0, elem) + init).to(elem)
    shared = buf + lane * 0
    private = buf + 1 + rank * LANES + lane
    first = (lane + pid) == 0  # (lane == 0) & (pid == 0): the interpreter rejects that mask
    for t in range(world_size):
        for rep in range(REPS):
            if OP == "cas":
                old = _atomic(ctx, rank, bases, shared, (initial, val), t, None, FN, OP, FREE, SEM, SCOPE)
            else:
                old = _atomic(ctx, rank, bases, shared, val, t, None, FN, OP, FREE, SEM, SCOPE)
            tl.store(shared_olds + ((t * tl.num_programs(0) + pid) * REPS + rep) * LANES + lane, old)
        if OP == "cas":
            cmp = tl.where(lane == 0, initial, initial + 1)
            if pid == 0:
                old = _atomic(ctx, rank, bases, private, (cmp, val), t, None, FN, OP, FREE, SEM, SCOPE)
                tl.store(private_olds + t + lane * 0, old, mask=lane == 0)
        else:
            old = _atomic(ctx, rank, bases, private, val, t, first, FN, OP, FREE, SEM, SCOPE)
            tl.store(private_olds + t + lane * 0, old, mask=first)


@imt.interpret()
@triton.jit
def scalar_atomic_kernel(counter, olds, context_ptr, REPS: tl.constexpr, FREE: tl.constexpr):
    """Scalar pointers: REPS atomic_add(1) into every rank's counter; olds[t, rep] the values seen."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    for t in range(world_size):
        for rep in range(REPS):
            if FREE:
                old = imt.atomic_add(counter, 1, rank, t, bases)
            else:
                old = ctx.atomic_add(counter, 1, t)
            tl.store(olds + t * REPS + rep, old)


@imt.interpret()
@triton.jit
def spinlock_kernel(lock, counter, failed, context_ptr, ITERS: tl.constexpr, LIMIT: tl.constexpr, FREE: tl.constexpr):
    """ITERS times: take rank 0's lock by CAS (acquire), increment rank 0's counter with a plain
    load and store, release by xchg (release). failed[0] = 1 if a lock wait passed LIMIT spins."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    for _ in range(ITERS):
        spins = 0
        if FREE:
            got = imt.atomic_cas(lock, 0, 1, rank, 0, bases, sem="acquire")
        else:
            got = ctx.atomic_cas(lock, 0, 1, 0, sem="acquire")
        while (got != 0) & (spins < LIMIT):
            if FREE:
                got = imt.atomic_cas(lock, 0, 1, rank, 0, bases, sem="acquire")
            else:
                got = ctx.atomic_cas(lock, 0, 1, 0, sem="acquire")
            spins += 1
        if got == 0:
            if FREE:
                v = imt.load(counter, rank, 0, bases)
                imt.store(counter, v + 1, rank, 0, bases)
                tl.debug_barrier()
                imt.atomic_xchg(lock, 0, rank, 0, bases, sem="release")
            else:
                v = ctx.load(counter, 0)
                ctx.store(counter, v + 1, 0)
                tl.debug_barrier()
                ctx.atomic_xchg(lock, 0, 0, sem="release")
        else:
            tl.store(failed, 1)


@imt.interpret()
@triton.jit
def message_kernel(data, inbox, flags, out, context_ptr, ROUNDS: tl.constexpr, N: tl.constexpr, FREE: tl.constexpr):
    """ROUNDS times: put data + round into the next rank's inbox[round], then signal its flag with
    a release atomic; wait (acquire) for our own flag >= round + 1 and copy inbox[round] to out[round]."""
    ctx, rank, world_size, bases = _apis(context_ptr)
    nxt = (rank + 1) % world_size
    offs = tl.arange(0, N)
    for r in range(ROUNDS):
        payload = tl.load(data + offs) + r
        # every thread's stores must precede the (single-thread) release atomic that signals them
        if FREE:
            imt.store(inbox + r * N + offs, payload, rank, nxt, bases)
            tl.debug_barrier()
            imt.atomic_add(flags, 1, rank, nxt, bases, sem="release")
            ok = imt.wait(flags, r + 1, context_ptr, ">=")
        else:
            ctx.store(inbox + r * N + offs, payload, nxt)
            tl.debug_barrier()
            ctx.atomic_add(flags, 1, nxt, sem="release")
            ok = ctx.wait(flags, r + 1, ">=")
        if ok:
            tl.store(out + r * N + offs, tl.load(inbox + r * N + offs))


# -- bounded wait --------------------------------------------------------------------------------


@imt.interpret()
@triton.jit
def wait_kernel(flag, value, result, context_ptr, CMP: tl.constexpr, FREE: tl.constexpr):
    """result[0] = wait(flag, value, CMP) as 0/1."""
    ctx = Context.initialize(context_ptr)
    if FREE:
        ok = imt.wait(flag, value, context_ptr, CMP)
    else:
        ok = ctx.wait(flag, value, CMP)
    tl.store(result, ok.to(tl.int32))


@imt.interpret()
@triton.jit
def wait_default_kernel(flag, value, result, context_ptr):
    """result[0] = ctx.wait(flag, value) with the default comparison (==)."""
    ctx = Context.initialize(context_ptr)
    tl.store(result, ctx.wait(flag, value).to(tl.int32))


@imt.interpret()
@triton.jit
def wait_block_kernel(flags, value, result, context_ptr, LANES: tl.constexpr, FREE: tl.constexpr):
    """result[0] = wait on the block flags[min(i, 2)] for i < LANES (lanes repeat the last flag) >= value."""
    ctx = Context.initialize(context_ptr)
    ptrs = flags + tl.minimum(tl.arange(0, LANES), 2)
    if FREE:
        ok = imt.wait(ptrs, value, context_ptr, ">=")
    else:
        ok = ctx.wait(ptrs, value, ">=")
    tl.store(result, ok.to(tl.int32))


@imt.interpret()
@triton.jit
def wait_each_kernel(flag, value, results, context_ptr, FREE: tl.constexpr):
    """results[program] = wait(flag == value) as 0/1: many programs (and warps) give up at once."""
    ctx = Context.initialize(context_ptr)
    if FREE:
        ok = imt.wait(flag, value, context_ptr)
    else:
        ok = ctx.wait(flag, value)
    tl.store(results + tl.program_id(0), ok.to(tl.int32))


# -- the device clock and device errors ------------------------------------------------------------


@imt.interpret()
@triton.jit
def clock_kernel(out, context_ptr, FREE: tl.constexpr):
    """out = [the device clock, the bound of a wait in its nanoseconds]."""
    if FREE:
        now = imt.clock_ns()
        bound = imt.wait_timeout_ns(context_ptr)
    else:
        ctx = Context.initialize(context_ptr)
        now = ctx.clock_ns()
        bound = ctx.wait_timeout_ns()
    tl.store(out, now)
    tl.store(out + 1, bound)


@imt.interpret()
@triton.jit
def record_error_kernel(flag, out, context_ptr, code, detail, FREE: tl.constexpr):
    """A wait for flag == 1, then two record_error calls (details detail and detail + 1, aux the
    clock's ns since the wait began): out = [wait held, healthy before, first won, second won,
    healthy after, elapsed_ns before the first (>= 0), elapsed_ns after it (-1)]."""
    ctx = Context.initialize(context_ptr)
    if FREE:
        start = imt.clock_ns()
        held = imt.wait(flag, 1, context_ptr)
        before = imt.healthy(context_ptr)
        running = imt.elapsed_ns(context_ptr, start)
        first = imt.record_error(context_ptr, code, detail, 11, ctx.rank, imt.clock_ns() - start)
        second = imt.record_error(context_ptr, code, detail + 1, 21, ctx.rank, imt.clock_ns() - start)
        after = imt.healthy(context_ptr)
        stopped = imt.elapsed_ns(context_ptr, start)
    else:
        start = ctx.clock_ns()
        held = ctx.wait(flag, 1)
        before = ctx.healthy()
        running = ctx.elapsed_ns(start)
        first = ctx.record_error(code, detail, 11, ctx.rank, ctx.clock_ns() - start)
        second = ctx.record_error(code, detail + 1, 21, ctx.rank, ctx.clock_ns() - start)
        after = ctx.healthy()
        stopped = ctx.elapsed_ns(start)
    tl.store(out, held.to(tl.int32))
    tl.store(out + 1, before.to(tl.int32))
    tl.store(out + 2, first.to(tl.int32))
    tl.store(out + 3, second.to(tl.int32))
    tl.store(out + 4, after.to(tl.int32))
    tl.store(out + 5, running.to(tl.int32))
    tl.store(out + 6, stopped.to(tl.int32))


@imt.interpret()
@triton.jit
def closed_store_kernel(x, context_ptr, N: tl.constexpr):
    """The next rank's x[:N] = rank * 100 + 1 + offs, through ctx.store (given a closed heap's
    context: this rank's own x)."""
    ctx = Context.initialize(context_ptr)
    offs = tl.arange(0, N)
    ctx.store(x + offs, (ctx.rank * 100 + 1 + offs).to(tl.int32), (ctx.rank + 1) % ctx.world_size)


# -- the compile-only cases ----------------------------------------------------------------------

RMA_DTYPES = ("i8", "i32", "fp16", "bf16", "fp32")
RMA_KERNELS = {"load": load_kernel, "store": store_kernel, "get": get_kernel, "put": put_kernel, "copy": copy_kernel}
ATOMIC_OPS = ("add", "sub", "xchg", "cas", "and", "or", "xor", "min", "max")
SEMS = (None, "relaxed", "acquire", "release", "acq_rel")
SCOPES = (None, "cta", "gpu", "sys")
COMPARISONS = ("==", "!=", ">=", ">", "<=", "<")


def atomic_api(op: str, free: bool):
    """What ``atomic_kernel``'s ``FN`` applies for ``op``: ``imt.atomic_<op>`` (``free``) or the
    ``Context`` method of that name (called with the context as its first argument)."""
    return getattr(imt if free else Context, f"atomic_{op}")


def _atomic_dtypes(op):
    ints = ("i32", "u32", "i64", "u64")
    if op in ("and", "or", "xor"):
        return ints
    if op in ("add", "cas"):
        return ints + ("fp16", "bf16", "fp32", "fp64")
    return ints + ("fp32", "fp64")  # sub, xchg (no 16-bit exchange in Triton), min, max


def compile_cases(target):
    """(label, kernel, signature, constexprs) for every kernel above, in the variants the tests use
    (the same for every ``target``: Triton lays blocks out itself)."""
    cases = []
    ctx = {"context_ptr": "*i64"}

    def rma(label, op, dt, free, **extra):
        """The case of load/store/get/put/copy kernel ``op`` on ``dt`` elements, ``extra`` constexprs added."""
        sig = {"src": f"*{dt}", ("out" if op == "load" else "dst"): f"*{dt}", **ctx, "n_valid": "i32"}
        if op in ("load", "get", "copy"):
            sig["other"] = "fp32"
        sig.update(dict.fromkeys(["N", "FREE", *extra], "constexpr"))
        return (label, RMA_KERNELS[op], sig, {"N": 64, "FREE": free, **extra})

    for dt in RMA_DTYPES:
        for free in (False, True):
            cases += [rma(f"{op}[{dt},free={free}]", op, dt, free) for op in RMA_KERNELS]
    for cache, volatile in ((None, True), (".cg", False), (".ca", False), (".cv", False)):
        cases.append(
            rma(f"load[cache={cache},volatile={volatile}]", "load", "fp32", False, CACHE=cache, VOLATILE=volatile)
        )
    for cache in (".wb", ".cg", ".cs", ".wt"):
        cases.append(rma(f"store[cache={cache}]", "store", "fp32", True, CACHE=cache))
    for free in (False, True):
        cases += [
            rma(f"get[hint=16,free={free}]", "get", "fp32", free, HINT=16),
            (f"translate[free={free}]", translate_kernel, {"x": "*fp32", "out": "*i64", **ctx, "FREE": "constexpr"}, {"FREE": free}),
            (f"shapes[free={free}]", shapes_kernel,
             {"x": "*i32", "scalars": "*i32", "grid": "*i32", **ctx, "ROWS": "constexpr", "COLS": "constexpr", "FREE": "constexpr"},
             {"ROWS": 4, "COLS": 16, "FREE": free}),
            # (without atomic_cas: scalar cmp and val over a block is a declared difference of Triton's)
            (f"broadcast[free={free}]", broadcast_kernel,
             {"x": "*i32", **ctx, "N": "constexpr", "FREE": "constexpr", "CAS": "constexpr"},
             {"N": 64, "FREE": free, "CAS": False}),
            (f"scalar_atomic[free={free}]", scalar_atomic_kernel,
             {"counter": "*i32", "olds": "*i32", **ctx, "REPS": "constexpr", "FREE": "constexpr"}, {"REPS": 4, "FREE": free}),
            (f"spinlock[free={free}]", spinlock_kernel,
             {"lock": "*i32", "counter": "*i32", "failed": "*i32", **ctx, "ITERS": "constexpr", "LIMIT": "constexpr", "FREE": "constexpr"},
             {"ITERS": 4, "LIMIT": 1000, "FREE": free}),
            (f"message[free={free}]", message_kernel,
             {"data": "*fp32", "inbox": "*fp32", "flags": "*i32", "out": "*fp32", **ctx, "ROUNDS": "constexpr", "N": "constexpr", "FREE": "constexpr"},
             {"ROUNDS": 3, "N": 64, "FREE": free}),
        ]  # fmt: skip
        for cmp in COMPARISONS:
            cases.append((f"wait[{cmp},free={free}]", wait_kernel,
                          {"flag": "*i32", "value": "i32", "result": "*i32", **ctx, "CMP": "constexpr", "FREE": "constexpr"},
                          {"CMP": cmp, "FREE": free}))  # fmt: skip
        cases.append((f"wait_block[free={free}]", wait_block_kernel,
                      {"flags": "*i32", "value": "i32", "result": "*i32", **ctx, "LANES": "constexpr", "FREE": "constexpr"},
                      {"LANES": 4, "FREE": free}))  # fmt: skip
        cases.append((f"wait_each[free={free}]", wait_each_kernel,
                      {"flag": "*i32", "value": "i32", "results": "*i32", **ctx, "FREE": "constexpr"}, {"FREE": free}))  # fmt: skip
    cases.append(("wait[default]", wait_default_kernel, {"flag": "*i32", "value": "i32", "result": "*i32", **ctx}, {}))
    cases += clock_cases()
    cases.append(("closed_store", closed_store_kernel, {"x": "*i32", **ctx, "N": "constexpr"}, {"N": 64}))
    for dt in ("i8", "fp16", "fp32"):
        cases += [(f"stream[{name},{dt}]", fn, sig, consts) for name, fn, sig, consts in stream_cases(dt, 1024, target)]

    def atomic(op, dt, free, sem=None, scope=None):
        init = "fp32" if dt.startswith(("fp", "bf")) else "i64" if dt.endswith("64") else "i32"
        sig = {"buf": f"*{dt}", "vals": f"*{dt}", "shared_olds": f"*{dt}", "private_olds": f"*{dt}", **ctx, "init": init,
               "FN": "constexpr", "OP": "constexpr", "LANES": "constexpr", "REPS": "constexpr", "FREE": "constexpr", "SEM": "constexpr", "SCOPE": "constexpr"}  # fmt: skip
        consts = {
            "FN": atomic_api(op, free),
            "OP": op,
            "LANES": 16,
            "REPS": 2,
            "FREE": free,
            "SEM": sem,
            "SCOPE": scope,
        }
        return (f"atomic[{op},{dt},free={free},sem={sem},scope={scope}]", atomic_kernel, sig, consts)

    for op in ATOMIC_OPS:
        for dt in _atomic_dtypes(op):
            cases.append(atomic(op, dt, dt == "i32"))
        if op in ("add", "xchg", "cas"):  # one of each lowering: read-modify-write, exchange, CAS
            for sem in SEMS:
                for scope in SCOPES:
                    cases.append(atomic(op, "i32", False, sem, scope))
    return cases


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


@imt.interpret()
@triton.jit
def stream_local_kernel(src, dst, context_ptr, n, BLOCK: tl.constexpr):
    """dst = src, plain Triton, no translation: the reference for vector widths. The context is
    initialized as in the translated copies (its closed-heap check stores the error record), so
    that translation is all they differ by."""
    Context.initialize(context_ptr)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@imt.interpret()
@triton.jit
def stream_kernel(src, dst, context_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    """dst = src through one translated operation against the next rank."""
    ctx = Context.initialize(context_ptr)
    peer = (ctx.rank + 1) % ctx.world_size
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if OP == "load":
        tl.store(dst + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    elif OP == "store":
        ctx.store(dst + offs, tl.load(src + offs, mask=mask), peer, mask=mask)
    elif OP == "get":
        ctx.get(src + offs, dst + offs, peer, mask=mask)
    elif OP == "put":
        ctx.put(src + offs, dst + offs, peer, mask=mask)
    else:
        ctx.copy(src + offs, dst + offs, peer, ctx.rank, mask=mask)


STREAM_OPS = ("load", "store", "get", "put", "copy")


def stream_cases(dtype, block, target):
    """(name, kernel, signature, constexprs) of the local copy and each translated operation (the
    same for every ``target``)."""
    sig = {"src": f"*{dtype}", "dst": f"*{dtype}", "context_ptr": "*i64", "n": "i32"}
    cases = [("local", stream_local_kernel, {**sig, "BLOCK": "constexpr"}, {"BLOCK": block})]
    for op in STREAM_OPS:
        cases.append((op, stream_kernel, {**sig, "OP": "constexpr", "BLOCK": "constexpr"}, {"OP": op, "BLOCK": block}))
    return cases

"""Rank bodies of the mem conformance suite: module-level functions that spawned ranks import.

Each runs ``fn(rank, world_size, backend, ...)`` on every rank, allocates on a fresh heap, launches
the kernels of the backend's kernels module (imported in the rank, where TRITON_INTERPRET is
settled) with its launch options, and asserts against a torch reference. Failures come back with
the rank that raised them.
"""

import functools
import operator
import time

import torch

import iris.heap
from iris.testing import gather

from .backend import SCALAR_CAS_OVER_A_BLOCK

HEAP_SIZE = 1 << 22
N = 64  # elements per block
N_VALID = 50  # the mask keeps offsets < N_VALID (not a multiple of the vector width)
OTHER = -1.0

DTYPES = {
    "int8": torch.int8,
    "int32": torch.int32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
    "int64": torch.int64,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "fp64": torch.float64,
}
RMA_DTYPES = ("int8", "int32", "fp16", "bf16", "fp32")


def _heap():
    return iris.heap.init(HEAP_SIZE)


def values(rank, dtype, n=N):
    """Rank ``rank``'s source block: small integers, exact in every dtype, distinct per rank."""
    return ((torch.arange(n) % 32) + 16 * rank + 1).to(dtype)


def masked(block, fill):
    out = block.clone()
    out[N_VALID:] = fill
    return out


def _expect(got, want, what):
    got, want = got.cpu(), want.cpu()
    if not torch.equal(got, want):
        bad = (got != want).nonzero().flatten()[:8].tolist()
        raise AssertionError(
            f"{what}: mismatch at {bad}: got {got.flatten()[bad].tolist()}, want {want.flatten()[bad].tolist()}"
        )


# -- load / store / get / put / copy -------------------------------------------------------------


def check_load(rank, world_size, backend, free):
    K, heap = backend.load(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        for cache, volatile in ((None, False), (".cg", False), ("", True)):  # (PTX has no volatile .cg load)
            src = heap.as_symmetric(values(rank, dtype))
            out = heap.zeros(world_size * N, dtype=dtype)
            heap.barrier()
            K.load_kernel[(1,)](src, out, heap.context, N_VALID, OTHER, N=N, FREE=free, CACHE=cache, VOLATILE=volatile,
                                **K.launch_options(block=N))  # fmt: skip
            heap.barrier()
            for t in range(world_size):
                _expect(
                    out[t * N : (t + 1) * N],
                    masked(values(t, dtype), OTHER),
                    f"{name} load from rank {t} (cache={cache})",
                )
            heap.free(src), heap.free(out)


def check_store(rank, world_size, backend, free):
    K, heap = backend.load(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        for cache in (None, ".wt"):
            src = heap.as_symmetric(values(rank, dtype))
            dst = heap.zeros(world_size * N, dtype=dtype)
            heap.barrier()
            K.store_kernel[(1,)](
                src, dst, heap.context, N_VALID, N=N, FREE=free, CACHE=cache, **K.launch_options(block=N)
            )
            heap.barrier()
            for r in range(world_size):
                _expect(
                    dst[r * N : (r + 1) * N], masked(values(r, dtype), 0), f"{name} store from rank {r} (cache={cache})"
                )
            heap.free(src), heap.free(dst)


def check_get_or_put(rank, world_size, backend, op, free, hint=None):
    """``get``: this rank's dst[t] = rank t's src; ``put``: rank t's dst[rank] = this rank's src. Either
    way every rank ends with rank r's block (masked) in its dst[r]."""
    K, heap = backend.load(), _heap()
    kernel, other = (K.get_kernel, (OTHER,)) if op == "get" else (K.put_kernel, ())
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        src = heap.as_symmetric(values(rank, dtype))
        dst = heap.zeros(world_size * N, dtype=dtype)
        heap.barrier()
        kernel[(1,)](src, dst, heap.context, N_VALID, *other, N=N, FREE=free, HINT=hint, **K.launch_options(block=N))
        heap.barrier()
        for r in range(world_size):
            _expect(dst[r * N : (r + 1) * N], masked(values(r, dtype), 0), f"{name} {op} of rank {r}'s block")
        heap.free(src), heap.free(dst)


def check_copy(rank, world_size, backend, free):
    K, heap = backend.load(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        src = heap.as_symmetric(values(rank, dtype))
        dst = heap.zeros(world_size * world_size * N, dtype=dtype)
        heap.barrier()
        K.copy_kernel[(1,)](src, dst, heap.context, N_VALID, OTHER, N=N, FREE=free, **K.launch_options(block=N))
        heap.barrier()
        # dst[r, a] on this rank: written by rank r, copying rank a's src here
        for r in range(world_size):
            for a in range(world_size):
                slot = (r * world_size + a) * N
                _expect(dst[slot : slot + N], masked(values(a, dtype), 0), f"{name} copy by rank {r} from rank {a}")
        heap.free(src), heap.free(dst)


def check_translate(rank, world_size, backend, free):
    K, heap = backend.load(), _heap()
    heap.zeros(3)  # so x is not at offset 0
    x = heap.zeros(16)
    out = heap.zeros(world_size, dtype=torch.int64)
    K.translate_kernel[(1,)](x, out, heap.context, FREE=free)
    heap.barrier()
    bases = heap.heap_bases.tolist()
    assert all(b % 16 == 0 for b in bases), f"heap bases must be 16-byte aligned, got {[hex(b) for b in bases]}"
    want = [bases[t] + heap.offset(x) for t in range(world_size)]
    assert out.tolist() == want, f"translate: got {out.tolist()}, want {want}"
    assert out[rank].item() == x.data_ptr(), "translate to the own rank must be the identity"


def check_shapes(rank, world_size, backend, free):
    K, heap = backend.load(), _heap()
    rows, cols = 4, 16
    x = heap.zeros(rows * cols + world_size, dtype=torch.int32)
    x[: rows * cols] = torch.arange(rows * cols, dtype=torch.int32) + 100 * rank
    scalars = heap.zeros(world_size, dtype=torch.int32)
    grid = heap.zeros(world_size * rows * cols, dtype=torch.int32)
    heap.barrier()
    K.shapes_kernel[(1,)](
        x, scalars, grid, heap.context, ROWS=rows, COLS=cols, FREE=free, **K.launch_options(cols=cols)
    )
    heap.barrier()
    _expect(scalars, torch.tensor([100 * t for t in range(world_size)], dtype=torch.int32), "scalar load")
    _expect(x[rows * cols :], torch.tensor([100 * rank + 1] * world_size, dtype=torch.int32), "scalar store")
    for t in range(world_size):
        want = torch.arange(rows * cols, dtype=torch.int32) + 100 * t
        want[(rows - 1) * cols :] = 0  # masked off: the local block keeps its zeros
        _expect(grid[t * rows * cols : (t + 1) * rows * cols], want, f"2-D get from rank {t}")


def check_broadcast(rank, world_size, backend, free):
    """Scalar values given with blocks of pointers are spread over the block (store and atomics)."""
    K, heap = backend.load(), _heap()
    cas = not backend.differs(SCALAR_CAS_OVER_A_BLOCK)
    x = heap.zeros(6 * N, dtype=torch.int32)
    x[2 * N : 3 * N] = 5
    x[5 * N :] = torch.zeros(N, dtype=torch.float32).view(torch.int32)
    heap.barrier()
    K.broadcast_kernel[(1,)](x, heap.context, N=N, FREE=free, CAS=cas, **K.launch_options(block=N))
    heap.barrier()
    for i, v in enumerate((7, 3, 9, 4, 5 if cas else 0)):
        _expect(x[i * N : (i + 1) * N], torch.full((N,), v, dtype=torch.int32), f"scalar broadcast into block {i}")
    _expect(x[5 * N :].view(torch.float32), torch.full((N,), 1.5), "scalar fp32 atomic_add into a block")


# -- atomics -------------------------------------------------------------------------------------

LANES = 16

_INITIAL = {"add": 0, "sub": 1 << 20, "xchg": 0, "cas": 0, "and": -1, "or": 0, "xor": 0, "min": 1000, "max": 0}


def _initial(op, dtype):
    init = _INITIAL[op]
    if op == "and" and dtype in (torch.uint32, torch.uint64):
        init = (1 << (32 if dtype == torch.uint32 else 64)) - 1
    if op == "max" and dtype not in (torch.uint32, torch.uint64):
        init = -1000
    if op == "sub" and dtype in (torch.float16, torch.bfloat16):
        init = 128  # every intermediate stays an integer below 256: exact in bf16
    return init


def atomic_values(op, dtype, world_size):
    """vals[r, lane]: what rank r's lane applies. Bits for and/or/xor, small integers otherwise."""
    k = torch.arange(world_size * LANES).reshape(world_size, LANES)
    if op in ("and", "or", "xor"):
        bits = [1 << int(i % 30) for i in k.flatten()]
        if op == "and":
            ones = _initial("and", dtype)
            bits = [(ones ^ b) if ones > 0 else ~b for b in bits]
        return torch.tensor(bits, dtype=torch.int64).reshape(world_size, LANES).to(dtype)
    if op in ("min", "max") and dtype not in (torch.uint32, torch.uint64):
        return (k % 31 - 15).to(dtype)  # negative and positive (float min/max work on the bits)
    if op in ("add", "sub") and dtype in (torch.float16, torch.bfloat16):
        return torch.ones(world_size, LANES, dtype=dtype)  # sums stay exact in 16-bit floats
    return (k % 31 + 1).to(dtype)


def _fold(op, init, applied):
    if op == "add":
        return init + sum(applied)
    if op == "sub":
        return init - sum(applied)
    if op == "and":
        return functools.reduce(operator.and_, applied, init)
    if op == "or":
        return functools.reduce(operator.or_, applied, init)
    if op == "xor":
        return functools.reduce(operator.xor, applied, init)
    if op == "min":
        return min([init, *applied])
    if op == "max":
        return max([init, *applied])
    raise ValueError(op)


def _applied_once(op, init, v):
    if op in ("xchg", "cas"):
        return v
    return _fold(op, init, [v])


def check_atomic(rank, world_size, backend, op, dtype_names, free, programs, reps, orders=((None, None),)):
    """Contention from every lane of every program of every rank on each rank's shared word, plus
    one masked, uncontended update of a private word per rank: exact results and old values.
    ``orders``: the (sem, scope) pairs to run each dtype with."""
    K, heap = backend.load(), _heap()
    for name, (sem, scope) in [(n, o) for n in dtype_names for o in orders]:
        dtype = DTYPES[name]
        init = _initial(op, dtype)
        vals_cpu = atomic_values(op, dtype, world_size)
        vals = heap.as_symmetric(vals_cpu)
        buf = heap.full((1 + world_size * LANES,), init, dtype=dtype)
        shared_olds = heap.zeros(world_size * programs * reps * LANES, dtype=dtype)
        private_olds = heap.zeros(world_size, dtype=dtype)
        kernel_init = float(init) if dtype.is_floating_point else init
        if dtype in (torch.uint32, torch.uint64) and init >= 1 << 31:
            kernel_init = -1  # all ones; the kernel converts it to the element type
        heap.barrier()
        K.atomic_kernel[(programs,)](buf, vals, shared_olds, private_olds, heap.context, kernel_init,
                                     FN=K.atomic_api(op, free), OP=op, LANES=LANES, REPS=reps, FREE=free, SEM=sem, SCOPE=scope,
                                     **K.launch_options(block=LANES))  # fmt: skip
        heap.barrier()
        what = f"atomic_{op} on {name} (sem={sem}, scope={scope}, free={free})"
        per_rank = vals_cpu.tolist()
        applied = [v for r in range(world_size) for v in per_rank[r] for _ in range(programs * reps)]
        final = buf[0].item()
        if op == "cas":
            olds = gather(shared_olds.tolist(), world_size)
            # on this rank's word exactly one lane, somewhere, saw the initial value and won
            winners_here = sum(
                1
                for r in range(world_size)
                for i, o in enumerate(olds[r])
                if _target_of(i, programs, reps) == rank and o == init
            )
            assert winners_here == 1, f"{what}: {winners_here} winners on rank {rank}'s word"
            assert final in applied, f"{what}: final {final} is no rank's value"
        elif op == "xchg":
            olds = gather(shared_olds.tolist(), world_size)
            mine = [
                o for r in range(world_size) for i, o in enumerate(olds[r]) if _target_of(i, programs, reps) == rank
            ]
            assert sorted(mine + [final]) == sorted([init] + applied), f"{what}: exchanged values do not chain"
        else:
            want = _fold(op, init, applied)
            assert final == want, f"{what}: shared word holds {final}, want {want}"
        # private words: rank r's lane 0 applied vals[r, 0] once and saw the initial value
        private = buf[1:].reshape(world_size, LANES).tolist()
        for r in range(world_size):
            want_word = _applied_once(op, init, per_rank[r][0])
            assert private[r][0] == want_word, (
                f"{what}: rank {r}'s private word holds {private[r][0]}, want {want_word}"
            )
            assert private[r][1:] == [init] * (LANES - 1), f"{what}: masked-off lanes of rank {r} were written"
        olds = private_olds.tolist()
        assert olds == [init] * world_size, f"{what}: private old values {olds}, want {init}"
        for t in (vals, buf, shared_olds, private_olds):
            heap.free(t)


def _target_of(index, programs, reps):
    """The target rank of entry ``index`` of shared_olds ([t, pid, rep, lane])."""
    return index // (programs * reps * LANES)


def check_scalar_atomics(rank, world_size, backend, free, reps):
    K, heap = backend.load(), _heap()
    counter = heap.zeros(1, dtype=torch.int32)
    olds = heap.zeros(world_size * reps, dtype=torch.int32)
    heap.barrier()
    K.scalar_atomic_kernel[(1,)](counter, olds, heap.context, REPS=reps, FREE=free)
    heap.barrier()
    assert counter.item() == world_size * reps, f"scalar atomic_add: counter {counter.item()}, want {world_size * reps}"
    seen = gather(olds.tolist(), world_size)
    mine = sorted(o for r in range(world_size) for o in seen[r][rank * reps : (rank + 1) * reps])
    assert mine == list(range(world_size * reps)), (
        f"scalar atomic_add: old values {mine} are not 0..{world_size * reps - 1}"
    )


def check_spinlock(rank, world_size, backend, free, iters):
    K, heap = backend.load(), _heap()
    lock = heap.zeros(1, dtype=torch.int32)
    counter = heap.zeros(1, dtype=torch.int32)
    failed = heap.zeros(1, dtype=torch.int32)
    heap.barrier()
    K.spinlock_kernel[(1,)](lock, counter, failed, heap.context, ITERS=iters, LIMIT=1 << 22, FREE=free)
    heap.barrier()
    assert failed.item() == 0, "spinlock: a rank gave up waiting for the lock"
    if rank == 0:
        assert counter.item() == world_size * iters, f"spinlock: counter {counter.item()}, want {world_size * iters}"
        assert lock.item() == 0, "spinlock: lock left taken"


def check_message_passing(rank, world_size, backend, free, rounds):
    K, heap = backend.load(), _heap()
    data = heap.as_symmetric(torch.arange(N, dtype=torch.float32) * (rank + 1))
    inbox = heap.zeros(rounds * N)
    flags = heap.zeros(1, dtype=torch.int32)
    out = heap.zeros(rounds * N)
    heap.barrier()
    K.message_kernel[(1,)](
        data, inbox, flags, out, heap.context, ROUNDS=rounds, N=N, FREE=free, **K.launch_options(block=N)
    )
    heap.barrier()  # raises WaitTimeoutError if a wait gave up
    prev = (rank - 1) % world_size
    for r in range(rounds):
        _expect(
            out[r * N : (r + 1) * N],
            torch.arange(N, dtype=torch.float32) * (prev + 1) + r,
            f"message {r} from rank {prev}",
        )
    assert flags.item() == rounds


# -- bounded wait --------------------------------------------------------------------------------

COMPARISONS = {
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


#: Bound of the waits that are meant to time out (seconds): short, as each one lasts that long.
SHORT_WAIT = 0.05


def _sync(heap):
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)


def _timeout(heap, what):
    """The recorded wait timeout (checked against the ABI's meaning of its words), then cleared."""
    error = heap._record.read()
    if error is None:
        raise AssertionError(f"{what} timed out without recording an error")
    assert error.code == iris.heap.context.ERROR_WAIT_TIMEOUT, f"{what}: recorded {error}"
    assert error.peer == -1, f"{what}: recorded {error}"
    assert error.aux >= round(heap.wait_timeout * 1e9), f"{what}: gave up after {error.aux} ns, before the bound"
    try:
        heap.check_device_errors()
    except iris.heap.WaitTimeoutError as e:
        assert e.offset == error.detail and e.value == error.value, (e.offset, e.value, error)
    else:
        raise AssertionError(f"{what}: check_device_errors() did not raise {error}")
    return error


def check_wait_outcomes(rank, world_size, backend, free):
    """The bound the kernels read is heap.wait_timeout; each comparison, satisfied (True at once)
    and not (False after the bound, error recorded)."""
    K, heap = backend.load(), _heap()
    heap.wait_timeout = SHORT_WAIT
    bound = heap.zeros(2, dtype=torch.int64)
    K.clock_kernel[(1,)](bound, heap.context, FREE=free)
    _sync(heap)
    assert bound[1].item() == round(SHORT_WAIT * 1e9), f"wait_timeout_ns() {bound[1].item()}, want {SHORT_WAIT} s"
    heap.zeros(5)  # the flag is not at offset 0
    flag = heap.full((1,), 7, dtype=torch.int32)
    result = heap.zeros(1, dtype=torch.int32)
    for cmp, fn in COMPARISONS.items():
        for value in (6, 7, 8):
            K.wait_kernel[(1,)](flag, value, result, heap.context, CMP=cmp, FREE=free)
            holds = fn(7, value)
            _sync(heap)
            assert result.item() == int(holds), f"wait(flag=7 {cmp} {value}) returned {result.item()}"
            if holds:
                heap.check_device_errors()
            else:
                error = _timeout(heap, f"wait(flag=7 {cmp} {value})")
                assert (error.detail, error.value) == (heap.offset(flag), 7), error
    K.wait_default_kernel[(1,)](flag, 7, result, heap.context)
    assert result.item() == 1
    K.wait_default_kernel[(1,)](flag, 8, result, heap.context)
    assert result.item() == 0
    error = _timeout(heap, "wait(flag=7, 8)")
    assert (error.detail, error.value) == (heap.offset(flag), 7), f"{error}: want the flag's offset and 7"


def check_many_warps_time_out_together(rank, world_size, backend, free):
    """Programs of the most threads a program may have (1024) wait for a flag that never comes:
    every one gives up (False) and one timeout is recorded, round after round. On a GPU the
    deadline falls between the clock reads of a program's warps; a wait whose warps disagreed
    about it would leave its loop at different polls and pair up wrong barriers."""
    K, heap = backend.load(), _heap()
    gpu = heap.device.type == "cuda"
    heap.wait_timeout = 20e-6 if gpu else SHORT_WAIT
    programs, rounds, warps = 2, 1, 4
    if gpu:
        props = torch.cuda.get_device_properties(heap.device)
        programs, rounds, warps = 4 * props.multi_processor_count, 100, 1024 // getattr(props, "warp_size", 32)
    flag = heap.zeros(1, dtype=torch.int32)
    results = heap.zeros(programs, dtype=torch.int32)
    for i in range(rounds):
        results.fill_(7)
        K.wait_each_kernel[(programs,)](flag, 1, results, heap.context, FREE=free, num_warps=warps)
        _sync(heap)
        assert results.tolist() == [0] * programs, f"round {i}: {results.tolist()}"
        error = _timeout(heap, f"round {i} of {programs} programs of {warps} warps")
        assert (error.detail, error.value) == (heap.offset(flag), 0), error


def check_wait_on_a_block(rank, world_size, backend, free):
    """A block of flags: True once every flag holds; a timeout names the lowest flag that did not."""
    K, heap = backend.load(), _heap()
    heap.wait_timeout = SHORT_WAIT
    heap.zeros(3)  # the flags are not at offset 0
    flags = heap.zeros(3, dtype=torch.int32)
    flags.copy_(torch.tensor([5, 9, 7], dtype=torch.int32))
    result = heap.full((1,), 3, dtype=torch.int32)
    for value, holds, missed in ((5, True, None), (6, False, 0), (8, False, 0)):
        K.wait_block_kernel[(1,)](flags, value, result, heap.context, LANES=4, FREE=free, **K.launch_options(block=4))
        _sync(heap)
        assert result.item() == int(holds), f"block wait for >= {value} over [5, 9, 7] returned {result.item()}"
        if holds:
            heap.check_device_errors()
            continue
        error = _timeout(heap, f"block wait for >= {value}")
        assert error.detail == heap.offset(flags) + 4 * missed, f"{error}: not flag {missed}'s offset"
        assert error.value == flags[missed].item(), error
    flags[0] = 8  # now only flag 2 (7, repeated in lanes 2 and 3) misses >= 8
    K.wait_block_kernel[(1,)](flags, 8, result, heap.context, LANES=4, FREE=free, **K.launch_options(block=4))
    assert result.item() == 0
    error = _timeout(heap, "block wait for >= 8")
    assert (error.detail, error.value) == (heap.offset(flags) + 8, 7), error


def check_wait_after_error(rank, world_size, backend, free):
    """With an error recorded, a wait returns False at once, even for a flag that holds, and the
    first error stays: a second failing wait does not overwrite it."""
    K, heap = backend.load(), _heap()
    heap.wait_timeout = SHORT_WAIT
    first = heap.full((1,), 1, dtype=torch.int32)
    flag = heap.full((1,), 1, dtype=torch.int32)
    result = heap.full((1,), 5, dtype=torch.int32)
    K.wait_kernel[(1,)](first, 2, result, heap.context, CMP="==", FREE=free)  # the first error
    _sync(heap)
    assert result.item() == 0
    heap.wait_timeout = 1e6  # a wait that spun would outlast the test
    for value in (1, 2):  # holds, and would fail
        start = time.monotonic()
        K.wait_kernel[(1,)](flag, value, result, heap.context, CMP="==", FREE=free)
        _sync(heap)
        assert result.item() == 0, f"wait(flag == {value}) returned {result.item()} with an error recorded"
        assert time.monotonic() - start < 10, "a wait with an error recorded did not return at once"
    error = heap._record.read()
    assert error.code == iris.heap.context.ERROR_WAIT_TIMEOUT and error.detail == heap.offset(first), (
        f"the first error was overwritten: {error}, want the timeout on offset {heap.offset(first)}"
    )
    try:
        heap.check_device_errors()
    except iris.heap.WaitTimeoutError as e:
        assert e.offset == heap.offset(first), str(e)
    else:
        raise AssertionError("the recorded error vanished")


def check_first_error_wins(rank, world_size, backend, free):
    """record_error: the first call wins and fills the record, a second changes nothing; healthy()
    says whether an error is recorded, and elapsed_ns turns -1 with it; once the host has raised
    it, kernels may record again."""
    K, heap = backend.load(), _heap()
    flag = heap.full((1,), 1, dtype=torch.int32)
    out = heap.zeros(7, dtype=torch.int32)
    code = iris.heap.context.ERROR_WAIT_TIMEOUT
    for detail in (heap.offset(flag), heap.offset(out)):  # twice: after the host's clear, again
        K.record_error_kernel[(1,)](flag, out, heap.context, code, detail, FREE=free)
        _sync(heap)
        held, before, won_first, won_second, after, running, stopped = out.tolist()
        assert (held, before, won_first, won_second, after, stopped) == (1, 1, 1, 0, 0, -1), out.tolist()
        assert running >= 0, out.tolist()  # elapsed_ns: time since the start while healthy, -1 after
        error = heap._record.read()
        assert (error.code, error.detail, error.value, error.peer) == (code, detail, 11, rank), error
        assert error.aux >= 0, error
        try:
            heap.check_device_errors()
        except iris.heap.WaitTimeoutError as e:
            assert (e.offset, e.value) == (detail, 11), str(e)
        else:
            raise AssertionError(f"check_device_errors() did not raise the recorded {error}")
        assert heap._record.read() is None
        assert heap.context[iris.heap.context.error_code_index(world_size)].item() == 0


def check_wait_for_missing_signal(rank, world_size, backend, free):
    """Rank 0 waits for a signal that no rank sends: it gives up, and the host raises naming rank 0."""
    K, heap = backend.load(), _heap()
    heap.wait_timeout = SHORT_WAIT
    flag = heap.zeros(1, dtype=torch.int32)
    result = heap.full((1,), 5, dtype=torch.int32)
    if rank == 0:
        K.wait_kernel[(1,)](flag, 1, result, heap.context, CMP="==", FREE=free)
    try:
        heap.barrier()
    except iris.heap.WaitTimeoutError as e:
        message = str(e)
    else:
        message = None
    if rank == 0:
        assert message is not None and "rank 0" in message, f"rank 0's timeout not raised: {message}"
        assert result.item() == 0
    else:
        assert message is None, message
    # Closed here, on every rank: the raised error's traceback keeps rank 0's heap alive until a
    # garbage collection, so the test runner would find it open on rank 0 only.
    heap.close()


def check_wait_lasts_its_bound(rank, world_size, backend, free, bound, allowance):
    """A wait that cannot hold gives up no sooner than ``bound`` seconds by the device clock (the
    record's aux), and within 1.5 x ``bound`` + ``allowance`` (the record, and the host's wall time
    around the launch). Returns (aux / bound, wall / bound)."""
    K, heap = backend.load(), _heap()
    flag = heap.zeros(1, dtype=torch.int32)
    result = heap.full((1,), 5, dtype=torch.int32)
    K.wait_kernel[(1,)](flag, 0, result, heap.context, CMP="==", FREE=free)  # warm: holds at once
    heap.wait_timeout = bound
    _sync(heap)
    start = time.monotonic()
    K.wait_kernel[(1,)](flag, 1, result, heap.context, CMP="==", FREE=free)
    _sync(heap)
    wall = time.monotonic() - start
    error = _timeout(heap, f"a wait bounded by {bound} s")
    waited = error.aux / 1e9
    limit = 1.5 * bound + allowance
    assert waited >= bound, f"the wait gave up after {waited:.4f} s by the device clock, before its bound {bound} s"
    assert wall >= bound, f"the launch took {wall:.4f} s of wall time, less than the bound {bound} s"
    assert waited <= limit and wall <= limit, (
        f"the wait bounded by {bound} s lasted {waited:.4f} s by the device clock, {wall:.4f} s of wall time; "
        f"want at most {limit:.3f} s (1.5 x bound + {allowance} s)"
    )
    return waited / bound, wall / bound


def check_clock_is_the_hosts_on_cpu_ranks(rank, world_size, backend, free):
    """On CPU ranks clock_ns() reads time.monotonic_ns() when the kernel runs (a fresh value per launch)."""
    K, heap = backend.load(), _heap()
    out = heap.zeros(2, dtype=torch.int64)
    seen = []
    for _ in range(2):
        before = time.monotonic_ns()
        K.clock_kernel[(1,)](out, heap.context, FREE=free)
        after = time.monotonic_ns()
        assert before <= out[0].item() <= after, f"clock_ns() {out[0].item()} is not within [{before}, {after}]"
        seen.append(out[0].item())
    assert seen[1] > seen[0]


def check_closed_heap(rank, world_size, backend):
    """A kernel given a closed heap's context records ERROR_HEAP_CLOSED, and its store to another
    rank lands in its own tensor only (the bases are 0: translation is the identity)."""
    K, heap = backend.load(), _heap()
    x = heap.zeros(N, dtype=torch.int32)
    canary = heap.full((N,), -7, dtype=torch.int32)  # allocated right after x
    context = heap.context
    heap.close()
    K.closed_store_kernel[(1,)](x, context, N=N, **K.launch_options(block=N))
    _sync(heap)
    error = heap._record.read()
    want = iris.heap.DeviceError(iris.heap.context.ERROR_HEAP_CLOSED, 0, 0, -1, 0)
    assert error == want, f"recorded {error}, want {want}"
    try:
        heap.check_device_errors()
    except iris.heap.HeapClosedError:
        pass
    else:
        raise AssertionError("check_device_errors() after close() did not raise HeapClosedError")
    _expect(x, (rank * 100 + 1 + torch.arange(N)).to(torch.int32), "the store through a closed heap's context")
    _expect(canary, torch.full((N,), -7, dtype=torch.int32), "the canary after x")


# -- what the interpreter cannot do --------------------------------------------------------------


def check_interpreter_atomic_errors(rank, world_size, backend, cases):
    """Each (op, dtype) raises a clear error at trace time under the interpreter, before touching memory."""
    K, heap = backend.load(), _heap()
    for op, name in cases:
        dtype = DTYPES[name]
        buf = heap.zeros(1 + world_size * LANES, dtype=dtype)
        vals = heap.zeros(world_size * LANES, dtype=dtype)
        olds = heap.zeros(world_size * LANES, dtype=dtype)
        try:
            K.atomic_kernel[(1,)](buf, vals, olds, olds, heap.context, 0.0, FN=K.atomic_api(op, False), OP=op,
                                 LANES=LANES, REPS=1, FREE=False, **K.launch_options(block=LANES))  # fmt: skip
        except Exception as e:  # the interpreter wraps it: check the message
            text = str(e)
            tl_name = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64"}[name]
            assert "not atomic across processes" in text and tl_name in text and f"atomic_{op}" in text, text
            assert "works compiled on a GPU" in text, text
        else:
            raise AssertionError(f"atomic_{op} on {name} ran under the interpreter without an error")
        assert torch.count_nonzero(buf).item() == 0, f"atomic_{op} on {name} wrote memory before failing"

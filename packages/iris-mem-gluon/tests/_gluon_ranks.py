"""Rank bodies of the iris.mem.gluon tests: module-level functions that spawned ranks import.

Each runs ``fn(rank, world_size, ...)`` on every rank, allocates on a fresh heap, launches the
Gluon kernels of ``_gluon_kernels`` (imported lazily, after conftest chose the interpreter or not)
and asserts against a torch reference. Failures come back with the rank that raised them.
"""

import functools
import operator

import torch
import torch.distributed as dist

import iris.heap

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


def _kernels():
    import _gluon_kernels

    return _gluon_kernels


def _heap():
    return iris.heap.init(HEAP_SIZE)


def _gather(obj, world_size):
    if world_size == 1:
        return [obj]
    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


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


def check_load(rank, world_size, free):
    K, heap = _kernels(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        for cache, volatile in ((None, False), (".cg", False), ("", True)):  # (PTX has no volatile .cg load)
            src = heap.as_symmetric(values(rank, dtype))
            out = heap.zeros(world_size * N, dtype=dtype)
            heap.barrier()
            K.load_kernel[(1,)](src, out, heap.context, N_VALID, OTHER, N=N, L=K.layout(N), FREE=free, CACHE=cache,
                                VOLATILE=volatile, num_warps=K.NUM_WARPS)  # fmt: skip
            heap.barrier()
            for t in range(world_size):
                _expect(
                    out[t * N : (t + 1) * N],
                    masked(values(t, dtype), OTHER),
                    f"{name} load from rank {t} (cache={cache})",
                )
            heap.free(src), heap.free(out)


def check_store(rank, world_size, free):
    K, heap = _kernels(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        for cache in (None, ".wt"):
            src = heap.as_symmetric(values(rank, dtype))
            dst = heap.zeros(world_size * N, dtype=dtype)
            heap.barrier()
            K.store_kernel[(1,)](
                src, dst, heap.context, N_VALID, N=N, L=K.layout(N), FREE=free, CACHE=cache, num_warps=K.NUM_WARPS
            )
            heap.barrier()
            for r in range(world_size):
                _expect(
                    dst[r * N : (r + 1) * N], masked(values(r, dtype), 0), f"{name} store from rank {r} (cache={cache})"
                )
            heap.free(src), heap.free(dst)


def check_get(rank, world_size, free, hint=None):
    K, heap = _kernels(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        src = heap.as_symmetric(values(rank, dtype))
        dst = heap.zeros(world_size * N, dtype=dtype)
        heap.barrier()
        K.get_kernel[(1,)](
            src, dst, heap.context, N_VALID, OTHER, N=N, L=K.layout(N), FREE=free, HINT=hint, num_warps=K.NUM_WARPS
        )
        heap.barrier()
        for t in range(world_size):
            _expect(dst[t * N : (t + 1) * N], masked(values(t, dtype), 0), f"{name} get from rank {t}")
        heap.free(src), heap.free(dst)


def check_put(rank, world_size, free, hint=None):
    K, heap = _kernels(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        src = heap.as_symmetric(values(rank, dtype))
        dst = heap.zeros(world_size * N, dtype=dtype)
        heap.barrier()
        K.put_kernel[(1,)](
            src, dst, heap.context, N_VALID, N=N, L=K.layout(N), FREE=free, HINT=hint, num_warps=K.NUM_WARPS
        )
        heap.barrier()
        for r in range(world_size):
            _expect(dst[r * N : (r + 1) * N], masked(values(r, dtype), 0), f"{name} put from rank {r}")
        heap.free(src), heap.free(dst)


def check_copy(rank, world_size, free):
    K, heap = _kernels(), _heap()
    for name in RMA_DTYPES:
        dtype = DTYPES[name]
        src = heap.as_symmetric(values(rank, dtype))
        dst = heap.zeros(world_size * world_size * N, dtype=dtype)
        heap.barrier()
        K.copy_kernel[(1,)](
            src, dst, heap.context, N_VALID, OTHER, N=N, L=K.layout(N), FREE=free, num_warps=K.NUM_WARPS
        )
        heap.barrier()
        # dst[r, a] on this rank: written by rank r, copying rank a's src here
        for r in range(world_size):
            for a in range(world_size):
                slot = (r * world_size + a) * N
                _expect(dst[slot : slot + N], masked(values(a, dtype), 0), f"{name} copy by rank {r} from rank {a}")
        heap.free(src), heap.free(dst)


def check_translate(rank, world_size, free):
    K, heap = _kernels(), _heap()
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


def check_shapes(rank, world_size, free):
    K, heap = _kernels(), _heap()
    rows, cols = 4, 16
    x = heap.zeros(rows * cols + world_size, dtype=torch.int32)
    x[: rows * cols] = torch.arange(rows * cols, dtype=torch.int32) + 100 * rank
    scalars = heap.zeros(world_size, dtype=torch.int32)
    grid = heap.zeros(world_size * rows * cols, dtype=torch.int32)
    heap.barrier()
    K.shapes_kernel[(1,)](x, scalars, grid, heap.context, ROWS=rows, COLS=cols, L2=K.layout_2d(cols), FREE=free,
                          num_warps=K.NUM_WARPS)  # fmt: skip
    heap.barrier()
    _expect(scalars, torch.tensor([100 * t for t in range(world_size)], dtype=torch.int32), "scalar load")
    _expect(x[rows * cols :], torch.tensor([100 * rank + 1] * world_size, dtype=torch.int32), "scalar store")
    for t in range(world_size):
        want = torch.arange(rows * cols, dtype=torch.int32) + 100 * t
        want[(rows - 1) * cols :] = 0  # masked off: the local block keeps its zeros
        _expect(grid[t * rows * cols : (t + 1) * rows * cols], want, f"2-D get from rank {t}")


def check_broadcast(rank, world_size, free):
    """Scalar values given with blocks of pointers are spread over the block (store and atomics)."""
    K, heap = _kernels(), _heap()
    x = heap.zeros(6 * N, dtype=torch.int32)
    x[2 * N : 3 * N] = 5
    x[5 * N :] = torch.zeros(N, dtype=torch.float32).view(torch.int32)
    heap.barrier()
    K.broadcast_kernel[(1,)](x, heap.context, N=N, L=K.layout(N), FREE=free, num_warps=K.NUM_WARPS)
    heap.barrier()
    for i, v in enumerate((7, 3, 9, 4, 5)):
        _expect(x[i * N : (i + 1) * N], torch.full((N,), v, dtype=torch.int32), f"scalar broadcast into block {i}")
    _expect(x[5 * N :].view(torch.float32), torch.full((N,), 1.5), "scalar fp32 atomic_add into a block")


# -- atomics -------------------------------------------------------------------------------------

LANES = 16

_INITIAL = {"add": 0, "sub": 1 << 20, "xchg": 0, "cas": 0, "and": -1, "or": 0, "xor": 0, "min": 1000, "max": 0}


def _initial(op, dtype):
    init = _INITIAL[op]
    if op == "and" and dtype in (torch.uint32, torch.uint64):
        init = (1 << (32 if dtype == torch.uint32 else 64)) - 1
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


def check_atomic(rank, world_size, op, dtype_names, free, programs, reps, orders=((None, None),)):
    """Contention from every lane of every program of every rank on each rank's shared word, plus
    one masked, uncontended update of a private word per rank: exact results and old values.
    ``orders``: the (sem, scope) pairs to run each dtype with."""
    K, heap = _kernels(), _heap()
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
                                     OP=op, LANES=LANES, L=K.layout(LANES), REPS=reps, FREE=free, SEM=sem,
                                     SCOPE=scope, num_warps=K.NUM_WARPS)  # fmt: skip
        heap.barrier()
        what = f"atomic_{op} on {name} (sem={sem}, scope={scope}, free={free})"
        per_rank = vals_cpu.tolist()
        applied = [v for r in range(world_size) for v in per_rank[r] for _ in range(programs * reps)]
        final = buf[0].item()
        if op == "cas":
            olds = _gather(shared_olds.tolist(), world_size)
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
            olds = _gather(shared_olds.tolist(), world_size)
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


def check_scalar_atomics(rank, world_size, free, reps):
    K, heap = _kernels(), _heap()
    counter = heap.zeros(1, dtype=torch.int32)
    olds = heap.zeros(world_size * reps, dtype=torch.int32)
    heap.barrier()
    K.scalar_atomic_kernel[(1,)](counter, olds, heap.context, REPS=reps, FREE=free)
    heap.barrier()
    assert counter.item() == world_size * reps, f"scalar atomic_add: counter {counter.item()}, want {world_size * reps}"
    seen = _gather(olds.tolist(), world_size)
    mine = sorted(o for r in range(world_size) for o in seen[r][rank * reps : (rank + 1) * reps])
    assert mine == list(range(world_size * reps)), (
        f"scalar atomic_add: old values {mine} are not 0..{world_size * reps - 1}"
    )


def check_spinlock(rank, world_size, free, iters):
    K, heap = _kernels(), _heap()
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


def check_message_passing(rank, world_size, free, rounds):
    K, heap = _kernels(), _heap()
    data = heap.as_symmetric(torch.arange(N, dtype=torch.float32) * (rank + 1))
    inbox = heap.zeros(rounds * N)
    flags = heap.zeros(1, dtype=torch.int32)
    out = heap.zeros(rounds * N)
    heap.barrier()
    K.message_kernel[(1,)](data, inbox, flags, out, heap.context, ROUNDS=rounds, N=N, L=K.layout(N), FREE=free,
                           num_warps=K.NUM_WARPS)  # fmt: skip
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


def check_wait_outcomes(rank, world_size, free):
    """Each comparison, satisfied (True at once) and not (False after wait_limit, error recorded)."""
    K, heap = _kernels(), _heap()
    heap.wait_limit = 20
    heap.zeros(5)  # the flag is not at offset 0
    flag = heap.full((1,), 7, dtype=torch.int32)
    result = heap.zeros(1, dtype=torch.int32)
    for cmp, fn in COMPARISONS.items():
        for value in (6, 7, 8):
            K.wait_kernel[(1,)](flag, value, result, heap.context, CMP=cmp, FREE=free)
            holds = fn(7, value)
            if heap.device.type == "cuda":
                torch.cuda.synchronize(heap.device)
            assert result.item() == int(holds), f"wait(flag=7 {cmp} {value}) returned {result.item()}"
            if holds:
                heap.check_device_errors()
            else:
                try:
                    heap.check_device_errors()
                except iris.heap.WaitTimeoutError as e:
                    assert "held 7" in str(e), str(e)
                else:
                    raise AssertionError(f"wait(flag=7 {cmp} {value}) timed out without recording an error")
    K.wait_default_kernel[(1,)](flag, 7, result, heap.context)
    assert result.item() == 1
    K.wait_default_kernel[(1,)](flag, 8, result, heap.context)
    assert result.item() == 0
    w = world_size
    detail = heap.context[iris.heap.context.error_detail_index(w)].item()
    assert detail == heap.offset(flag), f"error_detail {detail}, want the flag's offset {heap.offset(flag)}"
    assert heap.context[iris.heap.context.error_value_index(w)].item() == 7
    try:
        heap.check_device_errors()
    except iris.heap.WaitTimeoutError:
        pass
    else:
        raise AssertionError("default-comparison timeout not recorded")


def check_wait_on_a_block(rank, world_size, free):
    """A block of flags: True once every flag holds; a timeout names the lowest flag that did not."""
    K, heap = _kernels(), _heap()
    heap.wait_limit = 20
    heap.zeros(3)  # the flags are not at offset 0
    flags = heap.zeros(3, dtype=torch.int32)
    flags.copy_(torch.tensor([5, 9, 7], dtype=torch.int32))
    result = heap.full((1,), 3, dtype=torch.int32)
    w = world_size
    for value, holds, missed in ((5, True, None), (6, False, 0), (8, False, 0)):
        K.wait_block_kernel[(1,)](
            flags, value, result, heap.context, LANES=4, L=K.layout(4), FREE=free, num_warps=K.NUM_WARPS
        )
        if heap.device.type == "cuda":
            torch.cuda.synchronize(heap.device)
        assert result.item() == int(holds), f"block wait for >= {value} over [5, 9, 7] returned {result.item()}"
        if holds:
            heap.check_device_errors()
            continue
        detail = heap.context[iris.heap.context.error_detail_index(w)].item()
        assert detail == heap.offset(flags) + 4 * missed, f"error_detail {detail}: not flag {missed}'s offset"
        assert heap.context[iris.heap.context.error_value_index(w)].item() == flags[missed].item()
        try:
            heap.check_device_errors()
        except iris.heap.WaitTimeoutError:
            pass
        else:
            raise AssertionError(f"block wait for >= {value} timed out without recording an error")
    flags[0] = 8  # now only flag 2 (7, repeated in lanes 2 and 3) misses >= 8
    K.wait_block_kernel[(1,)](flags, 8, result, heap.context, LANES=4, L=K.layout(4), FREE=free, num_warps=K.NUM_WARPS)
    assert result.item() == 0
    assert heap.context[iris.heap.context.error_detail_index(w)].item() == heap.offset(flags) + 8
    assert heap.context[iris.heap.context.error_value_index(w)].item() == 7
    try:
        heap.check_device_errors()
    except iris.heap.WaitTimeoutError:
        pass


def check_wait_after_error(rank, world_size, free):
    """With an error already recorded, wait returns False at once, even for a flag that holds,
    and leaves the first error in place."""
    K, heap = _kernels(), _heap()
    heap.wait_limit = 1 << 40  # would never end if the wait spun
    flag = heap.full((1,), 1, dtype=torch.int32)
    result = heap.full((1,), 5, dtype=torch.int32)
    w = world_size
    heap.context[iris.heap.context.error_code_index(w)] = iris.heap.context.ERROR_WAIT_TIMEOUT
    heap.context[iris.heap.context.error_detail_index(w)] = 12345
    for value in (1, 2):
        K.wait_kernel[(1,)](flag, value, result, heap.context, CMP="==", FREE=free)
        if heap.device.type == "cuda":
            torch.cuda.synchronize(heap.device)
        assert result.item() == 0, f"wait returned {result.item()} with an error already recorded"
    assert heap.context[iris.heap.context.error_detail_index(w)].item() == 12345, "the first error was overwritten"
    try:
        heap.check_device_errors()
    except iris.heap.WaitTimeoutError:
        pass
    else:
        raise AssertionError("the recorded error vanished")


def check_wait_for_missing_signal(rank, world_size, free):
    """Rank 0 waits for a signal that no rank sends: it gives up, and the host raises naming rank 0."""
    K, heap = _kernels(), _heap()
    heap.wait_limit = 200
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
    heap.barrier()


# -- what the interpreter cannot do --------------------------------------------------------------


def check_interpreter_atomic_errors(rank, world_size, cases):
    """Each (op, dtype) raises a clear error at trace time under the interpreter, before touching memory."""
    K, heap = _kernels(), _heap()
    for op, name in cases:
        dtype = DTYPES[name]
        buf = heap.zeros(1 + world_size * LANES, dtype=dtype)
        vals = heap.zeros(world_size * LANES, dtype=dtype)
        olds = heap.zeros(world_size * LANES, dtype=dtype)
        try:
            K.atomic_kernel[(1,)](buf, vals, olds, olds, heap.context, 0.0, OP=op, LANES=LANES, L=K.layout(LANES), REPS=1,
                                 FREE=False, num_warps=K.NUM_WARPS)  # fmt: skip
        except Exception as e:  # the interpreter wraps it: check the message
            text = str(e)
            tl_name = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64"}[name]
            assert "not atomic across processes" in text and tl_name in text and f"atomic_{op}" in text, text
            assert "works compiled on a GPU" in text, text
        else:
            raise AssertionError(f"atomic_{op} on {name} ran under the interpreter without an error")
        assert torch.count_nonzero(buf).item() == 0, f"atomic_{op} on {name} wrote memory before failing"

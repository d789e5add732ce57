"""Rank-side bodies of the collectives' fault suite (module-level: spawned ranks import them).

Every body guards the memory of its calls (:class:`Guarded`): a heap tensor is the head of an
allocation whose tail holds guard bytes, followed by a separate canary allocation; a plain tensor
sits between guard bytes; and one canary allocation precedes everything. After a call, every
guard must hold its bytes: a write outside the call's tensors is the worst bug a collective can
have. Bodies return plain data (errors as :func:`summary` dicts, times in seconds) for the tests
to judge; what every case checks the same way (guards, symmetry after ``reset()``, the next
collective's result) is asserted here, on the rank, with the rank in the message.

Clocks, never spin counts: every time is ``time.monotonic()``.
"""

from __future__ import annotations

import importlib
import logging
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from _ccl_cases import ops_for, reference_reduce  # torch.distributed's semantics, in rank order

import iris.ccl as ccl
import iris.heap
from iris.ccl import call, protocol
from iris.testing.guarded import GUARD, UNWRITTEN, Guarded, as_bytes  # noqa: F401 (the fault tests' memory)
from iris.testing.processes import report, shm_entries, spawn  # noqa: F401 (the tests call F.spawn, F.shm_entries)

HEAP_SIZE = 1 << 22
BLOCK = 64
PROGRAMS = 2
#: Seconds a bounded wait may overrun its bound on the host's clock beyond the 1.5x the issue
#: allows: under Triton's interpreter a launch costs the host ~30-60 ms of Python before the
#: kernel's wait starts its clock, and a rank's call returns only after its kernel's last
#: program ran. Measured on 2 CPU cores: give-up at 1.02-1.11x a 0.5-1.0 s bound.
ALLOWANCE = 0.5
QUIET = 30.0  # wait_timeout while nothing is meant to fail: a hang still ends, a slow rank does not

#: Every dtype the heap holds; the reductions accept ``REDUCIBLE``, data movement all of them.
HEAP_DTYPES = protocol.DTYPES
REDUCIBLE = [torch.float16, torch.bfloat16, torch.float32, torch.float64,
             torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]  # fmt: skip
#: Integer ranges whose sums over 4 ranks stay in range (torch and the kernels would both wrap,
#: but a reference that relies on wrapping says nothing about rank order).
_RANGES = {torch.int8: (-30, 31), torch.uint8: (0, 60), torch.int16: (-1000, 1000)}


def cfg(backend, **fields) -> ccl.Config:
    return ccl.Config(block_size=BLOCK, num_programs=PROGRAMS, backend=backend, **fields)


def sample(shape, dtype, seed: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s input for ``seed`` (every rank can make every rank's: references are local)."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point and dtype.itemsize == 1:  # float8: any bit pattern moves the same
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    lo, hi = _RANGES.get(dtype, (-(10**6), 10**6) if dtype.is_signed else (0, 10**6))
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (data movement must not change a bit)."""
    return (
        got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape) and torch.equal(as_bytes(got), as_bytes(want))
    )


def settle(heap) -> None:
    """Wait for this rank's device work (a no-op on CPU ranks, whose kernels run in the call)."""
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)


def raised(call, *args, **kwargs) -> Exception | None:
    """What ``call(*args, **kwargs)`` raised, or None."""
    try:
        call(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the exception is the observation
        return e
    return None


def summary(e: BaseException | None) -> dict | None:
    """An exception as plain data: its type name, message and the fields the collectives give."""
    if e is None:
        return None
    out = {"type": type(e).__name__, "message": str(e), "timeout": isinstance(e, ccl.CollectiveTimeoutError)}
    for name in ("collective", "field", "values", "missing_rank", "abandoned_by", "rank"):
        if hasattr(e, name):
            out[name] = getattr(e, name)
    return out


def all_reduce_works(heap, backend, rank: int, world_size: int, when: str) -> None:
    """A sum all_reduce of a guarded heap tensor gives torch's result on this rank, touching nothing else."""
    mem = Guarded(heap)
    inputs = [sample((70,), torch.float32, 4242, r) for r in range(world_size)]
    x = mem.heap_tensor(inputs[rank], "the check's tensor")
    y = mem.plain_tensor(inputs[rank], "the check's plain tensor")
    ccl.all_reduce(x, config=cfg(backend, variant="two_shot", blocking=True))
    ccl.all_reduce(y, config=cfg(backend, variant="one_shot", blocking=True))
    z = mem.plain_tensor(inputs[rank], "the check's pushed tensor")  # (after one, the push slots are verified)
    ccl.all_reduce(z, config=cfg(backend, variant="one_shot_push", blocking=True))
    want = reference_reduce(inputs, "sum")
    assert same(x, want) and same(y, want) and same(z, want), f"rank {rank}: all_reduce {when} differs from torch's"
    mem.assert_guards(rank, f"all_reduce {when}")
    mem.free()


def recover(heap, backend, rank: int, world_size: int, *guarded: Guarded) -> None:
    """What every case ends with: reset() on every rank, the user's tensors freed, the heap symmetric
    again, and the next collectives correct."""
    ccl.reset()
    for mem in guarded:
        mem.free()
    heap.check_symmetry()  # the library's reservations included: staging was given back
    heap.wait_timeout = QUIET
    all_reduce_works(heap, backend, rank, world_size, "after reset()")


# -- 1. mismatched calls ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """One way ranks call a collective differently. The last rank makes the odd call; the field
    the error must name and its value on the other ranks (``usual``) and the last one (``odd``)."""

    field: str
    usual: object
    odd: object


MISMATCHES = {
    "element count, heap tensors": Mismatch("element count", 64, 100),
    "element count, plain tensors (staged)": Mismatch("element count", 64, 100),
    "no elements vs 64": Mismatch("element count", "at least 1", 0),
    "float32 vs float16": Mismatch("dtype", torch.float32, torch.float16),
    "float32 vs int32": Mismatch("dtype", torch.float32, torch.int32),
    "op sum vs max": Mismatch("op", "sum", "max"),
    "variant two_shot vs one_shot": Mismatch("variant", "two_shot", "one_shot"),
    "variant two_shot vs one_shot_push": Mismatch("variant", "two_shot", "one_shot_push"),
    "element count, one_shot_push after one": Mismatch("element count", 64, 100),
    "all_reduce vs all_gather": Mismatch("collective", "all_reduce", "all_gather"),
    "barrier vs all_reduce": Mismatch("collective", "barrier", "all_reduce"),
    "heap tensor vs plain tensor": Mismatch("tensors on the heap", "first tensor", "none"),
    "broadcast src 0 vs 1": Mismatch("src", 0, 1),
    "row-major vs channels_last": Mismatch("memory layout", "row-major", "dims permuted (#3)"),
}


def _mismatched_call(kind: str, mem: Guarded, backend, rank: int, world_size: int, blocking: bool):
    """This rank's call of the mismatch ``kind``: a function that makes it."""
    odd = rank == world_size - 1
    c = cfg(backend, blocking=blocking, variant="two_shot")
    data = sample((64,), torch.float32, 11, rank)
    if kind == "element count, heap tensors":
        x = mem.heap_tensor(sample((100 if odd else 64,), torch.float32, 11, rank), "the tensor")
        return lambda: ccl.all_reduce(x, config=c)
    if kind == "element count, plain tensors (staged)":
        x = mem.plain_tensor(sample((100 if odd else 64,), torch.float32, 11, rank), "the tensor")
        return lambda: ccl.all_reduce(x, config=c)
    if kind == "no elements vs 64":  # the empty call launches a barrier described as the collective
        x = mem.heap_tensor(sample((0 if odd else 64,), torch.float32, 11, rank), "the tensor")
        return lambda: ccl.all_reduce(x, config=c)
    if kind in ("float32 vs float16", "float32 vs int32"):
        dtype = MISMATCHES[kind].odd if odd else torch.float32
        x = mem.heap_tensor(sample((64,), dtype, 11, rank), "the tensor")
        return lambda: ccl.all_reduce(x, config=c)
    if kind == "op sum vs max":
        x = mem.heap_tensor(data, "the tensor")
        return lambda: ccl.all_reduce(x, op="max" if odd else "sum", config=c)
    if kind == "variant two_shot vs one_shot":
        x = mem.heap_tensor(data, "the tensor")
        return lambda: ccl.all_reduce(
            x, config=cfg(backend, blocking=blocking, variant="one_shot" if odd else "two_shot")
        )
    if kind == "variant two_shot vs one_shot_push":
        x = mem.plain_tensor(data, "the tensor")
        return lambda: ccl.all_reduce(x, config=cfg(backend, blocking=blocking, variant="one_shot_push" if odd else
                                                    "two_shot"))  # fmt: skip
    if kind == "element count, one_shot_push after one":  # the stores go out before the entry finds it
        push = cfg(backend, blocking=True, variant="one_shot_push")
        ccl.all_reduce(torch.ones(8, device=mem.heap.device), config=push)  # the slots' offsets agreed
        x = mem.plain_tensor(sample((100 if odd else 64,), torch.float32, 11, rank), "the tensor")
        return lambda: ccl.all_reduce(x, config=cfg(backend, blocking=blocking, variant="one_shot_push"))
    if kind == "all_reduce vs all_gather":
        x = mem.heap_tensor(data, "the input")
        if not odd:
            return lambda: ccl.all_reduce(x, config=c)
        out = mem.output((world_size * 64,), torch.float32, True, "the output")
        return lambda: ccl.all_gather(out, x, config=c)
    if kind == "barrier vs all_reduce":
        if not odd:
            return lambda: ccl.barrier(config=c)
        x = mem.heap_tensor(data, "the tensor")
        return lambda: ccl.all_reduce(x, config=c)
    if kind == "heap tensor vs plain tensor":
        x = mem.tensor(data, not odd, "the tensor")
        return lambda: ccl.all_reduce(x, config=c)
    if kind == "row-major vs channels_last":  # the same values and shape, another memory order
        x = mem.heap_tensor(sample((2, 4, 2, 4), torch.float32, 11, rank), "the tensor")
        if odd:
            x = x.as_strided(x.shape, torch.empty(x.shape, memory_format=torch.channels_last).stride())
        return lambda: ccl.all_reduce(x, config=c)
    if kind == "broadcast src 0 vs 1":
        x = mem.heap_tensor(data, "the tensor")
        return lambda: ccl.broadcast(x, 1 if odd else 0, config=c)
    raise ValueError(kind)


def mismatch(rank, world_size, backend, kind: str, how: str):
    """Every rank makes its call of mismatch ``kind``; the error as ``how`` surfaces it:
    ``"blocking"`` (Config(blocking=True): the call raises), ``"check_device_errors"`` (the
    default asynchronous call returns; heap.check_device_errors() after a device sync raises) or
    ``"next collective"`` (the next Iris call raises). Returns what the call and the check raised."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET  # every rank arrives: nothing here may time out
    ccl.barrier(config=cfg(backend))  # every rank's collectives are set up
    mem = Guarded(heap)
    call = _mismatched_call(kind, mem, backend, rank, world_size, blocking=how == "blocking")
    mem.freeze()
    at_call = raised(call)
    settle(heap)
    later = None
    if how == "check_device_errors":
        later = raised(heap.check_device_errors)
    elif how == "next collective":
        later = raised(lambda: ccl.barrier(config=cfg(backend)))
    mem.assert_unchanged(rank, f"after the mismatched call ({kind})")
    dist.barrier()  # every rank checked its memory before any rank moves on
    mem.assert_unchanged(rank, f"once every rank had raised ({kind})")
    recover(heap, backend, rank, world_size, mem)
    return {"at_call": summary(at_call), "later": summary(later)}


def mismatch_then_collective(rank, world_size, backend, follow: str):
    """A blocking mismatch (element counts), then, without reset(), every rank calls ``follow``
    (rank 0 last, 0.3 s after the others): what the second call did on each rank."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, blocking=True, variant="two_shot")
    ccl.barrier(config=c)
    mem = Guarded(heap)
    x = mem.heap_tensor(sample((100 if rank == world_size - 1 else 64,), torch.float32, 3, rank), "the tensor")
    first = raised(lambda: ccl.all_reduce(x, config=c))
    y = mem.heap_tensor(torch.full((10,), float(rank + 1)), "the second call's tensor")
    mem.freeze()
    heap.wait_timeout = 2.0  # a rank that waits for a peer that never comes gives up soon
    dist.barrier()
    if rank == 0:
        time.sleep(0.3)  # the last to arrive
    t0 = time.monotonic()
    second = raised(lambda: ccl.barrier(config=c) if follow == "barrier" else ccl.all_reduce(y, config=c))
    elapsed = time.monotonic() - t0
    settle(heap)
    late = raised(heap.check_device_errors)  # an error the second call left behind
    mem.assert_guards(rank, f"after a {follow} that followed a mismatch")
    dist.barrier()
    recover(heap, backend, rank, world_size, mem)
    return {"first": summary(first), "second": summary(second), "left behind": summary(late), "elapsed": elapsed}


def slow_between_publish_and_wait(rank, world_size, backend, odd_call: str):
    """Mismatch (the last rank's ``odd_call``, "all_reduce" of another size or "barrier", against
    the others' all_reduce) where the last rank, once it has published its call, is held 0.5 s
    before it looks at its peers (injected into its kernel module under the interpreter) while
    the others found the mismatch and gave up. What each rank raised, and whether every hold was
    injected (the kernels look ``_await`` up at run time only when interpreted)."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, blocking=True, variant="two_shot")
    ccl.barrier(config=c)
    # Warm both kernels up before the hold is injected: Gluon's interpreter checks what a kernel
    # refers to at its first launch, and would reject the hold (a plain Python function).
    warm = heap.zeros(8)
    ccl.all_reduce(warm, config=c)
    heap.free(warm)
    kernels = importlib.import_module(f"iris.ccl.protocol_{backend}")  # the device protocol's waits
    odd = rank == world_size - 1
    mem = Guarded(heap)
    x = mem.heap_tensor(sample((100 if odd else 64,), torch.float32, 5, rank), "the tensor")
    mem.freeze()
    real, held = kernels._await, []
    if odd:

        def slow_await(ctx, flags, sync, epoch, FLAGS, SCOPE, GROUPS):  # noqa: N803 - the kernel's names
            if not held:  # the entry's wait (the first one of the launch)
                held.append(time.monotonic())
                time.sleep(0.5)
            return real(ctx, flags, sync, epoch, FLAGS, SCOPE, GROUPS)

        kernels._await = slow_await
    dist.barrier()
    if not odd:
        time.sleep(0.1)  # the others are waiting when the odd rank publishes
    try:
        if odd and odd_call == "barrier":
            err = raised(lambda: ccl.barrier(config=c))
        else:
            err = raised(lambda: ccl.all_reduce(x, config=c))
    finally:
        kernels._await = real
    settle(heap)
    left = raised(heap.check_device_errors)
    mem.assert_unchanged(rank, "after a mismatch with a slow rank")
    injected = dist_all(bool(held) or not odd)
    dist.barrier()
    recover(heap, backend, rank, world_size, mem)
    return {"error": summary(err), "left behind": summary(left), "injected": all(injected)}


def dist_all(value) -> list:
    """Every rank's ``value`` (over gloo, no device work)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


# -- 2. a rank that skips a collective ---------------------------------------------------------------


def skipped(rank, world_size, backend, timeout: float, variant: str = "two_shot"):
    """The last rank skips an all_reduce (``variant``, on guarded heap tensors) that the others make
    with ``heap.wait_timeout = timeout``; once they gave up it makes the call late. Returns the
    errors and how long each call took."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, blocking=True, variant=variant)
    skipper = world_size - 1
    all_reduce_works(heap, backend, rank, world_size, "before the skip")  # also warms the kernels up
    mem = Guarded(heap)
    x = mem.heap_tensor(sample((100,), torch.float32, 7, rank), "the tensor")
    mem.freeze()
    heap.wait_timeout = timeout
    out = {"error": None, "elapsed": None, "late": None, "late_elapsed": None}
    dist.barrier()  # the ranks that call start within milliseconds of each other
    if rank != skipper:
        t0 = time.monotonic()
        out["error"] = summary(raised(lambda: ccl.all_reduce(x, config=c)))
        out["elapsed"] = time.monotonic() - t0
    dist.barrier()  # every rank that called has given up
    mem.assert_unchanged(rank, "after the others gave up on the skipped collective")
    if rank == skipper:  # arrives late, at the collective the others gave up on
        t0 = time.monotonic()
        out["late"] = summary(raised(lambda: ccl.all_reduce(x, config=c)))
        out["late_elapsed"] = time.monotonic() - t0
    dist.barrier()  # the late call is over
    mem.assert_unchanged(rank, "after the skipper's late call")
    recover(heap, backend, rank, world_size, mem)
    return out


# -- 3. failures after entry cannot skew the epochs --------------------------------------------------


class InjectedFailure(RuntimeError):
    """Raised inside a kernel (under the interpreter) after the rank published its entry."""


def _three_calls(rank, world_size, backend, timeout: float, fail_second):
    """Three collectives; the second fails on the last rank by ``fail_second(call)``. Returns each
    rank's error per call, the second call's time, and checks the recovery."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    w = world_size
    c = cfg(backend, blocking=True, variant="two_shot")
    failing = rank == w - 1
    inputs = [sample((40,), torch.float32, 21, r) for r in range(w)]
    mem = Guarded(heap)
    x1 = mem.heap_tensor(inputs[rank], "the first call's tensor")
    x2 = mem.heap_tensor(inputs[rank], "the second call's tensor")
    out = mem.output((w * 40,), torch.float32, True, "the third call's output")
    x3 = mem.plain_tensor(inputs[rank], "the third call's input")
    errors = {1: None}
    first = raised(lambda: ccl.all_reduce(x1, config=c))
    assert first is None and same(x1, reference_reduce(inputs, "sum")), f"rank {rank}: the first call failed: {first}"
    heap.wait_timeout = timeout
    dist.barrier()
    t0 = time.monotonic()
    if failing:
        errors[2] = summary(raised(fail_second, lambda: ccl.all_reduce(x2, config=c)))
    else:
        errors[2] = summary(raised(ccl.all_reduce, x2, config=c))
    elapsed = time.monotonic() - t0
    dist.barrier()  # every rank is done with the second call
    mem.freeze()
    errors[3] = summary(raised(lambda: ccl.all_gather(out, x3, config=c)))
    settle(heap)
    mem.assert_guards(rank, "after a failed call and the next one")
    assert "the third call's output" not in mem.changed_tensors() or errors[3] is None, (
        f"rank {rank}: the third call raised but wrote its output"
    )
    dist.barrier()
    recover(heap, backend, rank, world_size, mem)
    # the calls after the recovery pair up as they should: an all_gather and a broadcast
    mem = Guarded(heap)
    inp = mem.heap_tensor(inputs[rank], "the gather's input")
    gathered = mem.output((w * 40,), torch.float32, False, "the gather's output")
    ccl.all_gather(gathered, inp, config=c)
    b = mem.plain_tensor(inputs[rank], "the broadcast tensor")
    ccl.broadcast(b, w - 1, config=c)
    assert same(gathered, torch.cat(inputs)) and same(b, inputs[w - 1]), f"rank {rank}: calls after reset() wrong"
    mem.assert_guards(rank, "after the calls that follow reset()")
    mem.free()
    return {"errors": errors, "elapsed": elapsed}


def argument_error(rank, world_size, backend, timeout: float):
    """The last rank's second call has a bad argument (op="prod"): it is refused before the rank
    publishes anything."""

    def bad_op(_call):
        x = torch.zeros(4, device=iris.heap.default_heap().device)
        ccl.all_reduce(x, op="prod", config=cfg(backend, blocking=True))

    return _three_calls(rank, world_size, backend, timeout, bad_op)


def failure_inside_kernel(rank, world_size, backend, timeout: float):
    """The last rank's second call fails inside its kernel, after every rank arrived and agreed
    (the reduction raises under the interpreter). Returns None where the kernels are compiled."""
    kernels = call.kernels_of(backend)
    real, fired = kernels._reduce_tile, []

    def boom(*args, **kwargs):
        fired.append(True)
        raise InjectedFailure("injected: the reduction failed after the entry")

    def fail_inside(call):
        kernels._reduce_tile = boom
        try:
            call()
        finally:
            kernels._reduce_tile = real

    return {**_three_calls(rank, world_size, backend, timeout, fail_inside), "injected": bool(fired)}


# -- 4. a rank killed during a collective (plain processes: World reports a killed rank itself) ------


# The harness (spawn, report, shm_entries) is iris.testing.processes', shared with iris-ops' suite.


def killed(rank, world_size, backend, victim: int, sig: int, moment: str, timeout: float):
    """Rank ``victim`` is killed by ``sig`` during a collective: ``"before arriving"`` (it kills
    itself 0.2 s after the others entered the collective and wait for it) or ``"inside the wait"``
    (it entered and waits for rank 0, which sends the signal 0.3 s later and then enters itself).
    Survivors report what the collective raised and how long it took."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, blocking=True, variant="two_shot")
    all_reduce_works(heap, backend, rank, world_size, "before the kill")
    pids = dist_all(os.getpid())
    x = heap.full((100,), float(rank))
    heap.wait_timeout = timeout
    dist.barrier()
    if rank == victim:
        if moment == "before arriving":
            time.sleep(0.2)
            os.kill(os.getpid(), sig)
        else:
            ccl.all_reduce(x, config=c)
        time.sleep(60)  # the signal ends this process before
        return "survived the signal"
    if moment == "inside the wait" and rank == 0:
        time.sleep(0.3)
        os.kill(pids[victim], sig)
    t0 = time.monotonic()
    err = raised(lambda: ccl.all_reduce(x, config=c))
    return {"error": summary(err), "elapsed": time.monotonic() - t0}


# -- 5. the watchdog ---------------------------------------------------------------------------------


class _Seen(logging.Handler):
    """Keeps (monotonic time, message) of every record of the ``iris`` logger."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[tuple[float, str]] = []

    def emit(self, record):
        self.records.append((time.monotonic(), record.getMessage()))


def watchdog_raise(rank, world_size, backend, timeout: float, interval: float):
    """heap.watchdog(interval, "raise") on every rank; the last rank skips a barrier made with the
    default (asynchronous) config. Each other rank reports how long its barrier call took, when
    its watchdog logged, and what the next Iris calls raised."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    skipper = world_size - 1
    ccl.barrier(config=cfg(backend))  # every rank set up (and the kernel warm)
    heap.check_device_errors()
    seen = _Seen()
    logging.getLogger("iris").addHandler(seen)
    try:
        dog = heap.watchdog(interval=interval, on_error="raise")
        heap.wait_timeout = timeout
        out = {}
        dist.barrier()
        if rank != skipper:
            t0 = time.monotonic()
            out["at_call"] = summary(raised(lambda: ccl.barrier(config=cfg(backend))))
            out["call_returned"] = time.monotonic() - t0
            limit = t0 + 1.5 * timeout + ALLOWANCE + interval + 5.0  # then the watchdog missed it
            while not seen.records and time.monotonic() < limit:
                time.sleep(0.005)
            out["logged"] = seen.records[0][0] - t0 if seen.records else None
            out["log"] = seen.records[0][1] if seen.records else None
            out["next_call"] = summary(raised(lambda: ccl.barrier(config=cfg(backend))))
            out["then_check"] = summary(raised(heap.check_device_errors))  # raised once, then clear
        dist.barrier()
        dog.stop()
    finally:
        logging.getLogger("iris").removeHandler(seen)
    recover(heap, backend, rank, world_size)
    return out


def watchdog_abort(rank, world_size, backend, timeout: float, interval: float, log_path: str):
    """heap.watchdog(interval, "abort") on rank 0, which makes a barrier that rank 1 skips; rank
    0 then sleeps, and its watchdog should abort the process. Rank 0 logs to ``log_path``."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    ccl.barrier(config=cfg(backend))
    if rank == 0:
        handler = logging.FileHandler(log_path)
        logging.getLogger("iris").addHandler(handler)
        heap.watchdog(interval=interval, on_error="abort")
    heap.wait_timeout = timeout
    dist.barrier()
    if rank == 0:
        report("start", time.monotonic())
        ccl.barrier(config=cfg(backend))
        report("call returned", time.monotonic())
        time.sleep(1.5 * timeout + ALLOWANCE + interval + 10.0)
        return "not aborted"
    time.sleep(1.5 * timeout + ALLOWANCE + interval + 1.0)  # skips the barrier, stays alive meanwhile
    return "skipped"


# -- 6. the dtype matrix -----------------------------------------------------------------------------


def dtype_matrix(rank, world_size, backend, part):
    """Every collective x every dtype it accepts against torch (shape (3, 5); reduce_scatter and
    all_to_all: (W*3, 5)), heap and plain tensors alternating; ``part`` "reductions" (and the
    dtypes they refuse) or "data movement" (a test each: on a GPU they compile in parallel jobs).
    Returns the cases that differ or raised (``wrong``), and the calls the reductions did not
    refuse before launch (``not refused``)."""
    from iris.ccl.workspace import workspace_of

    if part not in ("reductions", "data movement"):
        raise ValueError(f"dtype_matrix: no part {part!r}")
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    w = world_size
    wrong: list[str] = []
    shape, big = (3, 5), (w * 3, 5)

    def run(what, got, want, exact_bytes, call, *args, **kwargs):
        err = raised(call, *args, **kwargs)
        if err is not None:
            wrong.append(f"{what}: raised {type(err).__name__}: {err}")
        elif not (same(got, want) if exact_bytes else (got.dtype == want.dtype and torch.equal(got.cpu(), want))):
            wrong.append(
                f"{what}: differs from torch ({got.cpu().reshape(-1)[:6].tolist()} vs {want.reshape(-1)[:6].tolist()})"
            )

    # each reduction x each dtype, the ops rotating so that every dtype meets every op (avg included)
    for d, dtype in enumerate(REDUCIBLE if part == "reductions" else ()):
        ops = ops_for(dtype)
        for i, variant in enumerate(("one_shot", "two_shot", "rs_ag", "one_shot_push", "reduce_scatter")):
            op, case = ops[(d + i) % len(ops)], 100 * d + i
            c = cfg(backend, blocking=True, variant="auto" if variant == "reduce_scatter" else variant)
            mem = Guarded(heap)
            if variant != "reduce_scatter":
                inputs = [sample(shape, dtype, case, r) for r in range(w)]
                x = mem.tensor(inputs[rank], case % 2 == 0, "the tensor")
                want = reference_reduce(inputs, op)
                run(f"all_reduce {variant} {op} {dtype}", x, want, False, ccl.all_reduce, x, op=op, config=c)
            else:
                chunks = [sample(big, dtype, case, r) for r in range(w)]
                inp = mem.tensor(chunks[rank], d % 2 == 0, "the input")
                out = mem.output(shape, dtype, d % 3 == 0, "the output")
                want = reference_reduce([ch.chunk(w)[rank] for ch in chunks], op)
                run(f"reduce_scatter {op} {dtype}", out, want, False, ccl.reduce_scatter, out, inp, op=op, config=c)
            wrong += [f"{variant} {op} {dtype}: {g}" for g in mem.broken_guards()]
            mem.free()
    # each data movement x each heap dtype, compared bit for bit
    for i, dtype in enumerate(HEAP_DTYPES if part == "data movement" else ()):
        c = cfg(backend, blocking=True)
        inputs = [sample(shape, dtype, 500 + i, r) for r in range(w)]
        chunks = [sample(big, dtype, 600 + i, r) for r in range(w)]
        mem = Guarded(heap)
        for variant, out_on_heap, inp_on_heap in (("push", True, False), ("pull", False, True)):
            inp = mem.tensor(inputs[rank], inp_on_heap, f"the {variant} input")
            out = mem.output((w * 3, 5), dtype, out_on_heap, f"the {variant} output")
            run(f"all_gather {variant} {dtype}", out, torch.cat(inputs), True, ccl.all_gather, out, inp, config=c)
        inp = mem.tensor(chunks[rank], i % 2 == 0, "the all_to_all input")
        out = mem.output(big, dtype, i % 2 == 1, "the all_to_all output")
        want = torch.cat([ch.chunk(w)[rank] for ch in chunks])
        run(f"all_to_all {dtype}", out, want, True, ccl.all_to_all, out, inp, config=c)
        src = i % w
        b = mem.tensor(inputs[rank], i % 2 == 1, "the broadcast tensor")
        run(f"broadcast src={src} {dtype}", b, inputs[src], True, ccl.broadcast, b, src, config=c)
        wrong += [f"data movement {dtype}: {g}" for g in mem.broken_guards()]
        mem.free()
    # the reductions refuse every other dtype before anything is launched
    ws = workspace_of(heap)
    launched = ws.launched
    not_refused = []
    for dtype in HEAP_DTYPES if part == "reductions" else ():
        if dtype in REDUCIBLE:
            continue
        t = heap.zeros(w * 2, dtype=dtype)
        o = heap.zeros(2, dtype=dtype)
        if not isinstance(raised(ccl.all_reduce, t, config=cfg(backend)), TypeError):
            not_refused.append(f"all_reduce {dtype}")
        if not isinstance(raised(ccl.reduce_scatter, o, t, config=cfg(backend)), TypeError):
            not_refused.append(f"reduce_scatter {dtype}")
        heap.free(o)
        heap.free(t)
    for dtype in REDUCIBLE if part == "reductions" else ():
        if not dtype.is_floating_point:
            t = heap.zeros(4, dtype=dtype)
            if not isinstance(raised(ccl.all_reduce, t, op="avg", config=cfg(backend)), TypeError):
                not_refused.append(f"all_reduce avg {dtype}")
            heap.free(t)
    if ws.launched != launched:
        not_refused.append(f"{ws.launched - launched} launches from refused calls")
    heap.check_symmetry()
    return {"wrong": wrong, "not refused": not_refused}


# -- 7. the soak -------------------------------------------------------------------------------------

_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier")
_WEIGHTS = (4, 2, 2, 1, 1, 0.5)


@dataclass(frozen=True)
class Call:
    kind: str
    dtype: torch.dtype
    shape: tuple
    op: str
    variant: str
    heap_in: bool
    heap_out: bool
    stacked: bool  # all_gather's out as (W, *shape) rather than (W * shape[0], ...)
    src: int
    blocking: bool
    seed: int = 0  # of the call's data (``sample``)
    skipper: int | None = None  # the rank that skips this call (an injected fault), or None


def draw(rng: random.Random, w: int) -> Call:
    """A call configuration, the same on every rank (every rank's ``rng`` has the same seed)."""
    kind = rng.choices(_KINDS, _WEIGHTS)[0]
    dtype = rng.choice(REDUCIBLE if kind in ("all_reduce", "reduce_scatter") else HEAP_DTYPES)
    if kind in ("reduce_scatter", "all_to_all"):
        k = rng.randint(1, 300 // w)
        shape = (w * k,) if rng.random() < 0.5 or k < 2 else (w * (k // 2), 2)
    else:
        n = rng.randint(1, 300)
        shape = (n,) if rng.random() < 0.6 or n < 4 else (n // 3, 3)
    return Call(
        kind=kind, dtype=dtype, shape=shape, op=rng.choice(ops_for(dtype)),
        variant=rng.choice(("auto", "one_shot", "two_shot", "rs_ag", "one_shot_push")), heap_in=rng.random() < 0.5,
        heap_out=rng.random() < 0.5, stacked=rng.random() < 0.3, src=rng.randrange(w),
        blocking=rng.random() < 0.5,
    )  # fmt: skip


def _prepare(call: Call, mem: Guarded, rank: int, w: int, launch: dict, backend):
    """(the collective as a function, the tensor it writes, torch's result for it, exact bytes?)."""
    c = ccl.Config(variant=call.variant, backend=backend, blocking=call.blocking, **launch)
    if call.kind == "barrier":
        return (lambda: ccl.barrier(config=c)), None, None, True
    inputs = [sample(call.shape, call.dtype, call.seed, r) for r in range(w)]
    inp = mem.tensor(inputs[rank], call.heap_in, "the input")
    if call.kind == "all_reduce":
        return (lambda: ccl.all_reduce(inp, op=call.op, config=c)), inp, reference_reduce(inputs, call.op), False
    if call.kind == "broadcast":
        return (lambda: ccl.broadcast(inp, call.src, config=c)), inp, inputs[call.src], True
    if call.kind == "all_gather":
        want = torch.stack(inputs) if call.stacked else torch.cat(inputs)
        out = mem.output(want.shape, call.dtype, call.heap_out, "the output")
        return (lambda: ccl.all_gather(out, inp, config=c)), out, want, True
    if call.kind == "reduce_scatter":
        want = reference_reduce([x.chunk(w)[rank] for x in inputs], call.op)
        out = mem.output(want.shape, call.dtype, call.heap_out, "the output")
        return (lambda: ccl.reduce_scatter(out, inp, op=call.op, config=c)), out, want, False
    want = torch.cat([x.chunk(w)[rank] for x in inputs])  # all_to_all
    out = mem.output(want.shape, call.dtype, call.heap_out, "the output")
    return (lambda: ccl.all_to_all(out, inp, config=c)), out, want, True


#: How many call configurations a soak draws its calls from.
SOAK_MENU = 32


def soak(rank, world_size, backend, seed: int, count: int, skip_rate: float, skip_timeout: float):
    """Random collectives until ``count`` of them were checked against torch; besides those, some
    (``skip_rate`` of the draws) are skipped by a random rank: the others must raise, then every
    rank calls reset() and goes on. The calls come from a menu of ``SOAK_MENU`` configurations
    (``draw``: kind, variant, dtype, shape, op, heap or plain tensors, blocking or not), each
    drawn again and again with new data, as a program repeats its collectives; so a GPU compiles
    each configuration's kernels once, not once per call (1148 distinct specializations for the
    three world sizes when every call was drawn anew, minutes of compiling on a cold cache). Each
    rank's launch shape (block size, programs) for each configuration is its own random choice:
    it is not part of what ranks agree on. Between faults the ranks never meet on the host. The
    first wrong result raises at once (the next calls would only hang behind it); returns the
    counts."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    w = world_size
    shared, own = random.Random(seed), random.Random(seed * 1000 + rank)
    menu = [draw(shared, w) for _ in range(SOAK_MENU)]
    launches = [{"block_size": own.choice((64, 128)), "num_programs": own.choice((1, 2))} for _ in menu]
    stats: Counter = Counter()
    t_start = time.monotonic()
    i = -1
    while stats["calls"] < count:
        i += 1
        entry = shared.randrange(SOAK_MENU)
        skipper = shared.randrange(w) if shared.random() < skip_rate else None
        call = replace(menu[entry], seed=shared.getrandbits(30), skipper=skipper)
        launch = launches[entry]
        mem = Guarded(heap)
        fn, result, want, exact = _prepare(call, mem, rank, w, launch, backend)
        what = f"rank {rank}, call {i} ({stats['calls']} checked, {stats['faults']} faults): {call}, {launch}"
        if call.skipper is None:
            err = raised(fn)
            settle(heap)
            if err is None and not call.blocking:
                err = raised(heap.check_device_errors)
            assert err is None, f"{what} raised {summary(err)}"
            if result is not None:
                assert same(result, want) if exact else torch.equal(result.cpu(), want), f"{what} differs from torch"
            mem.assert_guards(rank, what)
            stats["calls"] += 1
            stats[call.kind] += 1
            mem.free()
            continue
        # an injected fault: the skipper does not make the call
        stats["faults"] += 1
        mem.freeze()
        heap.wait_timeout = skip_timeout
        dist.barrier()  # the others start within milliseconds
        if rank != call.skipper:
            err = raised(fn)
            settle(heap)
            if err is None:
                err = raised(heap.check_device_errors)
            got = summary(err)
            assert is_skip_error(got, call.skipper, w) or came_late(got, call.skipper, rank), (
                f"{what}, skipped by rank {call.skipper}: raised {got}"
            )
            stats["reported"] += 1
        dist.barrier()  # the others have given up
        mem.assert_unchanged(rank, f"{what}, skipped by rank {call.skipper}")
        ccl.reset()
        heap.wait_timeout = QUIET
        mem.free()
    heap.check_symmetry()
    stats["seconds"] = round(time.monotonic() - t_start, 1)
    return dict(stats)


def came_late(err: dict | None, skipper: int, rank: int) -> bool:
    """What a rank that made the skipped collective raises when it reached the call only after a peer
    had given up on the skipper (here: its kernel still compiling when the bound passed, which on a
    GPU's cold cache takes longer than the soak's half second, since each rank's launch shape is its
    own): abandoned by a rank that made the call, with no missing rank of its own to name, since
    every rank it could have waited for had given up or never came."""
    return (err is not None and err["type"] == "CollectiveAbandonedError" and err["missing_rank"] == -1
            and err["abandoned_by"] not in (skipper, rank, -1))  # fmt: skip


def is_skip_error(err: dict | None, skipper: int, world_size: int) -> bool:
    """What a rank that made a collective that ``skipper`` skipped must raise: a
    CollectiveTimeoutError naming the skipper as ``missing_rank``; when another rank's give-up
    reached it first, that is the CollectiveAbandonedError subclass and ``abandoned_by`` names a
    rank that did make the call."""
    if err is None or not err["timeout"] or err["missing_rank"] != skipper:
        return False
    return err["type"] != "CollectiveAbandonedError" or err["abandoned_by"] not in (skipper, -1)

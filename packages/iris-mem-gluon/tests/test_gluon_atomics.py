"""Gluon kernels: every atomic, local and remote: exact results under contention from every rank, the old
values returned, masks, each sem and scope, scalar pointers, a CAS spinlock and release/acquire
message passing between ranks."""

import _gluon_ranks as ranks
import pytest
import torch
from conftest import WORLD_SIZES

# Dtypes whose atomics are cross-process atomics on CPU ranks (the GPU allows more:
# see test_atomics_on_16_bit_floats_on_gpu).
INTS = ("int32", "uint32", "int64")
FLOATS = ("fp32", "fp64")
DTYPES = {
    "add": INTS + FLOATS,
    "sub": INTS + FLOATS,
    "xchg": INTS,
    "cas": INTS + FLOATS,
    "and": INTS,
    "or": INTS,
    "xor": INTS,
    "min": INTS + FLOATS,
    "max": INTS + FLOATS,
}
OPS = list(DTYPES)
GPU = torch.cuda.is_available()
PROGRAMS = 8 if GPU else 2
REPS = 8 if GPU else 4


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("op", OPS)
def test_atomic_is_exact_under_contention_and_returns_old_values(world, world_size, op):
    # the method API on most dtypes, the free functions on int32 (both on every op)
    dtypes = DTYPES[op]
    world.run(ranks.check_atomic, world_size, op, dtypes[1:], False, PROGRAMS, REPS)
    world.run(ranks.check_atomic, world_size, op, dtypes[:1], True, PROGRAMS, REPS)


SEMS = [None, "relaxed", "acquire", "release", "acq_rel"]
SCOPES = [None, "cta", "gpu", "sys"]


@pytest.mark.parametrize("op", OPS)
def test_atomic_accepts_every_sem_and_scope(world, op):
    orders = [(sem, scope) for sem in SEMS for scope in SCOPES]
    world.run(ranks.check_atomic, 2, op, ("int32",), False, 1, 1, orders)


@pytest.mark.parametrize("free", [False, True], ids=["context", "free"])
def test_atomics_on_scalar_pointers(world, free):
    world.run(ranks.check_scalar_atomics, 3, free, 4)


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("free", [False, True], ids=["context", "free"])
def test_cas_spinlock_serializes_increments_across_ranks(world, world_size, free):
    world.run(ranks.check_spinlock, world_size, free, 8)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("free", [False, True], ids=["context", "free"])
def test_release_acquire_message_passing_between_ranks(world, world_size, free):
    world.run(ranks.check_message_passing, world_size, free, 3)


@pytest.mark.cpu_ranks
def test_cpu_ranks_refuse_atomics_that_are_not_cross_process(world):
    cases = [(op, dt) for op in OPS for dt in ("fp16", "bf16")]
    cases += [(op, dt) for op in ("xchg", "and", "or", "xor") for dt in ("fp32", "fp64")]
    world.run(ranks.check_interpreter_atomic_errors, 1, cases)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_atomics_on_16_bit_floats_on_gpu(world, world_size):
    # counts stay below 256 so bf16 sums are exact
    for op in ("add", "cas"):  # (Triton has no 16-bit float atomic_xchg)
        world.run(ranks.check_atomic, world_size, op, ("fp16", "bf16"), False, 1, 1)
    world.run(ranks.check_atomic, world_size, "xchg", ("fp32", "fp64"), True, 2, 2)

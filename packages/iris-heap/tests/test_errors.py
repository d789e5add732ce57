"""Bad input: each gets a clear exception, and the heap stays usable afterwards."""

import time

import pytest
import torch
from _ranks import new_heap, on_ranks

import iris.heap
from iris.heap import (
    DoubleFreeError,
    HeapClosedError,
    HeapError,
    HeapExhaustedError,
    NotOnHeapError,
)


def _still_usable(heap):
    t = heap.arange(10)
    assert torch.equal(t.cpu(), torch.arange(10))
    heap.free(t)
    heap.check_symmetry()


def _bad_sizes_and_dtypes(rank, world_size):
    heap = new_heap()
    before = heap.stats()
    for bad in [(-1,), (2, -3), (2.5,), ("3",), (None,), ((2, 1.0),), (True,)]:
        with pytest.raises((TypeError, ValueError), match="size"):
            heap.empty(*bad)
    with pytest.raises((TypeError, ValueError)):
        heap.full((-2,), 1.0)
    with pytest.raises(TypeError, match="cannot hold"):
        heap.zeros(3, dtype=torch.qint8)
    with pytest.raises(TypeError, match="torch.dtype"):
        heap.zeros(3, dtype="float32")
    with pytest.raises(TypeError, match="cannot hold"):
        heap.arange(3, dtype=torch.quint8)
    assert heap.stats() == before, "a rejected request must not touch the allocator"
    _still_usable(heap)


def _bad_tensors(rank, world_size):
    heap = new_heap()
    other = new_heap()
    local = torch.zeros(4, device=heap.device)
    foreign = other.zeros(4)
    mine = heap.zeros(4)
    for fn in (heap.free, heap.offset, lambda t: heap.peer(t, 0)):
        with pytest.raises(NotOnHeapError, match="not on this heap"):
            fn(local)
        with pytest.raises(NotOnHeapError, match="not on this heap"):
            fn(foreign)
    with pytest.raises(TypeError, match="torch.Tensor"):
        heap.free([1, 2])
    assert not heap.is_symmetric(local) and not heap.is_symmetric(foreign) and heap.is_symmetric(mine)
    if world_size > 1:
        remote = heap.peer(mine, (rank + 1) % world_size)
        with pytest.raises(NotOnHeapError, match="peer"):
            heap.free(remote)
        assert not heap.is_symmetric(remote), "a view of a peer's copy is not this rank's heap tensor"
    heap.free(mine)
    with pytest.raises(DoubleFreeError, match="already freed"):
        heap.free(mine)
    with pytest.raises(NotOnHeapError, match="freed"):
        heap.peer(mine, 0)
    assert not heap.is_symmetric(mine)
    other.close()
    _still_usable(heap)


def _bad_ranks(rank, world_size):
    heap = new_heap()
    t = heap.zeros(4)
    for bad in (-1, world_size, world_size + 7):
        with pytest.raises(ValueError, match=f"rank {bad} is out of range for a heap of world size {world_size}"):
            heap.peer(t, bad)
    for bad in (0.0, "0", None, True):
        with pytest.raises(TypeError, match="rank must be an int"):
            heap.peer(t, bad)
    _still_usable(heap)


def _exhaustion(rank, world_size):
    heap = new_heap(1 << 16)
    held = heap.empty(1 << 13)  # 32 KiB of the 64 KiB
    with pytest.raises(HeapExhaustedError) as info:
        heap.empty(1 << 14)
    e = info.value
    assert isinstance(e, MemoryError) and isinstance(e, HeapError)
    assert e.requested == 1 << 16 and e.free == 1 << 15 and e.largest_free_block == 1 << 15
    assert "65536 bytes" in str(e) and "32768 of 65536 bytes free" in str(e)
    del held
    with pytest.raises(HeapExhaustedError, match=r"call heap.collect\(\)"):
        heap.empty(1 << 14)
    assert heap.collect() == 1 << 15
    heap.free(heap.empty(1 << 14))  # the whole heap fits again
    with pytest.raises(HeapExhaustedError, match="cannot (reserve|create)"):
        iris.heap.init(1 << 62)
    _still_usable(heap)


def _use_after_close(rank, world_size):
    heap = new_heap()
    t = heap.ones(8)
    heap.close()
    heap.close()  # idempotent
    for call in (lambda: heap.zeros(1), lambda: heap.free(t), lambda: heap.offset(t), lambda: heap.peer(t, 0),
                 heap.stats, heap.barrier, heap.collect, heap.check_symmetry):  # fmt: skip
        with pytest.raises(HeapClosedError, match="closed"):
            call()
    assert torch.equal(t.cpu(), torch.ones(8)), "a tensor kept past close() stays valid memory"


def _bad_init_arguments(rank, world_size):
    for bad in (0, 100, -5):
        with pytest.raises(ValueError, match="at least 256 bytes"):
            iris.heap.init(bad)
    for bad in (1.5, "1M", True):
        with pytest.raises(TypeError, match="int number of bytes"):
            iris.heap.init(bad)
    with pytest.raises(ValueError, match="unknown transport"):
        iris.heap.init(1 << 16, transport="rdma")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="serves cuda"):
            iris.heap.init(1 << 16, transport="cuda-ipc")
    with new_heap() as heap:
        with pytest.raises(ValueError, match="positive"):
            heap.wait_timeout = 0
        with pytest.raises(ValueError, match="positive number of seconds"):
            heap.wait_timeout = float("nan")
        with pytest.raises(TypeError, match="number of seconds"):
            heap.wait_timeout = "60"


test_bad_sizes_and_dtypes = on_ranks(_bad_sizes_and_dtypes, [1, 2])
test_tensors_not_on_the_heap_and_double_free = on_ranks(_bad_tensors, [1, 2])
test_ranks_out_of_range = on_ranks(_bad_ranks, [1, 3])
test_exhaustion_says_what_was_asked_and_what_is_left = on_ranks(_exhaustion, [1, 2])
test_use_after_close = on_ranks(_use_after_close, [1, 2])
test_bad_init_arguments = on_ranks(_bad_init_arguments, [1])


# -- one rank's bad argument to init fails every rank at once --------------------------------------

ONE_BAD_RANK = [  # (that rank's keyword arguments, the error it raises, words of its message)
    pytest.param({"size": "big"}, TypeError, "heap size must be an int number of bytes", id="size-str"),
    pytest.param({"size": -5}, ValueError, "heap size must be at least 256 bytes", id="size-negative"),
    pytest.param({"size": 2.5}, TypeError, "heap size must be an int number of bytes", id="size-float"),
    pytest.param({"size": True}, TypeError, "heap size must be an int number of bytes", id="size-bool"),
    pytest.param({"transport": "rdma"}, ValueError, "unknown transport 'rdma'", id="transport-unknown"),
    pytest.param({"transport": 3}, TypeError, "transport must be a str", id="transport-int"),
    pytest.param({"device": "tpu:0"}, ValueError, "device 'tpu:0' names no torch device", id="device-unknown"),
    pytest.param({"device": "cuda:99"}, ValueError, "torch sees", id="device-missing"),
    pytest.param({"device": 1.5}, TypeError, "device must be a torch.device", id="device-float"),
    pytest.param({"group": "world"}, TypeError, "group must be a torch.distributed ProcessGroup", id="group-str"),
]


def _one_rank_passes_a_bad_argument(rank, world_size, kwargs, error, words):
    bad = world_size - 1
    start = time.monotonic()
    with pytest.raises(error if rank == bad else HeapError) as info:
        iris.heap.init(**{"size": 1 << 16, **(kwargs if rank == bad else {})})
    seconds = time.monotonic() - start
    assert words in str(info.value)
    if rank != bad:
        assert f"rank {bad}: {error.__name__}: " in str(info.value), "the others name the bad rank and its error"
    with new_heap() as heap:
        _still_usable(heap)
    return seconds


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("kwargs, error, words", ONE_BAD_RANK)
def test_a_bad_init_argument_on_one_rank_fails_every_rank_at_once(world, world_size, kwargs, error, words):
    seconds = world.run(_one_rank_passes_a_bad_argument, world_size, kwargs, error, words, timeout=60)
    assert max(seconds) < 20, f"every rank must raise within seconds, not wait for the others: {seconds}"


# -- bad input to the heap's API: a clear TypeError/ValueError/HeapError, and no block left behind ---

_META = torch.empty(3, device="meta")
_SPARSE = torch.zeros(3).to_sparse()
HUGE = 2**70

BAD_CALLS = [  # (heap method, arguments, keyword arguments, the error, words of its message)
    ("init", (HUGE,), {}, HeapExhaustedError, "cannot reserve a 1180591620717411303424-byte heap"),
    ("init", (torch.tensor(3.0),), {}, TypeError, "heap size must be an int number of bytes"),
    ("empty", (torch.tensor(3.0),), {}, TypeError, "size must be a sequence of non-negative integers"),
    ("rand", (HUGE,), {}, HeapExhaustedError, "cannot allocate"),
    ("randn", (2**40, 2**40), {}, HeapExhaustedError, "cannot allocate"),
    ("uniform", (2**63,), {}, HeapExhaustedError, "cannot allocate"),
    ("randint", (0, 3, (HUGE,)), {}, HeapExhaustedError, "cannot allocate"),
    ("arange", (10**12,), {}, HeapExhaustedError, "cannot allocate"),
    ("linspace", (0, 1, 10**12), {}, HeapExhaustedError, "cannot allocate"),
    ("rand", (3,), {"dtype": torch.int64}, TypeError, "heap.rand(3, dtype=torch.int64): torch.rand refuses"),
    ("randn", (3,), {"dtype": torch.bool}, TypeError, "torch.randn refuses"),
    ("uniform", ((3,),), {"dtype": torch.int64}, TypeError, "torch.Tensor.uniform_ refuses"),
    ("arange", (3,), {"dtype": torch.bool}, TypeError, "torch.arange refuses"),
    ("rand", (3,), {"generator": "seed"}, TypeError, "generator must be a torch.Generator"),
    ("full", ((2,), "x"), {}, TypeError, "heap.full((2,), 'x'): torch.full refuses"),
    ("full", ((2,), None), {}, TypeError, "torch.full refuses"),
    ("full", ((2,), HUGE), {}, ValueError, "torch.full refuses"),
    ("full", ((2,), 1e40), {"dtype": torch.float16}, ValueError, "without overflow"),
    ("full", ((2,), 1j), {"dtype": torch.int64}, ValueError, "without overflow"),
    ("arange", (0, 10, 0), {}, ValueError, "heap.arange(0, 10, 0): torch.arange refuses these arguments (step must"),
    ("arange", (float("inf"),), {}, ValueError, "torch.arange refuses"),
    ("arange", (0, -5), {}, ValueError, "torch.arange refuses"),
    ("arange", ("a",), {}, TypeError, "torch.arange refuses"),
    ("arange", (HUGE,), {}, ValueError, "torch.arange refuses"),
    ("linspace", (0, 1, -1), {}, ValueError, "number of steps must be non-negative"),
    ("linspace", (0, 1, 2.5), {}, TypeError, "torch.linspace refuses"),
    ("randint", (5, 5, (3,)), {}, ValueError, "torch.randint refuses"),
    ("randint", (0.5, 3.5, (3,)), {}, TypeError, "torch.randint refuses"),
    ("randint", (0, HUGE, (3,)), {}, ValueError, "torch.randint refuses"),
    ("randint", (0, 1000, (3,)), {"dtype": torch.int8}, ValueError, "torch.randint refuses"),
    ("uniform", ((3,), 1.0, 0.0), {}, ValueError, "torch.Tensor.uniform_ refuses"),
    ("uniform", ((3,), "a", 1.0), {}, TypeError, "torch.Tensor.uniform_ refuses"),
    ("uniform", ((3,), 0.0, float("inf")), {}, ValueError, "torch.Tensor.uniform_ refuses"),
    ("empty_like", (None,), {}, TypeError, "empty_like() takes a torch.Tensor, got NoneType"),
    ("zeros_like", ([1, 2],), {}, TypeError, "zeros_like() takes a torch.Tensor, got list"),
    ("ones_like", (None,), {}, TypeError, "ones_like() takes a torch.Tensor"),
    ("full_like", (None, 1.0), {}, TypeError, "full_like() takes a torch.Tensor"),
    ("full_like", (torch.zeros(2), "x"), {}, TypeError, "torch.full refuses"),
    ("as_symmetric", (_META,), {}, ValueError, "meta tensor, which holds no values"),
    ("as_symmetric", (_SPARSE,), {}, TypeError, "copies dense tensors, got a torch.sparse_coo one"),
]


def _bad_call(rank, world_size, name, args, kwargs, error, words):
    with new_heap() as heap:
        before = heap.stats()
        call = iris.heap.init if name == "init" else getattr(heap, name)
        with pytest.raises(error) as info:
            call(*args, **kwargs)
        assert words in str(info.value)
        after = heap.stats()
        assert (after.used, after.live_allocations) == (before.used, before.live_allocations), "no block left behind"
        _still_usable(heap)


@pytest.mark.parametrize(
    "name, args, kwargs, error, words", [pytest.param(*row, id=f"{row[0]}-{i}") for i, row in enumerate(BAD_CALLS)]
)
def test_bad_input_is_a_clear_error(world, name, args, kwargs, error, words):
    world.run(_bad_call, 1, name, args, kwargs, error, words)

"""Helpers shared by the heap's multi-rank tests (module-level so spawned ranks can import them)."""

import pytest
import torch

import iris.heap

HEAP_SIZE = 1 << 20


def new_heap(size=HEAP_SIZE):
    return iris.heap.init(size)


def sync(heap):
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    heap.barrier()


def shares_one_gpu(rank, world_size, transport, expect):
    """A heap made with ``transport`` (named ``expect``) on ranks sharing one GPU: every rank reads
    every rank's tensor, then adds to its neighbour's and sees its own added to; a new heap's
    bytes are zero; a heap larger than the free memory raises HeapExhaustedError."""
    heap = iris.heap.init(1 << 24, transport=transport)
    assert heap.transport_name == expect and heap.device.type == "cuda"
    assert heap.transport.mapped_size == 1 << 24
    x = heap.full((1 << 16,), float(rank), dtype=torch.float32)
    sync(heap)
    for r in range(world_size):
        assert torch.equal(heap.peer(x, r), torch.full_like(x, float(r))), f"rank {rank} reads rank {r}'s heap"
    sync(heap)  # every rank has read every heap before any rank writes a peer's
    heap.peer(x, (rank + 1) % world_size).add_(100)  # written by the previous rank, read here
    sync(heap)
    assert torch.equal(x, torch.full_like(x, float(rank) + 100))
    assert torch.count_nonzero(heap.empty((1 << 20,), dtype=torch.uint8)) == 0, "a new heap's bytes are zero"
    free, _ = torch.cuda.mem_get_info(heap.device)
    with pytest.raises(iris.heap.HeapExhaustedError, match="bytes free"):
        iris.heap.init(free * 2, transport=transport)


def on_ranks(body, world_sizes):
    """A test that runs ``body(rank, world_size)`` on every rank of a world of each of ``world_sizes``.

    Assign it to the test's name (``test_free_then_reuse = on_ranks(_free_and_reuse, [1, 2])``):
    ``body`` stays a module-level function, which the spawned ranks find by name.
    """

    @pytest.mark.parametrize("world_size", world_sizes)
    def test(world, world_size):
        world.run(body, world_size)

    test.__doc__ = body.__doc__
    return test

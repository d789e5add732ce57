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
